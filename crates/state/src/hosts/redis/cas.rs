//! One operation's compare-and-set rounds on a host's shared copy.

use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use mannerly_policy::budget::{HostBudget, HostParams};

use super::script::{self, Answer, Ask, LeaseChange, Waiting};
use super::{decode_or_new, Lease, LeaseAction, Miss, RedisHosts, Seen, MAX_ROUNDS};

impl RedisHosts {
    /// Decides on the shared copy of `key` and stores the decision, in up
    /// to [`MAX_ROUNDS`] compare-and-set rounds.
    pub(super) async fn shared<R>(
        &self,
        key: &str,
        p: &HostParams,
        now: Instant,
        wall: SystemTime,
        action: &LeaseAction<'_>,
        decide: &mut impl FnMut(&mut HostBudget, &HostParams, bool) -> (R, bool, Waiting),
    ) -> Result<(R, Option<Lease>), Miss> {
        let releasing_shared = matches!(action, LeaseAction::Release(_));
        // The slot being given back is in flight until the decision frees it.
        let releasing = releasing_shared || matches!(action, LeaseAction::ReleaseLocal);
        let (mut bytes, mut leases, mut pending, mut lost) = self.start(key, releasing_shared);
        let had_pending = pending.is_some();
        let mut last_version = 0;
        for _ in 0..MAX_ROUNDS {
            // The first round decides on top of the reservation kept
            // unstored, and stores both if the stored copy is still current.
            let mut budget = match pending.take() {
                Some(b) => b,
                None => decode_or_new(p, &bytes, now, wall),
            };
            budget.set_in_flight(leases + u32::from(releasing));
            let (value, wants_lease, waiting) = decide(&mut budget, p, lost);
            let take = wants_lease && matches!(action, LeaseAction::Take);
            let new_bytes = budget.encode(now, wall);
            let changed = new_bytes != bytes;
            let lease = self.lease_change(action, take);
            // Only a start's decision depends on the leases: one that goes
            // (the gate had room) or one that waits for a slot (it had none).
            let starts = matches!(action, LeaseAction::Take) && (take || !changed);
            let ask = Ask {
                host: key,
                seen: &bytes,
                leases: starts.then_some(leases),
                new: changed.then_some(&new_bytes[..]),
                lease: &lease,
                instance: &self.instance,
                announce: matches!(action, LeaseAction::Announce),
                waiting,
            };
            self.stats.round_trips.fetch_add(1, Ordering::Relaxed);
            let answer = script::call(&self.script, &self.conn, &self.settings, ask).await;
            match answer.map_err(Miss::Unreachable)? {
                Answer::Stored {
                    leases,
                    version,
                    shared,
                } => {
                    budget.set_in_flight(leases);
                    let bytes = if changed { new_bytes } else { bytes };
                    self.remember(key, bytes, leases, budget, lost, version, now);
                    self.mark_shared(key, shared, now);
                    return Ok((value, taken(lease)));
                }
                Answer::Changed {
                    leases: now_leases,
                    current,
                    version,
                    shared,
                } => {
                    last_version = version;
                    self.conflicted(key, shared, now);
                    // Any reservation kept unstored is not in `current`.
                    lost |= had_pending;
                    bytes = current;
                    leases = now_leases;
                }
            }
        }
        // The newest copy Redis answered: the stand-in this operation falls
        // back to is made from it (with any pause another proxy learned),
        // and the next operation starts from it.
        let mut budget = decode_or_new(p, &bytes, now, wall);
        budget.set_in_flight(leases);
        self.remember(key, bytes, leases, budget, lost, last_version, now);
        Err(Miss::Contended)
    }

    /// Where a run of rounds on `key` starts: the copy seen last, its live
    /// leases (one fewer when `releasing_shared`: our own release), the
    /// reservation kept unstored, and whether one was lost before.
    fn start(&self, key: &str, releasing_shared: bool) -> (Vec<u8>, u32, Option<HostBudget>, bool) {
        match self.seen.get_mut(key) {
            Some(mut s) => {
                s.used = self.bound.stamp();
                let pending = s.pending.take();
                let voided = s.voided;
                // Lost unless a round stores it (which says so again).
                s.voided |= pending.is_some();
                (
                    s.bytes.clone(),
                    s.leases.saturating_sub(u32::from(releasing_shared)),
                    pending,
                    voided,
                )
            }
            None => (Vec::new(), 0, None, false),
        }
    }

    /// A round lost to another proxy's write: counted, and its time kept
    /// because a host others change is one whose changes are worth hearing
    /// (`shared_lately`).
    fn conflicted(&self, key: &str, shared: bool, now: Instant) {
        self.mark_shared(key, shared, now);
        self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
        if let Some(mut s) = self.seen.get_mut(key) {
            s.conflict_at = Some(now);
        }
    }

    /// What one round does to the host's leases: gives back the one being
    /// released, or takes a new one when the decision asks for it.
    fn lease_change(&self, action: &LeaseAction<'_>, take: bool) -> LeaseChange {
        match action {
            LeaseAction::Release(id) => LeaseChange::Release((*id).to_string()),
            _ if take => LeaseChange::Take(format!(
                "{}:{}",
                self.instance,
                self.next_lease.fetch_add(1, Ordering::Relaxed)
            )),
            _ => LeaseChange::None,
        }
    }

    /// Keeps `bytes` as the shared copy of `key` seen last, decoded as
    /// `budget`, with `leases` live, as of server time `version`;
    /// `voided` when a reservation kept unstored did not make it into it.
    /// A newer copy told meanwhile by message stays. A new
    /// host may push the least recently used ones out (`hold_seen`).
    #[allow(clippy::too_many_arguments)]
    fn remember(
        &self,
        key: &str,
        bytes: Vec<u8>,
        leases: u32,
        budget: HostBudget,
        voided: bool,
        version: u64,
        now: Instant,
    ) {
        let (conflict_at, shared_at, newer) = match self.seen.get_mut(key) {
            Some(mut s) if s.at != version && !super::heard::replaces(version, s.at) => {
                s.pending = None;
                s.voided |= voided;
                return;
            }
            Some(s) => (s.conflict_at, s.shared_at, s.at),
            None => (None, None, 0),
        };
        self.seen.insert(
            Box::from(key),
            Seen {
                bytes,
                leases,
                budget,
                pending: None,
                voided,
                conflict_at,
                shared_at,
                at: version.max(newer),
                used: self.bound.stamp(),
            },
        );
        self.hold_seen(now);
    }
}

/// The lease a stored round gave this operation, if it took one.
fn taken(lease: LeaseChange) -> Option<Lease> {
    match lease {
        LeaseChange::Take(id) => Some(Lease::Shared(id)),
        _ => None,
    }
}
