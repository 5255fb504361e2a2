//! What of a host survives a restart: deadlines on the wall clock, since
//! `Instant`s do not outlive a process.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::host::{f, get, history, put, HostBudget, KEEP_MS};
use super::params::{micro, HostParams};
use super::Distress;

/// What of a host must survive a restart, with wall-clock deadlines
/// (unix milliseconds) since `Instant`s do not outlive a process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PersistedHost {
    /// Rate, requests/s.
    pub rate: f64,
    /// Ceiling as set by the last throttle, requests/s (it relaxes from there).
    pub ceiling: f64,
    /// When the last throttle came (unix ms).
    pub throttled_at_ms: Option<u64>,
    /// Earlier throttles still in the breaker history (unix ms, newest first).
    pub earlier_throttles_ms: Vec<u64>,
    /// Earlier throttles that opened the breaker (unix ms, newest first):
    /// on the record, no longer counted towards it. Absent in records
    /// written before it existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breaker_throttles_ms: Vec<u64>,
    /// End of the pause (unix ms).
    pub paused_until_ms: Option<u64>,
    /// The pause is an open breaker.
    pub breaker: bool,
    /// Concurrency limit.
    pub concurrency: u32,
    /// Throttles since the last success (the backoff exponent).
    pub strikes: u8,
    /// Crawl-delay in force, seconds.
    pub crawl_delay_secs: Option<f64>,
    /// The pause is for distress, this event's: answered at once after a
    /// restart too. Absent in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distress: Option<Distress>,
}

// === impl HostBudget (persistence) ===

impl HostBudget {
    /// The state worth keeping across a restart, or `None` when there is no
    /// live pause, open breaker or lowered ceiling.
    pub fn persist(&self, p: &HostParams, now: Instant, wall: SystemTime) -> Option<PersistedHost> {
        let n = self.ms(now);
        let paused = get(self.pause).filter(|&u| u > n);
        if paused.is_none() && self.ceiling_u(p, n) >= p.max_u() {
            return None;
        }
        let unix = |ms: u64| unix_ms(self.at(ms), now, wall);
        let throttled = get(self.throttled);
        let earlier = |counted: bool| -> Vec<u64> {
            let Some(t) = throttled else {
                return Vec::new();
            };
            self.history
                .iter()
                .filter_map(|&h| history::entry(h))
                .filter(|&(_, c)| c == counted)
                .filter_map(|(h, _)| t.checked_sub(h))
                .map(unix)
                .collect()
        };
        Some(PersistedHost {
            rate: f(self.rate.max(1)),
            ceiling: f(self.ceiling),
            throttled_at_ms: throttled.map(unix),
            earlier_throttles_ms: earlier(false),
            breaker_throttles_ms: earlier(true),
            paused_until_ms: paused.map(unix),
            breaker: self.breaker() && paused.is_some(),
            concurrency: u32::from(self.concurrency),
            strikes: self.strikes,
            crawl_delay_secs: (self.crawl_delay_ms > 0)
                .then(|| f64::from(self.crawl_delay_ms) / 1000.0),
            distress: Distress::from_code(self.event)
                .filter(|_| paused.is_some() && self.flags & super::host::DISTRESS != 0),
        })
    }

    /// Rebuilds a host from [`HostBudget::persist`] output, trusting none of
    /// it: values are clamped to the parameters, past deadlines dropped.
    pub fn restore(
        p: &HostParams,
        saved: &PersistedHost,
        now: Instant,
        wall: SystemTime,
    ) -> HostBudget {
        // The base lies in the past so that past throttles fit the clock.
        let (base, n) = match now.checked_sub(Duration::from_millis(KEEP_MS)) {
            Some(base) => (base, KEEP_MS),
            None => (now, 0),
        };
        let wall_ms = wall
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let local = |unix: u64| -> Option<u64> {
            if unix >= wall_ms {
                n.checked_add(unix - wall_ms)
            } else {
                // Where the clock cannot reach that far back, a past event
                // counts as just now: the conservative side.
                Some(n.saturating_sub(wall_ms - unix))
            }
        };
        let mut b = HostBudget::new(p, now);
        b.base = base;
        b.set_crawl_delay(p, now, saved.crawl_delay_secs);
        let floor = p.floor_u();
        b.rate = micro(saved.rate).clamp(1, p.max_u());
        b.ceiling = micro(saved.ceiling).clamp(floor, p.max_u());
        if let Some(t) = saved.throttled_at_ms.and_then(local) {
            b.throttled = put(t);
            let flagged = |v: &[u64], counted: bool| -> Vec<(u64, bool)> {
                v.iter()
                    .filter_map(|&e| local(e))
                    .filter_map(|e| t.checked_sub(e))
                    .map(|e| (e, counted))
                    .collect()
            };
            let mut earlier = flagged(&saved.earlier_throttles_ms, false);
            earlier.extend(flagged(&saved.breaker_throttles_ms, true));
            earlier.sort_unstable();
            for (slot, (e, counted)) in b.history.iter_mut().zip(earlier) {
                *slot = history::make(e, counted);
            }
        }
        if let Some(u) = saved.paused_until_ms.and_then(local).filter(|&u| u > n) {
            let u = u.min(n + KEEP_MS);
            b.pause = put(u);
            if saved.breaker {
                b.flags |= super::host::BREAKER;
            }
            if let Some(event) = saved.distress {
                b.flags |= super::host::DISTRESS;
                b.event = event.code();
            }
            b.tat = put(u + b.tau_ms(p, n));
        }
        b.concurrency = u16::try_from(saved.concurrency)
            .unwrap_or(u16::MAX)
            .clamp(1, p.concurrency_u());
        b.strikes = saved.strikes;
        b
    }
}

fn unix_ms(t: Instant, now: Instant, wall: SystemTime) -> u64 {
    let at = if t >= now {
        wall.checked_add(t - now)
    } else {
        wall.checked_sub(now - t)
    };
    at.and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
