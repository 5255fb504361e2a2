//! CONNECT: check the target, answer 200, then either intercept TLS with a
//! leaf for the requested name (so HTTPS walks the same pipeline as HTTP) or,
//! with interception off, pass the bytes through and log one `tunneled` line.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use mannerly_policy::Outcome;
use tokio_rustls::LazyConfigAcceptor;

use crate::body::{empty, ProxyBody};
use crate::config::secs;
use crate::error::Source;
use crate::pipeline::{self, Scheme, Target};
use crate::respond::{Refusal, DECISION};
use crate::server::{drive, Shared};
use crate::upstream::{connect_any, ConnectError};

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
        let r = Refusal::new(Outcome::Error, "CONNECT needs host:port")
            .status(400)
            .close();
        return shared.refuse(rec, r, Source::Client);
    };
    let host = authority.host().to_ascii_lowercase();
    let port = authority.port_u16().unwrap_or(443);
    let mut rec = shared.record("CONNECT", &url, &host, peer);
    rec.user = crate::auth::user_of(&req);
    if !shared.cfg.proxy.connect_ports.contains(&port) {
        let r = Refusal::new(
            Outcome::Blocked,
            format!("CONNECT to port {port} is not allowed (proxy.connect_ports)"),
        );
        return shared.refuse(rec, r, Source::Policy);
    }
    let addrs = match shared.guard.resolve(&host, port).await {
        Ok(a) => a,
        Err(e @ ConnectError::Blocked { .. }) => {
            return shared.refuse(
                rec,
                Refusal::new(Outcome::Blocked, e.to_string()),
                Source::Policy,
            )
        }
        Err(e) => {
            let r = Refusal::new(Outcome::Error, e.to_string()).status(502);
            return shared.refuse(rec, r, Source::Upstream);
        }
    };
    let target = Target {
        scheme: Scheme::Https,
        host,
        port,
    };
    let intercept = shared.cfg.proxy.intercept;
    // Requests inside the tunnel carry no Proxy-Authorization: they are
    // the CONNECT's user's.
    let user = rec.user.clone();
    let track = shared.tracker.track();
    let task_shared = shared.clone();
    tokio::spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) if intercept => {
                intercept_tls(task_shared, upgraded, target, peer, user).await
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

async fn intercept_tls(
    shared: Arc<Shared>,
    upgraded: hyper::upgrade::Upgraded,
    target: Target,
    peer: SocketAddr,
    user: Option<String>,
) {
    let acceptor =
        LazyConfigAcceptor::new(rustls::server::Acceptor::default(), TokioIo::new(upgraded));
    let timeout = secs(shared.cfg.proxy.header_read_timeout_secs);
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
            tracing::debug!("TLS handshake from {peer} for {name}: {e}");
            return;
        }
        Err(_) => return,
    };
    let svc_shared = shared.clone();
    let svc = service_fn(move |mut req: Request<Incoming>| {
        let shared = svc_shared.clone();
        let target = target.clone();
        if let Some(u) = &user {
            req.extensions_mut().insert(crate::auth::User(u.clone()));
        }
        async move {
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
    });
    let http = shared.http();
    let conn = http.serve_connection_with_upgrades(TokioIo::new(tls), svc);
    drive(&shared, conn, peer).await;
}

async fn pass_through(
    shared: Arc<Shared>,
    upgraded: hyper::upgrade::Upgraded,
    target: Target,
    addrs: Vec<SocketAddr>,
    mut rec: mannerly_policy::AuditRecord,
) {
    let timeout = secs(shared.cfg.upstream.connect_timeout_secs);
    let mut client = TokioIo::new(upgraded);
    rec.outcome = Some(Outcome::Tunneled);
    match connect_any(&target.host, &addrs, timeout).await {
        Ok(mut origin) => {
            rec.status = Some(200);
            match tokio::io::copy_bidirectional(&mut client, &mut origin).await {
                Ok((up, down)) => {
                    rec.bytes = Some(down);
                    rec.reason = Some(format!("{up} bytes up, {down} bytes down"));
                }
                Err(e) => rec.reason = Some(format!("tunnel ended: {e}")),
            }
        }
        Err(e) => {
            rec.outcome = Some(Outcome::Error);
            rec.status = Some(502);
            rec.source = Some(Source::Upstream.as_str());
            rec.reason = Some(e.to_string());
        }
    }
    shared.audit.send(rec);
}
