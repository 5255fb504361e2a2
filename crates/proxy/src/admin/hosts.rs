//! The JSON of `/hosts` and `/hosts/{host}`: the budget's view of a host
//! joined with what the audit stream said about it.

use std::time::SystemTime;

use mannerly_policy::budget::{Distress, HostParams, HostView, TurnWhy};
use mannerly_policy::site::GroupKind;
use serde::Serialize;

use super::activity::{unix_ms, Activity, Decision, HostActivity, RobotsSeen, Sample};

/// One budget as `/hosts` lists it (a group of hosts: `budget.group_by`).
/// Durations are seconds, times RFC 3339.
#[derive(Debug, Serialize)]
pub(crate) struct HostEntry {
    /// The budget's key; in `/hosts/{host}`, the host asked for.
    pub host: String,
    /// The group whose budget this is: a site, a host, an address or
    /// `group:NAME`.
    pub group: String,
    /// What the group's key names (`site`, `host`, `ip`, `named`); `null`
    /// for a budget no request placed a host in since the start.
    pub kind: Option<GroupKind>,
    /// The hosts requests were placed in the group by, sorted.
    pub members: Vec<String>,
    /// Requests/s now.
    pub rate: f64,
    /// Learned ceiling, requests/s (`max_rate` when nothing is learned).
    pub ceiling: f64,
    /// The configured `max_rate` the ceiling relaxes back to.
    pub max_rate: f64,
    /// Seconds until the ceiling is back at `max_rate` (`null`: it is, or
    /// the throttle that lowered it predates this process).
    pub ceiling_relaxes_in_s: Option<f64>,
    pub concurrency: u32,
    pub in_flight: u32,
    pub queued: u32,
    pub paused: bool,
    /// Remaining pause, seconds.
    pub paused_for_s: Option<f64>,
    pub paused_until: Option<String>,
    /// Why: the breaker, or the last throttle's status and Retry-After.
    pub pause_reason: Option<String>,
    pub breaker_open: bool,
    pub breaker_open_for_s: Option<f64>,
    /// Throttles inside the breaker window.
    pub recent_throttles: u32,
    /// Origin 429s (and throttling 503s) in the last hour.
    pub throttles_last_hour: usize,
    pub crawl_delay_s: Option<f64>,
    /// What the site showed without a 429: the event behind a pause in
    /// force (`null` when none), the latest event, the events inside the
    /// distress window, and its times to first byte (baseline and fast
    /// average, ms).
    pub distress: Option<Distress>,
    pub last_distress: Option<Distress>,
    pub recent_distress: u32,
    pub latency_baseline_ms: Option<u32>,
    pub latency_ms: Option<u32>,
    pub robots: Option<RobotsEntry>,
    /// When a new request would get its turn (RFC 3339), how far ahead
    /// (seconds, 0: now) and why: `now`, `paced`, `paused`,
    /// `breaker_open`, `distressed`, or `busy` (every concurrency slot
    /// taken: the turn comes when a request in flight ends).
    pub next_turn_at: String,
    pub next_turn_in_s: f64,
    pub next_turn: TurnWhy,
    /// Decisions seen for the host since start (or since it was last forgotten).
    pub decisions: u64,
    pub last_seen: Option<String>,
    /// Rate at the end of each 10-second bucket, oldest first.
    pub history: Vec<Sample>,
}

#[derive(Debug, Serialize)]
pub(crate) struct RobotsEntry {
    /// Status of the last robots.txt fetch (`null`: no answer).
    pub status: Option<u16>,
    /// Whether it gave usable rules (or "no robots.txt": all allowed).
    pub ok: bool,
    /// Seconds since that fetch.
    pub age_s: f64,
}

fn rfc3339(ms: u64) -> String {
    let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}

fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

pub(crate) fn entry(
    host: String,
    v: &HostView,
    p: &HostParams,
    a: Option<&HostActivity>,
    now: SystemTime,
) -> HostEntry {
    let now_ms = unix_ms(now);
    let secs = |d: Option<std::time::Duration>| d.map(|d| round(d.as_secs_f64()));
    let relaxes = secs(v.ceiling_relaxes_in);
    let pause_reason = pause_reason(v, p, a);
    let turn = v.next_turn();
    HostEntry {
        next_turn_at: rfc3339(now_ms + u64::try_from(turn.in_.as_millis()).unwrap_or(0)),
        next_turn_in_s: round(turn.in_.as_secs_f64()),
        next_turn: turn.why,
        group: host.clone(),
        host,
        kind: None,
        members: Vec::new(),
        rate: round(v.rate),
        ceiling: round(v.ceiling),
        max_rate: p.max_rate,
        ceiling_relaxes_in_s: relaxes,
        concurrency: v.concurrency,
        in_flight: v.in_flight,
        queued: v.queued,
        paused: v.paused_for.is_some(),
        paused_for_s: secs(v.paused_for),
        paused_until: v
            .paused_for
            .map(|d| rfc3339(now_ms + u64::try_from(d.as_millis()).unwrap_or(0))),
        pause_reason,
        breaker_open: v.breaker_open_for.is_some(),
        breaker_open_for_s: secs(v.breaker_open_for),
        recent_throttles: v.recent_throttles,
        // What the budget holds survives a restart; what the audit stream
        // showed since the start may be more.
        throttles_last_hour: a
            .map_or(0, |a| a.throttles_last_hour(now_ms))
            .max(v.throttles_last_hour as usize),
        crawl_delay_s: secs(v.crawl_delay),
        distress: v.distress,
        last_distress: v.last_distress,
        recent_distress: v.recent_distress,
        latency_baseline_ms: v.latency_baseline_ms,
        latency_ms: v.latency_ms,
        robots: a
            .and_then(|a| a.robots.as_ref())
            .map(|r: &RobotsSeen| RobotsEntry {
                status: r.status,
                ok: r.ok,
                age_s: round(now_ms.saturating_sub(r.at_ms) as f64 / 1000.0),
            }),
        decisions: a.map_or(0, |a| a.decisions),
        last_seen: a.map(|a| rfc3339(a.last_ms)),
        history: a
            .map(|a| a.history.iter().copied().collect())
            .unwrap_or_default(),
    }
}

/// Why the host is paused, in words: distress, the breaker, or the last
/// throttle the audit stream saw (`None`: not paused).
fn pause_reason(v: &HostView, p: &HostParams, a: Option<&HostActivity>) -> Option<String> {
    match (v.breaker_open_for, v.paused_for) {
        (_, Some(_)) if v.distress.is_some() => Some(format!(
            "the site shows distress ({}) without asking to slow down",
            v.distress.map_or("", Distress::as_str)
        )),
        (Some(_), _) => Some(format!(
            "breaker open: {} throttles within {} s",
            p.breaker_threshold, p.breaker_window_secs
        )),
        (None, Some(_)) => Some(match a.and_then(|a| a.last_throttle.as_ref()) {
            Some(t) => {
                let status = t.status.map_or("throttle".into(), |s| s.to_string());
                match &t.retry_after {
                    Some(ra) => format!("origin answered {status} with Retry-After: {ra}"),
                    None => format!("origin answered {status} without Retry-After (backoff)"),
                }
            }
            None => "paused (restored from saved state)".into(),
        }),
        (None, None) => None,
    }
}

/// `/hosts/{host}`: the entry plus its last decisions, newest first.
#[derive(Debug, Serialize)]
pub(crate) struct HostDetail {
    #[serde(flatten)]
    pub entry: HostEntry,
    pub last_decisions: Vec<Decision>,
}

pub(crate) fn detail(
    host: String,
    v: &HostView,
    p: &HostParams,
    activity: &Activity,
    now: SystemTime,
) -> HostDetail {
    activity
        .with(&host.clone(), |a| HostDetail {
            entry: entry(host.clone(), v, p, Some(a), now),
            last_decisions: a.last.iter().rev().map(|d| Decision::clone(d)).collect(),
        })
        .unwrap_or_else(|| HostDetail {
            entry: entry(host, v, p, None, now),
            last_decisions: Vec::new(),
        })
}
