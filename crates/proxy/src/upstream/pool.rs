//! Origin connections kept for the next request: hyper's own connection
//! API (`client::conn`), one pool per serving thread.
//!
//! hyper-util's pooled client did this before, at a cost per request the
//! benchmarks showed (bench/README, issue 52's eleventh round): a race
//! between the pool and a new connection set up for every request, the
//! pool key hashed byte by byte three times, the request boxed. Here a
//! request takes the newest idle connection of its origin, else opens one
//! and waits for it; what the pool keeps is what hyper-util's kept:
//!
//! - HTTP/1.1 connections go back once hyper says the next request can be
//!   written (the answer's body read to its end), at most
//!   `pool_max_idle_per_host` of them per origin, the oldest given up first;
//! - an h2 connection (ALPN) is shared by every request to its origin for
//!   as long as it is open;
//! - a connection idle for `pool_idle` is closed (looked at when the origin
//!   is asked for again, and by a task that sweeps every `pool_idle` while
//!   anything is kept);
//! - a request a kept connection hands back unwritten (it ended as the
//!   request was given to it) goes again, on another connection; one
//!   written and then cut is the origin's failure, as it was;
//! - over HTTP/1.1, the request line is in origin form, or absolute form
//!   when a parent proxy carries the connection, and a missing Host is
//!   written from the target (RFC 9112 3.2).
//!
//! What bounds connections over all origins is [`super::conns`], under this.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use http::uri::{Authority, PathAndQuery};
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2, TrySendError};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use mannerly_policy::{set_origin_host, url};
use tokio::sync::Notify;
use tokio::time::Instant;
use tower_service::Service;

use super::connector::GuardedConnector;
use super::conns::lock;
use crate::body::ProxyBody;
use crate::clock::Clock;

type BoxError = Box<dyn StdError + Send + Sync>;

/// How a pool is set up, from the `upstream` section.
pub(crate) struct PoolConfig {
    pub(crate) idle_for: Duration,
    pub(crate) max_idle_per_host: usize,
    pub(crate) max_head: usize,
}

/// The connections of one serving thread.
pub(crate) struct Pool(Arc<Shared>);

struct Shared {
    connector: HttpsConnector<GuardedConnector>,
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
    idle_for: Duration,
    max_idle_per_host: usize,
    idle: Mutex<Idle>,
    clock: Clock,
}

#[derive(Default)]
struct Idle {
    /// Oldest first.
    by_origin: HashMap<Key, Vec<Kept>, mannerly_state::FastHash>,
    /// Whether a sweep task is running.
    sweeping: bool,
    /// Origins an h2 connection is being set up to, and who waits for it.
    opening_h2: HashMap<Key, Arc<Notify>, mannerly_state::FastHash>,
}

struct Kept {
    conn: Conn,
    since: Instant,
}

/// A connection and what its connector said of it.
struct Conn {
    tx: Tx,
    info: Arc<Connected>,
}

enum Tx {
    H1(http1::SendRequest<ProxyBody>),
    H2(http2::SendRequest<ProxyBody>),
}

/// An origin: TLS or not, and its authority as the target has it. Equal
/// byte for byte (hashed whole, not byte by byte as `Authority` is): two
/// spellings of one name only keep two sets of connections.
#[derive(Clone)]
struct Key {
    tls: bool,
    authority: Authority,
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.tls == other.tls && self.authority.as_str() == other.authority.as_str()
    }
}

impl Eq for Key {}

impl Key {
    /// The same key over bytes of its own, for a key the pool keeps: a
    /// request's authority may share the bytes of the client's whole read
    /// buffer, which a kept key would hold for as long as it is kept.
    fn owned(&self) -> Key {
        Key {
            tls: self.tls,
            authority: self
                .authority
                .as_str()
                .parse()
                .unwrap_or_else(|_| self.authority.clone()),
        }
    }

    fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write(self.authority.as_str().as_bytes());
        h.write_u8(u8::from(self.tls));
    }
}

/// Why a request got no response: the connection was not made, or the
/// exchange on it failed. Its source is the connector's error or hyper's,
/// which `answer::failure` reads.
#[derive(Debug)]
pub(crate) struct SendError {
    stage: Stage,
    source: BoxError,
}

#[derive(Debug, Clone, Copy)]
enum Stage {
    Target,
    Connect,
    Handshake,
    Send,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.stage {
            Stage::Target => "no origin to send to",
            Stage::Connect => "connecting to the origin",
            Stage::Handshake => "setting up the connection",
            Stage::Send => "sending the request",
        })
    }
}

impl StdError for SendError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

impl SendError {
    fn new(stage: Stage, source: impl Into<BoxError>) -> SendError {
        SendError {
            stage,
            source: source.into(),
        }
    }
}

impl Pool {
    pub(crate) fn new(
        connector: HttpsConnector<GuardedConnector>,
        cfg: &PoolConfig,
        clock: Clock,
    ) -> Pool {
        let mut h1 = http1::Builder::new();
        // A hostile origin's endless head is cut, not relayed (answered
        // 502, `failure::upstream`).
        h1.max_buf_size(cfg.max_head);
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(cfg.max_head).unwrap_or(u32::MAX));
        Pool(Arc::new(Shared {
            connector,
            h1,
            h2,
            idle_for: cfg.idle_for,
            max_idle_per_host: cfg.max_idle_per_host,
            idle: Mutex::default(),
            clock,
        }))
    }

    /// Sends `req` (an absolute URI) on a kept connection to its origin,
    /// else on a new one. The response's extensions get the connection's
    /// extras (its [`super::conns::ConnExtra`]).
    pub(crate) async fn send(
        &self,
        mut req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, SendError> {
        let shared = &self.0;
        let key = match key_of(req.uri()) {
            Some(k) => k,
            None => {
                let why = format!("{} is not an absolute URI", req.uri());
                return Err(SendError::new(Stage::Target, why));
            }
        };
        // After a kept h2 connection handed a request back, a new one: the
        // pool may still list it until its task has ended.
        let mut kept_ok = true;
        loop {
            let kept = if kept_ok { shared.checkout(&key) } else { None };
            let (mut conn, reused) = match kept {
                Some(c) => (c, true),
                None => (Box::pin(shared.connect(&key)).await?, false),
            };
            let absolute = conn.prepare(&mut req, &key);
            match conn.tx.try_send(req).await {
                Ok(mut resp) => {
                    conn.info.get_extras(resp.extensions_mut());
                    shared.give_back(key, conn);
                    return Ok(resp);
                }
                Err(mut e) => match e.take_message() {
                    // The connection ended as the request was given to it.
                    Some(again) if reused => {
                        req = again;
                        *req.uri_mut() = absolute;
                        kept_ok = matches!(conn.tx, Tx::H1(_));
                    }
                    _ => return Err(SendError::new(Stage::Send, e.into_error())),
                },
            }
        }
    }
}

fn key_of(uri: &Uri) -> Option<Key> {
    let tls = match uri.scheme_str()? {
        "https" => true,
        "http" => false,
        _ => return None,
    };
    Some(Key {
        tls,
        authority: uri.authority()?.clone(),
    })
}

impl Shared {
    /// The newest usable connection kept for `key`; closed and expired
    /// ones found on the way are let go.
    fn checkout(&self, key: &Key) -> Option<Conn> {
        let mut idle = lock(&self.idle);
        let list = idle.by_origin.get_mut(key)?;
        let now = self.clock.now();
        let mut found = None;
        while let Some(last) = list.last_mut() {
            if now.saturating_duration_since(last.since) >= self.idle_for {
                // The newest expired: every older one has too.
                list.clear();
                break;
            }
            if last.conn.tx.is_closed() {
                list.pop();
                continue;
            }
            found = match &last.conn.tx {
                Tx::H2(tx) => {
                    last.since = now;
                    Some(Conn {
                        tx: Tx::H2(tx.clone()),
                        info: last.conn.info.clone(),
                    })
                }
                Tx::H1(_) => list.pop().map(|k| k.conn),
            };
            break;
        }
        if list.is_empty() {
            idle.by_origin.remove(key);
        }
        found
    }

    /// A new connection to `key`'s origin, ready for a request; an h2 one
    /// is kept at once for the requests that come while this one runs.
    async fn connect(self: &Arc<Self>, key: &Key) -> Result<Conn, SendError> {
        let uri = Uri::builder()
            .scheme(key.scheme())
            .authority(key.authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|e| SendError::new(Stage::Target, e))?;
        let io = self
            .connector
            .clone()
            .call(uri)
            .await
            .map_err(|e| SendError::new(Stage::Connect, e))?;
        let info = Arc::new(io.connected());
        let handshake = |e| SendError::new(Stage::Handshake, e);
        if info.is_negotiated_h2() {
            // One h2 connection per origin: requests that opened theirs at
            // the same time take the first that is set up.
            // With nothing kept (`pool_max_idle_per_host = 0`), each
            // request has a connection of its own.
            let _opening = match self.max_idle_per_host {
                0 => None,
                _ => match self.opening_h2(key).await {
                    Opening::Shared(conn) => return Ok(conn),
                    Opening::Ours(guard) => Some(guard),
                },
            };
            let (mut tx, conn) = self.h2.handshake(io).await.map_err(handshake)?;
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!("upstream h2 connection: {e}");
                }
            });
            tx.ready().await.map_err(handshake)?;
            let conn = Conn {
                tx: Tx::H2(tx.clone()),
                info: info.clone(),
            };
            self.keep(key.clone(), conn);
            return Ok(Conn {
                tx: Tx::H2(tx),
                info,
            });
        }
        let (mut tx, conn) = self.h1.handshake(io).await.map_err(handshake)?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!("upstream connection: {e}");
            }
        });
        tx.ready().await.map_err(handshake)?;
        Ok(Conn {
            tx: Tx::H1(tx),
            info,
        })
    }

    /// The h2 connection kept for `key`, once any being set up is; else
    /// the turn to set it up.
    async fn opening_h2<'a>(&'a self, key: &Key) -> Opening<'a> {
        loop {
            let wait = {
                let mut idle = lock(&self.idle);
                if let Some(conn) = idle.h2_for(key, self.clock.now()) {
                    return Opening::Shared(conn);
                }
                match idle.opening_h2.get(key) {
                    Some(n) => n.clone(),
                    None => {
                        let key = key.owned();
                        idle.opening_h2.insert(key.clone(), Arc::default());
                        return Opening::Ours(OpeningH2 { pool: self, key });
                    }
                }
            };
            let notified = wait.notified();
            tokio::pin!(notified);
            // Registered before looking again: the turn may end between.
            notified.as_mut().enable();
            if lock(&self.idle)
                .opening_h2
                .get(key)
                .is_some_and(|n| Arc::ptr_eq(n, &wait))
            {
                notified.await;
            }
        }
    }

    /// An HTTP/1.1 connection goes back once it can take the next request:
    /// now if its answer had no body, else when hyper has read the body.
    fn give_back(self: &Arc<Self>, key: Key, conn: Conn) {
        let Tx::H1(tx) = &conn.tx else {
            // The pool holds the h2 connection's own sender.
            return;
        };
        if self.max_idle_per_host == 0 || tx.is_closed() {
            return;
        }
        if tx.is_ready() {
            self.keep(key, conn);
            return;
        }
        let pool = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut conn = conn;
            let Tx::H1(tx) = &mut conn.tx else { return };
            if std::future::poll_fn(|cx| tx.poll_ready(cx)).await.is_ok() {
                if let Some(pool) = pool.upgrade() {
                    pool.keep(key, conn);
                }
            }
        });
    }

    fn keep(self: &Arc<Self>, key: Key, conn: Conn) {
        if self.max_idle_per_host == 0 {
            return;
        }
        let kept = Kept {
            conn,
            since: self.clock.now(),
        };
        let mut idle = lock(&self.idle);
        match idle.by_origin.get_mut(&key) {
            Some(list) => {
                if list.len() >= self.max_idle_per_host {
                    list.remove(0);
                }
                list.push(kept);
            }
            None => {
                idle.by_origin.insert(key.owned(), vec![kept]);
            }
        }
        if !idle.sweeping {
            idle.sweeping = true;
            tokio::spawn(sweep(Arc::downgrade(self), self.idle_for));
        }
    }
}

enum Opening<'a> {
    Shared(Conn),
    Ours(OpeningH2<'a>),
}

/// The turn to set up an origin's h2 connection; given up (and those
/// waiting woken) once it is kept, or failed.
struct OpeningH2<'a> {
    pool: &'a Shared,
    key: Key,
}

impl Drop for OpeningH2<'_> {
    fn drop(&mut self) {
        if let Some(n) = lock(&self.pool.idle).opening_h2.remove(&self.key) {
            n.notify_waiters();
        }
    }
}

impl Idle {
    /// A copy of an open h2 connection kept for `key`.
    fn h2_for(&mut self, key: &Key, now: Instant) -> Option<Conn> {
        let kept = self
            .by_origin
            .get_mut(key)?
            .iter_mut()
            .rev()
            .find(|k| match &k.conn.tx {
                Tx::H2(tx) => !tx.is_closed(),
                Tx::H1(_) => false,
            })?;
        kept.since = now;
        let Tx::H2(tx) = &kept.conn.tx else {
            return None;
        };
        Some(Conn {
            tx: Tx::H2(tx.clone()),
            info: kept.conn.info.clone(),
        })
    }
}

/// Lets go of connections idle for `every` or closed, every `every`, for
/// as long as the pool keeps any.
async fn sweep(pool: Weak<Shared>, every: Duration) {
    let every = every.max(Duration::from_millis(100));
    loop {
        tokio::time::sleep(every).await;
        let Some(pool) = pool.upgrade() else { return };
        let mut idle = lock(&pool.idle);
        let now = pool.clock.now();
        idle.by_origin.retain(|_, list| {
            list.retain(|k| {
                !k.conn.tx.is_closed() && now.saturating_duration_since(k.since) < pool.idle_for
            });
            !list.is_empty()
        });
        if idle.by_origin.is_empty() {
            idle.sweeping = false;
            return;
        }
    }
}

impl Conn {
    /// Puts `req` in the form this connection sends, and gives back the
    /// absolute URI it had (for a request sent again).
    fn prepare(&self, req: &mut Request<ProxyBody>, key: &Key) -> Uri {
        let Tx::H1(_) = self.tx else {
            // h2 takes :scheme and :authority from the absolute URI.
            return req.uri().clone();
        };
        if !req.headers().contains_key(http::header::HOST) {
            let host = url::strip_default_port(key.scheme(), key.authority.as_str());
            set_origin_host(req.headers_mut(), Some(host));
        }
        if self.info.is_proxied() {
            return req.uri().clone();
        }
        let origin_form = match req.uri().path_and_query() {
            Some(p) if p.as_str() != "/" => Uri::from(p.clone()),
            _ => Uri::from(PathAndQuery::from_static("/")),
        };
        std::mem::replace(req.uri_mut(), origin_form)
    }
}

impl Tx {
    fn is_closed(&self) -> bool {
        match self {
            Tx::H1(tx) => tx.is_closed(),
            Tx::H2(tx) => tx.is_closed(),
        }
    }

    async fn try_send(
        &mut self,
        req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, TrySendError<Request<ProxyBody>>> {
        match self {
            Tx::H1(tx) => tx.try_send_request(req).await,
            Tx::H2(tx) => tx.try_send_request(req).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UpstreamConfig;
    use crate::upstream::{client, Guard, UpstreamClient};
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// What a loopback origin saw: connections opened and closed by the
    /// proxy's side, and each request head with the connection it came on.
    #[derive(Default)]
    struct Seen {
        opened: usize,
        closed: usize,
        heads: Vec<(usize, String)>,
        /// Woken at each close.
        changed: Arc<Notify>,
    }

    fn closed(seen: &Mutex<Seen>) {
        let mut s = lock(seen);
        s.closed += 1;
        s.changed.notify_waiters();
    }

    /// An origin answering `200 ok` to each request head; it closes each
    /// connection after one answer when `one_each`, and holds answers until
    /// `hold` requests are in.
    async fn origin(one_each: bool, hold: usize) -> (u16, Arc<Mutex<Seen>>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let arrived = Arc::new(tokio::sync::Semaphore::new(0));
        let s = seen.clone();
        tokio::spawn(async move {
            loop {
                let (mut tcp, _) = l.accept().await.unwrap();
                let id = {
                    let mut s = lock(&s);
                    s.opened += 1;
                    s.opened
                };
                let (s, arrived) = (s.clone(), arrived.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let mut chunk = [0u8; 4096];
                        let n = tcp.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            closed(&s);
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        let head: Vec<u8> = buf.drain(..end + 4).collect();
                        lock(&s).heads.push((id, String::from_utf8(head).unwrap()));
                        arrived.add_permits(1);
                        let all = arrived.acquire_many(hold as u32).await.unwrap();
                        all.forget();
                        arrived.add_permits(hold);
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if tcp.write_all(answer).await.is_err() || one_each {
                            closed(&s);
                            return;
                        }
                    }
                });
            }
        });
        (port, seen)
    }

    fn proxy_client(idle_for: Duration, per_host: usize) -> UpstreamClient {
        let cfg = UpstreamConfig {
            allow_private: true,
            pool_idle: idle_for,
            pool_max_idle_per_host: per_host,
            ..UpstreamConfig::default()
        };
        client(&cfg, Guard::new(&cfg, crate::clock::Clock::system()), 0).unwrap()
    }

    async fn get(client: &UpstreamClient, port: u16, path: &str) -> String {
        let uri = format!("http://127.0.0.1:{port}{path}").parse().unwrap();
        get_uri(client, uri).await
    }

    /// The page at `uri`, which must be a 200.
    async fn get_uri(client: &UpstreamClient, uri: Uri) -> String {
        let req = Request::get(uri).body(crate::body::empty()).unwrap();
        let resp = client.request(req).await.expect("an answer");
        assert_eq!(resp.status(), 200);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    async fn until_seen(seen: &Arc<Mutex<Seen>>, what: &str, ok: impl Fn(&Seen) -> bool) {
        let changed = lock(seen).changed.clone();
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let next = changed.notified();
                tokio::pin!(next);
                next.as_mut().enable();
                if ok(&lock(seen)) {
                    return;
                }
                next.await;
            }
        });
        waited
            .await
            .unwrap_or_else(|_| panic!("{what}: not within 10 s"));
    }

    #[tokio::test]
    async fn a_kept_connection_carries_the_next_requests_in_origin_form_with_host() {
        let (port, seen) = origin(false, 1).await;
        let client = proxy_client(Duration::from_secs(60), 8);
        for path in ["/a", "/", "/b?q=1"] {
            assert_eq!(get(&client, port, path).await, "ok");
        }
        let seen = lock(&seen);
        assert_eq!(seen.opened, 1, "{:?}", seen.heads);
        let lines: Vec<&str> = seen
            .heads
            .iter()
            .map(|(_, h)| h.lines().next().unwrap())
            .collect();
        assert_eq!(
            lines,
            ["GET /a HTTP/1.1", "GET / HTTP/1.1", "GET /b?q=1 HTTP/1.1"]
        );
        let host = format!("host: 127.0.0.1:{port}\r\n");
        assert!(
            seen.heads.iter().all(|(_, h)| h.contains(&host)),
            "{:?}",
            seen.heads
        );
    }

    #[tokio::test]
    async fn an_origin_closing_after_each_answer_gets_each_request_on_a_new_connection() {
        let (port, seen) = origin(true, 1).await;
        let client = proxy_client(Duration::from_secs(60), 8);
        for _ in 0..3 {
            assert_eq!(get(&client, port, "/").await, "ok");
        }
        let seen = lock(&seen);
        assert_eq!(seen.opened, 3);
        let conns: Vec<usize> = seen.heads.iter().map(|(c, _)| *c).collect();
        assert_eq!(conns, [1, 2, 3]);
    }

    #[tokio::test]
    async fn a_connection_idle_past_pool_idle_is_closed_and_not_used_again() {
        let (port, seen) = origin(false, 1).await;
        let client = proxy_client(Duration::from_millis(200), 8);
        get(&client, port, "/").await;
        until_seen(&seen, "the idle connection closed", |s| s.closed == 1).await;
        get(&client, port, "/").await;
        let seen = lock(&seen);
        assert_eq!((seen.opened, seen.closed), (2, 1));
        assert_eq!(seen.heads.last().unwrap().0, 2);
    }

    #[tokio::test]
    async fn beyond_pool_max_idle_per_host_the_oldest_idle_connections_close() {
        let (port, seen) = origin(false, 3).await;
        let client = proxy_client(Duration::from_secs(60), 1);
        let (a, b, c) = tokio::join!(
            get(&client, port, "/1"),
            get(&client, port, "/2"),
            get(&client, port, "/3")
        );
        assert_eq!([a, b, c], ["ok", "ok", "ok"]);
        until_seen(&seen, "two connections closed", |s| s.closed == 2).await;
        get(&client, port, "/4").await;
        let seen = lock(&seen);
        assert_eq!((seen.opened, seen.closed), (3, 2), "{:?}", seen.heads);
    }

    /// hyper parses a client's request head out of its whole read buffer,
    /// and the request's URI shares those bytes: a key kept with an idle
    /// connection must not, or each origin's kept connection holds a
    /// client's buffer (broad crawl: 217 -> 380 MB at the peak).
    #[tokio::test]
    async fn a_kept_connection_holds_no_bytes_of_the_request_that_opened_it() {
        let (port, seen) = origin(false, 1).await;
        let client = proxy_client(Duration::from_secs(60), 8);
        let head = format!("GET http://127.0.0.1:{port}/a HTTP/1.1\r\n\r\n");
        let buffer = bytes::Bytes::from(head.into_bytes());
        let target = buffer.slice(4..buffer.len() - 13);
        let page = get_uri(&client, Uri::from_maybe_shared(target).unwrap()).await;
        assert_eq!(page, "ok");
        let let_go = tokio::time::timeout(Duration::from_secs(10), async {
            while !buffer.is_unique() {
                tokio::task::yield_now().await;
            }
        });
        assert!(
            let_go.await.is_ok(),
            "the pool still holds the request's bytes"
        );
        get(&client, port, "/b").await;
        assert_eq!(lock(&seen).opened, 1, "the connection was kept");
    }

    #[tokio::test]
    async fn with_pool_max_idle_per_host_0_nothing_is_kept() {
        let (port, seen) = origin(false, 1).await;
        let client = proxy_client(Duration::from_secs(60), 0);
        get(&client, port, "/1").await;
        until_seen(&seen, "the first connection closed", |s| s.closed == 1).await;
        get(&client, port, "/2").await;
        assert_eq!(lock(&seen).opened, 2);
    }
}
