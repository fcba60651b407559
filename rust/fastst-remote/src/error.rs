//! The store's errors as core errors: a missing object is `NotFound`
//! (ENOENT), a refused one `PermissionDenied` (EACCES), a failed `If-Match`
//! rule `file-changed`, an answer over its cap rule
//! `remote-answer-over-cap`, running out of descriptors an I/O error of
//! its errno (EMFILE, ENFILE), anything else an I/O error quoting the
//! store's answer (its HTTP status, at most [`ANSWER_SHOWN`] bytes of it).
//! The caller prefixes the URL.

use fastst_core::Error;

use crate::guard::{OverCap, ANSWER_CAP};

/// The most bytes of a store's answer a message quotes.
pub const ANSWER_SHOWN: usize = 8 << 10;

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
        _ if chain(&e).any(|c| c.is::<OverCap>()) => {
            return Error::RemoteAnswerOverCap {
                context: what.to_owned(),
                cap: ANSWER_CAP as u64,
            }
        }
        _ => io_cause(&e)
            .and_then(|io| io.raw_os_error())
            .filter(|&no| no == libc::EMFILE || no == libc::ENFILE),
    };
    let answer = shown(&crate::redact::in_text(&e.to_string()));
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

/// `e` and the errors that caused it, outermost first.
fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |c| c.source())
}

/// The operating system's error (one with an errno) that caused `e`, if
/// any: running out of descriptors or threads while connecting or making
/// a client, a refused connection...
pub(crate) fn io_cause(e: &(dyn std::error::Error + 'static)) -> Option<std::io::Error> {
    chain(e)
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .find_map(|io| io.raw_os_error())
        .map(std::io::Error::from_raw_os_error)
}

/// `text` cut to its first [`ANSWER_SHOWN`] bytes (at a character's
/// boundary), saying so when cut.
fn shown(text: &str) -> String {
    if text.len() <= ANSWER_SHOWN {
        return text.to_owned();
    }
    let mut end = ANSWER_SHOWN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{} [... {} more bytes not shown]",
        &text[..end],
        text.len() - end
    )
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

    /// A long answer is cut, an answer over its cap and an errno are told
    /// by their cause, whatever wraps them.
    #[test]
    fn answers_are_cut_and_causes_found() {
        let long = "é".repeat(ANSWER_SHOWN);
        let cut = shown(&long);
        assert!(cut.len() < ANSWER_SHOWN + 64 && cut.ends_with("more bytes not shown]"));
        assert_eq!(shown("short"), "short");
        let wrapped =
            |inner: Box<dyn std::error::Error + Send + Sync>| object_store::Error::Generic {
                store: "HTTP",
                source: Box::new(object_store::client::HttpError::new_boxed(
                    object_store::client::HttpErrorKind::Connect,
                    inner,
                )),
            };
        let over = from_store("cannot list", wrapped(Box::new(OverCap)));
        assert_eq!(over.rule(), "remote-answer-over-cap");
        let emfile = wrapped(Box::new(std::io::Error::from_raw_os_error(libc::EMFILE)));
        match from_store("cannot open", emfile) {
            Error::Io { source, .. } => assert_eq!(source.raw_os_error(), Some(libc::EMFILE)),
            other => panic!("{other}"),
        }
    }
}
