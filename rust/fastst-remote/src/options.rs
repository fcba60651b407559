//! Which store a URL names and how it is configured.
//!
//! URLs: `s3://bucket/key` (also `s3a://`), `gs://bucket/key`,
//! `az://container/key` (also `adl://`, `azure://`, `abfs://`, `abfss://`),
//! `https://<account>.blob.core.windows.net/container/key`,
//! `https://s3.<region>.amazonaws.com/bucket/key`, and any other
//! `http(s)://host/path` as a plain HTTP server (ranged GETs).
//!
//! Each cloud store starts from its environment (`AWS_*`, `GOOGLE_*`,
//! `AZURE_*` variables, as `object_store`'s `from_env` reads them), then
//! takes the caller's options: `object_store`'s configuration keys and
//! their aliases (`aws_endpoint`/`endpoint_url`, `aws_region`/`region`,
//! `aws_access_key_id`, `google_service_account`,
//! `azure_storage_account_name`, `allow_http`, `timeout`...). A key the
//! store does not know is refused. An `http://` endpoint or URL allows
//! plain HTTP by itself. Every request that carries credentials (the
//! cloud stores', a presigned URL's, a URL with a user part) follows no
//! redirect (`client.rs`): a signed request goes only where it was signed
//! for. One store (one client, one pool of connections) serves every
//! object of a bucket or server with the same settings (`stores.rs`).
//!
//! Three knobs tune the reads ([`Tuning`]), from the environment or the
//! options (keys in lower case): `FASTST_REMOTE_CONCURRENCY` (requests in
//! flight per object), `FASTST_REMOTE_PART_SIZE` (bytes per request,
//! a size in fastst's one grammar, `fastst_core::parse_size`) and
//! `FASTST_REMOTE_DEADLINE` (how long a read or an upload may take).

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use std::sync::Arc;

use object_store::path::Path;
use object_store::{ClientConfigKey, ObjectStoreScheme};
use url::Url;

use crate::urls::literal_key;

use crate::client::Connector;
use crate::redact::display;
use crate::stores::{self, Store};
use crate::OpenError;

/// The variable (and, in lower case, the option) naming the requests in
/// flight per object.
pub const CONCURRENCY_ENV: &str = "FASTST_REMOTE_CONCURRENCY";
/// The variable (and, in lower case, the option) naming the bytes per
/// request.
pub const PART_SIZE_ENV: &str = "FASTST_REMOTE_PART_SIZE";
/// The variable (and, in lower case, the option) naming the deadline of
/// a read: seconds, or a duration such as `90s` or `5m`.
pub const DEADLINE_ENV: &str = "FASTST_REMOTE_DEADLINE";

/// The deadline of a read when none is set: what a person waits for
/// before deciding that the server will not answer.
pub const DEFAULT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// How an object's reads (and an upload's parts) are cut and overlapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Ranged GETs in flight at once per object (and parts of an upload,
    /// within [`crate::upload::IN_FLIGHT_BYTES`]).
    pub concurrency: usize,
    /// Bytes per ranged GET of a large read (and per part of an upload,
    /// at least [`crate::upload::MIN_PART`]).
    pub part: usize,
    /// The most bytes per ranged GET of a whole load (at least `part`): a
    /// large load makes fewer, larger requests (see
    /// `fastst_core::LoadHint`). `part` itself when the part size is set.
    pub load_part: usize,
    /// How long a read may take, for every `concurrency` parts it needs
    /// (an open, a listing: once), retries included; then it fails with
    /// rule `remote-deadline`.
    pub deadline: std::time::Duration,
}

impl Default for Tuning {
    /// Defaults for real networks, where one stream is limited by its
    /// round trips and window: many streams of a few MiB each.
    fn default() -> Self {
        Tuning {
            concurrency: 16,
            part: 8 << 20,
            load_part: 64 << 20,
            deadline: DEFAULT_DEADLINE,
        }
    }
}

/// A configuration the caller got wrong (a `ValueError` in Python).
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The object path of the literal `key` (see [`literal_key`]; a trailing
/// `/` names a prefix). A key fastst cannot address is refused, rule
/// `object-key`: an empty segment (`a//b`, a `/` first) or a `.` or `..`
/// segment, which HTTP clients remove or resolve before a request is
/// sent, and control characters.
fn key_path(key: &str) -> fastst_core::Result<Path> {
    let refuse = |why: &str| {
        fastst_core::Error::ObjectKey {
        reason: format!("the object key {key:?} {why}, which fastst cannot address in the store (object keys are otherwise taken literally)"),
    }
    };
    let body = key.strip_suffix('/').unwrap_or(key);
    if body.is_empty() {
        return Ok(Path::default());
    }
    for segment in body.split('/') {
        match segment {
            "" => return Err(refuse("holds an empty segment (a `//`, or a `/` first)")),
            "." | ".." => return Err(refuse("holds a `.` or `..` segment")),
            s if s.chars().any(|c| c.is_control()) => {
                return Err(refuse("holds a control character"))
            }
            _ => {}
        }
    }
    Path::parse(body).map_err(|e| refuse(&format!("is refused by the store's client ({e})")))
}

/// A positive count or size, in the one size grammar of fastst
/// ([`fastst_core::parse_size`]).
fn parse_size(text: &str) -> Option<usize> {
    let n = fastst_core::parse_size(text).ok()?;
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// A positive, finite duration: seconds (`"90"`, `"2.5"`) or a number
/// with units (`"90s"`, `"5m"`, `"1h 30m"`).
fn parse_deadline(text: &str) -> Option<std::time::Duration> {
    let text = text.trim();
    let d = match text.parse::<f64>() {
        Ok(secs) => std::time::Duration::try_from_secs_f64(secs).ok()?,
        Err(_) => humantime::parse_duration(text).ok()?,
    };
    Some(d).filter(|d| !d.is_zero())
}

impl Tuning {
    /// The deadline of a read that needs `parts` requests: the deadline
    /// once per round of `concurrency` of them (at least one).
    pub fn deadline_for(&self, parts: usize) -> std::time::Duration {
        let rounds = parts.div_ceil(self.concurrency.max(1)).max(1);
        self.deadline
            .saturating_mul(u32::try_from(rounds).unwrap_or(u32::MAX))
    }

    /// The deadline of one request of `len` bytes (a load's, which may
    /// be larger than a part): the deadline once per `part` bytes, so that
    /// a stream is held to the pace a read in parts is held to.
    pub fn deadline_for_request(&self, len: usize) -> std::time::Duration {
        let parts = len.div_ceil(self.part.max(1)).max(1);
        self.deadline
            .saturating_mul(u32::try_from(parts).unwrap_or(u32::MAX))
    }

    /// The tuning from the environment and then `options` (which win);
    /// the options it used are taken out of `options`.
    pub fn read(
        env: impl Fn(&str) -> Option<String>,
        options: &mut Vec<(String, String)>,
    ) -> Result<Tuning, ConfigError> {
        let mut t = Tuning::default();
        let mut set = |name: &str, value: &str| -> Result<(), ConfigError> {
            if name.eq_ignore_ascii_case(DEADLINE_ENV) {
                t.deadline = parse_deadline(value).ok_or_else(|| {
                    ConfigError(format!(
                        "{name}={value:?} is not a positive duration (seconds, or with a unit: 90s, 5m)"
                    ))
                })?;
                return Ok(());
            }
            let n = parse_size(value).ok_or_else(|| {
                ConfigError(format!(
                    "{name}={value:?} is not a positive size (bytes, or with a unit: KB/MB/GB = 1000^n, KiB/MiB/GiB or K/M/G = 1024^n)"
                ))
            })?;
            if name.eq_ignore_ascii_case(CONCURRENCY_ENV) {
                t.concurrency = n.min(1024);
            } else {
                t.part = n;
                t.load_part = n;
            }
            Ok(())
        };
        let names = [CONCURRENCY_ENV, PART_SIZE_ENV, DEADLINE_ENV];
        for name in names {
            if let Some(v) = env(name).filter(|v| !v.trim().is_empty()) {
                set(name, &v)?;
            }
        }
        let mut rest = Vec::with_capacity(options.len());
        for (k, v) in options.drain(..) {
            if names.iter().any(|n| k.eq_ignore_ascii_case(n)) {
                set(&k, &v)?;
            } else {
                rest.push((k, v));
            }
        }
        *options = rest;
        Ok(t)
    }
}

/// `key` as a configuration key of a store (its own keys, then the
/// client's), or the error naming it.
fn key<K: std::str::FromStr>(
    store: &str,
    key: &str,
    wrap: impl Fn(ClientConfigKey) -> K,
) -> Result<K, ConfigError> {
    let lower = key.to_ascii_lowercase();
    if let Ok(k) = lower.parse::<K>() {
        return Ok(k);
    }
    match lower.parse::<ClientConfigKey>() {
        Ok(k) => Ok(wrap(k)),
        Err(_) => Err(ConfigError(format!(
            "storage option {key:?} is not a configuration key of {store}"
        ))),
    }
}

/// Whether an endpoint is plain HTTP.
fn plain_http(endpoint: Option<String>) -> bool {
    endpoint.is_some_and(|e| e.to_ascii_lowercase().starts_with("http://"))
}

/// Retries of failed requests (5xx, 429, timeouts, connection errors):
/// exponential backoff from 100 ms to 8 s, at most 6 retries within a
/// minute, so that a store that keeps failing is reported in seconds.
fn retry_config() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: std::time::Duration::from_millis(100),
            max_backoff: std::time::Duration::from_secs(8),
            base: 2.0,
        },
        max_retries: 6,
        retry_timeout: std::time::Duration::from_secs(60),
    }
}

/// The plain HTTP store of the server of `parsed`, whose requests carry
/// `query` (a presigned URL's) when given. Only a URL without credentials
/// (no query, no user part) follows redirects.
fn http_store(
    parsed: &Url,
    query: Option<&str>,
    options: Vec<(String, String)>,
) -> Result<Store, BuildError> {
    let credentials =
        query.is_some() || !parsed.username().is_empty() || parsed.password().is_some();
    let connector = Connector {
        redirects: !credentials,
        query: query.map(str::to_owned),
    };
    let mut b = HttpBuilder::new()
        .with_http_connector(connector)
        .with_url(&parsed[..url::Position::BeforePath]);
    for (k, v) in options {
        b = b.with_config(key("HTTP", &k, |c| c)?, v);
    }
    if parsed.scheme() == "http" {
        b = b.with_config(ClientConfigKey::AllowHttp, "true");
    }
    Ok(Store::objects_only(Arc::new(
        b.with_retry(retry_config()).build()?,
    )))
}

/// Why a store could not be made.
#[derive(Debug)]
pub(crate) enum BuildError {
    /// The settings are wrong.
    Config(ConfigError),
    /// The builder failed (bad values, or no resources to make a client).
    Store(object_store::Error),
}

impl From<ConfigError> for BuildError {
    fn from(e: ConfigError) -> Self {
        BuildError::Config(e)
    }
}

impl From<object_store::Error> for BuildError {
    fn from(e: object_store::Error) -> Self {
        BuildError::Store(e)
    }
}

/// Whether `url` names an object of a cloud store (S3, GCS, Azure), which
/// takes multipart uploads; a plain HTTP(S) URL, presigned or not, does not.
pub(crate) fn takes_uploads(url: &str) -> bool {
    if literal_key(url).is_some() {
        return true;
    }
    let Ok(parsed) = Url::parse(url) else {
        return false;
    };
    if parsed.query().is_some() && matches!(parsed.scheme(), "http" | "https") {
        return false;
    }
    matches!(
        ObjectStoreScheme::parse(&parsed),
        Ok((
            ObjectStoreScheme::AmazonS3
                | ObjectStoreScheme::GoogleCloudStorage
                | ObjectStoreScheme::MicrosoftAzure,
            _
        ))
    )
}

/// The store holding `url` (one per bucket or server and settings,
/// [`stores`]), the object's path in it, and the tuning. A store that
/// cannot be made for lack of resources (descriptors, threads) is an I/O
/// error; wrong settings are a [`ConfigError`].
pub(crate) fn store_for(
    url: &str,
    options: &[(String, String)],
) -> Result<(Store, Path, Tuning), OpenError> {
    crate::runtime::install_tls();
    let bad = |why: String| OpenError::Config(ConfigError(format!("{}: {why}", display(url))));
    let literal = literal_key(url);
    // A cloud store's URL: its root alone is parsed (the bucket), its key
    // taken as it is.
    let parsed = Url::parse(literal.map_or(url, |(root, _)| root))
        .map_err(|e| bad(format!("not a URL: {e}")))?;
    if literal.is_some()
        && (parsed.query().is_some() || parsed.fragment().is_some() || parsed.path() != "")
    {
        return Err(bad("not a bucket or container name before the key".into()));
    }
    let mut options = options.to_vec();
    let tuning =
        Tuning::read(|n| std::env::var(n).ok(), &mut options).map_err(OpenError::Config)?;
    let signed = parsed
        .query()
        .filter(|_| matches!(parsed.scheme(), "http" | "https"));
    let (scheme, path) = match signed {
        _ if literal.is_some() => {
            let (scheme, _) = ObjectStoreScheme::parse(&parsed)
                .map_err(|e| bad(format!("not an object URL: {e}")))?;
            (scheme, key_path(literal.map_or("", |(_, k)| k))?)
        }
        // Its own authorisation in the query (presigned, SAS): plain HTTP
        // whatever the host, the query sent with every request.
        Some(_) => (
            ObjectStoreScheme::Http,
            Path::from_url_path(parsed.path()).map_err(|e| bad(e.to_string()))?,
        ),
        None => {
            ObjectStoreScheme::parse(&parsed).map_err(|e| bad(format!("not an object URL: {e}")))?
        }
    };
    let key = stores::key(&parsed, &options);
    let root = literal.map_or(url, |(root, _)| root);
    let store = stores::get_or_build(key, || build(root, &parsed, scheme, signed, options))
        .map_err(|e| match e {
            BuildError::Config(c) => bad(c.0),
            BuildError::Store(e) => match crate::error::io_cause(&e) {
                Some(io) => OpenError::Read(fastst_core::Error::Io {
                    context: "cannot make the store's client".into(),
                    source: io,
                }),
                None => bad(format!("cannot configure the store: {e}")),
            },
        })?;
    Ok((store, path, tuning))
}

/// Makes the store of `url` (parsed: `parsed`) of kind `scheme`, whose
/// requests carry `signed` (a presigned URL's query) when given.
fn build(
    url: &str,
    parsed: &Url,
    scheme: ObjectStoreScheme,
    signed: Option<&str>,
    options: Vec<(String, String)>,
) -> Result<Store, BuildError> {
    Ok(match scheme {
        ObjectStoreScheme::AmazonS3 => {
            let mut b = AmazonS3Builder::from_env().with_url(url);
            for (k, v) in options {
                b = b.with_config(key("S3", &k, AmazonS3ConfigKey::Client)?, v);
            }
            if plain_http(b.get_config_value(&AmazonS3ConfigKey::Endpoint)) {
                b = b.with_allow_http(true);
            }
            let store = b
                .with_http_connector(Connector::signed())
                .with_retry(retry_config())
                .build()?;
            Store::cloud(Arc::new(store))
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            let mut b = GoogleCloudStorageBuilder::from_env().with_url(url);
            for (k, v) in options {
                b = b.with_config(key("GCS", &k, GoogleConfigKey::Client)?, v);
            }
            let store = b
                .with_http_connector(Connector::signed())
                .with_retry(retry_config())
                .build()?;
            Store::cloud(Arc::new(store))
        }
        ObjectStoreScheme::MicrosoftAzure => {
            let mut b = MicrosoftAzureBuilder::from_env().with_url(url);
            for (k, v) in options {
                b = b.with_config(key("Azure", &k, AzureConfigKey::Client)?, v);
            }
            if plain_http(b.get_config_value(&AzureConfigKey::Endpoint)) {
                b = b.with_allow_http(true);
            }
            let store = b
                .with_http_connector(Connector::signed())
                .with_retry(retry_config())
                .build()?;
            Store::cloud(Arc::new(store))
        }
        ObjectStoreScheme::Http => http_store(parsed, signed, options)?,
        _ => return Err(ConfigError("not an object store or HTTP URL".into()).into()),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_the_rest_of_fastst() {
        assert_eq!(parse_size("16"), Some(16));
        assert_eq!(parse_size("8M"), Some(8 << 20));
        assert_eq!(parse_size("8MiB"), Some(8 << 20));
        assert_eq!(parse_size("64kb"), Some(64_000));
        assert_eq!(parse_size("64KiB"), Some(64 << 10));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        for bad in ["", "0", "-1", "x", "M", "1X"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    #[test]
    fn options_win_over_the_environment_and_are_taken_out() {
        let env = |n: &str| (n == CONCURRENCY_ENV).then(|| "4".to_owned());
        let mut opts = vec![
            ("fastst_remote_part_size".to_owned(), "1M".to_owned()),
            ("region".to_owned(), "x".to_owned()),
            ("FASTST_REMOTE_DEADLINE".to_owned(), "1m 30s".to_owned()),
        ];
        let t = Tuning::read(env, &mut opts).unwrap();
        assert_eq!(
            t,
            Tuning {
                concurrency: 4,
                part: 1 << 20,
                load_part: 1 << 20,
                deadline: std::time::Duration::from_secs(90),
            }
        );
        assert_eq!(opts, vec![("region".to_owned(), "x".to_owned())]);
        let mut bad = vec![(CONCURRENCY_ENV.to_owned(), "0".to_owned())];
        let err = Tuning::read(|_| None, &mut bad).unwrap_err();
        assert!(err.0.contains("not a positive size"), "{err}");
        for wrong in ["0", "-1", "soon", "nan", "inf", ""] {
            let mut bad = vec![(DEADLINE_ENV.to_owned(), wrong.to_owned())];
            let err = Tuning::read(|_| None, &mut bad).unwrap_err();
            assert!(err.0.contains("not a positive duration"), "{wrong}: {err}");
        }
    }

    #[test]
    fn deadlines_read_seconds_or_durations_and_grow_with_rounds() {
        let s = std::time::Duration::from_secs;
        assert_eq!(parse_deadline("90"), Some(s(90)));
        assert_eq!(
            parse_deadline(" 2.5 "),
            Some(std::time::Duration::from_millis(2500))
        );
        assert_eq!(parse_deadline("5m"), Some(s(300)));
        assert_eq!(parse_deadline("0s"), None);
        let t = Tuning {
            concurrency: 4,
            part: 1,
            load_part: 1,
            deadline: s(10),
        };
        assert_eq!(t.deadline_for(0), s(10));
        assert_eq!(t.deadline_for(4), s(10));
        assert_eq!(t.deadline_for(5), s(20));
        let t = Tuning { part: 8, ..t };
        assert_eq!(t.deadline_for_request(0), s(10));
        assert_eq!(t.deadline_for_request(8), s(10));
        assert_eq!(t.deadline_for_request(17), s(30));
        assert_eq!(Tuning::default().deadline, DEFAULT_DEADLINE);
    }

    #[test]
    fn a_url_with_a_query_is_plain_http_whatever_its_host() {
        let url = "https://s3.us-east-1.amazonaws.com/bucket/dir/m.safetensors?X-Amz-Signature=1";
        let (_, path, _) = store_for(url, &[]).unwrap();
        assert_eq!(path.as_ref(), "bucket/dir/m.safetensors");
        let (_, path, _) = store_for(url.split('?').next().unwrap(), &[]).unwrap();
        assert_eq!(path.as_ref(), "dir/m.safetensors", "S3 without a query");
    }

    #[test]
    fn keys_of_store_urls_are_taken_literally() {
        for (url, key) in [
            ("s3://b/exp#3/model.safetensors", "exp#3/model.safetensors"),
            ("S3://b/a?versionId=1", "a?versionId=1"),
            ("s3://b/a%2Fb/c%", "a%2Fb/c%"),
            ("s3://b/x..y/ z \u{e9}", "x..y/ z \u{e9}"),
            ("s3://b/run/exp#3/", "run/exp#3"),
        ] {
            let (_, path, _) = store_for(url, &[]).unwrap();
            assert_eq!(path.as_ref(), key, "{url}");
        }
        for (url, root, key) in [
            ("gs://b/a#b?c", "gs://b", "a#b?c"),
            ("az://c/%41", "az://c", "%41"),
            (
                "abfss://c@acct.dfs.core.windows.net/k#1",
                "abfss://c@acct.dfs.core.windows.net",
                "k#1",
            ),
            ("s3://b", "s3://b", ""),
        ] {
            assert_eq!(literal_key(url), Some((root, key)), "{url}");
        }
        assert_eq!(literal_key("https://h/a#b"), None);
        for bad in [
            "s3://b/a//b",
            "s3://b//a",
            "s3://b/a/../b",
            "s3://b/./x",
            "s3://b/..",
            "s3://b/a\u{1}b",
        ] {
            match store_for(bad, &[]) {
                Err(OpenError::Read(e)) => assert_eq!(e.rule(), "object-key", "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        let Some(OpenError::Config(err)) = store_for("s3://b?x/k", &[]).err() else {
            panic!("a bucket with a query is refused")
        };
        assert!(err.0.contains("not a bucket"), "{err}");
    }

    #[test]
    fn unknown_keys_and_urls_are_refused() {
        let opts = vec![("no_such_key".to_owned(), "1".to_owned())];
        let Some(OpenError::Config(err)) = store_for("s3://bucket/k", &opts).err() else {
            panic!("a configuration error")
        };
        assert!(
            err.0
                .contains("\"no_such_key\" is not a configuration key of S3"),
            "{err}"
        );
        let opts = vec![
            ("endpoint_url".to_owned(), "http://127.0.0.1:1".to_owned()),
            ("allow_http".to_owned(), "false".to_owned()),
            ("region".to_owned(), "us-east-1".to_owned()),
        ];
        assert!(store_for("s3://bucket/k", &opts).is_ok());
        assert!(store_for("http://127.0.0.1:1/a/b", &[]).is_ok());
    }
}
