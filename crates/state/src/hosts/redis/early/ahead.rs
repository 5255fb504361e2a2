//! The early admit itself: the reservation made for a host's next request,
//! and its record. Kept apart from `early.rs`, which stores and hands them
//! out through `RedisHosts`, so that `redis.rs` can name them without
//! importing a file that imports it.

use std::time::{Duration, Instant};

use mannerly_policy::budget::{HostBudget, HostParams, Reservation};

use crate::hosts::redis::Basis;

/// An admit decided ahead for the host's next request.
pub(crate) struct EarlyAdmit {
    /// When its slot comes.
    pub(crate) slot: Instant,
    /// When it was reserved.
    pub(super) made: Instant,
    pub(super) basis: Basis,
}

/// Reserves the next request's slot on `b` when it must wait (a slot that
/// is now is left to that request's own admit, which starts it in the
/// same call); the wait, or `None` with `b` untouched.
pub(crate) fn admit_next(
    b: &mut HostBudget,
    p: &HostParams,
    now: Instant,
    hold: Duration,
) -> Option<Duration> {
    let mut next = b.clone();
    match next.admit_within(p, now, hold) {
        Reservation::Wait(d) => {
            *b = next;
            Some(d)
        }
        Reservation::Go | Reservation::Refuse(_) => None,
    }
}
