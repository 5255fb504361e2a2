//! Host budget state behind a trait.
//!
//! [`HostStore`] is what the proxy calls for the in-process backend. Each
//! method is one whole operation on one host (reserve a slot, start, learn
//! from a response), and never needs a lock held across calls. The shared
//! backend, [`RedisHosts`], offers the same operations, async, each one
//! compare-and-set round trip per try (see its module). The rules
//! themselves are [`mannerly_policy::budget`]; a backend only keeps the
//! state and applies them.
//!
//! Host keys are normalised by every method with
//! [`mannerly_policy::budget::host_key`]: `Example.com:443` and
//! `example.com` are one budget.
//!
//! Methods are infallible on purpose: a backend that loses its shared store
//! falls back to local state (for Redis, at the host's last shared rate
//! divided by `instances_hint`) and says so (`state: "degraded"` in the
//! audit line); it never fails open. An operation on a host whose shared
//! copy other proxies keep changing falls back the same way, alone
//! (`state: "contended"`), while the store stays shared.

mod bound;
mod memory;
mod redis;

/// The `[budget]` table a store decides by, swapped whole by a reload.
#[derive(Debug, Default)]
pub(crate) struct BudgetTable(std::sync::RwLock<mannerly_policy::budget::BudgetParams>);

impl BudgetTable {
    pub(crate) fn new(params: mannerly_policy::budget::BudgetParams) -> BudgetTable {
        BudgetTable(std::sync::RwLock::new(params))
    }

    /// The table in force.
    pub(crate) fn get(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, mannerly_policy::budget::BudgetParams> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Checks and installs a new table: every host is decided by the new
    /// numbers from its next step on; what it learned (pause, ceiling,
    /// breaker) stays.
    pub(crate) fn set(
        &self,
        params: mannerly_policy::budget::BudgetParams,
    ) -> Result<(), mannerly_policy::ParamError> {
        let params = params.validate()?;
        *self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = params;
        Ok(())
    }
}

pub use bound::{Bound, Evicted, Tier};
pub use memory::MemoryHosts;
pub use redis::{
    Basis, Decided, Heard, Lease, RedisHosts, RedisHostsError, RedisSettings, RedisStats, SCRIPT,
};

use std::time::{Duration, Instant, SystemTime};

use mannerly_policy::budget::{
    Announced, Failure, HostParams, HostView, PersistedHost, Reaction, Reservation, ResetReport,
    Start,
};

/// Where per-host budgets live. See the module docs for the contract.
pub trait HostStore: Send + Sync {
    /// The resolved budget parameters of `host` (global values with its
    /// overrides): `max_hold`, `may_retry` and friends for the proxy.
    fn params(&self, host: &str) -> HostParams;

    /// Reserves the next rate slot of `host` if it comes within `hold_left`
    /// ([`mannerly_policy::budget::HostBudget::admit_within`]); pass
    /// `params(host).max_hold()` for a new request.
    fn admit(&self, host: &str, now: Instant, hold_left: Duration) -> Reservation;

    /// [`HostStore::admit`] for a request that may not go on the first
    /// slot's loan ([`mannerly_policy::budget::HostBudget::admit_own_within`]).
    fn admit_own(&self, host: &str, now: Instant, hold_left: Duration) -> Reservation;

    /// Re-checks the pause and takes an in-flight slot once the reserved
    /// slot has come ([`mannerly_policy::budget::HostBudget::try_start`]).
    fn try_start(&self, host: &str, now: Instant, hold_left: Duration) -> Start;

    /// `try_start` for a waiter whose slot was reserved at `reserved`: a slot
    /// reserved before the host's last throttle is re-reserved at the lowered
    /// rate (see `HostBudget::try_start_since`).
    fn try_start_since(
        &self,
        host: &str,
        now: Instant,
        hold_left: Duration,
        reserved: Instant,
    ) -> Start;

    /// How long until the slot reserved on `host` and not yet sent on
    /// comes ([`mannerly_policy::budget::HostBudget::reserved_wait`]): an
    /// answer may have brought it forward since it was reserved.
    fn reserved_wait(&self, host: &str, now: Instant) -> Option<Duration>;

    /// Releases an in-flight slot without a response; `true` when a
    /// concurrency waiter could start now.
    fn finish(&self, host: &str, now: Instant) -> bool;

    /// Learns from a response and releases its in-flight slot
    /// ([`mannerly_policy::budget::HostBudget::on_timed_answer`]), with the
    /// limit the response announced if any and its time to first byte.
    /// `jitter` is a random number in [0, 1) drawn by the caller.
    #[allow(clippy::too_many_arguments)]
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
    ) -> Reaction;

    /// Learns from a request that got no response and releases its
    /// in-flight slot ([`mannerly_policy::budget::HostBudget::on_failure`]):
    /// a timeout or reset is distress, a request abandoned after a while
    /// a time to first byte at least that long.
    fn on_failure(
        &self,
        host: &str,
        now: Instant,
        failure: Failure,
        jitter: f64,
    ) -> Option<Reaction>;

    /// Applies the Crawl-delay of the robots.txt group that matched
    /// (`None` lifts it). Idempotent: call it after every robots lookup.
    /// `now` is read only when something changes.
    fn set_crawl_delay(&self, host: &str, now: &dyn Fn() -> Instant, delay_secs: Option<f64>);

    /// The state of one host, `None` when the store holds nothing for it.
    fn view(&self, host: &str, now: Instant) -> Option<HostView>;

    /// Up to `limit` hosts with their state, sorted by name (for `/hosts`).
    fn views(&self, now: Instant, limit: usize) -> Vec<(String, HostView)>;

    /// An operator's reset: forgets the learned pause, breaker and ceiling
    /// of `host` ([`mannerly_policy::budget::HostBudget::reset`]); `None`
    /// when the store holds nothing for it.
    fn reset(&self, host: &str, now: Instant) -> Option<ResetReport>;

    /// Drops every host with nothing to remember
    /// ([`mannerly_policy::budget::HostBudget::forgettable`]); returns how
    /// many were dropped. A paused host, an open breaker or a lowered
    /// ceiling is never dropped.
    fn sweep(&self, now: Instant) -> usize;

    /// What must survive a restart: hosts with a live pause, an open
    /// breaker or a lowered ceiling, sorted by name.
    fn persisted(&self, now: Instant, wall: SystemTime) -> Vec<(String, PersistedHost)>;

    /// Loads what [`HostStore::persisted`] returned in an earlier process;
    /// replaces any state held for those hosts.
    fn restore(&self, saved: Vec<(String, PersistedHost)>, now: Instant, wall: SystemTime);

    /// Number of hosts held.
    fn len(&self) -> usize;

    /// Hosts dropped to stay within `budget.max_hosts` since start.
    fn evicted(&self) -> Evicted;

    /// No host is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replaces the `[budget]` table (a configuration reload).
    fn set_budget_params(
        &self,
        params: mannerly_policy::budget::BudgetParams,
    ) -> Result<(), mannerly_policy::ParamError>;
}
