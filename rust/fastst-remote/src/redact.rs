//! URLs as every message, progress line, result and report shows them: the
//! one display rule, without user, password, query or fragment.
//!
//! A presigned URL carries its signature in the query, a `user:password@`
//! URL its password in the authority; neither may reach a message. The rule
//! applies to every string that might be a URL, parsed or not:
//!
//! - [`display`] takes a name (a command-line argument, a path given to
//!   `safe_open`): from the first `scheme://` on, it is a URL, shown without
//!   its user part, query and fragment. A cloud store's URL (`s3://`,
//!   `gs://`, `az://`...) has neither: its key is taken literally
//!   ([`crate::urls::literal_key`]) and shown whole, without the user
//!   part. A URL that parses is shown as the
//!   URL parser reads it; one that does not (a bad port, a broken IPv6 host)
//!   loses everything up to the last `@` and everything from the first `?`
//!   or `#`, so that no part of a password survives whichever way it was
//!   meant. A name without `scheme://` is returned unchanged.
//! - [`in_text`] applies the same rule to each URL inside free text (a
//!   store's answer quoting the URL it requested), a URL running to the
//!   next blank or the next character no URL holds unescaped (`"`, `<`,
//!   `>`, `` ` ``), so that the quotes around a quoted URL stay.

use url::Url;

/// True for the characters of a URL scheme after its first letter
/// (RFC 3986: letters, digits, `+`, `-`, `.`).
fn scheme_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')
}

/// Where the URL whose `://` is at byte `sep` of `text` starts: the first
/// letter of the longest scheme ending there, if there is one.
fn scheme_start(text: &str, sep: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut start = sep;
    while start > 0 && scheme_char(bytes[start - 1]) {
        start -= 1;
    }
    // A scheme begins with a letter: skip digits and signs before it.
    while start < sep && !bytes[start].is_ascii_alphabetic() {
        start += 1;
    }
    (start < sep).then_some(start)
}

/// The URL `url` (starting with `scheme://`) as shown.
fn one(url: &str) -> String {
    if let Some((root, _)) = crate::urls::literal_key(url) {
        // A cloud store's key is taken literally (`#`, `?` and `%` are
        // characters of it, no query or fragment): shown whole, after the
        // root without its user part. Where a user part may go on past the
        // root (a password holding `/`: the root holds `:` or `@` and an
        // `@` follows it), the URL is shown by the rule of unparsed URLs.
        let (scheme, authority) = root.split_once("://").unwrap_or(("", root));
        let user_part = authority.contains([':', '@']);
        if user_part && url[root.len()..].contains('@') {
            return unparsed(url);
        }
        let host = authority
            .rfind('@')
            .map_or(authority, |at| &authority[at + 1..]);
        return format!(
            "{}://{host}{}",
            scheme.to_ascii_lowercase(),
            &url[root.len()..]
        );
    }
    if let Ok(mut u) = Url::parse(url) {
        let _ = u.set_username("");
        let _ = u.set_password(None);
        u.set_query(None);
        u.set_fragment(None);
        if u.username().is_empty() && u.password().is_none() {
            return u.into();
        }
    }
    unparsed(url)
}

/// A URL the parser refuses (or whose user part it cannot drop), shown
/// with everything up to its last `@` and from its first `?` or `#` left
/// out: a password holding `/`, `?`, `#` or `@` loses every piece.
fn unparsed(url: &str) -> String {
    let Some(sep) = url.find("://") else {
        return url.to_owned();
    };
    let (scheme, rest) = (&url[..sep + 3], &url[sep + 3..]);
    let rest = rest.rfind('@').map_or(rest, |at| &rest[at + 1..]);
    let rest = rest.find(['?', '#']).map_or(rest, |end| &rest[..end]);
    format!("{scheme}{rest}")
}

/// `name` as shown: unchanged unless it holds `scheme://`, from which on it
/// is a URL shown without user part, query or fragment (see the module's
/// description).
pub fn display(name: &str) -> String {
    let mut from = 0;
    while let Some(found) = name[from..].find("://") {
        let sep = from + found;
        if let Some(start) = scheme_start(name, sep) {
            return format!("{}{}", &name[..start], one(&name[start..]));
        }
        from = sep + 3;
    }
    name.to_owned()
}

/// True for the characters that end a URL inside text.
fn ends_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '<' | '>' | '`')
}

/// `text` with every URL in it (from its `scheme://` to the next blank or
/// quote) shown by [`display`]'s rule.
pub fn in_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(found) = rest.find("://") {
        let Some(start) = scheme_start(rest, found) else {
            out.push_str(&rest[..found + 3]);
            rest = &rest[found + 3..];
            continue;
        };
        let end = rest[start..]
            .find(ends_url)
            .map_or(rest.len(), |n| start + n);
        out.push_str(&rest[..start]);
        out.push_str(&one(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_user_query_and_fragment() {
        assert_eq!(
            display("https://u:p@h:8/a/b%20c?X-Amz-Signature=s#f"),
            "https://h:8/a/b%20c"
        );
        assert_eq!(display("s3://key:secret@b/k"), "s3://b/k");
        // A cloud store's key is literal: `?`, `#`, `%` are characters of it.
        assert_eq!(display("s3://b/k?versionId=1"), "s3://b/k?versionId=1");
        assert_eq!(display("S3://u:p@b/exp#3/a%2Fb c"), "s3://b/exp#3/a%2Fb c");
        assert_eq!(display("gs://b"), "gs://b");
        assert_eq!(display("HTTP://tok@h/x#frag"), "http://h/x");
        assert_eq!(display("hf://u:pw@org/model"), "hf://org/model");
    }

    #[test]
    fn names_without_a_scheme_are_unchanged() {
        for name in [
            "model.safetensors",
            "not a url?sig=1",
            "dir/a@b#c.safetensors",
            "://x?y",
            "1://u:p@h",
            "",
        ] {
            assert_eq!(display(name), name);
        }
    }

    /// URLs the parser refuses keep no piece of their password, however it
    /// was written.
    #[test]
    fn unparsable_urls_lose_every_piece_of_the_password() {
        for (url, shown) in [
            ("http://user:PW@h:99999/m", "http://h:99999/m"),
            ("http://user:PW@[::1/m", "http://[::1/m"),
            ("s3://user:PW@[::1/m?sig=S#F", "s3://[::1/m?sig=S#F"),
            ("s3://u:p@q/r@b/k?s#F", "s3://b/k"),
            ("s3://user:PW/x@b/m?s=S#F", "s3://b/m"),
            ("gs://tok@b/m?s#F", "gs://b/m?s#F"),
            ("https://u:pa/ss@h:99999/x", "https://h:99999/x"),
            ("https://u:pa?ss@h:99999/x", "https://h:99999/x"),
            ("https://u:pa#ss@[h/x", "https://[h/x"),
            ("https://u:p@ss@h:0x/x", "https://h:0x/x"),
            ("https://h:bad/x?X-Amz-Signature=S", "https://h:bad/x"),
            ("http://u:PW@", "http://"),
        ] {
            assert_eq!(display(url), shown, "{url}");
        }
    }

    #[test]
    fn a_url_inside_a_name_is_shown_by_the_rule() {
        assert_eq!(display("./https://u:PW@h/x?s=1"), "./https://h/x");
        assert_eq!(display(" https://u:PW@h/x"), " https://h/x");
    }

    /// A store's answer naming a URL loses the URL's user part, query and
    /// fragment, wherever the URL stands and however many there are.
    #[test]
    fn urls_in_text_are_shown_by_the_rule() {
        for (text, shown) in [
            (
                "Error performing GET http://user:s3cret@h:9/x.safetensors in 1s",
                "Error performing GET http://h:9/x.safetensors in 1s",
            ),
            ("at https://tok@h", "at https://h/"),
            (
                "a https://u:p@h?q=a@b and s3://k:s@b/p#k",
                "a https://h/ and s3://b/p#k",
            ),
            (
                "GET https://h/k?X-Amz-Signature=SIG\nfailed",
                "GET https://h/k\nfailed",
            ),
            (
                "mail a@b, http://h/a@b, no scheme://",
                "mail a@b, http://h/a@b, no scheme://",
            ),
            ("http://@h http://u:p@ ://", "http://h/ http:// ://"),
            (
                "tensor \"https://u:PW@h/x?s=SIG\" <s3://b/k#F>",
                "tensor \"https://h/x\" <s3://b/k#F>",
            ),
        ] {
            assert_eq!(in_text(text), shown);
        }
    }
}
