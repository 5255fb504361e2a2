//! The figures of one host, counted line by line.

use super::feedback::{Feedback, Send};
use super::line::{Line, LineRef};
use super::robots::{Cited, RobotsSignal};
use mannerly_policy::robots_cache::fetch_failed;

/// Chart buckets per host; their width doubles as the log grows.
pub const BUCKETS: usize = 120;
/// Crawler names (agents, key ids) kept per host.
const NAMES: usize = 8;
/// Hosts named per group.
pub const MEMBERS: usize = 64;

/// One chart bucket.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bucket {
    /// Requests sent to the origin.
    pub sends: u32,
    /// The budget's rate last written in the bucket, requests/s.
    pub rate: Option<f32>,
    /// The host was paused (throttle, paused or breaker refusals) in it.
    pub paused: bool,
}

/// What a site showed without a 429, and what the proxy did about it.
#[derive(Debug, Default, serde::Serialize)]
pub struct DistressStats {
    /// Connect or first-byte timeouts and resets.
    pub timeouts: u64,
    /// 502/503/504 without Retry-After and runs of 500s.
    pub server_errors: u64,
    /// Cuts for answers slower than the host's baseline.
    pub slow: u64,
    /// Requests answered 503 at once while the host was paused for it.
    pub answered_at_once: u64,
}

impl DistressStats {
    /// Events the site showed.
    pub fn shown(&self) -> u64 {
        self.timeouts + self.server_errors + self.slow
    }

    fn record(&mut self, outcome: &str, event: &str) {
        if outcome == "distressed" {
            self.answered_at_once += 1;
            return;
        }
        match event {
            "slow" => self.slow += 1,
            "connect_timeout" | "first_byte_timeout" | "reset" => self.timeouts += 1,
            _ => self.server_errors += 1,
        }
    }
}

#[derive(Debug, Default)]
pub struct HostStats {
    /// Client requests (a request sent again after a throttle is one).
    pub requests: u64,
    /// Requests the origin received, robots.txt fetches and every
    /// attempt included.
    pub sent: u64,
    pub status_429: u64,
    pub paused_refusals: u64,
    pub breaker_refusals: u64,
    pub breaker_openings: Cited,
    pub fetched: u64,
    pub revalidated: Cited,
    pub unchanged: u64,
    pub saved_bytes: u64,
    pub bytes: u64,
    pub resets: u64,
    pub errors: u64,
    pub distress: DistressStats,
    pub collapsed: u64,
    pub first: f64,
    pub last: f64,
    pub robots: RobotsSignal,
    pub feedback: Feedback,
    /// With `--by group`: the hosts of the group (the first
    /// [`MEMBERS`]), and whether there were more.
    pub members: Vec<String>,
    pub more_members: bool,
    /// Product tokens and Web Bot Auth key ids the requests went out as.
    pub agents: Vec<String>,
    pub keyids: Vec<String>,
    last_was_breaker: bool,
    pub bucket_start: f64,
    pub bucket_width: f64,
    pub buckets: Vec<Bucket>,
    paused_until: f64,
}

fn remember(names: &mut Vec<String>, name: Option<&str>) {
    if let Some(n) = name.filter(|n| !n.is_empty()) {
        if names.len() < NAMES && !names.iter().any(|m| m == n) {
            names.push(n.to_string());
        }
    }
}

impl HostStats {
    /// A line of `host` counted in this group's row.
    pub fn member(&mut self, host: &str) {
        if self.members.iter().any(|m| m == host) {
            return;
        }
        if self.members.len() < MEMBERS {
            self.members.push(host.to_string());
        } else {
            self.more_members = true;
        }
    }

    pub fn new(t: f64) -> HostStats {
        HostStats {
            first: t,
            last: t,
            bucket_start: t.floor(),
            bucket_width: 1.0,
            ..HostStats::default()
        }
    }

    /// Share of pages answered by a 304 to the proxy's validators.
    pub fn revalidation_share(&self) -> Option<f64> {
        let n = self.fetched + self.revalidated.count;
        (n > 0).then(|| self.revalidated.count as f64 / n as f64)
    }

    /// The chart's end.
    pub fn bucket_end(&self) -> f64 {
        self.bucket_start + self.buckets.len() as f64 * self.bucket_width
    }

    fn bucket(&mut self, t: f64) -> &mut Bucket {
        let t = t.max(self.bucket_start);
        while t >= self.bucket_start + self.bucket_width * BUCKETS as f64 {
            // Halve the resolution: pairs of buckets become one.
            let merged: Vec<Bucket> = self
                .buckets
                .chunks(2)
                .map(|c| {
                    let mut b = c[0];
                    if let Some(n) = c.get(1) {
                        b.sends += n.sends;
                        b.rate = n.rate.or(b.rate);
                        b.paused |= n.paused;
                    }
                    b
                })
                .collect();
            self.buckets = merged;
            self.bucket_width *= 2.0;
        }
        let i = ((t - self.bucket_start) / self.bucket_width) as usize;
        let i = i.min(BUCKETS - 1);
        while self.buckets.len() <= i {
            let start = self.bucket_start + self.buckets.len() as f64 * self.bucket_width;
            let paused = start < self.paused_until;
            self.buckets.push(Bucket {
                paused,
                ..Bucket::default()
            });
        }
        &mut self.buckets[i]
    }

    /// Counts one decision of this host: `t` its arrival, `sent` when its
    /// request reached the origin (if it did).
    pub fn record(&mut self, t: f64, sent: Option<f64>, outcome: &str, l: &Line<'_>, at: LineRef) {
        let end = sent.map_or(t, |s| s.max(t));
        self.first = self.first.min(sent.unwrap_or(t)).min(t);
        self.last = self.last.max(end);
        if let Some(r) = l.rate {
            self.bucket(end).rate = Some(r as f32);
        }
        remember(&mut self.agents, l.agent.as_deref());
        remember(&mut self.keyids, l.keyid.as_deref());
        let breaker = outcome == "breaker_open";
        let robots_fetch = outcome == "robots_fetched";
        // A robots.txt (or tdmrep.json) fetch is the proxy's own and a
        // reset the operator's: neither is a request a client made; an
        // attempt that was sent again is the same request as its retry.
        let own = robots_fetch || matches!(outcome, "tdmrep_fetched" | "operator_reset");
        if !own && l.retried_by.is_none() {
            self.requests += 1;
            if breaker && sent.is_some() {
                self.breaker_openings.add(&at);
            } else if breaker && !self.last_was_breaker {
                // A log written before the opening throttle said so.
                self.breaker_openings.add(&at);
            }
            self.last_was_breaker = breaker;
        }
        if let Some(s) = sent {
            self.sent_at(s, l, at.clone());
        }
        if robots_fetch {
            let usable = !fetch_failed(l.status, l.reason.as_deref());
            self.robots.fetched(sent.unwrap_or(t), &l.url, usable, &at);
        } else if l.rule.is_some() {
            self.robots.checked(t, &l.url, &at);
        }
        if let Some(p) = &l.prefs {
            self.robots.page(&p.directives, !p.ignored.is_empty(), &at);
        }
        if sent.is_some() && matches!(l.would.as_deref(), Some("disallowed" | "signal_refused")) {
            self.robots.disallowed_fetched.add(&at);
        }
        match outcome {
            "fetched" if sent.is_some() => self.fetched += 1,
            "revalidated" => self.revalidated.add(&at),
            "unchanged" => self.unchanged += 1,
            "disallowed" | "signal_refused" => {
                let rule = l.rule.as_deref().or(l.reason.as_deref());
                self.robots.refused(outcome, rule, &at);
            }
            "robots_unavailable" => self.robots.unavailable.add(&at),
            "paused" => {
                self.paused_refusals += 1;
                self.bucket(t).paused = true;
            }
            "breaker_open" if sent.is_none() => {
                self.breaker_refusals += 1;
                self.bucket(t).paused = true;
            }
            "operator_reset" => {
                self.resets += 1;
                self.paused_until = t;
            }
            "error" => self.errors += 1,
            "collapsed" => self.collapsed += 1,
            _ => {}
        }
        if let Some(event) = l.distress.as_deref() {
            self.distress.record(outcome, event);
            if outcome == "distressed" {
                self.bucket(t).paused = true;
            }
        }
        self.saved_bytes += l.saved_bytes.unwrap_or(0);
        self.bytes += l.bytes.unwrap_or(0);
    }

    fn sent_at(&mut self, s: f64, l: &Line<'_>, at: LineRef) {
        self.sent += 1;
        self.bucket(s).sends += 1;
        let throttle = l.status == Some(429)
            || (l.status == Some(503) && l.pause_s.is_some())
            || l.outcome.as_deref() == Some("throttled");
        if throttle {
            self.status_429 += u64::from(l.status == Some(429));
            if let Some(p) = l.pause_s {
                self.paused_until = self.paused_until.max(s + p);
            }
            self.bucket(s).paused = true;
        }
        self.feedback.send(Send {
            t: s,
            status: l.status,
            throttle,
            pause_s: l.pause_s,
            line: at,
        });
    }

    pub fn finish(&mut self) {
        self.feedback.finish(self.last);
    }
}
