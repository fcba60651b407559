//! The HTTP client of every store: `object_store`'s own client, built
//! from the same [`ClientOptions`] (timeouts, proxy, HTTP versions, plain
//! HTTP, certificates), but one that follows no redirect where a request
//! carries credentials, and whose answers pass through [`crate::guard`]
//! (caps on bodies, the query of a presigned URL).
//!
//! `object_store` builds its `reqwest` client with reqwest's default
//! policy, which follows up to ten redirects and keeps headers such as
//! `x-amz-security-token` across hosts. The cloud stores (S3, GCS, Azure,
//! and the services their credentials come from), presigned and SAS URLs
//! and URLs with a user part connect with redirects off: a `3xx` answer
//! reaches the store, which reports it as an error naming the status, so
//! a signed request (its `Authorization` header, session token or
//! signature) is only ever sent to the address it was signed for. Only a
//! plain HTTP(S) URL without credentials follows redirects, as HTTP
//! clients do (never from `https` to `http`).

use std::str::FromStr;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use object_store::client::{HttpClient, HttpConnector};
use object_store::{ClientConfigKey as Key, ClientOptions};

use crate::guard::Guard;

/// Set once a client that does not check certificates was made
/// (`allow_invalid_certificates`), for the caller's warning.
static CERTIFICATES_UNCHECKED: AtomicBool = AtomicBool::new(false);

/// Whether a client made in this process does not check TLS
/// certificates (`allow_invalid_certificates` in `storage_options` or
/// the environment, e.g. `AWS_ALLOW_INVALID_CERTIFICATES`): the Python
/// glue warns once when it becomes true.
pub fn certificates_unchecked() -> bool {
    CERTIFICATES_UNCHECKED.load(Ordering::Relaxed)
}

/// Makes the clients of one store.
#[derive(Debug)]
pub(crate) struct Connector {
    /// Redirects are followed (a plain HTTP(S) URL without credentials).
    pub(crate) redirects: bool,
    /// The query every request carries (a presigned or SAS URL's).
    pub(crate) query: Option<String>,
}

impl Connector {
    /// A connector for requests that carry credentials: no redirect.
    pub(crate) fn signed() -> Connector {
        Connector {
            redirects: false,
            query: None,
        }
    }
}

impl HttpConnector for Connector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        if Values(options).flag(Key::AllowInvalidCertificates)? {
            CERTIFICATES_UNCHECKED.store(true, Ordering::Relaxed);
        }
        Ok(HttpClient::new(Guard::new(
            client(options, self.redirects)?,
            self.query.clone(),
        )))
    }
}

/// A configuration value the client cannot use.
fn bad(key: Key, value: &str, what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "Config",
        source: format!("failed to parse {value:?} as {what} (client option {key:?})").into(),
    }
}

/// `options`' value of `key`, parsed as `object_store` parses it.
struct Values<'a>(&'a ClientOptions);

impl Values<'_> {
    fn text(&self, key: Key) -> Option<String> {
        self.0.get_config_value(&key)
    }

    fn flag(&self, key: Key) -> object_store::Result<bool> {
        match self.text(key) {
            None => Ok(false),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "on" | "yes" | "y" => Ok(true),
                "0" | "false" | "off" | "no" | "n" => Ok(false),
                _ => Err(bad(key, &v, "a boolean")),
            },
        }
    }

    fn duration(&self, key: Key) -> object_store::Result<Option<Duration>> {
        self.text(key)
            .map(|v| humantime::parse_duration(&v).map_err(|_| bad(key, &v, "a duration")))
            .transpose()
    }

    fn number<T: FromStr>(&self, key: Key) -> object_store::Result<Option<T>> {
        self.text(key)
            .map(|v| v.parse::<T>().map_err(|_| bad(key, &v, "a number")))
            .transpose()
    }
}

/// The `reqwest` client `object_store` would build from `options`, with
/// redirects off unless `redirects` (then reqwest's default policy).
fn client(options: &ClientOptions, redirects: bool) -> object_store::Result<reqwest::Client> {
    let failed = |e: reqwest::Error| object_store::Error::Generic {
        store: "HTTP client",
        source: Box::new(e),
    };
    let o = Values(options);
    let agent = o
        .text(Key::UserAgent)
        .unwrap_or_else(|| concat!("fastst/", env!("CARGO_PKG_VERSION")).to_owned());
    let mut b = reqwest::ClientBuilder::new()
        .user_agent(agent)
        .redirect(if redirects {
            reqwest::redirect::Policy::default()
        } else {
            reqwest::redirect::Policy::none()
        })
        // No transparent decompression: it would change the lengths the
        // store checks.
        .no_gzip()
        .no_brotli()
        .no_zstd()
        .no_deflate();
    if let Some(url) = o.text(Key::ProxyUrl) {
        let mut proxy = reqwest::Proxy::all(&url).map_err(failed)?;
        if let Some(pem) = o.text(Key::ProxyCaCertificate) {
            let cert = reqwest::tls::Certificate::from_pem(pem.as_bytes()).map_err(failed)?;
            b = b.tls_certs_merge(std::iter::once(cert));
        }
        if let Some(excludes) = o.text(Key::ProxyExcludes) {
            proxy = proxy.no_proxy(reqwest::NoProxy::from_string(&excludes));
        }
        b = b.proxy(proxy);
    }
    if o.flag(Key::NoSystemCertificates)? {
        b = b.tls_certs_only(std::iter::empty());
    }
    if let Some(t) = o.duration(Key::Timeout)? {
        b = b.timeout(t);
    }
    if let Some(t) = o.duration(Key::ConnectTimeout)? {
        b = b.connect_timeout(t);
    }
    if let Some(t) = o.duration(Key::ReadTimeout)? {
        b = b.read_timeout(t);
    }
    if let Some(t) = o.duration(Key::PoolIdleTimeout)? {
        b = b.pool_idle_timeout(t);
    }
    if let Some(n) = o.number::<usize>(Key::PoolMaxIdlePerHost)? {
        b = b.pool_max_idle_per_host(n);
    }
    if let Some(t) = o.duration(Key::Http2KeepAliveInterval)? {
        b = b.http2_keep_alive_interval(t);
    }
    if let Some(t) = o.duration(Key::Http2KeepAliveTimeout)? {
        b = b.http2_keep_alive_timeout(t);
    }
    if o.flag(Key::Http2KeepAliveWhileIdle)? {
        b = b.http2_keep_alive_while_idle(true);
    }
    if let Some(n) = o.number::<u32>(Key::Http2MaxFrameSize)? {
        b = b.http2_max_frame_size(Some(n));
    }
    if o.flag(Key::Http1Only)? {
        b = b.http1_only();
    }
    if o.flag(Key::Http2Only)? {
        b = b.http2_prior_knowledge();
    }
    if o.flag(Key::AllowInvalidCertificates)? {
        b = b.danger_accept_invalid_certs(true);
    }
    b.https_only(!o.flag(Key::AllowHttp)?)
        .build()
        .map_err(failed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_client_options_are_read_as_object_store_reads_them() {
        crate::runtime::install_tls();
        let options = ClientOptions::new()
            .with_timeout(Duration::from_millis(1500))
            .with_allow_http(true)
            .with_config(Key::Http1Only, "yes")
            .with_config(Key::PoolMaxIdlePerHost, "3");
        assert!(client(&options, false).is_ok());
        let o = Values(&options);
        assert_eq!(
            o.duration(Key::Timeout).unwrap(),
            Some(Duration::from_millis(1500))
        );
        assert!(o.flag(Key::AllowHttp).unwrap() && o.flag(Key::Http1Only).unwrap());
        let wrong = ClientOptions::new().with_config(Key::Timeout, "soon");
        let err = client(&wrong, true).unwrap_err().to_string();
        assert!(
            err.contains("\"soon\"") && err.contains("duration"),
            "{err}"
        );
    }
}
