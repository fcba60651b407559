//! The store's errors as core errors: a missing object is `NotFound`
//! (ENOENT), a refused one `PermissionDenied` (EACCES), a failed `If-Match`
//! rule `file-changed`, anything else an I/O error quoting the store's
//! answer (its HTTP status). The caller prefixes the URL.

use fastst_core::Error;

/// `e`, met while doing `what`, as a core error.
#[cold]
pub(crate) fn from_store(what: &str, e: object_store::Error) -> Error {
    use object_store::Error as E;
    let errno = match &e {
        E::Precondition { .. } | E::NotModified { .. } => {
            return changed("its ETag no longer matches the one it had when opened".into())
        }
        E::NotFound { .. } => Some(libc::ENOENT),
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => Some(libc::EACCES),
        _ => None,
    };
    // The answer may quote the URL it requested: shown by the one rule.
    let answer = crate::redact::in_text(&e.to_string());
    let message = format!("{what}: {answer}");
    let source = match errno {
        // The OS error's kind (and errno) for the Python class; the store's
        // answer in the context.
        Some(no) => std::io::Error::from_raw_os_error(no),
        None => std::io::Error::other(answer),
    };
    Error::Io {
        context: match errno {
            Some(_) => message,
            None => what.to_owned(),
        },
        source,
    }
}

/// Rule `file-changed`: the object is not the one opened.
#[cold]
pub(crate) fn changed(what: String) -> Error {
    Error::FileChanged {
        what: format!("the object changed since it was opened: {what}"),
    }
}

/// An answer that breaks the protocol (wrong range, wrong length): an I/O
/// error, never bytes handed out.
#[cold]
pub(crate) fn protocol(what: String) -> Error {
    Error::Io {
        context: "the store's answer does not fit the request".into(),
        source: std::io::Error::other(what),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store's answer quoting a URL loses the URL's user part and query.
    #[test]
    fn store_answers_lose_the_user_part_and_query_of_urls() {
        let e = object_store::Error::Generic {
            store: "HTTP",
            source: "Error performing GET https://user:pw@h/m?sig=SIG in 1s".into(),
        };
        let shown = from_store("cannot open the object", e).to_string();
        assert!(
            !shown.contains("pw") && !shown.contains("user") && !shown.contains("SIG"),
            "{shown}"
        );
    }
}
