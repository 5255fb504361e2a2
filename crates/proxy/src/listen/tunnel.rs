//! CONNECT: check the target, answer 200, then either intercept TLS with a
//! leaf for the requested name (so HTTPS walks the same pipeline as HTTP) or,
//! with interception off, pass the bytes through and log one `tunneled` line.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use mannerly_policy::Outcome;
use tokio::io::AsyncReadExt;
use tokio_rustls::LazyConfigAcceptor;

use crate::answer::{failure, DECISION};
use crate::body::{empty, ProxyBody};
use crate::clients::heads::{Heads, Refused};
use crate::clients::intake::Prefixed;
use crate::clients::interim::{Interim, Lane};
use crate::listen::connection::drive;
use crate::pipeline;
use crate::shared::Shared;
use crate::target::{Scheme, Target};

/// Handles a CONNECT request read on the proxy port.
pub(crate) async fn connect(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    peer: SocketAddr,
    user: Option<String>,
) -> Response<ProxyBody> {
    let authority = req.uri().authority().cloned();
    let url = req.uri().to_string();
    let Some(authority) = authority else {
        let rec = shared.record("CONNECT", &url, "", peer);
        return shared.stop(rec, failure::bad_target("CONNECT needs host:port"));
    };
    let host = authority.host().to_ascii_lowercase();
    let port = authority
        .port_u16()
        .unwrap_or(mannerly_policy::url::HTTPS_PORT);
    let mut rec = shared.record("CONNECT", &url, &host, peer);
    rec.user = user.clone();
    // An intercepted tunnel carries HTTP or TLS through the pipeline (its
    // first bytes decide; anything else fails to parse), so only an opaque
    // pass-through tunnel is held to the port list.
    if !shared.cfg.proxy.intercept && !shared.cfg.proxy.connect_ports.contains(&port) {
        return shared.stop(rec, failure::port_not_allowed(port));
    }
    let addrs = match shared.guard.resolve(&host, port).await {
        Ok(a) => a,
        Err(e) => return shared.stop(rec, failure::connect(&e)),
    };
    let target = Target::new(Scheme::Https, host, port);
    let intercept = shared.cfg.proxy.intercept;
    let track = shared.tracker.track();
    let task_shared = shared.clone();
    tokio::spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) if intercept => {
                let from = Peer { addr: peer, user };
                inside(task_shared, upgraded, target, from).await;
            }
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

/// The client a tunnel is for, and whom it authenticated as on the CONNECT
/// (the requests inside carry no credentials of their own).
#[derive(Clone)]
struct Peer {
    addr: SocketAddr,
    user: Option<String>,
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
    peer: Peer,
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
        let target = target.with_scheme(Scheme::Http);
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
    peer: Peer,
    writes: Writes,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (io, refused) = Heads::new(io, first, shared.head_limits());
    let (io, lane) = Interim::new(io);
    let mut http = shared.http().http1_only();
    http.http1().writev(writes == Writes::Vectored);
    let svc = service(&shared, target, peer.clone(), Some((refused, lane)));
    let conn = http.serve_connection_with_upgrades(TokioIo::new(io), svc);
    drive(&shared, conn, peer.addr).await;
}

/// The service for the requests of one intercepted tunnel.
fn service(
    shared: &Arc<Shared>,
    target: Target,
    peer: Peer,
    h1: Option<(Refused, Lane)>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response<ProxyBody>,
    Error = Infallible,
    Future = impl std::future::Future<Output = Result<Response<ProxyBody>, Infallible>> + Send,
> + Clone {
    let shared = shared.clone();
    service_fn(move |req: Request<Incoming>| {
        let shared = shared.clone();
        let (target, peer) = (target.clone(), peer.clone());
        let bad = h1.as_ref().and_then(|(r, _)| r.take(&req));
        // Over h2, hyper's server gives no way to send a 1xx: no lane.
        let lane = h1.as_ref().map(|(_, lane)| lane.clone());
        if let Some(lane) = &lane {
            lane.begin();
        }
        let walk_lane = lane.clone();
        let answered = move || {
            if let Some(lane) = &lane {
                lane.answered();
            }
        };
        async move {
            if let Some(bad) = bad {
                let mut resp = shared.refuse_head(bad, peer.addr);
                crate::audit::line_written(&mut resp).await;
                answered();
                return Ok(resp);
            }
            // Boxed, as on the proxy port: unboxed, the pipeline's future
            // is copied whole into this one and again into hyper's.
            let (client, user) = (peer.addr, peer.user.clone());
            let handling = pipeline::handle(shared.clone(), req, target, client, user, walk_lane);
            let mut resp = Box::pin(handling).await;
            if shared.tracker.is_stopping() {
                resp.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            crate::audit::line_written(&mut resp).await;
            answered();
            Ok::<_, Infallible>(resp)
        }
    })
}

async fn intercept_tls<S>(shared: Arc<Shared>, io: S, target: Target, peer: Peer)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io);
    let timeout = shared.cfg.proxy.header_read_timeout;
    let start = match tokio::time::timeout(timeout, acceptor).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!("TLS from {} for {}: {e}", peer.addr, target.host);
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
            let mut rec = shared.record("CONNECT", &target.url(None), &target.host, peer.addr);
            failure::no_leaf(&name, &e).record(&mut rec);
            shared.audit.send(rec);
            return;
        }
    };
    let tls = match tokio::time::timeout(timeout, start.into_stream(config)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            client_rejected(&shared, &target, &name, peer.addr, &e);
            return;
        }
        Err(_) => return,
    };
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        let http = shared.http();
        let svc = service(&shared, target, peer.clone(), None);
        let conn = http.serve_connection_with_upgrades(TokioIo::new(tls), svc);
        drive(&shared, conn, peer.addr).await;
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
    let stop = failure::client_tls(name, e);
    tracing::warn!(
        "{}: the client must trust mannerly's CA ({}; `mannerly ca export` prints it)",
        stop.reason(),
        shared.ca.cert_path().display()
    );
    let mut rec = shared.record("CONNECT", &target.url(None), &target.host, peer);
    stop.record(&mut rec);
    shared.audit.send(rec);
}

async fn pass_through(
    shared: Arc<Shared>,
    upgraded: hyper::upgrade::Upgraded,
    target: Target,
    addrs: Vec<SocketAddr>,
    mut rec: Box<mannerly_policy::AuditRecord>,
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
        // The client has had its 200: the stop is recorded, not answered.
        Err(e) => failure::connect(&e).record(&mut rec),
    }
    shared.audit.send(rec);
}

/// Copies both ways until both sides have closed, or nothing has moved
/// either way for `idle` (an idle tunnel holds two descriptors for nothing).
/// A side that closes its sending half is half-closed toward the other,
/// whose reply still comes back (as with `copy_bidirectional`). A write
/// that stalls counts as no traffic, so a peer that stops reading cannot
/// hold the tunnel open. Returns the bytes up and down and how it ended.
async fn copy_until_idle<C, O>(client: &mut C, origin: O, idle: Duration) -> (u64, u64, String)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    O: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut or, mut ow) = tokio::io::split(origin);
    // Set by every byte moved; the idle check clears it. A tunnel ends
    // after between one and two `idle` periods without traffic.
    let moved = AtomicBool::new(false);
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let upward = pump(&mut cr, &mut ow, &up, &moved);
    let downward = pump(&mut or, &mut cw, &down, &moved);
    tokio::pin!(upward, downward);
    let (mut up_open, mut down_open) = (true, true);
    let idle_check = tokio::time::sleep(idle);
    tokio::pin!(idle_check);
    let ended = loop {
        tokio::select! {
            r = &mut upward, if up_open => match r {
                Ok(()) if down_open => up_open = false,
                Ok(()) => break "origin closed, then client".to_string(),
                Err(e) => break format!("client to origin: {e}"),
            },
            r = &mut downward, if down_open => match r {
                Ok(()) if up_open => down_open = false,
                Ok(()) => break "client closed, then origin".to_string(),
                Err(e) => break format!("origin to client: {e}"),
            },
            _ = &mut idle_check => {
                if !moved.swap(false, Ordering::Relaxed) {
                    break format!("closed after {idle:?} without traffic");
                }
                idle_check.set(tokio::time::sleep(idle));
            }
        }
    };
    (
        up.load(Ordering::Relaxed),
        down.load(Ordering::Relaxed),
        ended,
    )
}

/// Copies one direction until its reader ends, then shuts the writer (a
/// half-close the far side sees as end of input).
async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    bytes: &std::sync::atomic::AtomicU64,
    moved: &std::sync::atomic::AtomicBool,
) -> Result<(), String>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from
            .read(&mut buf)
            .await
            .map_err(|e| format!("read failed: {e}"))?;
        if n == 0 {
            let _ = to.shutdown().await;
            return Ok(());
        }
        to.write_all(&buf[..n])
            .await
            .map_err(|e| format!("write failed: {e}"))?;
        bytes.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        moved.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A client that stops reading while the origin keeps sending stalls the
    /// downward write; the tunnel still ends after `idle`, not never.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_write_counts_as_no_traffic() {
        let (mut client, _client_far) = tokio::io::duplex(1024);
        let (origin, mut origin_far) = tokio::io::duplex(1024);
        let flood = tokio::spawn(async move {
            let chunk = [7u8; 512];
            while origin_far.write_all(&chunk).await.is_ok() {}
        });
        let (up, down, ended) = copy_until_idle(&mut client, origin, Duration::from_secs(5)).await;
        assert_eq!(up, 0);
        assert!(down <= 1024 + 16 * 1024, "{down}");
        assert_eq!(ended, "closed after 5s without traffic");
        flood.abort();
    }

    /// Each side's end of input reaches the other as a half-close, and the
    /// tunnel ends when both have closed.
    #[tokio::test]
    async fn both_half_closes_end_the_tunnel() {
        use tokio::io::AsyncReadExt;
        let (mut client, mut client_far) = tokio::io::duplex(1024);
        let (origin, mut origin_far) = tokio::io::duplex(1024);
        let copy = tokio::spawn(async move {
            copy_until_idle(&mut client, origin, Duration::from_secs(60)).await
        });
        origin_far.write_all(b"banner").await.unwrap();
        origin_far.shutdown().await.unwrap();
        let mut got = [0u8; 6];
        client_far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"banner");
        client_far.write_all(b"late request").await.unwrap();
        client_far.shutdown().await.unwrap();
        let mut up = Vec::new();
        origin_far.read_to_end(&mut up).await.unwrap();
        assert_eq!(up, b"late request");
        let (up, down, ended) = copy.await.unwrap();
        assert_eq!((up, down), (12, 6));
        assert_eq!(ended, "origin closed, then client");
    }
}
