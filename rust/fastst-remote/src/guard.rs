//! What every answer of a store passes through before `object_store` reads
//! it, so that no server decides how much fastst holds in memory or shows:
//!
//! - an error's body (4xx, 5xx) is cut to its first [`ERROR_BODY_KEPT`]
//!   bytes, the rest never read: the message quoting it stays short, and
//!   a huge body costs nothing (the connection is dropped);
//! - an answer to a request without a byte range (a listing page, a
//!   credential token, an upload's answer) may hold at most
//!   [`ANSWER_CAP`] bytes, or it is refused (rule
//!   `remote-answer-over-cap`); the bytes of an object are always asked
//!   for by range, and checked against it by the reader;
//! - a URL that carries its own authorisation in the query (S3 presigned
//!   URLs, Azure SAS URLs) has every request sent with that query; the
//!   answers to refused requests lose their bodies (they may quote the
//!   signature), and no error shows the query.

use std::future::Future;
use std::pin::Pin;

use futures::StreamExt;
use object_store::client::{
    HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpResponseBody, HttpService,
};

/// Bytes of an error's body kept (for its message).
pub const ERROR_BODY_KEPT: usize = 4 << 10;

/// The most bytes of an answer to a request without a byte range: far
/// above a listing page of a thousand keys of the longest length the
/// stores allow.
pub const ANSWER_CAP: usize = 16 << 20;

/// An answer without a byte range was larger than [`ANSWER_CAP`]: found
/// in the error's chain by [`crate::error::from_store`].
#[derive(Debug)]
pub(crate) struct OverCap;

impl std::fmt::Display for OverCap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the answer holds more than {ANSWER_CAP} bytes")
    }
}

impl std::error::Error for OverCap {}

/// A client whose answers are held to the rules of the module.
pub(crate) struct Guard {
    inner: reqwest::Client,
    query: Option<String>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard(..)")
    }
}

impl Guard {
    /// `inner`'s answers held to the rules; every request sent with
    /// `query` when given.
    pub(crate) fn new(inner: reqwest::Client, query: Option<String>) -> Guard {
        Guard { inner, query }
    }

    /// `e` as text without the query, when there is one.
    fn hide(&self, e: HttpError) -> HttpError {
        let Some(query) = &self.query else {
            return e;
        };
        let mut text = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            text = format!("{text}: {c}");
            cause = c.source();
        }
        let text = text.replace(query.as_str(), "...");
        HttpError::new_boxed(e.kind(), text.into())
    }

    async fn send(&self, mut req: HttpRequest) -> Result<HttpResponse, HttpError> {
        if let Some(query) = &self.query {
            let joint = if req.uri().query().is_some() {
                '&'
            } else {
                '?'
            };
            let uri = format!("{}{joint}{query}", req.uri());
            *req.uri_mut() = uri
                .parse()
                .map_err(|e| self.hide(HttpError::new(HttpErrorKind::Request, e)))?;
        }
        let ranged = req.headers().contains_key("range");
        let got = HttpService::call(&self.inner, req)
            .await
            .map_err(|e| self.hide(e))?;
        let status = got.status();
        if status.is_client_error() || status.is_server_error() {
            let (parts, body) = got.into_parts();
            let kept = match self.query {
                Some(_) => String::new(),
                None => head(body).await,
            };
            return Ok(HttpResponse::from_parts(parts, kept.into()));
        }
        if ranged || !status.is_success() {
            return Ok(got);
        }
        let (parts, body) = got.into_parts();
        let whole = whole(body).await.map_err(|e| self.hide(e))?;
        Ok(HttpResponse::from_parts(parts, whole.into()))
    }
}

/// The first [`ERROR_BODY_KEPT`] bytes of an error's body as text (what
/// breaks off is left out), saying so when there was more.
async fn head(body: HttpResponseBody) -> String {
    let mut stream = body.bytes_stream();
    let mut kept = Vec::new();
    let mut more = false;
    while let Some(Ok(chunk)) = stream.next().await {
        let room = ERROR_BODY_KEPT - kept.len();
        if chunk.len() > room {
            kept.extend_from_slice(&chunk[..room]);
            more = true;
            break;
        }
        kept.extend_from_slice(&chunk);
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if more {
        text.push_str(" [... the rest of the answer was not read]");
    }
    text
}

/// The whole body of an answer without a byte range, refused past
/// [`ANSWER_CAP`] bytes (nothing more is read).
async fn whole(body: HttpResponseBody) -> Result<Vec<u8>, HttpError> {
    let mut stream = body.bytes_stream();
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if chunk.len() > ANSWER_CAP - out.len() {
            return Err(HttpError::new(HttpErrorKind::Decode, OverCap));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

impl HttpService for Guard {
    fn call<'s, 'f>(
        &'s self,
        req: HttpRequest,
    ) -> Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send + 'f>>
    where
        's: 'f,
        Self: 'f,
    {
        Box::pin(self.send(req))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn body(chunks: Vec<Vec<u8>>) -> HttpResponseBody {
        let mut all = Vec::new();
        for c in chunks {
            all.extend(c);
        }
        all.into()
    }

    #[test]
    fn error_bodies_are_cut_and_other_answers_capped() {
        let rt = crate::runtime().unwrap();
        let short = rt.block_on(head(body(vec![b"<Error>denied</Error>".to_vec()])));
        assert_eq!(short, "<Error>denied</Error>");
        let long = rt.block_on(head(body(vec![vec![b'x'; ERROR_BODY_KEPT * 3]])));
        assert!(
            long.starts_with(&"x".repeat(ERROR_BODY_KEPT)),
            "{}",
            long.len()
        );
        assert!(long.ends_with("[... the rest of the answer was not read]"));
        assert!(long.len() < ERROR_BODY_KEPT + 100);
        let page = rt.block_on(whole(body(vec![vec![1u8; 1000]]))).unwrap();
        assert_eq!(page.len(), 1000);
        let huge = rt.block_on(whole(body(vec![vec![0u8; ANSWER_CAP + 1]])));
        let err = huge.unwrap_err();
        assert!(
            std::error::Error::source(&err).unwrap().is::<OverCap>(),
            "{err}"
        );
    }
}
