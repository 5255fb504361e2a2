//! The admin listener: `/metrics`, `/hosts`, `/hosts/{host}`,
//! `POST /hosts/{host}/reset`, `/healthz`, `/readyz`, the dashboard at
//! `/`, and, without the token, the Web Bot Auth key directory and
//! Signature Agent Card (`wellknown.rs`). It reads the proxy through two doors only: the audit records
//! ([`Observe::record`], called by the audit sink for every decision) and
//! the host store (the `host_*` functions below).

mod activity;
mod client;
mod hosts;
mod metrics;
mod reply;
mod spend;
mod wellknown;

pub use client::{call, AdminReply};

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::{header, Method, Request, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use mannerly_policy::budget::{host_key, HostParams, HostView, ResetReport};
use mannerly_policy::identity::{ABOUT_PATH, CARD_PATH, DIRECTORY_PATH, RANGES_PATH};
use mannerly_policy::{AuditRecord, Outcome};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

use crate::clock::Clock;
use crate::config::AdminConfig;
use crate::error::StartError;
use crate::shared::Shared;

use activity::Activity;
use metrics::{Gauges, Metrics};
use reply::{answer, error, json, Answer};

const DASHBOARD: &str = include_str!("admin/dashboard.html");
const PER_PAGE: usize = 50;
const MAX_PER_PAGE: usize = 500;

/// What the admin side keeps: metrics and recent activity, both fed by the
/// audit records, and whether the proxy is serving.
pub(crate) struct Observe {
    metrics: Metrics,
    activity: Activity,
    ready: AtomicBool,
    token: Option<[u8; 32]>,
    host_labels: Vec<String>,
    clock: Clock,
}

impl Observe {
    /// After the budgets' sweep: the hosts it dropped are marked forgotten.
    pub(crate) fn swept(&self, shared: &Shared) {
        self.activity.mark_forgotten(self.clock.wall(), |h| {
            host_view(shared, &shared.budgets.key_for(h)).is_some()
        });
    }

    pub(crate) fn new(cfg: &AdminConfig, clock: Clock) -> Arc<Observe> {
        Arc::new(Observe {
            metrics: Metrics::new(&cfg.host_labels),
            activity: Activity::new(cfg.max_hosts),
            ready: AtomicBool::new(false),
            token: (!cfg.token.is_empty()).then(|| Sha256::digest(cfg.token.as_bytes()).into()),
            host_labels: cfg
                .host_labels
                .iter()
                .map(|h| host_key(h).into_owned())
                .collect(),
            clock,
        })
    }

    /// Takes in one decision (called by the audit sink).
    pub(crate) fn record(&self, rec: &AuditRecord) {
        self.metrics.observe(rec);
        self.activity.observe(rec, self.clock.wall());
    }

    /// The proxy accepts requests (`/readyz`).
    pub(crate) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Compares digests so that the time taken says nothing about the token.
    fn authorized(&self, req: &Request<Incoming>) -> bool {
        let Some(want) = &self.token else {
            return true;
        };
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| Sha256::digest(t.trim().as_bytes()));
        match given {
            Some(g) => g.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0,
            None => false,
        }
    }
}

// --- host reads: the one place that knows how the store is asked ---

fn host_views(shared: &Shared) -> Vec<(String, HostView)> {
    shared.budgets.views()
}

fn host_view(shared: &Shared, host: &str) -> Option<HostView> {
    shared.budgets.view(host)
}

fn host_params(shared: &Shared, host: &str) -> HostParams {
    shared.budgets.params(host)
}

async fn host_reset(shared: &Shared, host: &str) -> Option<ResetReport> {
    shared.budgets.reset(host).await
}

// --- the listener ---

/// Binds the admin listener if `admin.listen` is set.
pub(crate) async fn bind(cfg: &AdminConfig) -> Result<Option<TcpListener>, StartError> {
    let Some(addr) = cfg.addr()? else {
        return Ok(None);
    };
    TcpListener::bind(addr)
        .await
        .map(Some)
        .map_err(|source| StartError::Io {
            what: format!("admin listener on {addr} (admin.listen)"),
            source,
        })
}

/// Serves the admin listener until the task is aborted.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>, observe: Arc<Observe>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("admin accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (shared, observe) = (shared.clone(), observe.clone());
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let (shared, observe) = (shared.clone(), observe.clone());
                async move { Ok::<_, Infallible>(route(&shared, &observe, req, peer).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn route(
    shared: &Arc<Shared>,
    observe: &Observe,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Answer {
    let path = req.uri().path().to_string();
    let query = parse_query(req.uri().query().unwrap_or(""));
    let method = req.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "/healthz") => return answer(StatusCode::OK, "text/plain", "ok\n"),
        (&Method::GET, "/readyz") => return readyz(shared, observe),
        // Verifiers of our signatures fetch these: public, no token.
        (&Method::GET | &Method::HEAD, DIRECTORY_PATH) => {
            return wellknown::directory(shared, &req).await
        }
        (&Method::GET | &Method::HEAD, CARD_PATH) => return wellknown::card(shared),
        // Site operators read these: public too.
        (&Method::GET | &Method::HEAD, ABOUT_PATH) => return wellknown::about(shared),
        (&Method::GET | &Method::HEAD, RANGES_PATH) => return wellknown::ranges(shared),
        (&Method::GET, "/") => {
            let mut r = answer(StatusCode::OK, "text/html; charset=utf-8", DASHBOARD);
            r.headers_mut().insert(
                header::CONTENT_SECURITY_POLICY,
                header::HeaderValue::from_static(
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:",
                ),
            );
            return r;
        }
        _ => {}
    }
    if !observe.authorized(&req) {
        let mut r = error(
            StatusCode::UNAUTHORIZED,
            "this admin listener needs Authorization: Bearer <admin.token>",
        );
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"mannerly\""),
        );
        return r;
    }
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (&method, segments.as_slice()) {
        (&Method::GET, ["metrics"]) => metrics(shared, observe),
        (&Method::GET, ["hosts"]) => list(shared, observe, &query),
        (&Method::GET, ["hosts", host]) => show(shared, observe, &pct_decode(host)),
        (&Method::POST, ["hosts", host, "reset"]) => {
            if cross_site(&req) {
                return error(
                    StatusCode::FORBIDDEN,
                    "a reset must come from the dashboard of this listener or a non-browser client",
                );
            }
            reset(shared, &pct_decode(host), peer).await
        }
        (_, ["metrics"] | ["hosts"] | ["hosts", _] | ["hosts", _, "reset"]) => {
            error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here")
        }
        _ => error(StatusCode::NOT_FOUND, "no such admin endpoint"),
    }
}

fn readyz(shared: &Shared, observe: &Observe) -> Answer {
    let ready = observe.ready.load(Ordering::SeqCst);
    // The CA and the store are opened before the listener accepts, so
    // "serving" implies them. A degraded Redis backend still serves (each
    // proxy decides alone at its share of the rate), so it is said, not
    // made unready.
    let body = serde_json::json!({
        "ready": ready,
        "listener": ready,
        "ca": true,
        "store": true,
        "state_backend": if shared.budgets.shared().is_some() { "redis" } else { "memory" },
        "state": shared.budgets.state(),
        // Paying fails closed without making the proxy unready: pages
        // that cost nothing are still served.
        "payments": match shared.payments.stopped() {
            Some(why) => format!("stopped: {why}"),
            None => "ok".to_string(),
        },
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    answer(status, "application/json", body.to_string())
}

/// A browser request from another site (the POST a malicious page could
/// make to a loopback listener): it carries an Origin that is not ours.
fn cross_site(req: &Request<Incoming>) -> bool {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok());
    match req.headers().get(header::ORIGIN).map(|v| v.to_str()) {
        None => false,
        Some(Ok(origin)) => {
            let origin_host = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            origin_host.is_none() || origin_host != host
        }
        Some(Err(_)) => true,
    }
}

fn metrics(shared: &Shared, observe: &Observe) -> Answer {
    let mut g = Gauges::default();
    for (host, v) in host_views(shared) {
        g.hosts_tracked += 1;
        g.hosts_paused += u64::from(v.paused_for.is_some());
        g.hosts_breaker_open += u64::from(v.breaker_open_for.is_some());
        g.queued += u64::from(v.queued);
        g.in_flight += u64::from(v.in_flight);
        if observe.host_labels.contains(&host) {
            let paused = v.paused_for.map_or(0.0, |d| d.as_secs_f64());
            g.labelled.push((host, v.rate, v.ceiling, paused));
        }
    }
    g.asleep = shared.budgets.asleep();
    g.budget_evicted = shared.budgets.evicted();
    g.store_errors = shared.cache.errors();
    g.backend_degraded = shared.budgets.state() == Some("degraded");
    g.redis = shared.budgets.shared().map(|r| {
        let s = r.stats();
        let n = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let (woken_by_message, wakes_live) = shared.budgets.woken_by_message();
        metrics::RedisCounts {
            woken_by_message,
            wakes_live,
            woken_by_reset: shared.budgets.woken_by_reset(),
            robots_woken_by_message: shared.budgets.robots_woken_by_message(),
            robots_asleep: shared.budgets.robots_asleep(),
            messages_heard: shared.budgets.messages_heard(),
            channels_heard: shared.budgets.channels_heard() as u64,
            round_trips: n(&s.round_trips),
            conflicts: n(&s.conflicts),
            degraded_ops: n(&s.degraded_ops),
            contended_ops: n(&s.contended_ops),
        }
    });
    g.store = shared.cache.store().stats();
    let stats = shared.audit.stats();
    g.audit_lines = stats.written.load(Ordering::Relaxed);
    g.audit_write_errors = stats.errors.load(Ordering::Relaxed);
    g.compression_saved = shared.compression_saved.load(Ordering::Relaxed);
    answer(
        StatusCode::OK,
        "text/plain; version=0.0.4; charset=utf-8",
        observe.metrics.render(&g),
    )
}

#[derive(Serialize)]
struct HostList {
    now: String,
    hosts_tracked: usize,
    /// Hosts matching the filter.
    total: usize,
    page: usize,
    per_page: usize,
    pages: usize,
    hosts: Vec<hosts::HostEntry>,
    totals: Totals,
    latest: Vec<activity::Decision>,
}

#[derive(Serialize)]
struct Totals {
    decisions: BTreeMap<&'static str, u64>,
    paused: usize,
    breaker_open: usize,
    in_flight: u64,
    queued: u64,
    throttles_last_hour: usize,
}

impl Totals {
    fn new(decisions: Vec<(&'static str, u64)>) -> Totals {
        Totals {
            decisions: decisions.into_iter().collect(),
            paused: 0,
            breaker_open: 0,
            in_flight: 0,
            queued: 0,
            throttles_last_hour: 0,
        }
    }

    fn add(&mut self, v: &HostView, throttles_last_hour: usize) {
        self.paused += usize::from(v.paused_for.is_some());
        self.breaker_open += usize::from(v.breaker_open_for.is_some());
        self.in_flight += u64::from(v.in_flight);
        self.queued += u64::from(v.queued);
        self.throttles_last_hour += throttles_last_hour;
    }
}

/// A host `/hosts` may list: (last active, unix ms; host; its view).
type Row = (u64, String, HostView);

/// What `/hosts` was asked for: which page of which hosts, in what order.
struct HostQuery {
    /// From 1.
    page: usize,
    per_page: usize,
    /// Lowercase substring of the host; empty: every host.
    filter: String,
    paused_only: bool,
    /// By name; otherwise most recently active first.
    by_name: bool,
}

impl HostQuery {
    /// Missing or unparsable values fall back to the defaults, out-of-range
    /// ones to the nearest allowed.
    fn parse(q: &BTreeMap<String, String>) -> HostQuery {
        HostQuery {
            page: q
                .get("page")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1usize)
                .max(1),
            per_page: q
                .get("per_page")
                .and_then(|v| v.parse().ok())
                .unwrap_or(PER_PAGE)
                .clamp(1, MAX_PER_PAGE),
            filter: q
                .get("q")
                .map(|s| s.to_ascii_lowercase())
                .unwrap_or_default(),
            paused_only: q.get("paused").is_some_and(|v| v == "1" || v == "true"),
            by_name: q.get("sort").is_some_and(|v| v == "name"),
        }
    }

    fn matches(&self, host: &str, v: &HostView) -> bool {
        (self.filter.is_empty() || host.contains(&self.filter))
            && !(self.paused_only && v.paused_for.is_none())
    }

    fn sort(&self, rows: &mut [Row]) {
        if self.by_name {
            rows.sort_by(|a, b| a.1.cmp(&b.1));
        } else {
            rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        }
    }

    /// The rows of the page asked for (none past the last page).
    fn page(&self, rows: Vec<Row>) -> impl Iterator<Item = Row> {
        rows.into_iter()
            .skip((self.page - 1).saturating_mul(self.per_page))
            .take(self.per_page)
    }
}

/// The totals count every host; only the rows are filtered.
fn list(shared: &Shared, observe: &Observe, q: &BTreeMap<String, String>) -> Answer {
    let now = shared.clock.wall();
    let now_ms = activity::unix_ms(now);
    let query = HostQuery::parse(q);
    let views = host_views(shared);
    let hosts_tracked = views.len();
    let mut totals = Totals::new(observe.metrics.totals());
    let mut rows: Vec<Row> = Vec::with_capacity(views.len());
    for (host, v) in views {
        let throttles = observe
            .activity
            .with(&host, |a| a.throttles_last_hour(now_ms))
            .unwrap_or(0)
            .max(v.throttles_last_hour as usize);
        totals.add(&v, throttles);
        if query.matches(&host, &v) {
            rows.push((observe.activity.last_ms(&host), host, v));
        }
    }
    query.sort(&mut rows);
    let total = rows.len();
    let pages = total.div_ceil(query.per_page).max(1);
    let groups = shared.budgets.members();
    let hosts = query
        .page(rows)
        .map(|(_, host, v)| host_entry(shared, observe, host, &v, &groups, now))
        .collect();
    json(
        StatusCode::OK,
        &HostList {
            now: humantime::format_rfc3339_millis(now).to_string(),
            hosts_tracked,
            total,
            page: query.page,
            per_page: query.per_page,
            pages,
            hosts,
            totals,
            latest: observe.activity.latest(),
        },
    )
}

fn host_entry(
    shared: &Shared,
    observe: &Observe,
    host: String,
    v: &HostView,
    groups: &Members,
    now: std::time::SystemTime,
) -> hosts::HostEntry {
    let p = host_params(shared, &host);
    let mut e = observe
        .activity
        .with(&host, |a| hosts::entry(host.clone(), v, &p, Some(a), now))
        .unwrap_or_else(|| hosts::entry(host.clone(), v, &p, None, now));
    if let Some(g) = groups.get(&host) {
        with_members(&mut e, g);
    }
    e
}

/// Each group's kind, hosts and their Crawl-delays, as the budgets placed
/// them.
type Members = std::collections::HashMap<String, crate::hosts::budget::Members>;

/// A group's kind and hosts on its row; a host's own Crawl-delay inside a
/// shared group shows there when the budget has none of its own.
fn with_members(e: &mut hosts::HostEntry, g: &crate::hosts::budget::Members) {
    e.kind = Some(g.kind);
    e.members.clone_from(&g.hosts);
    if e.crawl_delay_s.is_none() {
        e.crawl_delay_s = g.crawl_delay.map(|d| d.as_secs_f64());
    }
}

/// `/hosts/{name}`: a group by its key, or a host: its group's budget with
/// the host's own activity.
fn show(shared: &Shared, observe: &Observe, host: &str) -> Answer {
    let name = host_key(host).into_owned();
    let key = shared.budgets.key_for(&name);
    let Some(v) = host_view(shared, &key) else {
        let said = match observe
            .activity
            .with(&name, |a| (a.forgotten_ms, a.last_ms))
        {
            Some((Some(at), last)) => forgotten_text(&name, at, last),
            _ => format!("{name} is not tracked"),
        };
        return error(StatusCode::NOT_FOUND, &said);
    };
    let p = host_params(shared, &key);
    let mut d = hosts::detail(name, &v, &p, &observe.activity, shared.clock.wall());
    d.entry.group.clone_from(&key);
    if let Some(g) = shared.budgets.members_of(&key) {
        with_members(&mut d.entry, &g);
    }
    json(StatusCode::OK, &d)
}

/// A host dropped by the sweep had nothing learned to keep; saying so
/// (and when) tells the operator its next request starts afresh, where
/// "not tracked" reads as if the proxy had never seen it.
fn forgotten_text(key: &str, at_ms: u64, last_ms: u64) -> String {
    let time = |ms: u64| {
        humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
        )
    };
    format!(
        "{key} was forgotten at {} after it went idle (last request {}): its budget held nothing to keep (no pause, no lowered ceiling, its pace at the start rate), so its next request starts a fresh one",
        time(at_ms),
        time(last_ms),
    )
}

#[derive(Serialize)]
struct ResetAnswer {
    /// The name the operator gave.
    host: String,
    /// The budget reset: the group `host` belongs to, or `host` itself.
    group: String,
    audit_id: String,
    before: HostView,
    after: HostView,
}

/// Resets the budget `host` names: a group by its key, or a host's group
/// (every member's pause ends with it).
async fn reset(shared: &Shared, host: &str, peer: SocketAddr) -> Answer {
    let name = host_key(host).into_owned();
    let key = shared.budgets.key_for(&name);
    let Some(report) = host_reset(shared, &key).await else {
        return error(StatusCode::NOT_FOUND, &format!("{name} is not tracked"));
    };
    // Saved now, like a throttle, so that a restart does not bring the
    // cleared pause back.
    shared.save_budgets.notify_one();
    let b = &report.before;
    let mut rec = shared.record("POST", &format!("/hosts/{name}/reset"), &name, peer);
    rec.group = Some(key.clone());
    rec.outcome = Some(Outcome::OperatorReset);
    rec.status = Some(200);
    rec.rate = Some(b.rate);
    rec.ceiling = Some(b.ceiling);
    rec.pause_s = b.paused_for.map(|d| d.as_millis() as f64 / 1000.0);
    rec.reason = Some(format!(
        "operator reset; before: rate {:.3}/s, ceiling {:.3}/s, concurrency {}, paused {}, breaker {}, {} recent throttles",
        b.rate,
        b.ceiling,
        b.concurrency,
        b.paused_for
            .map_or("no".into(), |d| format!("{:.1} s", d.as_secs_f64())),
        if b.breaker_open_for.is_some() { "open" } else { "closed" },
        b.recent_throttles,
    ));
    let audit_id = rec.id.clone();
    shared.audit.send(rec);
    json(
        StatusCode::OK,
        &ResetAnswer {
            host: name,
            group: key,
            audit_id,
            before: report.before,
            after: report.after,
        },
    )
}

fn parse_query(q: &str) -> BTreeMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (pct_decode(k), pct_decode(v)),
            None => (pct_decode(p), String::new()),
        })
        .collect()
}

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| char::from(c).to_digit(16);
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::{forgotten_text, pct_decode};

    #[test]
    fn a_forgotten_host_is_told_as_forgotten_with_both_times() {
        let said = forgotten_text("example.org", 1_796_515_260_000, 1_796_515_200_000);
        assert_eq!(
            said,
            "example.org was forgotten at 2026-12-06T00:01:00Z after it went idle (last request 2026-12-06T00:00:00Z): its budget held nothing to keep (no pause, no lowered ceiling, its pace at the start rate), so its next request starts a fresh one"
        );
    }

    #[test]
    fn percent_decoding_keeps_bad_escapes() {
        assert_eq!(pct_decode("%5B%3A%3A1%5D"), "[::1]");
        assert_eq!(pct_decode("a%2"), "a%2");
        assert_eq!(pct_decode("a%zz"), "a%zz");
        assert_eq!(pct_decode("%"), "%");
    }
}
