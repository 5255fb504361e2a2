//! The connector under the pool: each new connection to an origin is
//! resolved and checked by the [`Guard`], opened within the connect timeout
//! and the global bounds of [`Conns`], directly or through the parent.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::rt::TokioIo;
use mannerly_policy::url;

use super::conns::Conns;
use super::guard::{connect_any, Guard};
use super::parent::{Link, Parent};
use crate::error::ConnectError;

/// A connector that resolves through the [`Guard`] and connects only to the
/// addresses it checked. One `Arc`, cloned for each connection opened.
#[derive(Clone)]
pub(crate) struct GuardedConnector(pub(super) Arc<Connecting>);

pub(super) struct Connecting {
    pub(super) guard: Guard,
    pub(super) connect_timeout: Duration,
    pub(super) conns: Arc<Conns>,
    pub(super) parent: Option<Arc<Parent>>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Uri> for GuardedConnector {
    type Response = TokioIo<Link>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.0.clone();
        Box::pin(async move {
            let Connecting {
                guard,
                connect_timeout: timeout,
                conns,
                parent,
            } = &*this;
            let timeout = *timeout;
            let host = uri
                .host()
                .ok_or_else(|| ConnectError::NoHost(uri.to_string()))?
                .to_string();
            let port = uri.port_u16().unwrap_or_else(|| {
                let scheme = uri.scheme_str().unwrap_or("http");
                url::default_port(scheme).unwrap_or(url::HTTP_PORT)
            });
            let Some(_turn) = conns.connecting(timeout).await else {
                return Err(ConnectError::ProxyBusy {
                    host,
                    why: format!(
                        "no turn to open a connection within {timeout:?} (upstream.max_connecting)"
                    ),
                }
                .into());
            };
            if let Some(parent) = parent.as_ref().filter(|p| p.serves(&host, port)) {
                let tunnel = uri.scheme_str() == Some("https");
                let link = parent
                    .open(guard, conns, &host, port, tunnel, timeout)
                    .await?;
                return Ok(TokioIo::new(link));
            }
            let addrs = guard.resolve(&host, port).await?;
            let stream = connect_any(&host, &addrs, timeout).await?;
            Ok(TokioIo::new(Link::direct(conns.track(stream))))
        })
    }
}
