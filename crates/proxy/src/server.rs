//! The listener: accepts connections, reads the first head, serves HTTP/1.1
//! with upgrades (for CONNECT), and shuts down gracefully: stop accepting,
//! let every request already read finish, within the grace period.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use mannerly_policy::{AuditRecord, Outcome};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

use crate::audit::AuditSink;
use crate::body::ProxyBody;
use crate::budget::Budgets;
use crate::ca::CertificateAuthority;
use crate::cache::Cache;
use crate::config::{secs, Config};
use crate::error::{ConfigError, Source, StartError};
use crate::intake::{read_head, Intake, Prefixed};
use crate::pipeline::{self, Target};
use crate::respond::Refusal;
use crate::robots::RobotsCache;
use crate::tunnel;
use crate::upstream::{self, Guard, UpstreamClient};
use mannerly_state::hosts::MemoryHosts;

/// State shared by every connection.
pub(crate) struct Shared {
    pub cfg: Config,
    pub ca: Arc<CertificateAuthority>,
    pub client: UpstreamClient,
    pub guard: Guard,
    pub audit: AuditSink,
    pub robots: RobotsCache,
    pub budgets: Arc<Budgets>,
    pub cache: Arc<Cache>,
    /// Wakes the budget saver early (after a throttle) so that a pause
    /// survives even a `kill -9` moments later.
    pub save_budgets: Notify,
    pub tracker: Tracker,
    pub auth: crate::auth::Gate,
    pub conns: Arc<crate::limits::ConnLimits>,
    ids: AtomicU64,
    id_prefix: String,
}

impl Shared {
    /// A new audit record for a request, stamped now.
    pub fn record(&self, method: &str, url: &str, host: &str, client: SocketAddr) -> AuditRecord {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        AuditRecord {
            ts: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            id: format!("{}-{n}", self.id_prefix),
            client: Some(client.to_string()),
            method: method.to_string(),
            url: url.to_string(),
            host: host.to_string(),
            ..AuditRecord::default()
        }
    }

    /// Answers with a refusal and writes its audit line.
    pub fn refuse(&self, mut rec: AuditRecord, r: Refusal, source: Source) -> Response<ProxyBody> {
        rec.outcome = Some(r.outcome);
        rec.status = Some(r.status);
        rec.reason = Some(r.reason.clone());
        rec.source = Some(source.as_str());
        rec.bytes = Some(r.body_text().len() as u64);
        let mut resp = r.into_response(&rec.id);
        crate::audit::gate(&mut resp, self.audit.commit(rec));
        resp
    }

    pub fn http(&self) -> auto::Builder<TokioExecutor> {
        let mut b = auto::Builder::new(TokioExecutor::new());
        b.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(secs(self.cfg.proxy.header_read_timeout_secs))
            .max_headers(self.cfg.proxy.max_headers)
            .max_buf_size(self.cfg.proxy.max_header_bytes.max(8192));
        // Client-side HTTP/2 (inside intercepted TLS): bounded streams and
        // header lists (a CONTINUATION flood counts against the list size),
        // and hyper's rapid-reset guards.
        b.http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(self.cfg.proxy.h2_max_streams)
            .max_header_list_size(self.cfg.proxy.max_header_bytes.min(u32::MAX as usize) as u32)
            .max_pending_accept_reset_streams(Some(20))
            .max_local_error_reset_streams(Some(1024));
        b
    }
}

/// Counts live connection tasks and tells them when shutdown starts.
pub(crate) struct Tracker {
    live: watch::Sender<usize>,
    stop: watch::Sender<bool>,
}

/// Held by a connection task for its whole life.
pub(crate) struct Track {
    live: watch::Sender<usize>,
}

impl Drop for Track {
    fn drop(&mut self) {
        self.live.send_modify(|n| *n -= 1);
    }
}

impl Tracker {
    fn new() -> Self {
        Tracker {
            live: watch::Sender::new(0),
            stop: watch::Sender::new(false),
        }
    }

    pub fn track(&self) -> Track {
        self.live.send_modify(|n| *n += 1);
        Track {
            live: self.live.clone(),
        }
    }

    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    pub fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }
}

/// A bound proxy, ready to run.
pub struct Proxy {
    shared: Arc<Shared>,
    listener: TcpListener,
}

impl Proxy {
    /// Binds the listener and prepares the CA and the upstream client.
    pub async fn bind(
        cfg: Config,
        ca: Arc<CertificateAuthority>,
        audit: AuditSink,
    ) -> Result<Proxy, StartError> {
        let cfg = cfg.validate()?;
        let auth = crate::auth::Gate::new(&cfg)?;
        let conns = crate::limits::ConnLimits::new(
            cfg.proxy.max_connections,
            cfg.proxy.max_connections_per_client,
        );
        let guard = Guard::new(&cfg.upstream);
        let client = upstream::client(&cfg.upstream, guard.clone())?;
        let listener =
            crate::limits::listen(cfg.proxy.listen, cfg.proxy.backlog).map_err(|source| {
                StartError::Io {
                    what: format!("listen on {}", cfg.proxy.listen),
                    source,
                }
            })?;
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let robots = RobotsCache::new(cfg.robots.clone());
        let hosts = MemoryHosts::new(cfg.budget.clone()).map_err(|e| ConfigError::Invalid {
            key: e.key.clone(),
            why: e.reason.clone(),
        })?;
        let budgets = Budgets::new(Arc::new(hosts));
        let cache = Cache::open(&cfg)?;
        let restored = {
            let (budgets, store) = (budgets.clone(), cache.store().clone());
            tokio::task::spawn_blocking(move || budgets.load(store.as_ref()))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
        };
        match restored {
            Ok(0) => {}
            Ok(n) => tracing::info!("budget state of {n} hosts restored"),
            Err(why) => {
                return Err(StartError::Store {
                    path: cfg.store_path(),
                    why: format!("reading saved budget state: {why}"),
                })
            }
        }
        Ok(Proxy {
            shared: Arc::new(Shared {
                cfg,
                ca,
                client,
                guard,
                audit,
                robots,
                budgets,
                cache,
                save_budgets: Notify::new(),
                tracker: Tracker::new(),
                auth,
                conns,
                ids: AtomicU64::new(0),
                id_prefix: format!("{start:x}"),
            }),
            listener,
        })
    }

    /// The address the proxy listens on.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The CA certificate path clients must trust.
    pub fn ca_path(&self) -> PathBuf {
        self.shared.ca.cert_path().to_path_buf()
    }

    /// Serves until `shutdown` completes, then stops accepting and waits up
    /// to the grace period for requests and tunnels in flight.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Proxy { shared, listener } = self;
        tokio::pin!(shutdown);
        // Hosts with nothing left to remember are dropped now and then, so
        // memory follows the hosts in use, not every host ever seen.
        let sweeper = {
            let budgets = shared.budgets.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(std::time::Duration::from_secs(60));
                loop {
                    every.tick().await;
                    budgets.sweep();
                }
            })
        };
        let saver = {
            let shared = shared.clone();
            tokio::spawn(async move {
                loop {
                    let every = tokio::time::sleep(std::time::Duration::from_secs(5));
                    tokio::select! {
                        _ = every => {}
                        _ = shared.save_budgets.notified() => {}
                    }
                    save_budgets(&shared).await;
                }
            })
        };
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let Some(permit) = shared.conns.admit(peer.ip()) else { continue };
                        let _ = stream.set_nodelay(true);
                        let track = shared.tracker.track();
                        let shared = shared.clone();
                        tokio::spawn(async move {
                            serve_client(shared, stream, peer).await;
                            drop((track, permit));
                        });
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: back off
                        // instead of spinning on the error.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                }
            }
        }
        drop(listener);
        sweeper.abort();
        shared.tracker.stop.send_replace(true);
        let grace = secs(shared.cfg.proxy.shutdown_grace_secs);
        let mut live = shared.tracker.live.subscribe();
        let drained = tokio::time::timeout(grace, live.wait_for(|n| *n == 0))
            .await
            .is_ok();
        if !drained {
            tracing::warn!(
                "shutdown grace of {grace:?} over with {} connections still open",
                *shared.tracker.live.borrow()
            );
        }
        saver.abort();
        // Awaited so that the store file is closed when `run` returns: a
        // proxy started right after on the same data dir can open it.
        let _ = saver.await;
        let _ = sweeper.await;
        shared.cache.drain(grace).await;
        save_budgets(&shared).await;
        let errors = shared.cache.errors();
        if errors > 0 {
            tracing::warn!(
                "cache: {errors} store errors since start (those requests were passed through)"
            );
        }
    }
}

/// Writes the budget state that must survive a restart to the store.
async fn save_budgets(shared: &Arc<Shared>) {
    let (budgets, store) = (shared.budgets.clone(), shared.cache.store().clone());
    match tokio::task::spawn_blocking(move || budgets.save(store.as_ref())).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => shared.cache.failed("saving budget state", &e),
        Err(e) => shared.cache.failed("saving budget state", &e),
    }
}

async fn serve_client(shared: Arc<Shared>, mut stream: TcpStream, peer: SocketAddr) {
    let p = &shared.cfg.proxy;
    let head = read_head(
        &mut stream,
        p.max_header_bytes,
        p.max_headers,
        secs(p.header_read_timeout_secs),
    )
    .await;
    let prefix = match head {
        Intake::Ready(buf) => buf,
        Intake::Gone => return,
        Intake::Bad(bad) => {
            let rec = shared.record(&bad.method, &bad.target, "", peer);
            let refusal = Refusal::new(Outcome::Error, bad.reason)
                .status(bad.status)
                .close();
            let resp = shared.refuse(rec, refusal, Source::Client);
            let _ = write_raw(&mut stream, resp).await;
            return;
        }
    };
    let io = TokioIo::new(Prefixed::new(prefix, stream));
    let svc_shared = shared.clone();
    let svc = service_fn(move |req| {
        let shared = svc_shared.clone();
        async move { Ok::<_, Infallible>(dispatch(shared, req, peer).await) }
    });
    let http = shared.http().http1_only();
    let conn = http.serve_connection_with_upgrades(io, svc);
    drive(&shared, conn, peer).await;
}

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
                rec.outcome = Some(Outcome::Error);
                rec.status = Some(if h.is_parse_too_large() { 431 } else { 400 });
                rec.reason = Some(format!("malformed request on a kept-alive connection: {h}"));
                rec.source = Some(Source::Client.as_str());
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

/// Writes a response on a raw stream (before hyper owns it) and closes.
async fn write_raw(stream: &mut TcpStream, mut resp: Response<ProxyBody>) -> std::io::Result<()> {
    use http_body_util::BodyExt;
    crate::audit::line_written(&mut resp).await;
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        parts.status.as_u16(),
        parts.status.canonical_reason().unwrap_or("")
    );
    for (k, v) in &parts.headers {
        out.push_str(k.as_str());
        out.push_str(": ");
        out.push_str(v.to_str().unwrap_or(""));
        out.push_str("\r\n");
    }
    out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    stream.write_all(out.as_bytes()).await?;
    stream.write_all(&body).await?;
    stream.shutdown().await
}

/// Routes one request read on the proxy port.
async fn dispatch(
    shared: Arc<Shared>,
    mut req: Request<Incoming>,
    peer: SocketAddr,
) -> Response<ProxyBody> {
    if let Err(denied) = crate::auth::admit(&shared, &mut req, peer).await {
        return denied;
    }
    if crate::limits::is_loop(req.headers()) {
        let rec = shared.record(req.method().as_str(), &req.uri().to_string(), "", peer);
        let why = "this request has already passed through this proxy (its own Via): a proxy loop";
        let mut resp = shared.refuse(
            rec,
            Refusal::new(Outcome::Error, why).status(508).close(),
            Source::Client,
        );
        crate::audit::line_written(&mut resp).await;
        return resp;
    }
    if req.method() == Method::CONNECT {
        let mut resp = tunnel::connect(shared, req, peer).await;
        crate::audit::line_written(&mut resp).await;
        return resp;
    }
    let mut resp = {
        match Target::from_absolute(req.uri()) {
            Ok(target) => pipeline::handle(shared.clone(), req, target, peer).await,
            Err(why) => {
                let rec = shared.record(req.method().as_str(), &req.uri().to_string(), "", peer);
                let r = Refusal::new(Outcome::Error, why).status(400).close();
                shared.refuse(rec, r, Source::Client)
            }
        }
    };
    if shared.tracker.is_stopping() {
        resp.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    crate::audit::line_written(&mut resp).await;
    resp
}
