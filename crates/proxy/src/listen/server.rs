//! The listener: accepts connections, reads the first head, serves HTTP/1.1
//! with upgrades (for CONNECT), and shuts down gracefully: stop accepting,
//! let every request already read finish, within the grace period.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::admin;
use crate::answer::{failure, Stop};
use crate::audit::AuditSink;
use crate::body::ProxyBody;
use crate::clients::heads::Heads;
use crate::clients::intake::{read_head, Intake};
use crate::clients::interim::{Interim, Lane};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::StartError;
use crate::listen::connection::drive;
use crate::listen::shards::Shards;
use crate::listen::tunnel;
use crate::pipeline;
use crate::shared::{Reloaded, Shared};
use crate::target::Target;
use crate::tls::CertificateAuthority;

/// Applies the reloadable keys of a new configuration (`[policy]`,
/// `[crawler]`, `[budget]`) to a running proxy.
#[derive(Clone)]
pub struct Reloader(Arc<Shared>);

impl Reloader {
    /// Validates `cfg` and applies what may change while running; says
    /// what changed and which changed sections need a restart.
    pub fn reload(&self, cfg: Config) -> Result<Reloaded, crate::ConfigError> {
        self.0.reload(cfg)
    }
}

/// A bound proxy, ready to run.
pub struct Proxy {
    shared: Arc<Shared>,
    listener: TcpListener,
    admin: Option<TcpListener>,
    observe: Arc<admin::Observe>,
}

impl Proxy {
    /// Binds the listener and prepares the CA and the upstream client.
    pub async fn bind(
        cfg: Config,
        ca: Arc<CertificateAuthority>,
        audit: AuditSink,
    ) -> Result<Proxy, StartError> {
        Self::start(cfg, ca, move |_| Ok(audit)).await
    }

    /// [`Proxy::bind`], with the audit log opened by `open_audit` only once
    /// the listeners are bound and everything else that can fail has
    /// started: a start that fails writes nothing into the log.
    pub async fn start(
        cfg: Config,
        ca: Arc<CertificateAuthority>,
        open_audit: impl FnOnce(&Config) -> Result<AuditSink, StartError>,
    ) -> Result<Proxy, StartError> {
        let cfg = cfg.validate()?;
        let clock = Clock::system();
        let observe = admin::Observe::new(&cfg.admin, clock.clone());
        let admin = admin::bind(&cfg.admin).await?;
        let listener = crate::clients::limits::listen(cfg.proxy.listen, cfg.proxy.backlog)
            .map_err(|source| StartError::Io {
                what: format!("listen on {}", cfg.proxy.listen),
                source,
            })?;
        let observer = observe.clone();
        let shared = Shared::start(cfg, clock, ca, move |cfg| {
            let audit = open_audit(cfg)?;
            Ok(
                audit.observed(Arc::new(move |rec: &mannerly_policy::AuditRecord| {
                    observer.record(rec)
                })),
            )
        })
        .await?;
        Ok(Proxy {
            shared: Arc::new(shared),
            listener,
            admin,
            observe,
        })
    }

    /// A handle that applies a reloaded configuration to this proxy while
    /// it runs (what `mannerly run` does on SIGHUP).
    pub fn reloader(&self) -> Reloader {
        Reloader(self.shared.clone())
    }

    /// The address of the admin listener, `None` when it is off.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
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
        let Proxy {
            shared,
            listener,
            admin,
            observe,
        } = self;
        let admin = admin.map(|l| tokio::spawn(admin::serve(l, shared.clone(), observe.clone())));
        observe.set_ready(true);
        let sweeper = sweep_hosts(&shared, &observe);
        let saver = save_budgets_often(&shared);
        // cfg.proxy.threads was resolved when the pools were built.
        let shards = match Shards::start(shared.cfg.proxy.serving_threads()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("cannot start serving threads, serving on the main runtime: {e}");
                None
            }
        };
        accept_until(&shared, listener, shards.as_ref(), shutdown).await;
        observe.set_ready(false);
        sweeper.abort();
        drain(&shared, shards).await;
        saver.abort();
        // Awaited so that the store file is closed when `run` returns: a
        // proxy started right after on the same data dir can open it.
        let _ = saver.await;
        let _ = sweeper.await;
        if let Some(a) = admin {
            a.abort();
            let _ = a.await;
        }
        let grace = shared.cfg.proxy.shutdown_grace;
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

/// Hosts with nothing left to remember are dropped now and then, so memory
/// follows the hosts in use, not every host ever seen.
fn sweep_hosts(shared: &Arc<Shared>, observe: &Arc<admin::Observe>) -> tokio::task::JoinHandle<()> {
    let shared = shared.clone();
    let observe = observe.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(60));
        loop {
            every.tick().await;
            if shared.budgets.sweep() > 0 {
                observe.swept(&shared);
            }
        }
    })
}

/// Budget state is saved every 5 s and after an operator's reset; a
/// throttle saves before its answer (`Shared::save_budgets_now`).
fn save_budgets_often(shared: &Arc<Shared>) -> tokio::task::JoinHandle<()> {
    let shared = shared.clone();
    tokio::spawn(async move {
        loop {
            let every = tokio::time::sleep(Duration::from_secs(5));
            tokio::select! {
                _ = every => {}
                _ = shared.save_budgets.notified() => {}
            }
            save_budgets(&shared).await;
        }
    })
}

/// Accepts client connections until `shutdown`, then closes the listener.
async fn accept_until(
    shared: &Arc<Shared>,
    listener: TcpListener,
    shards: Option<&Shards>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut backoff = AcceptBackoff::default();
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff.recovered();
                    start_connection(shared, stream, peer, shards);
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off
                    // instead of spinning on the error. The waiting
                    // clients stay in the listen backlog meanwhile.
                    let pause = backoff.failed(&e);
                    tokio::select! {
                        biased;
                        _ = &mut shutdown => break,
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
    }
}

/// Serves an accepted connection on the least busy serving thread (or this
/// runtime when there are none), within the connection limits.
fn start_connection(
    shared: &Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    shards: Option<&Shards>,
) {
    let Some(permit) = shared.conns.admit(peer.ip()) else {
        return;
    };
    let _ = stream.set_nodelay(true);
    let track = shared.tracker.track();
    let shared = shared.clone();
    let Some(shards) = shards else {
        drop(tokio::spawn(async move {
            serve_client(shared, stream, peer).await;
            drop((track, permit));
        }));
        return;
    };
    // Registered again with the serving thread's reactor: left with this
    // runtime's, every read and write readiness of the connection would wake
    // a thread here first.
    let stream = match stream.into_std() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(
                "connection from {peer} closed: cannot hand it to a serving thread: {e}"
            );
            return;
        }
    };
    shards.spawn(async move {
        match TcpStream::from_std(stream) {
            Ok(stream) => serve_client(shared, stream, peer).await,
            Err(e) => tracing::warn!(
                "connection from {peer} closed: its serving thread cannot take it: {e}"
            ),
        }
        drop((track, permit));
    });
}

/// Tells every connection to finish and waits up to the grace period for
/// them, then stops the serving threads.
async fn drain(shared: &Shared, shards: Option<Shards>) {
    shared.tracker.stop.send_replace(true);
    let grace = shared.cfg.proxy.shutdown_grace;
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
    if let Some(shards) = shards {
        shards.stop().await;
    }
}

/// How long the accept loop rests after a failed accept: 10 ms doubling to
/// 1 s while failures go on, logged once per episode (a loop that logs
/// every failure fills the disk at the worst moment).
#[derive(Default)]
struct AcceptBackoff {
    failures: u32,
}

impl AcceptBackoff {
    fn failed(&mut self, e: &std::io::Error) -> Duration {
        if self.failures == 0 {
            tracing::warn!("accept failed, backing off until it works again: {e}");
        }
        self.failures = self.failures.saturating_add(1);
        Duration::from_millis(10u64 << (self.failures - 1).min(7)).min(Duration::from_secs(1))
    }

    fn recovered(&mut self) {
        if self.failures > 0 {
            tracing::info!("accepting again after {} failed accepts", self.failures);
            self.failures = 0;
        }
    }
}

/// Writes the budget state that must survive a restart to the store.
async fn save_budgets(shared: &Arc<Shared>) {
    shared.save_budgets_now().await;
}

async fn serve_client(shared: Arc<Shared>, mut stream: TcpStream, peer: SocketAddr) {
    let p = &shared.cfg.proxy;
    let head = read_head(
        &mut stream,
        p.max_header_bytes,
        p.max_headers,
        shared.clock.now(),
        p.header_read_timeout,
    )
    .await;
    let prefix = match head {
        Intake::Ready(buf) => buf,
        Intake::Gone => return,
        Intake::Bad(bad) => {
            let resp = shared.refuse_head(bad, peer);
            let _ = write_raw(&mut stream, resp).await;
            return;
        }
    };
    let (io, refused) = Heads::new(stream, prefix, shared.head_limits());
    let (io, lane) = Interim::new(io);
    let io = TokioIo::new(io);
    let svc_shared = shared.clone();
    let svc = service_fn(move |req: Request<Incoming>| {
        let shared = svc_shared.clone();
        let bad = refused.take(&req);
        let lane = lane.clone();
        lane.begin();
        async move {
            let mut resp = match bad {
                Some(bad) => shared.refuse_head(bad, peer),
                None => dispatch(shared, req, peer, lane.clone()).await,
            };
            crate::audit::line_written(&mut resp).await;
            lane.answered();
            Ok::<_, Infallible>(resp)
        }
    });
    let http = shared.http().http1_only();
    let conn = http.serve_connection_with_upgrades(io, svc);
    drive(&shared, conn, peer).await;
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
    req: Request<Incoming>,
    peer: SocketAddr,
    lane: Lane,
) -> Response<ProxyBody> {
    let user = match admit(&shared, &req, peer).await {
        Ok(user) => user,
        Err(stop) => {
            let rec = shared.record(req.method().as_str(), &req.uri().to_string(), "", peer);
            return shared.stop(rec, stop);
        }
    };
    // Both boxed: a future is moved whole, at its full size, into the one
    // that awaits it, and up the chain into hyper's. Unboxed, a CONNECT's
    // future made every request's 22 KiB, copied at each level.
    if req.method() == Method::CONNECT {
        return Box::pin(tunnel::connect(shared, req, peer, user)).await;
    }
    let mut resp = {
        match Target::from_absolute(req.uri()) {
            Ok(target) => {
                Box::pin(pipeline::handle(
                    shared.clone(),
                    req,
                    target,
                    peer,
                    user,
                    Some(lane),
                ))
                .await
            }
            Err(why) => {
                let mut rec =
                    shared.record(req.method().as_str(), &req.uri().to_string(), "", peer);
                rec.user = user;
                shared.stop(rec, failure::bad_target(why))
            }
        }
    };
    if shared.tracker.is_stopping() {
        resp.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    resp
}

/// Admits a request read on the proxy port (proxy authentication, the
/// client allow-list, no loop through ourselves) and says as whom (`None`
/// with auth off), or says why not.
async fn admit<B>(
    shared: &Shared,
    req: &Request<B>,
    peer: SocketAddr,
) -> Result<Option<String>, Stop> {
    let user = shared.auth.check(req.headers(), peer).await?;
    if shared.via.is_loop(req.headers()) {
        return Err(failure::proxy_loop());
    }
    Ok(user)
}
