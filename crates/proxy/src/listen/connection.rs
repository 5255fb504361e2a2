//! One client connection, driven to its end: on shutdown its current
//! request finishes and then it closes; a request hyper's parser rejects
//! still gets its audit line.

use std::future::Future;
use std::net::SocketAddr;

use crate::answer::failure;
use crate::shared::Shared;
use hyper::body::Incoming;
use hyper_util::server::conn::auto;

/// Runs a connection to its end; on shutdown lets its current request
/// finish and then closes it.
pub(crate) async fn drive<C, E>(shared: &Shared, conn: C, peer: SocketAddr)
where
    C: Future<Output = Result<(), E>> + GracefulConn,
    E: std::fmt::Display + Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::pin!(conn);
    let mut stop = shared.tracker.stopping();
    let result = if *stop.borrow() {
        // Started after shutdown began: the request already read is served
        // and every response says Connection: close.
        conn.await
    } else {
        tokio::select! {
            biased;
            r = conn.as_mut() => r,
            _ = stop.changed() => {
                conn.as_mut().shutdown_gracefully();
                conn.await
            }
        }
    };
    if let Err(e) = result {
        let err: Box<dyn std::error::Error + Send + Sync> = e.into();
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_parse() || h.is_parse_too_large() {
                let mut rec = shared.record("", "", "", peer);
                failure::malformed_kept_alive(h).record(&mut rec);
                shared.audit.send(rec);
            }
        }
    }
}

/// The part of hyper-util's connections that graceful shutdown needs.
pub(crate) trait GracefulConn {
    fn shutdown_gracefully(self: std::pin::Pin<&mut Self>);
}

impl<I, S, E> GracefulConn for auto::UpgradeableConnection<'_, I, S, E>
where
    S: hyper::service::HttpService<Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S::ResBody: http_body::Body + Send + 'static,
    <S::ResBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, S::ResBody>,
{
    fn shutdown_gracefully(self: std::pin::Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, E> GracefulConn for auto::Connection<'_, I, S, E>
where
    S: hyper::service::HttpService<Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S::ResBody: http_body::Body + Send + 'static,
    <S::ResBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, S::ResBody>,
{
    fn shutdown_gracefully(self: std::pin::Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}
