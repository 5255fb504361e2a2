//! The client towards origins: name resolution with overrides, the guard
//! against internal addresses (applied to every address that is connected
//! to), TLS with webpki roots plus configured extras, HTTP/1.1 or h2 by ALPN,
//! and a pool of origin connections per serving thread (`pool`).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use rustls::RootCertStore;

use crate::body::ProxyBody;
use crate::config::UpstreamConfig;
use crate::error::{ConnectError, StartError};
use crate::upstream::connector::{Connecting, GuardedConnector};
use crate::upstream::conns::Conns;
use crate::upstream::parent::{Link, Parent};
use crate::upstream::pool::{Pool, PoolConfig};

/// The largest response head taken from an origin (as the 64 KiB a
/// client's head may have by default).
pub(crate) const MAX_RESPONSE_HEAD: usize = 64 * 1024;

mod connector;
pub(crate) mod conns;
mod guard;
pub(crate) mod parent;
pub(crate) mod pinned;
mod pool;
mod resolve;

pub(crate) use guard::{connect_any, Guard};
pub(crate) use pool::SendError;

std::thread_local! {
    /// Which serving thread this is (see `shards.rs`), as an index into
    /// [`UpstreamClient`]'s pools; 0 for any other thread.
    static POOL: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks the current thread as serving thread `i`: its requests use a pool
/// of origin connections of their own, driven by the same thread.
pub(crate) fn serve_on_shard(i: usize) {
    POOL.with(|p| p.set(i + 1));
}

/// The pooled client towards origins, directly or through the parent.
#[derive(Clone)]
pub(crate) struct UpstreamClient {
    /// One pool per serving thread, and one (the first) for other threads.
    /// A pooled connection is driven by the thread that opened it; sharing
    /// one pool between threads would hand each answer across threads.
    pools: Arc<[Pool]>,
    parent: Option<Arc<Parent>>,
    guard: Guard,
    conns: Arc<Conns>,
    connect_timeout: Duration,
}

impl UpstreamClient {
    /// Sends a request; a plain-HTTP one the parent carries gets the
    /// parent's credentials.
    pub(crate) fn request(
        &self,
        mut req: Request<ProxyBody>,
    ) -> impl Future<Output = Result<Response<Incoming>, SendError>> + Send + '_ {
        if let Some(parent) = self.parent_for(req.uri()) {
            if req.uri().scheme_str() != Some("https") {
                parent.authorize(&mut req);
            }
        }
        let i = POOL.with(std::cell::Cell::get);
        self.pools[i.min(self.pools.len() - 1)].send(req)
    }

    /// The parent that carries requests to `uri`, if any.
    pub(crate) fn parent_for(&self, uri: &Uri) -> Option<&Parent> {
        // Without a parent the URI's port is not parsed (every request asks).
        self.parent.as_ref()?;
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        self.parent_serving(uri.host()?, port)
    }

    /// The parent that carries requests to `host:port`, if any.
    pub(crate) fn parent_serving(&self, host: &str, port: u16) -> Option<&Parent> {
        let parent = self.parent.as_deref()?;
        parent.serves(host, port).then_some(parent)
    }

    /// A raw byte stream to `host:port` (for CONNECT without interception):
    /// through the parent's CONNECT when it serves the target, else direct
    /// to the addresses the guard already passed.
    pub(crate) async fn tunnel(
        &self,
        host: &str,
        port: u16,
        addrs: &[SocketAddr],
    ) -> Result<Link, ConnectError> {
        let timeout = self.connect_timeout;
        match self.parent.as_deref().filter(|p| p.serves(host, port)) {
            Some(parent) => {
                parent
                    .open(&self.guard, &self.conns, host, port, true, timeout)
                    .await
            }
            None => {
                let stream = connect_any(host, addrs, timeout).await?;
                Ok(Link::direct(self.conns.track(stream)))
            }
        }
    }
}

/// Builds the client: webpki roots plus `extra_roots`, ALPN h2 + http/1.1;
/// a pool for each of `threads` serving threads. `pool_max_idle_per_host`
/// applies to each pool, `pool_max_idle_total` to all together.
pub(crate) fn client(
    cfg: &UpstreamConfig,
    guard: Guard,
    threads: usize,
) -> Result<UpstreamClient, StartError> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let mut named = Vec::new();
    for path in &cfg.extra_roots {
        let pem = std::fs::read(path)
            .map_err(|e| StartError::Roots(format!("{}: {e}", path.display())))?;
        let mut n = 0;
        for cert in
            <rustls_pki_types::CertificateDer as rustls_pki_types::pem::PemObject>::pem_slice_iter(
                &pem,
            )
        {
            let cert = cert.map_err(|e| StartError::Roots(format!("{}: {e}", path.display())))?;
            named.push(cert.clone());
            roots
                .add(cert)
                .map_err(|e| StartError::Roots(format!("{}: {e}", path.display())))?;
            n += 1;
        }
        if n == 0 {
            return Err(StartError::Roots(format!(
                "{}: no certificate in the file",
                path.display()
            )));
        }
    }
    let parent = Parent::from_config(cfg, &roots)
        .map_err(StartError::Config)?
        .map(Arc::new);
    if let Some(p) = &parent {
        tracing::info!("origins are reached through the parent proxy {}", p.shown());
    }
    let webpki = rustls::client::WebPkiServerVerifier::builder(Arc::new(roots))
        .build()
        .map_err(|e| StartError::Roots(e.to_string()))?;
    let tls = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(pinned::Pinned::new(webpki, named)))
        .with_no_client_auth();
    let conns = Conns::new(cfg.max_connecting, cfg.pool_max_idle_total);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(GuardedConnector(Arc::new(Connecting {
            guard: guard.clone(),
            connect_timeout: cfg.connect_timeout,
            conns: conns.clone(),
            parent: parent.clone(),
        })));
    let pool = PoolConfig {
        idle_for: cfg.pool_idle,
        max_idle_per_host: cfg.pool_max_idle_per_host,
        max_head: MAX_RESPONSE_HEAD,
    };
    let pools = (0..=threads)
        .map(|_| Pool::new(connector.clone(), &pool, guard.clock().clone()))
        .collect();
    Ok(UpstreamClient {
        pools,
        parent,
        guard,
        conns,
        connect_timeout: cfg.connect_timeout,
    })
}
