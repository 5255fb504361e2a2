//! What every connection shares: the configuration, the clock, the CA, the
//! upstream client, the robots.txt cache, the budgets, the response store
//! and the audit sink; and the tracker that graceful shutdown waits on.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use http::Response;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use mannerly_policy::AuditRecord;
use tokio::sync::{watch, Notify};

use crate::answer::{failure, Stop};
use crate::audit::AuditSink;
use crate::body::ProxyBody;
use crate::cache::Cache;
use crate::clients::heads::Limits;
use crate::clients::intake::BadHead;
use crate::clock::Clock;
use crate::config::Config;
use crate::error::{ConfigError, StartError};
use crate::flights::Flights;
use crate::hosts::budget::Budgets;
use crate::hosts::robots::RobotsCache;
use crate::identity::Signer;
use crate::payments::Payments;
use crate::tls::CertificateAuthority;
use crate::upstream::{self, Guard, UpstreamClient};
use mannerly_policy::prefs::TdmFile;

/// The most header lines hyper's HTTP/1 server parses in a head unless its
/// builder is told otherwise (`hyper::proto::h1::role::DEFAULT_MAX_HEADERS`).
const HYPER_MAX_HEADERS: usize = 100;

/// State shared by every connection.
pub(crate) struct Shared {
    /// The configuration the proxy started with.
    pub(crate) cfg: Config,
    /// The keys a reload (SIGHUP) may change while running: `[policy]`,
    /// `[crawler]` and `[budget]`; everything else is read from `cfg`.
    live: std::sync::RwLock<Arc<Config>>,
    pub(crate) clock: Clock,
    pub(crate) ca: Arc<CertificateAuthority>,
    pub(crate) client: UpstreamClient,
    pub(crate) guard: Guard,
    pub(crate) audit: AuditSink,
    pub(crate) robots: RobotsCache,
    /// `/.well-known/tdmrep.json` per origin, fetched only for a crawl
    /// that declares a text-and-data-mining purpose.
    pub(crate) tdmrep: RobotsCache<TdmFile>,
    pub(crate) budgets: Arc<Budgets>,
    pub(crate) cache: Arc<Cache>,
    /// Wakes the budget saver early (after an operator's reset); a
    /// throttle saves at once instead ([`Shared::save_budgets_now`]).
    pub(crate) save_budgets: Notify,
    /// The origin (`scheme://host:port/`) whose answer last paused each host,
    /// so a paused answer names it: the budget is the host name's, shared
    /// by all its ports.
    pub(crate) throttled_by: ThrottledBy,
    /// Bytes the origins did not send because we asked for `gzip, br` on
    /// behalf of clients that take identity only (decoded minus wire).
    pub(crate) compression_saved: Arc<AtomicU64>,
    /// Identical requests in flight together: the origin is asked once.
    pub(crate) flights: Arc<Flights>,
    pub(crate) tracker: Tracker,
    /// Web Bot Auth signer (`[identity]`), when enabled.
    pub(crate) identity: Option<Arc<Signer>>,
    /// Paying sites within limits (`[payment]`): the ledger and the signer.
    pub(crate) payments: Arc<Payments>,
    /// Who may use the proxy (`proxy.auth`, `proxy.allow`).
    pub(crate) auth: crate::clients::auth::Gate,
    /// Connection caps (`proxy.max_connections*`).
    pub(crate) conns: Arc<crate::clients::limits::ConnLimits>,
    /// This proxy's name in `Via`, for loop detection.
    pub(crate) via: crate::clients::limits::Via,
    ids: AtomicU64,
    id_prefix: String,
}

impl Shared {
    /// Builds everything a validated configuration asks for, except the
    /// listener: upstream client, robots cache, budgets (with the state a
    /// previous process saved), response store.
    pub(crate) async fn start(
        cfg: Config,
        clock: Clock,
        ca: Arc<CertificateAuthority>,
        open_audit: impl FnOnce(&Config) -> Result<AuditSink, StartError>,
    ) -> Result<Shared, StartError> {
        let via = crate::clients::limits::Via::new()?;
        let auth = crate::clients::auth::Gate::new(&cfg)?;
        let conns = crate::clients::limits::ConnLimits::new(
            cfg.proxy.max_connections,
            cfg.proxy.max_connections_per_client,
        );
        let guard = Guard::new(&cfg.upstream, clock.clone());
        let client = upstream::client(&cfg.upstream, guard.clone(), cfg.proxy.serving_threads())?;
        let start = clock
            .wall()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let identity = Signer::load(&cfg)?;
        if let Some(signer) = &identity {
            signer.watch();
        }
        let robots = RobotsCache::new(cfg.robots.clone(), clock.clone(), identity.clone());
        let tdmrep = RobotsCache::new(cfg.robots.clone(), clock.clone(), identity.clone());
        let budgets = Budgets::from_config(&cfg, clock.clone())?;
        let cache = Cache::open(&cfg, &clock)?;
        if cfg.state.share_pages {
            cache.share(budgets.shared_pages(&cfg));
        }
        let shared_hosts = budgets.shared().map(|r| r.as_ref());
        let payments = Payments::start(&cfg, clock.clone(), shared_hosts, format!("{start:x}"))?;
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
        // Last: everything above can fail, and a start that fails must leave
        // the audit log as it was (a seal written into another proxy's live
        // log, or one that stops at once, would read as a cut).
        let audit = open_audit(&cfg)?;
        let flights = Flights::new(cfg.cache.max_body);
        Ok(Shared {
            live: std::sync::RwLock::new(Arc::new(cfg.clone())),
            cfg,
            clock,
            ca,
            client,
            guard,
            audit,
            robots,
            tdmrep,
            budgets,
            cache,
            save_budgets: Notify::new(),
            throttled_by: ThrottledBy::default(),
            compression_saved: Arc::default(),
            flights,
            tracker: Tracker::new(),
            identity,
            payments: Arc::new(payments),
            auth,
            conns,
            via,
            ids: AtomicU64::new(0),
            id_prefix: format!("{start:x}"),
        })
    }

    /// Writes the budget state that must survive a restart (pauses,
    /// breakers, lowered ceilings) to the store, and returns once it is
    /// there: the disk store forces host records to disk.
    pub(crate) async fn save_budgets_now(&self) {
        let (budgets, store) = (self.budgets.clone(), self.cache.store().clone());
        match tokio::task::spawn_blocking(move || budgets.save(store.as_ref())).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => self.cache.failed("saving budget state", &e),
            Err(e) => self.cache.failed("saving budget state", &e),
        }
    }

    /// The configuration in force for the keys a reload may change.
    pub(crate) fn live(&self) -> Arc<Config> {
        self.live.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Applies a new configuration's reloadable keys (`[policy]`,
    /// `[crawler]`, `[budget]` with its per-host overrides) and says what
    /// changed; a changed key that needs a restart is named, not applied.
    pub(crate) fn reload(&self, new: Config) -> Result<Reloaded, ConfigError> {
        let new = new.validate()?;
        let old = self.live();
        let section = |v: &dyn std::fmt::Debug| format!("{v:?}");
        let mut changed = Vec::new();
        if section(&old.policy) != section(&new.policy) {
            changed.push("policy".to_string());
        }
        if section(&old.crawler) != section(&new.crawler) {
            changed.push("crawler".to_string());
        }
        if section(&old.budget) != section(&new.budget) {
            self.budgets.set_params(new.budget.clone())?;
            changed.push("budget".to_string());
        }
        let fixed = [
            ("data_dir", section(&old.data_dir), section(&new.data_dir)),
            ("ca_dir", section(&old.ca_dir), section(&new.ca_dir)),
            ("proxy", section(&old.proxy), section(&new.proxy)),
            ("upstream", section(&old.upstream), section(&new.upstream)),
            ("audit", section(&old.audit), section(&new.audit)),
            ("robots", section(&old.robots), section(&new.robots)),
            ("cache", section(&old.cache), section(&new.cache)),
            ("identity", section(&old.identity), section(&new.identity)),
            ("admin", section(&old.admin), section(&new.admin)),
            ("state", section(&old.state), section(&new.state)),
            ("payment", section(&old.payment), section(&new.payment)),
        ];
        let restart = fixed
            .into_iter()
            .filter(|(_, a, b)| a != b)
            .map(|(name, _, _)| name.to_string())
            .collect();
        let mut next = (*old).clone();
        next.policy = new.policy;
        next.crawler = new.crawler;
        next.budget = new.budget;
        *self.live.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        Ok(Reloaded { changed, restart })
    }

    /// The next decision id: unique within this process, and across
    /// restarts by its prefix (the start time).
    pub(crate) fn next_id(&self) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        // By hand rather than `format!`: every request takes one.
        let mut digits = itoa::Buffer::new();
        let n = digits.format(n);
        let mut id = String::with_capacity(self.id_prefix.len() + 1 + n.len());
        id.push_str(&self.id_prefix);
        id.push('-');
        id.push_str(n);
        id
    }

    /// A new audit record for a request, stamped now.
    pub(crate) fn record(
        &self,
        method: &str,
        url: &str,
        host: &str,
        client: SocketAddr,
    ) -> Box<AuditRecord> {
        let group = self.budgets.group(host).key;
        self.record_in(
            method,
            url.to_string(),
            host,
            group,
            client,
            self.clock.wall(),
        )
    }

    /// [`Shared::record`] for a request whose host's group was looked up
    /// already.
    pub(crate) fn record_in(
        &self,
        method: &str,
        url: String,
        host: &str,
        group: String,
        client: SocketAddr,
        at: std::time::SystemTime,
    ) -> Box<AuditRecord> {
        // Boxed from the start: a record is some 1,200 bytes, and it moves
        // from the exchange to the answer's body and on to the writer.
        // Made in its box, not on the stack and copied (`heap`).
        crate::heap::boxed(|| AuditRecord {
            ts: crate::clock::stamp(at),
            id: self.next_id(),
            client: Some(client_text(client)),
            method: method.to_string(),
            url,
            host: host.to_string(),
            group: Some(group),
            ..AuditRecord::default()
        })
    }

    /// The one funnel of a [`Stop`]: its audit fields into `rec`, the
    /// client's answer out. The head waits until the line is written (see
    /// `audit::line_written`).
    pub(crate) fn stop(&self, rec: impl Into<Box<AuditRecord>>, stop: Stop) -> Response<ProxyBody> {
        let mut rec = rec.into();
        stop.record(&mut rec);
        let mut resp = stop.into_response(&rec.id);
        crate::audit::gate(&mut resp, self.audit.commit_soon(rec));
        resp
    }

    /// The limits every request head of a client connection is held to.
    pub(crate) fn head_limits(&self) -> Limits {
        let p = &self.cfg.proxy;
        Limits {
            max_bytes: p.max_header_bytes,
            max_headers: p.max_headers,
            timeout: p.header_read_timeout,
        }
    }

    /// The answer to a request head we refuse (framing, size, time), with
    /// its audit line; the connection closes after it.
    pub(crate) fn refuse_head(&self, bad: BadHead, peer: SocketAddr) -> Response<ProxyBody> {
        let rec = self.record(&bad.method, &bad.target, "", peer);
        self.stop(rec, failure::bad_head(bad.status, bad.reason))
    }

    /// The HTTP server settings for client connections. A head is timed by
    /// `heads::Heads` from its first byte and answered 408 when late;
    /// hyper's own timer, which runs from the end of the previous request
    /// and closes silently, is set at twice that, to close idle kept-alive
    /// connections.
    pub(crate) fn http(&self) -> auto::Builder<TokioExecutor> {
        let mut b = auto::Builder::new(TokioExecutor::new());
        b.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.cfg.proxy.header_read_timeout * 2)
            .max_buf_size(self.cfg.proxy.max_header_bytes.max(8192));
        // Every HTTP/1 head has passed `clients::heads` and its limit
        // before hyper parses it, so hyper's own limit (100 lines unless
        // told) only needs raising. Told any number, hyper fills two
        // arrays of that many slots for every head it parses (about 1,700
        // instructions a request); left alone, it takes them uninitialised.
        if self.cfg.proxy.max_headers > HYPER_MAX_HEADERS {
            b.http1().max_headers(self.cfg.proxy.max_headers);
        }
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

/// What a reload did: the sections applied, the ones that need a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// Changed and now in force: `policy`, `crawler`, `budget`.
    pub changed: Vec<String>,
    /// Changed in the file but only read at start.
    pub restart: Vec<String>,
}

/// Counts live connection tasks and tells them when shutdown starts.
pub(crate) struct Tracker {
    pub(crate) live: watch::Sender<usize>,
    pub(crate) stop: watch::Sender<bool>,
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

    pub(crate) fn track(&self) -> Track {
        self.live.send_modify(|n| *n += 1);
        Track {
            live: self.live.clone(),
        }
    }

    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    pub(crate) fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }
}

/// Which origin last throttled each budget (memory only, and bounded: past
/// [`ThrottledBy::MAX`] hosts the least recently throttled are forgotten,
/// and a paused answer of theirs then names no origin).
#[derive(Default)]
pub(crate) struct ThrottledBy {
    /// Budget → the origin, with a `bound` stamp of when.
    by: dashmap::DashMap<String, (String, u64)>,
    bound: mannerly_state::hosts::Bound,
}

impl ThrottledBy {
    const MAX: usize = 100_000;

    /// `origin` throttled the budget `host` (a group's key: a pause is
    /// the group's, whichever member drew it).
    pub(crate) fn note(&self, host: &str, origin: String) {
        let stamp = self.bound.stamp();
        self.by.insert(host.to_ascii_lowercase(), (origin, stamp));
        let idle = mannerly_state::hosts::Tier::Idle;
        self.bound
            .hold(&self.by, Self::MAX, |_, o| Some((idle, o.1)));
    }

    /// The origin that last throttled `host`, if known.
    pub(crate) fn get(&self, host: &str) -> Option<String> {
        self.by.get(&host.to_ascii_lowercase()).map(|o| o.0.clone())
    }
}

/// `ip:port` as `SocketAddr`'s `Display` writes it. An IPv4 client's is
/// made by hand: it is on every audit line, and the formatter's padding
/// machinery cost more than the rest of the record's start.
fn client_text(client: SocketAddr) -> String {
    let SocketAddr::V4(v4) = client else {
        return client.to_string();
    };
    let mut out = String::with_capacity(21);
    let mut digits = itoa::Buffer::new();
    for (i, octet) in v4.ip().octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        out.push_str(digits.format(octet));
    }
    out.push(':');
    out.push_str(digits.format(v4.port()));
    out
}

#[cfg(test)]
mod tests {
    use super::client_text;
    use std::net::SocketAddr;

    #[test]
    fn client_text_is_what_display_writes() {
        for a in [
            "0.0.0.0:0",
            "127.0.0.1:8080",
            "10.20.3.255:65535",
            "255.255.255.255:1",
            "192.168.100.7:443",
            "[::1]:80",
            "[2001:db8::5%3]:9",
        ] {
            let addr: SocketAddr = a.parse().unwrap();
            assert_eq!(client_text(addr), addr.to_string(), "{a}");
        }
    }
}
