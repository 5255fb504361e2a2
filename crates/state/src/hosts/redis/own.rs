//! The admit of a request that may not go on a new host's first-slot loan.

use std::time::{Duration, Instant, SystemTime};

use mannerly_policy::budget::Reservation;

use super::script::Waiting;
use super::{host_key, Decided, LeaseAction, RedisHosts};

impl RedisHosts {
    /// [`mannerly_policy::budget::HostBudget::admit_own_within`] on the shared budget: never kept
    /// unstored nor fused with a start, so the loan it calls in is stored.
    pub async fn admit_own(
        &self,
        host: &str,
        now: Instant,
        wall: SystemTime,
        hold_left: Duration,
    ) -> Decided<Reservation> {
        let key = host_key(host);
        let d = self
            .run(&key, now, wall, LeaseAction::None, |b, p, _| {
                let r = b.admit_own_within(p, now, hold_left);
                let waiting = Waiting::after_admit(&r);
                (r, false, waiting)
            })
            .await;
        Decided {
            value: d.value.0,
            basis: d.basis,
        }
    }
}
