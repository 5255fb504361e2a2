//! The in-process host store: one `HostBudget` per host in a `DashMap`,
//! held to `budget.max_hosts` hosts, least recently used first (`bound.rs`).
//!
//! A host with a request in flight, a slot reserved ahead or a live pause
//! (a 429's, the breaker's) is never dropped for room: forgetting it would
//! send the next request to a site that asked to be left alone. Hosts that
//! only learned a lowered ceiling go once no idle host is left to drop, and
//! are counted (`Evicted::learned`): a dropped ceiling is learned again from
//! the start rate, below the default maximum, by the next 429.

use std::time::{Duration, Instant, SystemTime};

use mannerly_policy::budget::{
    host_key, Announced, BudgetParams, Failure, HostBudget, HostParams, HostView, PersistedHost,
    Reaction, Reservation, ResetReport, Start,
};

use super::bound::{budget_tier, Bound, Evicted};
use super::HostStore;
use crate::FastMap;

/// Host budgets of one process. Operations on one host are serialised by the
/// map's shard lock, held only for the few arithmetic steps of one call;
/// other hosts on other shards are never slowed.
#[derive(Debug, Default)]
pub struct MemoryHosts {
    params: super::BudgetTable,
    hosts: FastMap<Box<str>, Held>,
    bound: Bound,
}

/// A host's budget and when it was last used (a [`Bound`] stamp).
#[derive(Debug)]
struct Held {
    budget: HostBudget,
    used: u64,
}

impl std::ops::Deref for Held {
    type Target = HostBudget;

    fn deref(&self) -> &HostBudget {
        &self.budget
    }
}

impl std::ops::DerefMut for Held {
    fn deref_mut(&mut self) -> &mut HostBudget {
        &mut self.budget
    }
}

// === impl MemoryHosts ===

impl MemoryHosts {
    /// An empty store with these parameters (validated here, so that a
    /// store never runs on nonsense).
    pub fn new(params: BudgetParams) -> Result<MemoryHosts, mannerly_policy::ParamError> {
        Ok(MemoryHosts {
            params: super::BudgetTable::new(params.validate()?),
            hosts: FastMap::default(),
            bound: Bound::default(),
        })
    }

    /// The `[budget]` table in force.
    pub fn budget_params(&self) -> BudgetParams {
        self.table().clone()
    }

    /// Replaces the `[budget]` table (a configuration reload): every host
    /// is decided by the new numbers from its next step on; what it learned
    /// (pause, ceiling, breaker) stays.
    pub fn set_budget_params(
        &self,
        params: BudgetParams,
    ) -> Result<(), mannerly_policy::ParamError> {
        self.params.set(params)
    }

    fn table(&self) -> std::sync::RwLockReadGuard<'_, BudgetParams> {
        self.params.get()
    }

    /// Runs `f` on the budget of `host`, creating it if new.
    fn with<R>(
        &self,
        host: &str,
        now: Instant,
        f: impl FnOnce(&mut HostBudget, &HostParams) -> R,
    ) -> R {
        let key = host_key(host);
        let p = self.table().for_host(&key);
        let used = self.bound.stamp();
        // The common case is a known host: look it up without allocating
        // the key.
        if let Some(mut b) = self.hosts.get_mut(key.as_ref()) {
            b.used = used;
            return f(&mut b, &p);
        }
        let r = {
            let mut b = self
                .hosts
                .entry(Box::from(key.as_ref()))
                .or_insert_with(|| Held {
                    budget: HostBudget::new(&p, now),
                    used,
                });
            b.used = used;
            f(&mut b, &p)
        };
        self.hold(now);
        r
    }

    /// Drops least recently used hosts once more than `max_hosts` are held
    /// (see the module docs for which may go).
    fn hold(&self, now: Instant) {
        let table = self.table();
        self.bound.hold(&self.hosts, table.max_hosts, |h, b| {
            budget_tier(b, &table.for_host(h), now).map(|t| (t, b.used))
        });
    }
}

impl HostStore for MemoryHosts {
    fn set_budget_params(&self, params: BudgetParams) -> Result<(), mannerly_policy::ParamError> {
        MemoryHosts::set_budget_params(self, params)
    }

    fn params(&self, host: &str) -> HostParams {
        self.table().for_host(host)
    }

    fn admit(&self, host: &str, now: Instant, hold_left: Duration) -> Reservation {
        self.with(host, now, |b, p| b.admit_within(p, now, hold_left))
    }

    fn admit_own(&self, host: &str, now: Instant, hold_left: Duration) -> Reservation {
        self.with(host, now, |b, p| b.admit_own_within(p, now, hold_left))
    }

    fn reserved_wait(&self, host: &str, now: Instant) -> Option<Duration> {
        self.hosts.get(host_key(host).as_ref())?.reserved_wait(now)
    }

    fn try_start(&self, host: &str, now: Instant, hold_left: Duration) -> Start {
        self.with(host, now, |b, p| b.try_start(p, now, hold_left))
    }

    fn try_start_since(
        &self,
        host: &str,
        now: Instant,
        hold_left: Duration,
        reserved: Instant,
    ) -> Start {
        self.with(host, now, |b, p| {
            b.try_start_since(p, now, hold_left, reserved)
        })
    }

    fn finish(&self, host: &str, now: Instant) -> bool {
        let key = host_key(host);
        let p = self.table().for_host(&key);
        match self.hosts.get_mut(key.as_ref()) {
            Some(mut b) => b.finish(&p, now),
            None => true,
        }
    }

    fn on_response(
        &self,
        host: &str,
        now: Instant,
        wall: SystemTime,
        status: u16,
        retry_after: Option<&str>,
        announced: Option<&Announced>,
        ttfb_ms: Option<u64>,
        jitter: f64,
    ) -> Reaction {
        self.with(host, now, |b, p| {
            let reaction = b.on_timed_answer(
                p,
                now,
                wall,
                status,
                retry_after,
                announced,
                ttfb_ms,
                jitter,
            );
            // The waiter on the slot is in this process and reads its wait
            // again (`reserved_wait`); a shared budget's waiter would not.
            if let Reaction::Ok { .. } = reaction {
                b.bring_forward(p, now);
            }
            reaction
        })
    }

    fn on_failure(
        &self,
        host: &str,
        now: Instant,
        failure: Failure,
        jitter: f64,
    ) -> Option<Reaction> {
        self.with(host, now, |b, p| b.on_failure(p, now, failure, jitter))
    }

    fn set_crawl_delay(&self, host: &str, now: &dyn Fn() -> Instant, delay_secs: Option<f64>) {
        let key = host_key(host);
        if delay_secs.is_some() {
            let now = now();
            return self.with(&key, now, |b, p| b.set_crawl_delay(p, now, delay_secs));
        }
        // No delay, as on nearly every request: a host not known yet has
        // none to clear, and a known one is found with one lookup (and no
        // clock read).
        if let Some(mut b) = self.hosts.get_mut(key.as_ref()) {
            if b.has_crawl_delay() {
                b.set_crawl_delay(&self.table().for_host(&key), now(), None);
            }
        }
    }

    fn view(&self, host: &str, now: Instant) -> Option<HostView> {
        let key = host_key(host);
        let p = self.table().for_host(&key);
        self.hosts.get(key.as_ref()).map(|b| b.view(&p, now))
    }

    fn views(&self, now: Instant, limit: usize) -> Vec<(String, HostView)> {
        let mut out: Vec<_> = self
            .hosts
            .iter()
            .take(limit)
            .map(|e| {
                let p = self.table().for_host(e.key());
                (e.key().to_string(), e.value().view(&p, now))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    fn reset(&self, host: &str, now: Instant) -> Option<ResetReport> {
        let key = host_key(host);
        let p = self.table().for_host(&key);
        self.hosts
            .get_mut(key.as_ref())
            .map(|mut b| b.reset(&p, now))
    }

    fn sweep(&self, now: Instant) -> usize {
        let before = self.hosts.len();
        self.hosts
            .retain(|host, b| !b.forgettable(&self.table().for_host(host), now));
        let dropped = before.saturating_sub(self.hosts.len());
        if dropped > 0 {
            // As after a bound's pass (`bound.rs`): no table left at twice
            // what its entries need.
            self.hosts.shrink_to_fit();
        }
        dropped
    }

    fn persisted(&self, now: Instant, wall: SystemTime) -> Vec<(String, PersistedHost)> {
        let mut out: Vec<_> = self
            .hosts
            .iter()
            .filter_map(|e| {
                let p = self.table().for_host(e.key());
                let saved = e.value().persist(&p, now, wall)?;
                Some((e.key().to_string(), saved))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    fn restore(&self, saved: Vec<(String, PersistedHost)>, now: Instant, wall: SystemTime) {
        for (host, saved) in saved {
            let key = host_key(&host);
            let p = self.table().for_host(&key);
            let budget = HostBudget::restore(&p, &saved, now, wall);
            let used = self.bound.stamp();
            self.hosts
                .insert(Box::from(key.as_ref()), Held { budget, used });
        }
        self.hold(now);
    }

    fn len(&self) -> usize {
        self.hosts.len()
    }

    fn evicted(&self) -> Evicted {
        self.bound.evicted()
    }
}
