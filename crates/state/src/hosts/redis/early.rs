//! The admit of a host's next request, decided in the call that starts the
//! request before it.
//!
//! A proxy lets one request of a host through its line at a time, and the
//! next one asks for its slot the moment the one before it starts. Under
//! contention that slot waits, and its admit would be a round trip of its
//! own: instead the start reserves it on the same copy, in the same
//! compare-and-set, when another request is waiting in the line. The slot
//! is in the shared copy at once (other proxies queue behind it), and the
//! next request of the line picks it up without asking
//! ([`RedisHosts::take_early_admit`]). One nobody picks up before it comes
//! is a slot left unused: never one used twice.

use std::time::{Duration, Instant};

use mannerly_policy::budget::{host_key, Refusal, Reservation};

use super::{Basis, Decided, RedisHosts};

mod ahead;
pub(super) use ahead::{admit_next, EarlyAdmit};

impl RedisHosts {
    pub(super) fn keep_early_admit(&self, key: &str, now: Instant, wait: Duration, basis: Basis) {
        let e = EarlyAdmit {
            slot: now + wait,
            made: now,
            basis,
        };
        self.early_admits.insert(Box::from(key), e);
    }

    /// The admit decided for `host`'s next request with the start before
    /// it, if one waits to be picked up and its slot is still ahead: the
    /// reservation (refused when the slot lies past `hold_left`) and when
    /// it was reserved. `None`: admit as usual.
    pub fn take_early_admit(
        &self,
        host: &str,
        now: Instant,
        hold_left: Duration,
    ) -> Option<(Decided<Reservation>, Instant)> {
        let (_, e) = self.early_admits.remove(host_key(host).as_ref())?;
        // Too late for its slot: going now could crowd the slot after it.
        let wait = e
            .slot
            .checked_duration_since(now)
            .filter(|w| !w.is_zero())?;
        self.stats
            .ops
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let value = if wait > hold_left {
            Reservation::Refuse(Refusal::Paced { retry_after: wait })
        } else {
            Reservation::Wait(wait)
        };
        let basis = e.basis;
        Some((Decided { value, basis }, e.made))
    }
}
