//! CONNECT: check the target, answer 200, then either intercept TLS with a
//! leaf for the requested name (so HTTPS walks the same pipeline as HTTP) or,
//! with interception off, pass the bytes through and log one `tunneled` line.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use mannerly_policy::Outcome;
use tokio::io::AsyncReadExt;
use tokio_rustls::LazyConfigAcceptor;

use crate::body::{empty, ProxyBody};
use crate::connection::drive;
use crate::error::Source;
use crate::heads::{Heads, Refused};
use crate::intake::Prefixed;
use crate::pipeline;
use crate::respond::{Answer, DECISION};
use crate::shared::Shared;
use crate::target::{Scheme, Target};
use crate::upstream::ConnectError;

/// Handles a CONNECT request read on the proxy port.
pub(crate) async fn connect(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Response<ProxyBody> {
    let authority = req.uri().authority().cloned();
    let url = req.uri().to_string();
    let Some(authority) = authority else {
        let rec = shared.record("CONNECT", &url, "", peer);
        let r = Answer::new(Outcome::Error, "CONNECT needs host:port")
            .status(400)
            .close();
        return shared.refuse(rec, r, Source::Client);
    };
    let host = authority.host().to_ascii_lowercase();
    let port = authority.port_u16().unwrap_or(443);
    let mut rec = shared.record("CONNECT", &url, &host, peer);
    rec.user = shared.auth.user_for(peer);
    if !shared.cfg.proxy.connect_ports.contains(&port) {
        let why = format!("CONNECT to port {port} is not allowed (proxy.connect_ports)");
        // curl and most clients show only the CONNECT answer's headers.
        let r = Answer::new(Outcome::Blocked, why.clone()).detail("reason", why);
        return shared.refuse(rec, r, Source::Policy);
    }
    let addrs = match shared.guard.resolve(&host, port).await {
        Ok(a) => a,
        Err(e @ ConnectError::Blocked { .. }) => {
            let r = Answer::new(Outcome::Blocked, e.to_string()).detail("reason", e.to_string());
            return shared.refuse(rec, r, Source::Policy);
        }
        Err(e) => {
            let reason = match e {
                ConnectError::Resolve { .. } => "name not resolved".to_string(),
                _ => e.to_string(),
            };
            let r = Answer::new(Outcome::Error, e.to_string())
                .status(502)
                .detail("reason", reason);
            return shared.refuse(rec, r, Source::Upstream);
        }
    };
    let target = Target {
        scheme: Scheme::Https,
        host,
        port,
    };
    let intercept = shared.cfg.proxy.intercept;
    let track = shared.tracker.track();
    let task_shared = shared.clone();
    tokio::spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) if intercept => inside(task_shared, upgraded, target, peer).await,
            Ok(upgraded) => pass_through(task_shared, upgraded, target, addrs, rec).await,
            Err(e) => tracing::debug!("CONNECT upgrade from {peer} failed: {e}"),
        }
        drop(track);
    });
    let mut resp = Response::new(empty());
    let decision = if intercept {
        "tunneled; intercepted=yes"
    } else {
        "tunneled"
    };
    resp.headers_mut()
        .insert(DECISION, http::HeaderValue::from_static(decision));
    resp
}

/// A TLS record starts with this content type (handshake); an HTTP request
/// starts with a method's letters.
const TLS_HANDSHAKE: u8 = 0x16;

/// What comes through an intercepted tunnel: TLS (the usual case), or plain
/// HTTP, as Node's undici sends for `http://` URLs through a `ProxyAgent`.
/// Either way its requests walk the same pipeline.
async fn inside(
    shared: Arc<Shared>,
    upgraded: hyper::upgrade::Upgraded,
    target: Target,
    peer: SocketAddr,
) {
    let mut io = TokioIo::new(upgraded);
    let mut first = BytesMut::with_capacity(2048);
    let timeout = shared.cfg.proxy.header_read_timeout;
    match tokio::time::timeout(timeout, io.read_buf(&mut first)).await {
        Ok(Ok(n)) if n > 0 => {}
        _ => return,
    }
    if first[0] == TLS_HANDSHAKE {
        intercept_tls(shared, Prefixed::new(first, io), target, peer).await;
    } else {
        let target = Target {
            scheme: Scheme::Http,
            ..target
        };
        serve_h1(shared, io, first, target, peer, Writes::Vectored).await;
    }
}

/// How hyper hands a response to the stream.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Writes {
    /// Head and body as separate buffers in one `writev` (plain TCP).
    Vectored,
    /// Head and body copied into one buffer first: rustls makes a record of
    /// each buffer it is given, so separate buffers cost a record (and its
    /// encryption and framing) each.
    Flattened,
}

/// HTTP/1 on a tunnel: every head checked (`heads::Heads`).
async fn serve_h1<S>(
    shared: Arc<Shared>,
    io: S,
    first: BytesMut,
    target: Target,
    peer: SocketAddr,
    writes: Writes,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (io, refused) = Heads::new(io, first, shared.head_limits());
    let mut http = shared.http().http1_only();
    http.http1().writev(writes == Writes::Vectored);
    let svc = service(&shared, target, peer, Some(refused));
    let conn = http.serve_connection_with_upgrades(TokioIo::new(io), svc);
    drive(&shared, conn, peer).await;
}

/// The service for the requests of one intercepted tunnel.
fn service(
    shared: &Arc<Shared>,
    target: Target,
    peer: SocketAddr,
    refused: Option<Refused>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<ProxyBody>,
    Error = Infallible,
    Future = impl std::future::Future<Output = Result<Response<ProxyBody>, Infallible>> + Send,
> + Clone {
    let shared = shared.clone();
    service_fn(move |req: Request<Incoming>| {
        let shared = shared.clone();
        let target = target.clone();
        let bad = refused.as_ref().and_then(|r| r.take(&req));
        async move {
            if let Some(bad) = bad {
                let mut resp = shared.refuse_head(bad, peer);
                crate::audit::line_written(&mut resp).await;
                return Ok(resp);
            }
            let mut resp = pipeline::handle(shared.clone(), req, target, peer).await;
            if shared.tracker.is_stopping() {
                resp.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            crate::audit::line_written(&mut resp).await;
            Ok::<_, Infallible>(resp)
        }
    })
}

async fn intercept_tls<S>(shared: Arc<Shared>, io: S, target: Target, peer: SocketAddr)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io);
    let timeout = shared.cfg.proxy.header_read_timeout;
    let start = match tokio::time::timeout(timeout, acceptor).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!("TLS from {peer} for {}: {e}", target.host);
            return;
        }
        Err(_) => return,
    };
    // The certificate names what the client asked for (SNI); without SNI,
    // the CONNECT authority, which is also what was checked and where the
    // requests go.
    let name = start
        .client_hello()
        .server_name()
        .map(str::to_string)
        .unwrap_or_else(|| target.host.clone());
    let config = match shared.ca.server_config(&name) {
        Ok(c) => c,
        Err(e) => {
            let mut rec = shared.record("CONNECT", &target.url(None), &target.host, peer);
            rec.outcome = Some(Outcome::Error);
            rec.source = Some(Source::Internal.as_str());
            rec.reason = Some(format!("no leaf certificate for {name}: {e}"));
            shared.audit.send(rec);
            return;
        }
    };
    let tls = match tokio::time::timeout(timeout, start.into_stream(config)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            client_rejected(&shared, &target, &name, peer, &e);
            return;
        }
        Err(_) => return,
    };
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        let http = shared.http();
        let svc = service(&shared, target, peer, None);
        let conn = http.serve_connection_with_upgrades(TokioIo::new(tls), svc);
        drive(&shared, conn, peer).await;
    } else {
        serve_h1(
            shared,
            tls,
            BytesMut::new(),
            target,
            peer,
            Writes::Flattened,
        )
        .await;
    }
}

/// A handshake the client broke off after seeing our certificate: almost
/// always a client that does not trust mannerly's CA. Logged with the fix,
/// and audited, since the client's request never reaches the pipeline.
fn client_rejected(
    shared: &Shared,
    target: &Target,
    name: &str,
    peer: SocketAddr,
    e: &std::io::Error,
) {
    let alert = e.to_string();
    let why = if alert.contains("alert") || e.kind() == std::io::ErrorKind::UnexpectedEof {
        format!("client rejected our certificate for {name} ({alert})")
    } else {
        format!("TLS handshake with the client failed for {name}: {alert}")
    };
    tracing::warn!(
        "{why}: the client must trust mannerly's CA ({}; `mannerly ca export` prints it)",
        shared.ca.cert_path().display()
    );
    let mut rec = shared.record("CONNECT", &target.url(None), &target.host, peer);
    rec.refused(Outcome::Error, 0, &why, Source::Client.as_str(), 0);
    rec.status = None;
    shared.audit.send(rec);
}

async fn pass_through(
    shared: Arc<Shared>,
    upgraded: hyper::upgrade::Upgraded,
    target: Target,
    addrs: Vec<SocketAddr>,
    mut rec: mannerly_policy::AuditRecord,
) {
    let mut client = TokioIo::new(upgraded);
    rec.outcome = Some(Outcome::Tunneled);
    let opened = shared
        .client
        .tunnel(&target.host, target.port, &addrs)
        .await;
    match opened {
        Ok(origin) => {
            rec.status = Some(200);
            let idle = shared.cfg.upstream.idle_timeout;
            let (up, down, ended) = copy_until_idle(&mut client, origin, idle).await;
            rec.bytes = Some(down);
            rec.reason = Some(format!("{up} bytes up, {down} bytes down; {ended}"));
        }
        Err(e) => {
            let source = match e {
                ConnectError::Parent { .. } => Source::Parent,
                _ => Source::Upstream,
            };
            rec.outcome = Some(Outcome::Error);
            rec.status = Some(502);
            rec.source = Some(source.as_str());
            rec.reason = Some(e.to_string());
        }
    }
    shared.audit.send(rec);
}

/// Copies both ways until either side closes, or nothing has moved either
/// way for `idle` (an idle tunnel holds two descriptors for nothing).
/// Returns the bytes up and down and how it ended.
async fn copy_until_idle<C, O>(
    client: &mut C,
    origin: O,
    idle: std::time::Duration,
) -> (u64, u64, String)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    O: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut or, mut ow) = tokio::io::split(origin);
    let (mut up, mut down) = (0u64, 0u64);
    let (mut cbuf, mut obuf) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    let ended = loop {
        tokio::select! {
            r = cr.read(&mut cbuf) => match r {
                Ok(0) => break "client closed".to_string(),
                Ok(n) => {
                    if let Err(e) = ow.write_all(&cbuf[..n]).await {
                        break format!("origin write failed: {e}");
                    }
                    up += n as u64;
                }
                Err(e) => break format!("client read failed: {e}"),
            },
            r = or.read(&mut obuf) => match r {
                Ok(0) => break "origin closed".to_string(),
                Ok(n) => {
                    if let Err(e) = cw.write_all(&obuf[..n]).await {
                        break format!("client write failed: {e}");
                    }
                    down += n as u64;
                }
                Err(e) => break format!("origin read failed: {e}"),
            },
            _ = tokio::time::sleep(idle) => break format!("closed after {idle:?} without traffic"),
        }
    };
    let _ = ow.shutdown().await;
    let _ = cw.shutdown().await;
    (up, down, ended)
}
