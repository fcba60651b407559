//! URLs that carry their own authorisation in the query (S3 presigned
//! URLs, Azure SAS URLs...): read as plain HTTP with every request sent
//! to the URL with its query. The store only ever sends GETs for them (a
//! presigned signature is for one method); the answers to refused
//! requests lose their bodies, which may quote the signature, and no
//! message shows the query.

use std::future::Future;
use std::pin::Pin;

use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};
use object_store::ClientOptions;

/// Makes clients that send every request with the query `0`.
pub(crate) struct WithQuery(pub(crate) String);

impl std::fmt::Debug for WithQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WithQuery(..)")
    }
}

impl HttpConnector for WithQuery {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(Service {
            inner: ReqwestConnector::default().connect(options)?,
            query: self.0.clone(),
        }))
    }
}

struct Service {
    inner: HttpClient,
    query: String,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Service(..)")
    }
}

impl Service {
    /// `e` as text without the query.
    fn hide(&self, e: HttpError) -> HttpError {
        let mut text = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            text = format!("{text}: {c}");
            cause = c.source();
        }
        let text = text.replace(&self.query, "...");
        HttpError::new_boxed(e.kind(), text.into())
    }

    async fn send(&self, mut req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let joint = if req.uri().query().is_some() {
            '&'
        } else {
            '?'
        };
        let uri = format!("{}{joint}{}", req.uri(), self.query);
        *req.uri_mut() = uri
            .parse()
            .map_err(|e| HttpError::new(HttpErrorKind::Request, e))?;
        let got = self.inner.execute(req).await.map_err(|e| self.hide(e))?;
        if got.status().is_client_error() || got.status().is_server_error() {
            let (parts, _) = got.into_parts();
            return Ok(HttpResponse::from_parts(parts, Vec::new().into()));
        }
        Ok(got)
    }
}

impl HttpService for Service {
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
