//! What a name is when it is a URL: whether this crate reads it (a cloud
//! store's or an HTTP(S) URL, rather than a local path), and how a cloud
//! store's URL splits into its root and its key, taken literally.
//! Nothing here depends on the rest of the crate: the options, the display
//! rule of messages and the uploads all build on it.

/// The schemes of the cloud stores (S3, GCS, Azure), whose URLs name a
/// bucket (or container) and a key taken literally ([`literal_key`]).
pub const STORE_SCHEMES: [&str; 8] = ["s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss"];

/// Whether `name` is a URL this crate reads (rather than a local path).
pub fn is_url(name: &str) -> bool {
    let Some((scheme, rest)) = name.split_once("://") else {
        return false;
    };
    let scheme = scheme.to_ascii_lowercase();
    !rest.is_empty()
        && (STORE_SCHEMES.contains(&scheme.as_str()) || matches!(scheme.as_str(), "http" | "https"))
}

/// A URL of a cloud store's scheme (`s3://bucket/key`, `gs://`, `az://`...)
/// cut into its root (`s3://bucket`, the authority as given) and its key,
/// taken literally: everything after the first `/` that follows the
/// bucket, `#`, `?`, `%`, spaces and `..` included, as boto3 and the
/// stores' own tools take a key. None for another URL (HTTP(S), whose path
/// follows the URL rules: percent-encoding, a query, a fragment).
pub fn literal_key(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    if !STORE_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) {
        return None;
    }
    let root = scheme.len() + 3 + rest.find('/').unwrap_or(rest.len());
    Some((&url[..root], url.get(root + 1..).unwrap_or("")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_paths() {
        for url in [
            "s3://b/k",
            "S3://b/k",
            "gs://b/k",
            "az://c/k",
            "https://h/p",
            "http://h/p",
        ] {
            assert!(is_url(url), "{url}");
        }
        for path in [
            "model.safetensors",
            "/tmp/x",
            "file:///x",
            "s3://",
            "ftp://h/p",
            "C:\\x",
        ] {
            assert!(!is_url(path), "{path}");
        }
    }
}
