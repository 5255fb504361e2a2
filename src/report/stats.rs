//! The figures of a conduct report, gathered in one pass with bounded
//! state per host (the sends of the last minutes, a fixed number of chart
//! buckets, the first few hundred 429s, a few cited lines per figure).

use std::collections::HashMap;
use std::io::{self, Write};

use mannerly_policy::{chain_line, GENESIS};

use super::time::{format_ts, parse_ts};

mod feedback;
mod host;
mod line;
mod robots;

pub use feedback::{Episode, Window, EPISODES, WINDOW_S};
pub use host::HostStats;
pub use line::{Line, LineRef};
pub use robots::{Cited, MAX_AGE_S};

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

/// What a row of the report is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum By {
    /// The host name.
    Host,
    /// The budget's group (lines written before groups: their host).
    Group,
}

pub struct Report {
    since: Option<f64>,
    by: By,
    /// `--host`: the one site reported on.
    pub only: Option<String>,
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
    pub fn new(since: Option<f64>, only: Option<String>, by: By) -> Report {
        Report {
            since,
            by,
            only: only.map(|h| h.to_ascii_lowercase()),
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
        let Some(outcome) = l.outcome.as_deref() else {
            return;
        };
        if outcome == "checkpoint" || l.host.is_empty() {
            return;
        }
        let key = match (self.by, &l.group) {
            (By::Group, Some(g)) if !g.is_empty() => g.as_ref(),
            _ => l.host.as_ref(),
        };
        if self
            .only
            .as_deref()
            .is_some_and(|h| !key.eq_ignore_ascii_case(h))
        {
            return;
        }
        let sent = l.sent_at(t, outcome);
        if self.since.is_some_and(|s| sent.unwrap_or(t).max(t) < s) {
            return;
        }
        self.counted += 1;
        let end = sent.map_or(t, |s| s.max(t));
        let start = sent.map_or(t, |s| s.min(t));
        self.first = Some(self.first.map_or(start, |f: f64| f.min(start)));
        self.last = Some(self.last.map_or(end, |f: f64| f.max(end)));
        let at = LineRef {
            file: u16::try_from(self.files.len().saturating_sub(1)).unwrap_or(u16::MAX),
            line: self.file_lines,
            id: l.id.as_deref().unwrap_or("").to_string(),
        };
        // Looked up before inserting: `entry` would allocate the host's name
        // for every line.
        let host = match self.hosts.get_mut(key) {
            Some(h) => h,
            None => self
                .hosts
                .entry(key.to_string())
                .or_insert_with(|| HostStats::new(start)),
        };
        host.record(t, sent, outcome, &l, at);
        if self.by == By::Group {
            host.member(&l.host);
        }
        let (charged, saved) = (l.charged.as_deref(), l.saved_charge.as_deref());
        self.payments.record(&l.host, outcome, charged, saved);
    }

    pub fn finish(&mut self) {
        for h in self.hosts.values_mut() {
            h.finish();
        }
    }

    /// Every line a figure cites, by file index and line number.
    pub fn cited(&self) -> std::collections::HashSet<(u16, u64)> {
        let mut set = std::collections::HashSet::new();
        let mut add = |refs: &[LineRef]| {
            for r in refs {
                set.insert((r.file, r.line));
            }
        };
        for h in self.hosts.values() {
            let r = &h.robots;
            for c in [
                &r.stale,
                &r.age_unknown,
                &r.disallowed_fetched,
                &r.unavailable,
                &r.fetches,
                &h.breaker_openings,
                &h.revalidated,
            ] {
                add(&c.lines);
            }
            for b in &r.by_rule {
                add(&b.refused.lines);
            }
            for e in &h.feedback.episodes {
                add(std::slice::from_ref(&e.line));
                add(&e.before.lines);
                add(&e.after.lines);
                add(e.next_request.as_slice());
                add(e.next_429.as_slice());
            }
        }
        set
    }

    /// Hosts, busiest first.
    pub fn sorted(&self) -> Vec<(&String, &HostStats)> {
        let mut v: Vec<_> = self.hosts.iter().collect();
        v.sort_by(|a, b| b.1.requests.cmp(&a.1.requests).then_with(|| a.0.cmp(b.0)));
        v
    }

    /// The figures of all hosts together (counts only: the 429s of
    /// different hosts are not one timeline).
    pub fn overall(&self) -> Overall {
        let mut o = Overall::default();
        for h in self.hosts.values() {
            o.requests += h.requests;
            o.sent += h.sent;
            o.robots_refused += h.robots.refusals() + h.robots.unavailable.count;
            o.throttles += h.feedback.throttles;
            o.stayed_below += h.feedback.stayed_below;
            o.not_below += h.feedback.not_below;
            o.repeated += h.feedback.repeated;
            o.breaker_openings += h.breaker_openings.count;
            o.fetched += h.fetched;
            o.revalidated += h.revalidated.count;
            o.saved_bytes += h.saved_bytes;
            o.next_gap_sum += h.feedback.next_gap_sum;
            o.next_gap_n += h.feedback.next_gap_n;
            o.next_gap_min = match (o.next_gap_min, h.feedback.next_gap_min) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
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
        if let Some(h) = &self.only {
            writeln!(out, "site: {h}")?;
            if let Some(stats) = self.hosts.get(h) {
                writeln!(out, "crawler: {}", crawler_text(stats))?;
            }
        }
        if self.by == By::Group {
            for (name, h) in self.sorted() {
                let more = if h.more_members { ", …" } else { "" };
                writeln!(out, "group {name}: {}{more}", h.members.join(", "))?;
            }
        }
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
            match self.by {
                By::Host => "HOST",
                By::Group => "GROUP",
            },
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
        for (name, h) in self.sorted() {
            Overall::of(h).row(out, name)?;
        }
        if self.only.is_none() {
            o.row(out, "ALL HOSTS")?;
        }
        writeln!(out)?;
        writeln!(
            out,
            "SENT: requests that reached the origin. ROBOTS: refused by robots.txt before sending.\n\
             SLOWED: 429s after which the pace of the next minute stayed below the pace of the minute before.\n\
             REPEAT: 429s drawn again at about (within 25%) the pace that drew the previous one.\n\
             NEXT429 / MIN429: mean / shortest time from a 429 to the next one (send times).\n\
             Definitions: docs/audit.md, \"The conduct report\"."
        )?;
        self.write_distress(out)?;
        self.payments.write_text(out)?;
        Ok(())
    }

    /// What sites showed without a 429, for the hosts that showed any.
    fn write_distress(&self, out: &mut dyn Write) -> io::Result<()> {
        let shown: Vec<_> = self
            .sorted()
            .into_iter()
            .filter(|(_, h)| h.distress.shown() > 0 || h.collapsed > 0)
            .collect();
        if shown.is_empty() {
            return Ok(());
        }
        writeln!(out)?;
        writeln!(
            out,
            "{:<32} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "DISTRESS", "TIMEOUTS", "5xx", "SLOW", "AT ONCE", "COLLAPSED"
        )?;
        for (name, h) in shown {
            let d = &h.distress;
            writeln!(
                out,
                "{:<32} {:>9} {:>9} {:>9} {:>9} {:>9}",
                name, d.timeouts, d.server_errors, d.slow, d.answered_at_once, h.collapsed
            )?;
        }
        writeln!(
            out,
            "TIMEOUTS: connect or first-byte timeouts and resets. 5xx: 502/503/504 without Retry-After and runs of 500s.\n\
             SLOW: cuts for answers slower than the host's baseline. AT ONCE: requests answered 503 while the host was paused for distress.\n\
             COLLAPSED: requests answered with an identical request's answer (the origin asked once)."
        )
    }
}

/// The crawler a site saw: product tokens and Web Bot Auth key ids.
pub fn crawler_text(h: &HostStats) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(", ")
        }
    };
    format!(
        "agent {}; Web Bot Auth key id {}",
        list(&h.agents),
        list(&h.keyids)
    )
}

/// The counts of one row of the table.
#[derive(Debug, Default)]
pub struct Overall {
    pub requests: u64,
    pub sent: u64,
    pub robots_refused: u64,
    pub throttles: u64,
    pub stayed_below: u64,
    pub not_below: u64,
    pub repeated: u64,
    pub breaker_openings: u64,
    pub fetched: u64,
    pub revalidated: u64,
    pub saved_bytes: u64,
    pub next_gap_sum: f64,
    pub next_gap_n: u64,
    pub next_gap_min: Option<f64>,
}

impl Overall {
    pub fn of(h: &HostStats) -> Overall {
        Overall {
            requests: h.requests,
            sent: h.sent,
            robots_refused: h.robots.refusals() + h.robots.unavailable.count,
            throttles: h.feedback.throttles,
            stayed_below: h.feedback.stayed_below,
            not_below: h.feedback.not_below,
            repeated: h.feedback.repeated,
            breaker_openings: h.breaker_openings.count,
            fetched: h.fetched,
            revalidated: h.revalidated.count,
            saved_bytes: h.saved_bytes,
            next_gap_sum: h.feedback.next_gap_sum,
            next_gap_n: h.feedback.next_gap_n,
            next_gap_min: h.feedback.next_gap_min,
        }
    }

    pub fn mean_next_gap(&self) -> Option<f64> {
        (self.next_gap_n > 0).then(|| self.next_gap_sum / self.next_gap_n as f64)
    }

    pub fn revalidation_share(&self) -> Option<f64> {
        let n = self.fetched + self.revalidated;
        (n > 0).then(|| self.revalidated as f64 / n as f64)
    }

    fn row(&self, out: &mut dyn Write, name: &str) -> io::Result<()> {
        writeln!(
            out,
            "{:<32} {:>9} {:>9} {:>8} {:>6} {:>7} {:>7} {:>7} {:>9} {:>8} {:>7} {:>10}",
            name,
            self.requests,
            self.sent,
            self.robots_refused,
            self.throttles,
            format!(
                "{}/{}",
                self.stayed_below,
                self.stayed_below + self.not_below
            ),
            self.repeated,
            self.breaker_openings,
            self.mean_next_gap()
                .map_or("-".into(), |g| format!("{g:.1}s")),
            self.next_gap_min.map_or("-".into(), |g| format!("{g:.1}s")),
            self.revalidation_share()
                .map_or("-".into(), |s| format!("{:.1}", s * 100.0)),
            self.saved_bytes,
        )
    }
}
