//! An operator's reset of one host: what was learned from the site's 429s
//! (pause, breaker, lowered ceiling, halved rate and concurrency) is
//! dropped; what robots.txt says (Crawl-delay) is kept.

use std::time::Instant;

use super::decision::HostView;
use super::host::HostBudget;
use super::params::HostParams;

/// Marks an empty time slot (same encoding as the host's compact clock).
const NONE: u32 = u32::MAX;

/// A reset as it happened: the host before and after, for the audit line
/// and the answer to the operator.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ResetReport {
    /// The host as it was.
    pub before: HostView,
    /// The host as it is now.
    pub after: HostView,
}

// === impl HostBudget ===

impl HostBudget {
    /// Forgets the learned pause, breaker, ceiling and throttle history.
    /// The rate goes back to at least the start rate and concurrency to its
    /// configured limit; requests already holding a slot keep it, new ones
    /// are not made to wait behind the old pause.
    pub fn reset(&mut self, p: &HostParams, now: Instant) -> ResetReport {
        let before = self.view(p, now);
        self.pause = NONE;
        self.flags &= !(super::host::BREAKER | super::host::DISTRESS | super::host::LEARNED);
        self.log = Default::default();
        self.distressed = NONE;
        (self.events, self.errors, self.latency_cap) = (0, 0, 0);
        self.throttled = NONE;
        self.history.fill(NONE);
        self.ceiling = p.max_u();
        self.rate = self.rate.max(p.start_u()).min(p.max_u());
        self.concurrency = p.concurrency_u();
        self.strikes = 0;
        self.streak = 0;
        self.tat = NONE;
        ResetReport {
            before,
            after: self.view(p, now),
        }
    }
}
