//! The host's next turn as a client may be told it: when the next rate
//! slot comes and how many are free now (the RateLimit fields, `/hosts`).

use std::time::{Duration, Instant};

use super::{get, put, HostBudget, LENT, LOAN_SENT, ON_LOAN};
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

    /// After an answer that raised the rate: the slot reserved behind the
    /// send it answered was spaced at the rate before (a request reserves
    /// when the one ahead of it goes, before that one's answer), so it
    /// comes forward to an interval of the new rate after that send, or
    /// each step of a climb would lag a request behind. Burst 1 only (with
    /// a burst `tat` runs ahead of the slots by design), and not around the
    /// loan. Only for a store whose waiter reads its wait again
    /// ([`HostBudget::reserved_wait`]): one that sleeps to the slot it was
    /// given would send there all the same, and the next slot, spaced
    /// from the earlier one, would come too close to it.
    pub fn bring_forward(&mut self, p: &HostParams, now: Instant) {
        let n = self.tick(now);
        if self.flags & (LENT | ON_LOAN | LOAN_SENT) != 0 || self.tau_ms(p, n) != 0 {
            return;
        }
        let (Some(slot), Some(sent)) = (get(self.slot), get(self.sent)) else {
            return;
        };
        if slot <= n || slot <= sent {
            return;
        }
        let interval = self.interval_ms(p, n);
        let forward = n.max(sent + interval).max(get(self.pause).unwrap_or(0));
        if forward < slot {
            self.slot = put(forward);
            self.tat = put(forward + interval);
        }
    }

    /// How long until the slot reserved and not yet sent on comes; `None`
    /// when none is (the waiter's own reservation is the only one: a line
    /// reserves one at a time).
    pub fn reserved_wait(&self, now: Instant) -> Option<Duration> {
        let slot = get(self.slot)?;
        if get(self.sent).is_some_and(|sent| slot <= sent) {
            return None;
        }
        Some(self.at(slot).saturating_duration_since(now))
    }
}
