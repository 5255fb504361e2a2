//! The copies of shared budgets this proxy holds: what they show, and the
//! sweep and the bound that keep them few (Redis keeps every host; a copy
//! dropped here is read again on the host's next step).

use std::time::Instant;

use mannerly_policy::budget::{host_key, HostView};

use super::RedisHosts;

impl RedisHosts {
    /// The host as this proxy saw it last (its stand-in while degraded).
    pub fn view(&self, host: &str, now: Instant) -> Option<HostView> {
        let key = host_key(host);
        let p = self.table().for_host(&key);
        if self.is_degraded() {
            if let Some(v) = self.fallback.view(&key, &p, now) {
                return Some(v);
            }
        }
        self.seen.get(key.as_ref()).map(|s| s.budget.view(&p, now))
    }

    /// Up to `limit` hosts as this proxy saw them last, sorted by name.
    pub fn views(&self, now: Instant, limit: usize) -> Vec<(String, HostView)> {
        let mut out: Vec<_> = self
            .seen
            .iter()
            .take(limit)
            .map(|e| {
                let p = self.table().for_host(e.key());
                (e.key().to_string(), e.value().budget.view(&p, now))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Forgets local copies of hosts with nothing to remember (Redis
    /// forgets on its own, by TTL). Returns how many were dropped.
    pub fn sweep(&self, now: Instant) -> usize {
        let before = self.seen.len();
        self.seen.retain(|h, s| {
            s.pending.is_some() || !s.budget.forgettable(&self.table().for_host(h), now)
        });
        // A start nobody picked up: its lease has expired in Redis by now.
        let ttl = self.settings.lease_ttl;
        self.early
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
        // An admit nobody picked up before its slot: the slot is gone.
        self.early_admits.retain(|_, e| e.slot > now);
        let dropped = before.saturating_sub(self.seen.len());
        dropped + self.fallback.sweep(now, |h| self.table().for_host(h))
    }

    /// Drops the least recently used copies once more than
    /// `budget.max_hosts` are held. Redis keeps every host's state, so a
    /// copy dropped is read again by the host's next step (the first
    /// compare-and-set round, sent with no copy, answers the current one);
    /// only a copy this proxy holds something of its own in (a lease, an
    /// admit not yet stored, a reservation lost) stays.
    pub(super) fn hold_seen(&self, now: Instant) {
        let table = self.table();
        self.bound.hold(&self.seen, table.max_hosts, |h, s| {
            if s.leases > 0 || s.pending.is_some() || s.voided {
                return None;
            }
            let tier = match s.budget.forgettable(&table.for_host(h), now) {
                true => crate::hosts::bound::Tier::Idle,
                false => crate::hosts::bound::Tier::Learned,
            };
            Some((tier, s.used))
        });
    }

    /// Hosts dropped to stay within `budget.max_hosts` since start (shared
    /// copies and stand-ins).
    pub fn evicted(&self) -> crate::hosts::Evicted {
        self.bound.evicted() + self.fallback.evicted()
    }

    /// Hosts whose shared copy this proxy has seen (local copies of a
    /// degraded spell not counted).
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// No host is held.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}
