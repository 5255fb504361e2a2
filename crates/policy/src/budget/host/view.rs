//! What a host's budget shows at an instant: the admin answers, the
//! RateLimit fields and the metrics read it, never the compact state.

use std::time::{Duration, Instant};

use super::{f, get, HostBudget, DISTRESS};
use crate::budget::decision::HostView;
use crate::budget::params::HostParams;
use crate::budget::Distress;

impl HostBudget {
    /// The host as seen at `now`.
    pub fn view(&self, p: &HostParams, now: Instant) -> HostView {
        let n = self.ms(now);
        let paused = get(self.pause)
            .filter(|&u| u > n)
            .map(|u| self.at(u).saturating_duration_since(now));
        HostView {
            rate: f(self.rate_u(p, n)),
            ceiling: f(self.shown_ceiling_u(p, n)),
            concurrency: u32::from(self.concurrency_limit(p)),
            in_flight: u32::from(self.in_flight),
            queued: u32::try_from(self.queued(p, n)).unwrap_or(u32::MAX),
            paused_for: paused,
            breaker_open_for: paused.filter(|_| self.breaker()),
            crawl_delay: (self.crawl_delay_ms > 0)
                .then(|| Duration::from_millis(u64::from(self.crawl_delay_ms))),
            announced_rate: (self.announced > 0).then(|| f(self.announced)),
            recent_throttles: self.recent_throttles(p, n),
            throttles_last_hour: self.throttles_within(n, 3_600_000),
            ceiling_relaxes_in: self.ceiling_relaxes_in(p, n),
            distress: paused
                .filter(|_| self.flags & DISTRESS != 0)
                .and(Distress::from_code(self.event)),
            last_distress: Distress::from_code(self.event),
            recent_distress: self.recent_distress(p, n),
            latency_baseline_ms: (self.latency_base > 0).then_some(u32::from(self.latency_base)),
            latency_ms: (self.latency_fast > 0).then_some(u32::from(self.latency_fast)),
            next_slot_in: Duration::from_millis(self.next_slot(p, n).saturating_sub(n)),
            free_slots: self.free_slots(p, n),
        }
    }
}
