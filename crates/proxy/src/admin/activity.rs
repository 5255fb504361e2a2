//! What the audit stream says about each host that the budget does not
//! keep: when it was last used, its last decisions, the 429s of the last
//! hour, a short rate history for the sparkline, the last robots.txt fetch.
//! Bounded: `admin.max_hosts` hosts, a few hundred bytes to a few KiB each.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use mannerly_policy::robots_cache::fetch_failed;
use mannerly_policy::{AuditRecord, Outcome};
use mannerly_state::FastMap;
use serde::Serialize;

/// Decisions kept per host for `/hosts/{host}`.
const LAST_DECISIONS: usize = 10;
/// Decisions kept across all hosts for the dashboard.
const LATEST: usize = 20;
/// Rate history: one sample per bucket, this many buckets.
const BUCKET_MS: u64 = 10_000;
const BUCKETS: usize = 30;
/// 429 times kept per host (the last hour, but never more than this).
const MAX_THROTTLES: usize = 512;
const HOUR_MS: u64 = 3_600_000;
/// URLs are cut to this length in the kept decisions.
const URL_MAX: usize = 200;

/// One decision as the dashboard shows it. Its texts (time, id, host,
/// method, URL) share one allocation: a decision is kept for every request.
#[derive(Clone, Debug)]
pub(crate) struct Decision {
    /// `ts`, `id`, `host`, `method` and `url`, one after the other.
    text: Box<str>,
    /// Where each of the first four ends in `text`.
    ends: [usize; 4],
    pub outcome: &'static str,
    pub status: Option<u16>,
    pub waited_ms: Option<u64>,
    pub reason: Option<String>,
}

impl Decision {
    /// Long URLs and reasons are cut so a kept decision stays small.
    fn of(rec: &AuditRecord, outcome: Outcome) -> Decision {
        let url = cut(&rec.url);
        let parts = [rec.ts.as_str(), &rec.id, &rec.host, &rec.method];
        let mut text =
            String::with_capacity(parts.iter().map(|p| p.len()).sum::<usize>() + url.len());
        let mut ends = [0; 4];
        for (end, part) in ends.iter_mut().zip(parts) {
            text.push_str(part);
            *end = text.len();
        }
        text.push_str(url);
        Decision {
            text: text.into_boxed_str(),
            ends,
            outcome: outcome.as_str(),
            status: rec.status,
            waited_ms: rec.waited_ms,
            reason: rec.reason.as_deref().map(|r| cut(r).to_string()),
        }
    }

    /// The `i`th of the texts (0 `ts` ... 4 `url`).
    fn text(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        let end = self.ends.get(i).copied().unwrap_or(self.text.len());
        &self.text[start..end]
    }

    pub(crate) fn ts(&self) -> &str {
        self.text(0)
    }

    #[cfg(test)]
    pub(crate) fn id(&self) -> &str {
        self.text(1)
    }
}

impl Serialize for Decision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut d = s.serialize_struct("Decision", 9)?;
        d.serialize_field("ts", self.text(0))?;
        d.serialize_field("id", self.text(1))?;
        d.serialize_field("host", self.text(2))?;
        d.serialize_field("method", self.text(3))?;
        d.serialize_field("url", self.text(4))?;
        d.serialize_field("outcome", self.outcome)?;
        d.serialize_field("status", &self.status)?;
        d.serialize_field("waited_ms", &self.waited_ms)?;
        d.serialize_field("reason", &self.reason)?;
        d.end()
    }
}

/// One sparkline point: the rate at the end of a 10-second bucket.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Sample {
    /// Start of the bucket, unix seconds.
    pub t: u64,
    /// Last rate the budget reported in the bucket, requests/s.
    pub rate: f64,
    /// Decisions in the bucket.
    pub n: u32,
    /// Throttles (origin 429/503) in the bucket.
    pub throttles: u32,
}

/// The last robots.txt fetch of a host.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RobotsSeen {
    pub status: Option<u16>,
    pub ok: bool,
    #[serde(skip)]
    pub at_ms: u64,
}

/// The last throttle of a host, to say why it is paused.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ThrottleSeen {
    pub status: Option<u16>,
    pub retry_after: Option<String>,
    pub pause_s: Option<f64>,
}

#[derive(Debug, Default)]
pub(crate) struct HostActivity {
    pub last_ms: u64,
    pub decisions: u64,
    /// Shared with the latest decisions across hosts: one copy each.
    pub last: VecDeque<Arc<Decision>>,
    pub history: VecDeque<Sample>,
    throttles: VecDeque<u64>,
    pub last_throttle: Option<ThrottleSeen>,
    pub robots: Option<RobotsSeen>,
    /// When the sweep found the budget had dropped this host (unix ms);
    /// cleared by its next decision.
    pub forgotten_ms: Option<u64>,
}

impl HostActivity {
    /// 429s (and throttling 503s) received in the hour before `now_ms`.
    pub(super) fn throttles_last_hour(&self, now_ms: u64) -> usize {
        let from = now_ms.saturating_sub(HOUR_MS);
        self.throttles.iter().filter(|&&t| t >= from).count()
    }

    /// Takes in one decision `d` of this host, made at `now_ms`.
    fn take_in(&mut self, rec: &AuditRecord, outcome: Outcome, d: Arc<Decision>, now_ms: u64) {
        self.last_ms = now_ms;
        self.forgotten_ms = None;
        self.decisions += 1;
        if self.last.len() == LAST_DECISIONS {
            self.last.pop_front();
        }
        self.last.push_back(d);
        // The throttle that opened the breaker is a 429 received too.
        let throttled = outcome == Outcome::Throttled
            || (outcome == Outcome::BreakerOpen && rec.sent.is_some());
        self.sample(now_ms, rec.rate, throttled);
        if throttled {
            self.throttled(rec, now_ms);
        }
        if outcome == Outcome::RobotsFetched {
            self.robots = Some(RobotsSeen {
                status: rec.status,
                ok: !fetch_failed(rec.status, rec.reason.as_deref()),
                at_ms: now_ms,
            });
        }
    }

    /// Counts a decision into the sparkline bucket of `now_ms`.
    fn sample(&mut self, now_ms: u64, rate: Option<f64>, throttled: bool) {
        let bucket = now_ms / BUCKET_MS * BUCKET_MS / 1000;
        match self.history.back_mut() {
            Some(s) if s.t == bucket => {
                s.n += 1;
                s.throttles += u32::from(throttled);
                if let Some(r) = rate {
                    s.rate = r;
                }
            }
            last => {
                // Only a decision the budget reacted to carries a rate; the
                // others keep the line at the last one, not at zero.
                let rate = rate.or(last.map(|s| s.rate)).unwrap_or(0.0);
                if self.history.len() == BUCKETS {
                    self.history.pop_front();
                }
                self.history.push_back(Sample {
                    t: bucket,
                    rate,
                    n: 1,
                    throttles: u32::from(throttled),
                });
            }
        }
    }

    /// Keeps the time of a throttle (the last hour's, at most
    /// [`MAX_THROTTLES`]) and what the origin said.
    fn throttled(&mut self, rec: &AuditRecord, now_ms: u64) {
        let from = now_ms.saturating_sub(HOUR_MS);
        while self.throttles.front().is_some_and(|&t| t < from) {
            self.throttles.pop_front();
        }
        if self.throttles.len() == MAX_THROTTLES {
            self.throttles.pop_front();
        }
        self.throttles.push_back(now_ms);
        self.last_throttle = Some(ThrottleSeen {
            status: rec.status,
            retry_after: rec.retry_after.clone(),
            pause_s: rec.pause_s,
        });
    }
}

pub(crate) struct Activity {
    hosts: FastMap<Box<str>, HostActivity>,
    latest: Mutex<VecDeque<Arc<Decision>>>,
    max_hosts: usize,
    evicting: AtomicUsize,
}

pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn cut(s: &str) -> &str {
    let mut end = s.len().min(URL_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Activity {
    pub(super) fn new(max_hosts: usize) -> Activity {
        Activity {
            hosts: FastMap::default(),
            latest: Mutex::new(VecDeque::with_capacity(LATEST)),
            max_hosts: max_hosts.max(1),
            evicting: AtomicUsize::new(0),
        }
    }

    /// Takes in one audit record, seen at wall time `now`.
    pub(super) fn observe(&self, rec: &AuditRecord, now: SystemTime) {
        let Some(outcome) = rec.outcome else { return };
        if rec.host.is_empty() {
            return;
        }
        let d = Arc::new(Decision::of(rec, outcome));
        self.push_latest(d.clone());
        let key = mannerly_policy::budget::host_key(&rec.host);
        let now = unix_ms(now);
        // A group of several hosts is a row of `/hosts` too.
        if let Some(group) = rec.group.as_deref().filter(|g| *g != key.as_ref()) {
            self.take_in(group, rec, outcome, d.clone(), now);
        }
        self.take_in(key.as_ref(), rec, outcome, d, now);
    }

    fn take_in(&self, key: &str, rec: &AuditRecord, outcome: Outcome, d: Arc<Decision>, now: u64) {
        // A known host (nearly every record) needs no owned key; the shard
        // lock is released before `len` below takes every shard.
        if let Some(mut known) = self.hosts.get_mut(key) {
            known.take_in(rec, outcome, d, now);
            return;
        }
        self.hosts
            .entry(Box::from(key))
            .or_default()
            .take_in(rec, outcome, d, now);
        if self.hosts.len() > self.max_hosts {
            self.evict();
        }
    }

    fn push_latest(&self, d: Arc<Decision>) {
        if let Ok(mut latest) = self.latest.lock() {
            if latest.len() == LATEST {
                latest.pop_front();
            }
            latest.push_back(d);
        }
    }

    /// Forgets the least recently active tenth once the table is full, so
    /// that the cost of finding them is paid once per many new hosts.
    fn evict(&self) {
        if self.evicting.swap(1, Ordering::AcqRel) == 1 {
            return;
        }
        let mut ages: Vec<(u64, Box<str>)> = self
            .hosts
            .iter()
            .map(|e| (e.value().last_ms, e.key().clone()))
            .collect();
        let drop_n = (ages.len() - self.max_hosts.min(ages.len())).max(self.max_hosts / 10);
        if drop_n > 0 && drop_n <= ages.len() {
            ages.select_nth_unstable_by_key(drop_n - 1, |(t, _)| *t);
            for (_, k) in ages.into_iter().take(drop_n) {
                self.hosts.remove(&k);
            }
        }
        self.evicting.store(0, Ordering::Release);
    }

    /// Runs `f` on the activity of `host` (normalised), if any.
    pub(super) fn with<R>(&self, host: &str, f: impl FnOnce(&HostActivity) -> R) -> Option<R> {
        self.hosts.get(host).map(|a| f(&a))
    }

    /// When `host` was last active (unix ms), 0 when never seen.
    pub(super) fn last_ms(&self, host: &str) -> u64 {
        self.hosts.get(host).map_or(0, |a| a.last_ms)
    }

    /// The latest decisions across hosts, newest first.
    /// Newest arrival first. Decisions are kept in the order they were
    /// made, and a request held by its budget is decided after others
    /// that arrived later; the page shows arrival times, so it sorts by
    /// them (`ts` is RFC 3339 UTC with milliseconds: text order is time
    /// order).
    pub(super) fn latest(&self) -> Vec<Decision> {
        let mut out: Vec<Decision> = self
            .latest
            .lock()
            .map(|l| l.iter().rev().map(|d| Decision::clone(d)).collect())
            .unwrap_or_default();
        out.sort_by(|a, b| b.ts().cmp(a.ts()));
        out
    }

    /// Marks the hosts the budget no longer tracks (`tracked` says which
    /// it does) as forgotten at `now`, once each, so that `hosts show`
    /// can say when a host went rather than that it never came.
    pub(crate) fn mark_forgotten(&self, now: SystemTime, tracked: impl Fn(&str) -> bool) {
        let now = unix_ms(now);
        for mut e in self.hosts.iter_mut() {
            if e.forgotten_ms.is_none() && !tracked(e.key()) {
                e.forgotten_ms = Some(now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(host: &str, ts: &str, id: &str) -> AuditRecord {
        AuditRecord {
            ts: ts.into(),
            id: id.into(),
            host: host.into(),
            method: "GET".into(),
            url: format!("http://{host}/"),
            outcome: Some(Outcome::Fetched),
            status: Some(200),
            ..AuditRecord::default()
        }
    }

    #[test]
    fn latest_decisions_are_listed_by_arrival_not_by_when_they_were_decided() {
        let a = Activity::new(10);
        let now = UNIX_EPOCH + std::time::Duration::from_secs(100);
        // The held request arrived first and was decided last.
        a.observe(&rec("b.test", "2026-12-06T00:00:02.000Z", "2"), now);
        a.observe(&rec("c.test", "2026-12-06T00:00:03.000Z", "3"), now);
        a.observe(&rec("a.test", "2026-12-06T00:00:01.000Z", "1"), now);
        let ids: Vec<String> = a.latest().iter().map(|d| d.id().to_string()).collect();
        assert_eq!(ids, ["3", "2", "1"]);
    }

    #[test]
    fn a_decision_shows_each_field_by_name_with_long_texts_cut() {
        let mut r = rec("b.test", "2026-12-06T00:00:02.000Z", "id-2");
        r.url = format!("http://b.test/x{}", "é".repeat(150));
        r.reason = Some("r".repeat(300));
        r.waited_ms = Some(7);
        let shown = serde_json::to_value(Decision::of(&r, Outcome::Fetched)).expect("json");
        let url = &r.url[..r.url.floor_char_boundary(URL_MAX)];
        assert_eq!(
            shown,
            serde_json::json!({
                "ts": "2026-12-06T00:00:02.000Z", "id": "id-2", "host": "b.test",
                "method": "GET", "url": url, "outcome": "fetched", "status": 200,
                "waited_ms": 7, "reason": "r".repeat(URL_MAX),
            })
        );
        assert!(url.len() < URL_MAX, "the cut fell inside a character");
    }

    #[test]
    fn a_host_the_budget_dropped_is_forgotten_until_it_is_seen_again() {
        let a = Activity::new(10);
        let t = |s| UNIX_EPOCH + std::time::Duration::from_secs(s);
        a.observe(&rec("idle.test", "2026-12-06T00:00:01.000Z", "1"), t(100));
        a.observe(&rec("busy.test", "2026-12-06T00:00:01.000Z", "2"), t(100));
        a.mark_forgotten(t(160), |h| h == "busy.test");
        assert_eq!(a.with("idle.test", |h| h.forgotten_ms), Some(Some(160_000)));
        assert_eq!(a.with("busy.test", |h| h.forgotten_ms), Some(None));
        // A later sweep keeps the first time it was found gone.
        a.mark_forgotten(t(220), |h| h == "busy.test");
        assert_eq!(a.with("idle.test", |h| h.forgotten_ms), Some(Some(160_000)));
        a.observe(&rec("idle.test", "2026-12-06T00:05:00.000Z", "3"), t(300));
        assert_eq!(a.with("idle.test", |h| h.forgotten_ms), Some(None));
    }
}
