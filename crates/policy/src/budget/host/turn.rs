//! The host's next turn as a client may be told it: when the next rate
//! slot comes and how many are free now (the RateLimit fields, `/hosts`).

use super::{get, HostBudget};
use crate::budget::params::HostParams;

impl HostBudget {
    /// The next rate slot a reservation would get, as `admit` places it.
    pub(super) fn next_slot(&self, p: &HostParams, n: u64) -> u64 {
        let tat = get(self.tat).unwrap_or(0);
        let pause = get(self.pause).unwrap_or(0);
        n.max(tat.saturating_sub(self.tau_ms(p, n))).max(pause)
    }

    /// Slots that could be reserved at `n` without a wait: the unused
    /// burst (GCRA: one per interval `tat` lags behind `n + tau`).
    pub(super) fn free_slots(&self, p: &HostParams, n: u64) -> u32 {
        if self.next_slot(p, n) > n {
            return 0;
        }
        let tat = get(self.tat).unwrap_or(0).max(n);
        let spare = (n + self.tau_ms(p, n) - tat) / self.interval_ms(p, n) + 1;
        u32::try_from(spare).unwrap_or(u32::MAX).min(p.burst.max(1))
    }
}
