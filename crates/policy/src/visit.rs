//! When a site may be visited: robots.txt's `Visit-time` windows (and its
//! `Request-rate`, read with them), and the operator's quiet hours per host
//! pattern (`budget.quiet_hours`). Neither is in RFC 9309; sites still write
//! the first two (Yandex and Seznam read them), and an operator may owe a
//! site its nights.
//!
//! Times are UTC minutes of the day, as `Visit-time` writes them
//! (`0600-0845`); a window whose end is before its start runs over
//! midnight. A request outside every visit window, or inside a quiet hour,
//! is held until the site opens again, or answered with when that is.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::ParamError;

const DAY_MINUTES: u32 = 24 * 60;

/// A span of the day, `start` included and `end` excluded, in minutes
/// since 00:00 UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// First minute in the window.
    pub start: u16,
    /// First minute after it (`start == end`: the whole day).
    pub end: u16,
}

impl Window {
    /// `0600-0845` (robots.txt) or `06:00-08:45`; `None` for anything else.
    pub fn parse(value: &str) -> Option<Window> {
        let (a, b) = value.trim_matches([' ', '\t']).split_once('-')?;
        Some(Window {
            start: minute(a)?,
            end: minute(b)?,
        })
    }

    /// Whether minute `m` of the day is in the window.
    pub fn contains(&self, m: u16) -> bool {
        match self.start.cmp(&self.end) {
            std::cmp::Ordering::Less => (self.start..self.end).contains(&m),
            std::cmp::Ordering::Greater => m >= self.start || m < self.end,
            std::cmp::Ordering::Equal => true,
        }
    }
}

impl fmt::Display for Window {
    /// `06:00-08:45`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hm = |m: u16| (m / 60, m % 60);
        let ((h1, m1), (h2, m2)) = (hm(self.start), hm(self.end));
        write!(f, "{h1:02}:{m1:02}-{h2:02}:{m2:02} UTC")
    }
}

/// `HHMM` or `HH:MM`, 00:00 to 24:00 (24:00 is the day's end, minute 0).
fn minute(s: &str) -> Option<u16> {
    let s = s.trim_matches([' ', '\t']);
    let digits: String = s.chars().filter(|&c| c != ':').collect();
    let colons = s.len() - digits.len();
    if digits.len() != 4 || colons > 1 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (h, m) = (
        digits[..2].parse::<u16>().ok()?,
        digits[2..].parse::<u16>().ok()?,
    );
    match (h, m) {
        (24, 0) => Some(0),
        (0..=23, 0..=59) => Some(h * 60 + m),
        _ => None,
    }
}

/// `Request-rate: 1/5` (one request per 5 s), `1/10m`, `3/1h`, `1/5s`: the
/// least time between requests, in seconds; `None` when unreadable. A time
/// window after the rate (`1/10m 0800-1000`) is not read: the rate then
/// holds all day, the stricter reading.
pub fn parse_request_rate(value: &str) -> Option<f64> {
    let rate = value.split([' ', '\t']).find(|s| !s.is_empty())?;
    let (n, per) = rate.split_once('/')?;
    let n: f64 = n.parse().ok()?;
    let (num, unit) = match per.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&per[..i], &per[i..]),
        None => (per, "s"),
    };
    let scale = match unit.to_ascii_lowercase().as_str() {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => return None,
    };
    let secs: f64 = num.parse::<f64>().ok()? * scale;
    let interval = secs / n;
    (n > 0.0 && interval.is_finite() && interval >= 0.0).then_some(interval)
}

/// `[[budget.quiet_hours]]`: hours in which the operator sends nothing to
/// some hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuietHours {
    /// Host patterns: `example.org` (that host), `*.example.org` (its
    /// subdomains), `*` (every host).
    pub hosts: Vec<String>,
    /// Start, `HH:MM` UTC.
    pub from: String,
    /// End (excluded), `HH:MM` UTC; before `from`: over midnight.
    pub to: String,
}

impl QuietHours {
    /// The window, once validated.
    pub fn window(&self) -> Option<Window> {
        Some(Window {
            start: minute(&self.from)?,
            end: minute(&self.to)?,
        })
    }

    /// Whether `host` (no port, any case) is one of its patterns.
    pub fn covers(&self, host: &str) -> bool {
        self.hosts.iter().any(|p| host_matches(p, host))
    }

    /// Where it is written in the configuration.
    pub fn source(&self, index: usize) -> String {
        format!("budget.quiet_hours[{index}]")
    }
}

fn host_matches(pattern: &str, host: &str) -> bool {
    let host = host.trim_end_matches('.');
    if pattern == "*" {
        return true;
    }
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            host.len() > suffix.len() + 1
                && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
                && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
        }
        None => pattern.eq_ignore_ascii_case(host),
    }
}

/// Checks `budget.quiet_hours`, naming the key at fault.
pub fn validate_quiet_hours(quiet: &[QuietHours]) -> Result<(), ParamError> {
    for (i, q) in quiet.iter().enumerate() {
        let key = |k: &str| format!("budget.quiet_hours[{i}].{k}");
        for (k, v) in [("from", &q.from), ("to", &q.to)] {
            if minute(v).is_none() {
                return Err(ParamError::new(key(k), format!("{v:?} is no HH:MM time")));
            }
        }
        if q.window().is_some_and(|w| w.start == w.end) {
            return Err(ParamError::new(
                key("to"),
                "equal to from: the host would never be visited",
            ));
        }
        let bad = |p: &String| {
            let name = p.strip_prefix("*.").unwrap_or(p);
            p != "*" && (name.is_empty() || name.contains(['*', '/', ':', ' ']))
        };
        if q.hosts.is_empty() {
            return Err(ParamError::new(
                key("hosts"),
                "name at least one host pattern",
            ));
        }
        if let Some(p) = q.hosts.iter().find(|p| bad(p)) {
            return Err(ParamError::new(
                key("hosts"),
                format!("{p:?} is no host pattern (example.org, *.example.org or *)"),
            ));
        }
    }
    Ok(())
}

/// A window and where it was written (`robots.txt line 4: Visit-time:
/// 0600-0845`, `budget.quiet_hours[0]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stated {
    /// The window.
    pub window: Window,
    /// Its source, for the audit line.
    pub source: String,
}

/// Whether a host may be visited now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visit {
    /// Yes.
    Open,
    /// Not before `opens_in` from now; `why` names the window that closed it.
    Closed {
        /// Time until the first minute the host may be visited.
        opens_in: Duration,
        /// `outside robots.txt line 4: Visit-time: 0600-0845 (06:00-08:45 UTC)`.
        why: String,
    },
}

/// Judges `now` against the site's visit windows, one list per identity
/// the request speaks for (each must be open; an empty list: any time), and
/// the operator's quiet hours for the host.
pub fn judge(visit: &[Vec<Stated>], quiet: &[Stated], now: SystemTime) -> Visit {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let into_minute = secs % 60;
    let m = ((secs / 60) % u64::from(DAY_MINUTES)) as u32;
    let inside =
        |set: &[Stated], m: u16| set.is_empty() || set.iter().any(|s| s.window.contains(m));
    let open = |m: u32| {
        let m = (m % DAY_MINUTES) as u16;
        visit.iter().all(|set| inside(set, m)) && !quiet.iter().any(|s| s.window.contains(m))
    };
    if open(m) {
        return Visit::Open;
    }
    let why = match quiet.iter().find(|s| s.window.contains(m as u16)) {
        Some(q) => format!("inside the quiet hours of {} ({})", q.source, q.window),
        None => {
            let shut = visit.iter().find(|set| !inside(set, m as u16));
            let list: Vec<String> = shut
                .into_iter()
                .flatten()
                .map(|s| format!("{} ({})", s.source, s.window))
                .collect();
            format!("outside {}", list.join(", "))
        }
    };
    // The first open minute of the next day at most (a day of quiet hours
    // everywhere is refused by validation; a site's windows that quiet
    // hours cover whole say so).
    match (1..=DAY_MINUTES).find(|d| open(m + d)) {
        Some(d) => Visit::Closed {
            opens_in: Duration::from_secs(u64::from(d) * 60 - into_minute),
            why,
        },
        None => Visit::Closed {
            opens_in: Duration::from_secs(u64::from(DAY_MINUTES) * 60),
            why: format!("{why}; no minute of the day is open"),
        },
    }
}

#[cfg(test)]
mod tests;
