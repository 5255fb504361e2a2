//! Waiting for a host's budget: the tokio half of `mannerly_policy::budget`.
//! The store decides (slot, pause, concurrency, refusal); this module only
//! sleeps until the decided time or until another request to the same host
//! frees a concurrency slot. No polling: one timer or one notification per
//! wait — except with the shared (redis) backend, where a slot freed by
//! another proxy arrives as a message on this proxy's own channel of the
//! host, told to the earliest waiter only (`mannerly_state::wake`), and a
//! concurrency waiter also looks again every
//! [`SHARED_SLOT_RECHECK`], or every [`SHARED_SLOT_RECHECK_UNHEARD`] while
//! the subscription is down (a lease that expired sends no message either).
//! A pause that ends early (an operator's reset, here or heard from another
//! proxy) wakes every waiter of the host to ask again; one that runs its
//! course is the timer the waiter already sleeps on.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use mannerly_policy::budget::{
    host_key, Announced, BudgetParams, Failure, HostParams, HostView, PersistedHost, Reaction,
    Refusal, Reservation, ResetReport, Start, Strain, QUEUE_RETRY_AFTER,
};
use mannerly_state::hosts::{Basis, Bound, HostStore, Lease, MemoryHosts, RedisHosts, Tier};
use mannerly_state::responses::{ResponseStore, StoreError};
use mannerly_state::wake::Wakes;
use mannerly_state::FastMap;
use tokio::sync::{Mutex, Notify};
use tokio::time::Instant;

use crate::clock::Clock;
use crate::config::Config;
use crate::error::ConfigError;

/// How often a request waiting for a concurrency slot looks again when
/// the slots are shared with other proxies and their releases are heard.
pub(crate) const SHARED_SLOT_RECHECK: Duration = Duration::from_secs(1);

/// The same while the subscription to other proxies' releases is down.
pub(crate) const SHARED_SLOT_RECHECK_UNHEARD: Duration = Duration::from_millis(100);

/// Lines no request holds kept for hosts asked again soon (past it the
/// least recently used go, an eighth at a time).
const LINES_MAX: usize = 4096;

/// The budgets of all groups of hosts and the wake-ups of their waiters.
/// A budget is keyed by its group (`groups.rs`): below the public methods,
/// `key` is a group's key, `host` a host name.
pub(crate) struct Budgets {
    backend: Backend,
    clock: Clock,
    groups: groups::Groups,
    lines: FastMap<String, Arc<Line>>,
    /// Holds `lines` to `LINES_MAX` besides those in use (see `line`).
    lines_bound: Bound,
    seed: AtomicU64,
    /// Crawl-delays to apply to shared budgets before the next request.
    crawl_delays: FastMap<String, Option<f64>>,
    /// Other proxies' released slots, with the redis backend.
    wakes: std::sync::OnceLock<Wakes>,
    /// Concurrency waiters woken by another proxy's release (for metrics
    /// and tests).
    woken_by_message: AtomicU64,
    /// Waiters woken by another proxy's early end of a host's pause (an
    /// operator's reset there).
    woken_by_reset: AtomicU64,
    /// Requests asleep now until their turn (`turn.rs`).
    asleep: AtomicU64,
}

/// Where the budgets live.
enum Backend {
    /// This process only (`state.backend = "memory"`).
    Memory(Arc<dyn HostStore>),
    /// Shared by the cluster (`state.backend = "redis"`).
    Redis(Arc<RedisHosts>),
}

/// The requests waiting for one group.
struct Line {
    /// Held by the request whose slot is being reserved or waited for.
    turn: Mutex<()>,
    /// Signalled when a response frees a concurrency slot.
    freed: Notify,
    /// Requests waiting for `turn`, for the queue bound.
    waiting: AtomicUsize,
    /// Releases heard from other proxies: tells a wake-up by message from
    /// one by this proxy's own release.
    heard: AtomicU64,
    /// Signalled when the host's pause ended early (an operator's reset,
    /// here or on another proxy): every waiter asks for a slot again.
    changed: Notify,
    /// Such ends heard from other proxies.
    resets_heard: AtomicU64,
    /// When a request last took the line (a `lines_bound` stamp).
    used: AtomicU64,
}

/// An in-flight slot of a host. Released by [`Permit::respond`], or on drop
/// when no response came (error, timeout, client gone).
pub(crate) struct Permit {
    /// The group's key.
    host: String,
    budgets: Arc<Budgets>,
    open: bool,
    lease: Option<Lease>,
    /// The audit `state` of the decisions that let it go.
    state: Option<&'static str>,
    /// When it was let go: a request abandoned later is a time to first
    /// byte at least that long.
    since: Instant,
    /// This proxy's own channel of the host, listened on while the request
    /// is out when other proxies share the host or it waited on one.
    _hearing: Option<mannerly_state::wake::Hearing>,
}

impl Budgets {
    pub(crate) fn new(
        store: Arc<dyn HostStore>,
        clock: Clock,
        params: BudgetParams,
    ) -> Arc<Budgets> {
        Budgets::with(Backend::Memory(store), clock, params)
    }

    fn with(backend: Backend, clock: Clock, params: BudgetParams) -> Arc<Budgets> {
        Arc::new(Budgets {
            backend,
            clock,
            groups: groups::Groups::new(params),
            lines: FastMap::default(),
            lines_bound: Bound::default(),
            seed: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
            crawl_delays: FastMap::default(),
            wakes: std::sync::OnceLock::new(),
            woken_by_message: AtomicU64::new(0),
            woken_by_reset: AtomicU64::new(0),
            asleep: AtomicU64::new(0),
        })
    }

    /// The budgets `[state]` and `[budget]` ask for. Must run inside the
    /// runtime (the redis connection is made lazily, on it).
    pub(crate) fn from_config(cfg: &Config, clock: Clock) -> Result<Arc<Budgets>, ConfigError> {
        let invalid = ConfigError::from;
        match cfg.state.backend {
            crate::config::StateBackend::Redis => Budgets::shared_from_config(cfg, clock),
            crate::config::StateBackend::Memory => {
                let hosts = MemoryHosts::new(cfg.budget.clone()).map_err(invalid)?;
                Ok(Budgets::new(Arc::new(hosts), clock, cfg.budget.clone()))
            }
        }
    }

    /// The shared store, when budgets are shared.
    pub(crate) fn shared(&self) -> Option<&Arc<RedisHosts>> {
        match &self.backend {
            Backend::Redis(r) => Some(r),
            Backend::Memory(_) => None,
        }
    }

    /// Replaces the `[budget]` table: every host is decided by the new
    /// numbers from its next step on, keeping what it learned.
    pub(crate) fn set_params(
        &self,
        params: BudgetParams,
    ) -> Result<(), mannerly_policy::ParamError> {
        match &self.backend {
            Backend::Memory(m) => m.set_budget_params(params.clone()),
            Backend::Redis(r) => r.set_budget_params(params.clone()),
        }?;
        self.groups.set_params(params);
        Ok(())
    }

    /// The resolved budget parameters of `host`'s group.
    pub(crate) fn params(&self, host: &str) -> HostParams {
        self.key_params(&self.groups.of(host).key)
    }

    /// The resolved budget parameters of the group `key`.
    pub(crate) fn key_params(&self, key: &str) -> HostParams {
        match &self.backend {
            Backend::Memory(m) => m.params(&host_key(key)),
            Backend::Redis(r) => r.params(key),
        }
    }

    /// The audit `state` of a decision made now: absent with the memory
    /// backend, `shared` or `degraded` with redis.
    pub(crate) fn state(&self) -> Option<&'static str> {
        match &self.backend {
            Backend::Memory(_) => None,
            Backend::Redis(r) if r.is_degraded() => Some("degraded"),
            Backend::Redis(_) => Some("shared"),
        }
    }

    /// Monotonic time on the proxy's clock.
    pub(crate) fn now(&self) -> tokio::time::Instant {
        self.clock.now()
    }

    /// Wall time on the proxy's clock.
    pub(crate) fn wall(&self) -> std::time::SystemTime {
        self.clock.wall()
    }

    /// The state of one group's budget (for `/hosts`), by its key: with
    /// Redis, as this proxy saw it last.
    pub(crate) fn view(&self, host: &str) -> Option<HostView> {
        let now = self.clock.now_std();
        match &self.backend {
            Backend::Memory(m) => m.view(host, now),
            Backend::Redis(r) => r.view(host, now),
        }
    }

    /// Every group's budget held, sorted by key.
    pub(crate) fn views(&self) -> Vec<(String, HostView)> {
        let now = self.clock.now_std();
        match &self.backend {
            Backend::Memory(m) => m.views(now, usize::MAX),
            Backend::Redis(r) => r.views(now, usize::MAX),
        }
    }

    /// An operator's reset of a group's learned pause, ceiling and
    /// breaker, by its key; `None` when nothing is held for it.
    pub(crate) async fn reset(&self, host: &str) -> Option<ResetReport> {
        let now = self.clock.now_std();
        let report = match &self.backend {
            Backend::Memory(m) => m.reset(host, now),
            Backend::Redis(r) => Some(Box::pin(r.reset(host, now, self.clock.wall())).await.value),
        };
        // Slots reserved behind the old pause are gone with it.
        if let Some(l) = self.lines.get(host_key(host).as_ref()) {
            l.changed.notify_waiters();
        }
        report
    }

    /// Counts a waiter woken by a pause's early end, if another proxy's.
    fn count_reset(&self, line: &Line, resets_before: u64) {
        if line.resets_heard.load(Ordering::SeqCst) != resets_before {
            self.woken_by_reset.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The longest a new request to `host` may be held.
    pub(crate) fn max_hold(&self, host: &str) -> Duration {
        self.params(host).max_hold()
    }

    /// Waits for `host`'s turn: a rate slot in arrival order, the end of a
    /// pause, a free concurrency slot. Gives up at `deadline` with the
    /// budget's refusal.
    /// Every request the origin sees takes its turn here: pages, their
    /// retries, robots.txt and each of its redirects.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        host: &str,
        deadline: Instant,
    ) -> Result<Permit, Refusal> {
        self.acquire_turn(host, deadline, Loan::May).await
    }

    /// [`Budgets::acquire`] for a redirect of a robots.txt fetch: it may
    /// not go on the loan the fetch's first request made (see
    /// `HostBudget::admit_within`), nor leave it to the page behind it.
    pub(crate) async fn acquire_own(
        self: &Arc<Self>,
        host: &str,
        deadline: Instant,
    ) -> Result<Permit, Refusal> {
        self.acquire_turn(host, deadline, Loan::Not).await
    }

    /// The refusal for a request whose hold ran out in the line: the host's
    /// pause if it has one, else a full queue.
    fn held_too_long(&self, key: &str) -> Refusal {
        self.view(key).map_or(
            Refusal::QueueFull {
                retry_after: QUEUE_RETRY_AFTER,
            },
            |v| v.hold_refusal(),
        )
    }

    /// Makes sure a robots.txt Crawl-delay caps the host's rate: the
    /// budget's own, when the host is its group alone; else the host's
    /// spacing inside its group, which other members do not wait for.
    pub(crate) fn set_crawl_delay(&self, host: &str, delay: Option<f64>) {
        // Called on every request: the placed group is read in place.
        let alone = self.groups.with_of(host, |group| {
            let alone = self.groups.alone(group);
            if alone {
                match &self.backend {
                    Backend::Memory(m) => {
                        m.set_crawl_delay(&group.key, &|| self.clock.now_std(), delay)
                    }
                    // Applied on the way into the host's next request, where a
                    // round trip may be awaited.
                    Backend::Redis(_) => {
                        self.crawl_delays.insert(group.key.clone(), delay);
                    }
                }
            }
            alone
        });
        if !alone {
            self.groups.set_spacing(host, delay);
        }
    }

    async fn apply_crawl_delay(&self, key: &str) {
        let Backend::Redis(r) = &self.backend else {
            return;
        };
        let Some((_, delay)) = self.crawl_delays.remove(key) else {
            return;
        };
        Box::pin(r.set_crawl_delay(key, self.clock.now_std(), self.clock.wall(), delay)).await;
    }

    /// Reserves `key`'s next slot: the reservation, with Redis what it was
    /// decided on, and when it was reserved (`now`, or earlier for a slot
    /// reserved with the previous request's start).
    async fn admit(
        &self,
        key: &str,
        now: Instant,
        hold_left: Duration,
        loan: Loan,
    ) -> (Reservation, Option<Basis>, Instant) {
        let at = now;
        let (now, wall) = (now.into_std(), self.clock.wall());
        let shared = |d: mannerly_state::hosts::Decided<Reservation>| (d.value, Some(d.basis), at);
        match (&self.backend, loan) {
            (Backend::Memory(m), Loan::May) => (m.admit(key, now, hold_left), None, at),
            (Backend::Memory(m), Loan::Not) => (m.admit_own(key, now, hold_left), None, at),
            (Backend::Redis(r), Loan::May) => match r.take_early_admit(key, now, hold_left) {
                Some((d, made)) => (d.value, Some(d.basis), Instant::from_std(made)),
                None => shared(Box::pin(r.admit(key, now, wall, hold_left)).await),
            },
            (Backend::Redis(r), Loan::Not) => {
                shared(Box::pin(r.admit_own(key, now, wall, hold_left)).await)
            }
        }
    }

    async fn try_start_since(
        &self,
        key: &str,
        now: Instant,
        hold_left: Duration,
        reserved: Instant,
        next_hold: Option<Duration>,
    ) -> (Start, Option<Lease>, Option<Basis>) {
        match &self.backend {
            Backend::Memory(m) => (
                m.try_start_since(key, now.into_std(), hold_left, reserved.into_std()),
                None,
                None,
            ),
            Backend::Redis(r) => {
                let d = Box::pin(r.try_start_then_admit(
                    key,
                    now.into_std(),
                    self.clock.wall(),
                    hold_left,
                    reserved.into_std(),
                    next_hold,
                ))
                .await;
                (d.value.0, d.value.1, Some(d.basis))
            }
        }
    }

    fn line(&self, key: &str) -> Arc<Line> {
        if let Some(l) = self.lines.get(key) {
            l.used.store(self.lines_bound.stamp(), Ordering::Relaxed);
            return l.clone();
        }
        let line = self
            .lines
            .entry(key.to_string())
            .or_insert_with(|| {
                Arc::new(Line {
                    turn: Mutex::new(()),
                    freed: Notify::new(),
                    waiting: AtomicUsize::new(0),
                    heard: AtomicU64::new(0),
                    changed: Notify::new(),
                    resets_heard: AtomicU64::new(0),
                    used: AtomicU64::new(self.lines_bound.stamp()),
                })
            })
            .clone();
        // A line no request holds is the same as a new one; the minute's
        // sweep drops those, but a broad crawl makes thousands a second,
        // and a minute's worth is a table that grows and empties with the
        // crawl's pace. Past the bound, the least recently used of them go.
        self.lines_bound.hold(&self.lines, LINES_MAX, |_, l| {
            (Arc::strong_count(l) == 1).then(|| (Tier::Idle, l.used.load(Ordering::Relaxed)))
        });
        line
    }

    fn wake(&self, key: &str) {
        if let Some(l) = self.lines.get(key) {
            l.freed.notify_one();
        }
    }

    /// After a reaction: a pause for distress is answered at once, so the
    /// requests sleeping towards a slot behind it ask again now rather
    /// than at their slot.
    fn after_reaction(&self, key: &str, reaction: Option<&Reaction>) {
        if let Some(Reaction::Distressed(Strain { pause: Some(_), .. })) = reaction {
            if let Some(l) = self.lines.get(key) {
                l.changed.notify_waiters();
            }
        }
    }

    /// A number in [0, 1) for backoff jitter; quality does not matter, only
    /// that proxies and hosts do not retry in lockstep.
    fn jitter(&self) -> f64 {
        let mut x = self
            .seed
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        x ^= self
            .clock
            .wall()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64)
            .unwrap_or(0);
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Writes what must survive a restart (pauses, open breakers, lowered
    /// ceilings) to `store`, and forgets the records of hosts that no longer
    /// have any. Blocking: call it off the async threads.
    pub(crate) fn save(&self, store: &dyn ResponseStore) -> Result<usize, StoreError> {
        // Shared budgets outlive any one proxy in Redis itself.
        let Backend::Memory(hosts) = &self.backend else {
            return Ok(0);
        };
        let now = self.clock.now_std();
        let saved = hosts.persisted(now, self.clock.wall());
        let before = store.host_records()?;
        for (host, record) in &saved {
            let bytes = serde_json::to_vec(record)?;
            let unchanged = before.iter().any(|(h, b)| h == host && *b == bytes);
            if !unchanged {
                store.put_host_record(host, &bytes)?;
            }
        }
        for (host, _) in before {
            if !saved.iter().any(|(h, _)| *h == host) {
                store.remove_host_record(&host)?;
            }
        }
        Ok(saved.len())
    }

    /// Loads what [`Budgets::save`] wrote in an earlier process. A record
    /// that cannot be read is skipped (and overwritten at the next save).
    pub(crate) fn load(&self, store: &dyn ResponseStore) -> Result<usize, StoreError> {
        let Backend::Memory(hosts) = &self.backend else {
            return Ok(0);
        };
        let records = store.host_records()?;
        let saved: Vec<(String, PersistedHost)> = records
            .into_iter()
            .filter_map(|(host, bytes)| match serde_json::from_slice(&bytes) {
                Ok(r) => Some((host, r)),
                Err(e) => {
                    tracing::warn!("saved budget of {host} unreadable, ignored: {e}");
                    None
                }
            })
            .collect();
        let n = saved.len();
        hosts.restore(saved, self.clock.now_std(), self.clock.wall());
        Ok(n)
    }

    /// Budgets dropped to stay within `budget.max_hosts` since start.
    pub(crate) fn evicted(&self) -> mannerly_state::hosts::Evicted {
        match &self.backend {
            Backend::Memory(m) => m.evicted(),
            Backend::Redis(r) => r.evicted(),
        }
    }

    /// Forgets hosts with nothing to remember, and their wakers.
    pub(crate) fn sweep(&self) -> usize {
        let now = self.clock.now_std();
        let dropped = match &self.backend {
            Backend::Memory(m) => m.sweep(now),
            Backend::Redis(r) => r.sweep(now),
        };
        self.lines.retain(|_, l| Arc::strong_count(l) > 1);
        self.lines.shrink_to_fit();
        dropped
    }
}

impl Permit {
    /// The audit `state` of the decisions that let this request go: absent
    /// with the memory backend, else `shared`, `degraded` or `contended`.
    pub(crate) fn state(&self) -> Option<&'static str> {
        self.state
    }

    /// Releases the slot with what the origin answered and how long its
    /// head took; returns what the budget learned.
    pub(crate) async fn respond(
        mut self,
        status: u16,
        retry_after: Option<&str>,
        announced: Option<&Announced>,
        ttfb_ms: Option<u64>,
    ) -> Reaction {
        self.open = false;
        let b = self.budgets.clone();
        let jitter = b.jitter();
        let now = self.budgets.clock.now_std();
        let reaction = match (&b.backend, &self.lease) {
            (Backend::Memory(m), _) => m.on_response(
                &self.host,
                now,
                self.budgets.clock.wall(),
                status,
                retry_after,
                announced,
                ttfb_ms,
                jitter,
            ),
            // Every shared start hands out a lease; without one there is
            // nothing to give back, only something to learn.
            (Backend::Redis(r), lease) => {
                Box::pin(r.on_response(
                    &self.host,
                    lease.as_ref().unwrap_or(&Lease::Local),
                    now,
                    self.budgets.clock.wall(),
                    status,
                    retry_after,
                    announced,
                    ttfb_ms,
                    jitter,
                ))
                .await
                .value
            }
        };
        b.wake(&self.host);
        b.after_reaction(&self.host, Some(&reaction));
        reaction
    }

    /// Releases the slot of a request that got no response, with what the
    /// site showed (a timeout, a reset); returns what the budget learned.
    pub(crate) async fn failed(mut self, failure: Failure) -> Option<Reaction> {
        self.open = false;
        let b = self.budgets.clone();
        let jitter = b.jitter();
        let now = b.clock.now_std();
        let reaction = match (&b.backend, &self.lease) {
            (Backend::Memory(m), _) => m.on_failure(&self.host, now, failure, jitter),
            (Backend::Redis(r), lease) => {
                let lease = lease.as_ref().unwrap_or(&Lease::Local);
                Box::pin(r.on_failure(&self.host, lease, now, b.clock.wall(), failure, jitter))
                    .await
                    .value
            }
        };
        b.wake(&self.host);
        b.after_reaction(&self.host, reaction.as_ref());
        reaction
    }

    /// What a request let go at `since` and abandoned now tells the budget.
    fn abandoned(&self, now: Instant) -> Failure {
        let after = now.saturating_duration_since(self.since);
        Failure::Abandoned {
            after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let now = self.budgets.clock.now_std();
        let wall = self.budgets.clock.wall();
        let abandoned = self.abandoned(self.budgets.clock.now());
        let jitter = self.budgets.jitter();
        match (&self.budgets.backend, self.lease.take()) {
            (Backend::Memory(m), _) => {
                let reaction = m.on_failure(&self.host, now, abandoned, jitter);
                self.budgets.after_reaction(&self.host, reaction.as_ref());
            }
            (Backend::Redis(r), Some(lease)) => {
                // Given back off the request's path; should the task never
                // run (shutdown), the lease expires in Redis on its own.
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    let (r, host, b) = (r.clone(), self.host.clone(), self.budgets.clone());
                    rt.spawn(async move {
                        r.on_failure(&host, &lease, now, wall, abandoned, jitter)
                            .await;
                        b.wake(&host);
                    });
                }
            }
            (Backend::Redis(_), None) => {}
        }
        self.budgets.wake(&self.host);
    }
}

/// Whether a request may go on the first slot's loan.
#[derive(Clone, Copy)]
enum Loan {
    May,
    Not,
}

mod by_group;
mod groups;
mod turn;
pub(crate) use groups::Members;
mod shared;
#[cfg(test)]
mod tests;
