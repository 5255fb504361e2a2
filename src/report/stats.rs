//! The figures of a conduct report, gathered in one pass with fixed-size
//! state per host (a ring of recent sends, a fixed number of chart buckets,
//! the first few 429 episodes).

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, Write};

use mannerly_policy::{chain_line, GENESIS};
use serde::Deserialize;

use super::time::{format_ts, parse_ts};

/// Sends remembered per host to measure the pace around a 429.
const RING: usize = 16;
/// Sends before a 429 that count towards the pace that drew it.
const PACE_WINDOW_S: f64 = 60.0;
/// Two 429s drawn at paces this close (ratio) are the same pattern.
const REPEAT_RATIO: f64 = 1.25;
/// Chart buckets per host; their width doubles as the log grows.
pub const BUCKETS: usize = 120;
/// 429 episodes listed in detail per host.
pub const EPISODES: usize = 20;

/// The fields of an audit line the report reads.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    ts: Cow<'a, str>,
    #[serde(borrow, default)]
    host: Cow<'a, str>,
    #[serde(borrow, default)]
    outcome: Option<Cow<'a, str>>,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    rate: Option<f64>,
    #[serde(default)]
    pause_s: Option<f64>,
    #[serde(default)]
    saved_bytes: Option<u64>,
    #[serde(default)]
    bytes: Option<u64>,
    #[serde(borrow, default)]
    charged: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    saved_charge: Option<Cow<'a, str>>,
}

/// One chart bucket.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bucket {
    /// Requests sent to the origin.
    pub sends: u32,
    /// 429s (and throttling 503s) received.
    pub throttles: u32,
    /// The budget's rate last written in the bucket, requests/s.
    pub rate: Option<f32>,
    /// The host was paused (throttle, paused or breaker refusals) in it.
    pub paused: bool,
}

/// What happened after one 429.
#[derive(Clone, Debug)]
pub struct Episode {
    pub at: f64,
    pub status: u16,
    /// Pace of real sends before it, requests/s (`None`: too few sends).
    pub pace_before: Option<f64>,
    /// Pace of real sends after it, until the next 429.
    pub pace_after: Option<f64>,
    /// Pause the proxy put the host under, seconds.
    pub pause_s: Option<f64>,
    /// Seconds until the next 429 (`None`: there was none).
    pub next_after: Option<f64>,
    /// Drawn at about the pace that drew the previous 429.
    pub repeated: bool,
}

impl Episode {
    /// `Some(true)` slowed down, `Some(false)` did not, `None` unknown.
    pub fn slowed(&self) -> Option<bool> {
        Some(self.pace_after? < self.pace_before? * 0.95)
    }
}

#[derive(Debug, Default)]
pub struct HostStats {
    pub requests: u64,
    pub sent: u64,
    pub robots_refused: u64,
    pub robots_fetches: u64,
    pub robots_failures: u64,
    pub throttles: u64,
    pub status_429: u64,
    pub slowed: u64,
    pub not_slowed: u64,
    pub repeated: u64,
    pub next_gap_sum: f64,
    pub next_gap_n: u64,
    pub next_gap_min: Option<f64>,
    pub paused_refusals: u64,
    pub breaker_refusals: u64,
    pub breaker_openings: u64,
    pub fetched: u64,
    pub revalidated: u64,
    pub unchanged: u64,
    pub saved_bytes: u64,
    pub bytes: u64,
    pub resets: u64,
    pub errors: u64,
    pub first: f64,
    pub last: f64,
    /// Recent send times, oldest overwritten.
    ring: [f64; RING],
    ring_len: usize,
    ring_at: usize,
    /// The 429 waiting for its pace-after and next-429 figures.
    open: Option<Episode>,
    after_first: Option<f64>,
    after_last: f64,
    after_n: u32,
    last_was_breaker: bool,
    /// End of the last throttle's pause: where the next run of sends starts.
    run_start: f64,
    pub episodes: Vec<Episode>,
    pub bucket_start: f64,
    pub bucket_width: f64,
    pub buckets: Vec<Bucket>,
    paused_until: f64,
}

impl HostStats {
    fn new(t: f64) -> HostStats {
        HostStats {
            first: t,
            last: t,
            bucket_start: t.floor(),
            bucket_width: 1.0,
            ..HostStats::default()
        }
    }

    /// Mean seconds from one 429 to the next.
    pub fn mean_next_gap(&self) -> Option<f64> {
        (self.next_gap_n > 0).then(|| self.next_gap_sum / self.next_gap_n as f64)
    }

    /// Share of pages answered by a 304 to the proxy's validators.
    pub fn revalidation_share(&self) -> Option<f64> {
        let n = self.fetched + self.revalidated;
        (n > 0).then(|| self.revalidated as f64 / n as f64)
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
                        b.throttles += n.throttles;
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

    /// Pace of the remembered sends of the run that led to a 429 at `t`:
    /// since the previous pause ended, and inside the window.
    fn pace_before(&self, t: f64) -> Option<f64> {
        let from = (t - PACE_WINDOW_S).max(self.run_start);
        let mut first = f64::INFINITY;
        let mut last = f64::NEG_INFINITY;
        let mut n = 0u32;
        for &s in &self.ring[..self.ring_len] {
            if s >= from && s <= t {
                first = first.min(s);
                last = last.max(s);
                n += 1;
            }
        }
        (n >= 2 && last > first).then(|| f64::from(n - 1) / (last - first))
    }

    fn note_send(&mut self, t: f64) {
        self.ring[self.ring_at] = t;
        self.ring_at = (self.ring_at + 1) % RING;
        self.ring_len = (self.ring_len + 1).min(RING);
        if self.open.is_some() && self.after_n < RING as u32 {
            if self.after_first.is_none() {
                self.after_first = Some(t);
            }
            self.after_last = t;
            self.after_n += 1;
        }
    }

    /// Closes the open 429 episode, `next` being the time of the next 429.
    fn close_episode(&mut self, next: Option<f64>) {
        let Some(mut e) = self.open.take() else {
            return;
        };
        e.pace_after = match self.after_first {
            Some(f) if self.after_n >= 2 && self.after_last > f => {
                Some(f64::from(self.after_n - 1) / (self.after_last - f))
            }
            _ => None,
        };
        e.next_after = next.map(|n| n - e.at);
        match e.slowed() {
            Some(true) => self.slowed += 1,
            Some(false) => self.not_slowed += 1,
            None => {}
        }
        if let Some(g) = e.next_after {
            self.next_gap_sum += g;
            self.next_gap_n += 1;
            self.next_gap_min = Some(self.next_gap_min.map_or(g, |m: f64| m.min(g)));
        }
        if self.episodes.len() < EPISODES {
            self.episodes.push(e);
        } else if let Some(last) = self.episodes.last_mut() {
            // Keep the first episodes and always the latest one.
            *last = e;
        }
        self.after_first = None;
        self.after_n = 0;
    }

    fn throttle(&mut self, t: f64, status: u16, pause_s: Option<f64>) {
        let pace = self.pace_before(t);
        let previous = self.open.as_ref().and_then(|e| e.pace_before);
        self.close_episode(Some(t));
        let repeated = match (previous, pace) {
            (Some(a), Some(b)) => b <= a * REPEAT_RATIO && b >= a / REPEAT_RATIO,
            _ => false,
        };
        self.repeated += u64::from(repeated);
        self.throttles += 1;
        self.status_429 += u64::from(status == 429);
        if let Some(p) = pause_s {
            self.paused_until = self.paused_until.max(t + p);
        }
        self.run_start = t + pause_s.unwrap_or(0.0);
        self.open = Some(Episode {
            at: t,
            status,
            pace_before: pace,
            pace_after: None,
            pause_s,
            next_after: None,
            repeated,
        });
    }

    /// Counts one decision of this host, at `t`.
    fn record(&mut self, t: f64, outcome: &str, l: &Line<'_>) {
        self.last = self.last.max(t);
        if let Some(r) = l.rate {
            self.bucket(t).rate = Some(r as f32);
        }
        let breaker = outcome == "breaker_open";
        // A robots.txt fetch is the proxy's own and a reset the operator's:
        // neither is a request a client made.
        if !matches!(outcome, "robots_fetched" | "operator_reset") {
            self.requests += 1;
            if breaker && !self.last_was_breaker {
                self.breaker_openings += 1;
            }
            self.last_was_breaker = breaker;
        }
        match outcome {
            "fetched" | "revalidated" | "unchanged" | "throttled" => {
                self.sent += 1;
                self.note_send(t);
                self.bucket(t).sends += 1;
                match outcome {
                    "fetched" => self.fetched += 1,
                    "revalidated" => self.revalidated += 1,
                    "unchanged" => self.unchanged += 1,
                    _ => {
                        self.throttle(t, l.status.unwrap_or(429), l.pause_s);
                        let b = self.bucket(t);
                        b.throttles += 1;
                        b.paused = true;
                    }
                }
            }
            "disallowed" | "signal_refused" | "robots_unavailable" => self.robots_refused += 1,
            "paused" => {
                self.paused_refusals += 1;
                self.bucket(t).paused = true;
            }
            "breaker_open" => {
                self.breaker_refusals += 1;
                self.bucket(t).paused = true;
            }
            "robots_fetched" => {
                self.robots_fetches += 1;
                let failed = match l.status {
                    None => true,
                    Some(s) => s == 429 || s >= 500 || (300..400).contains(&s),
                };
                self.robots_failures += u64::from(failed);
            }
            "operator_reset" => {
                self.resets += 1;
                self.paused_until = t;
            }
            "error" => self.errors += 1,
            _ => {}
        }
        self.saved_bytes += l.saved_bytes.unwrap_or(0);
        self.bytes += l.bytes.unwrap_or(0);
    }

    fn finish(&mut self) {
        self.close_episode(None);
    }
}

/// Chain check of one file.
#[derive(Debug, Clone)]
pub enum ChainResult {
    Intact {
        lines: u64,
    },
    Broken {
        lines: u64,
        line: u64,
        why: &'static str,
    },
}

pub struct Report {
    since: Option<f64>,
    pub hosts: HashMap<String, HostStats>,
    pub lines: u64,
    pub counted: u64,
    pub unreadable: u64,
    pub files: Vec<(String, ChainResult)>,
    prev: String,
    file_lines: u64,
    broken: Option<(u64, &'static str)>,
    pub first: Option<f64>,
    pub last: Option<f64>,
    pub payments: super::payments::Payments,
}

impl Report {
    pub fn new(since: Option<f64>) -> Report {
        Report {
            since,
            hosts: HashMap::new(),
            lines: 0,
            counted: 0,
            unreadable: 0,
            files: Vec::new(),
            prev: GENESIS.to_string(),
            file_lines: 0,
            broken: None,
            first: None,
            last: None,
            payments: Default::default(),
        }
    }

    pub fn start_file(&mut self, name: String) {
        self.files.push((name, ChainResult::Intact { lines: 0 }));
        self.file_lines = 0;
        self.broken = None;
    }

    pub fn end_file(&mut self) {
        let lines = self.file_lines;
        if let Some(last) = self.files.last_mut() {
            last.1 = match self.broken {
                None => ChainResult::Intact { lines },
                Some((line, why)) => ChainResult::Broken { lines, line, why },
            };
        }
    }

    pub fn chain_ok(&self) -> bool {
        self.files
            .iter()
            .all(|(_, r)| matches!(r, ChainResult::Intact { .. }))
    }

    fn check_chain(&mut self, line: &str) {
        self.file_lines += 1;
        if self.broken.is_some() {
            return;
        }
        let Some((content, chain)) = mannerly_policy::split_line(line) else {
            self.broken = Some((self.file_lines, "no chain field"));
            return;
        };
        let (_, expect) = chain_line(&self.prev, &content);
        if expect != chain {
            // A file that starts a new log (not continuing the previous
            // file) begins at the genesis value.
            let (_, fresh) = chain_line(GENESIS, &content);
            if self.file_lines == 1 && fresh == chain {
                self.prev = fresh;
                return;
            }
            self.broken = Some((
                self.file_lines,
                "chain does not match (line edited, or a line before it removed)",
            ));
            return;
        }
        self.prev = expect;
    }

    pub fn line(&mut self, raw: &str) {
        if raw.trim().is_empty() {
            return;
        }
        self.lines += 1;
        self.check_chain(raw);
        let Ok(l) = serde_json::from_str::<Line>(raw) else {
            self.unreadable += 1;
            return;
        };
        let Some(t) = parse_ts(&l.ts) else {
            self.unreadable += 1;
            return;
        };
        if self.since.is_some_and(|s| t < s) {
            return;
        }
        let Some(outcome) = l.outcome.as_deref() else {
            return;
        };
        if outcome == "checkpoint" || l.host.is_empty() {
            return;
        }
        self.counted += 1;
        self.first = Some(self.first.map_or(t, |f: f64| f.min(t)));
        self.last = Some(self.last.map_or(t, |f: f64| f.max(t)));
        // Looked up before inserting: `entry` would allocate the host's name
        // for every line.
        let host = match self.hosts.get_mut(l.host.as_ref()) {
            Some(h) => h,
            None => self
                .hosts
                .entry(l.host.to_string())
                .or_insert_with(|| HostStats::new(t)),
        };
        host.record(t, outcome, &l);
        let (charged, saved) = (l.charged.as_deref(), l.saved_charge.as_deref());
        self.payments.record(&l.host, outcome, charged, saved);
    }

    pub fn finish(&mut self) {
        for h in self.hosts.values_mut() {
            h.finish();
        }
    }

    /// Hosts, busiest first.
    pub fn sorted(&self) -> Vec<(&String, &HostStats)> {
        let mut v: Vec<_> = self.hosts.iter().collect();
        v.sort_by(|a, b| b.1.requests.cmp(&a.1.requests).then_with(|| a.0.cmp(b.0)));
        v
    }

    /// The figures of all hosts together.
    pub fn overall(&self) -> HostStats {
        let mut o = HostStats::default();
        for h in self.hosts.values() {
            o.requests += h.requests;
            o.sent += h.sent;
            o.robots_refused += h.robots_refused;
            o.robots_fetches += h.robots_fetches;
            o.robots_failures += h.robots_failures;
            o.throttles += h.throttles;
            o.status_429 += h.status_429;
            o.slowed += h.slowed;
            o.not_slowed += h.not_slowed;
            o.repeated += h.repeated;
            o.next_gap_sum += h.next_gap_sum;
            o.next_gap_n += h.next_gap_n;
            o.next_gap_min = match (o.next_gap_min, h.next_gap_min) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            o.paused_refusals += h.paused_refusals;
            o.breaker_refusals += h.breaker_refusals;
            o.breaker_openings += h.breaker_openings;
            o.fetched += h.fetched;
            o.revalidated += h.revalidated;
            o.unchanged += h.unchanged;
            o.saved_bytes += h.saved_bytes;
            o.bytes += h.bytes;
            o.resets += h.resets;
            o.errors += h.errors;
        }
        o.first = self.first.unwrap_or(0.0);
        o.last = self.last.unwrap_or(0.0);
        o
    }

    pub fn chain_text(&self) -> Vec<String> {
        self.files
            .iter()
            .map(|(name, r)| match r {
                ChainResult::Intact { lines } => format!("{name}: {lines} lines, chain intact"),
                ChainResult::Broken { lines, line, why } => {
                    format!("{name}: {lines} lines, line {line}: {why}")
                }
            })
            .collect()
    }

    pub fn write_text(&self, out: &mut impl Write) -> io::Result<()> {
        let o = self.overall();
        writeln!(out, "mannerly conduct report")?;
        if let (Some(f), Some(l)) = (self.first, self.last) {
            writeln!(out, "period: {} to {} UTC", format_ts(f), format_ts(l))?;
        }
        for c in self.chain_text() {
            writeln!(out, "chain: {c}")?;
        }
        if self.unreadable > 0 {
            writeln!(out, "unreadable lines: {}", self.unreadable)?;
        }
        writeln!(out)?;
        writeln!(
            out,
            "{:<32} {:>9} {:>9} {:>8} {:>6} {:>7} {:>7} {:>7} {:>9} {:>8} {:>7} {:>10}",
            "HOST",
            "REQUESTS",
            "SENT",
            "ROBOTS",
            "429s",
            "SLOWED",
            "REPEAT",
            "BREAKER",
            "NEXT429",
            "MIN429",
            "REVAL%",
            "SAVED"
        )?;
        let row = |out: &mut dyn Write, name: &str, h: &HostStats| -> io::Result<()> {
            writeln!(
                out,
                "{:<32} {:>9} {:>9} {:>8} {:>6} {:>7} {:>7} {:>7} {:>9} {:>8} {:>7} {:>10}",
                name,
                h.requests,
                h.sent,
                h.robots_refused,
                h.throttles,
                format!("{}/{}", h.slowed, h.slowed + h.not_slowed),
                h.repeated,
                h.breaker_openings,
                h.mean_next_gap().map_or("-".into(), |g| format!("{g:.1}s")),
                h.next_gap_min.map_or("-".into(), |g| format!("{g:.1}s")),
                h.revalidation_share()
                    .map_or("-".into(), |s| format!("{:.1}", s * 100.0)),
                h.saved_bytes,
            )
        };
        for (name, h) in self.sorted() {
            row(out, name, h)?;
        }
        row(out, "ALL HOSTS", &o)?;
        writeln!(out)?;
        writeln!(
            out,
            "SENT: requests that reached the origin. ROBOTS: refused by robots.txt before sending.\n\
             SLOWED: 429s after which real sends were slower than the pace that drew them.\n\
             REPEAT: 429s drawn again at about (within 25%) the pace that drew the previous one.\n\
             NEXT429 / MIN429: mean / shortest time from a 429 to the next one."
        )?;
        self.payments.write_text(out)?;
        Ok(())
    }
}
