//! Host budgets shared by every proxy of a crawl cluster through Redis.
//!
//! Policy runs in Rust; Redis only keeps each host's encoded `HostBudget`
//! ([`HostBudget::encode`]) and its concurrency leases. An operation decides
//! on the copy this proxy saw last and sends the decision with that copy to
//! one Lua script ([`SCRIPT`]), which stores it only if the copy is still
//! current (compare-and-set) and otherwise answers with the current one to
//! decide again. So a step costs one round trip while the copy is current,
//! and one more each time another proxy changed it meanwhile. Other
//! proxies' changes of a host they share with this one are told, with the
//! new copy, to the proxy whose request acts next on it (`op.lua`), and
//! taken in by [`RedisHosts::heard`], so that proxy's copy is current when
//! its step comes; the others' next step may lose one round.
//!
//! When Redis does not answer within the command timeout the store decides
//! alone ("degraded") on a local copy at the host's last known shared rate
//! divided by `instances_hint`, tries Redis again every `probe_every`, and
//! drops the local copies once Redis answers. It never fails a request and
//! never decides above the shared rate.
//!
//! Two steps of a request are folded into others' round trips (see
//! "Round trips" in docs/architecture.md): an admit whose slot is now takes
//! the start's lease in the same call, and an admit that must wait, on a
//! host no other proxy changed lately, is kept here and stored by this
//! proxy's next call on the host (the previous request's response, or the
//! start). A lone proxy so pays two calls per page; should another proxy
//! change the host meanwhile, the unstored reservation is void and the
//! start reserves again on the current copy: never a slot twice. Under
//! contention the admit of the request waiting behind a start is decided
//! and stored in that start's call instead (`early.rs`): two calls per page
//! again, the start and the response.
//!
//! An operation that loses its compare-and-set [`MAX_ROUNDS`] times is
//! contention on that one host, not an outage: Redis answered every time.
//! Only that operation is decided on the host's local copy, made the same
//! way at the same floor rate ([`Basis::Contended`]); the store stays shared.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use dashmap::DashMap;
use mannerly_policy::budget::{
    host_key, Announced, BudgetParams, Failure, HostBudget, HostParams, Reaction, Reservation,
    ResetReport, Start,
};

use crate::link::Link;

mod cas;
mod decided;
mod early;
mod fallback;
mod heard;
mod held;
mod own;
mod script;
mod settings;

pub use decided::{Basis, Decided, Lease};
pub use heard::Heard;
pub use script::SCRIPT;
pub use settings::{RedisHostsError, RedisSettings};

use fallback::Fallback;
use script::{Waiting, QUIET};

/// Compare-and-set rounds before an operation gives up on the shared copy
/// (only reached when other proxies keep changing one host's budget). The
/// operation is then decided locally ([`Basis::Contended`]); other hosts and
/// later operations still go to Redis.
const MAX_ROUNDS: u32 = 8;

/// Counters for metrics and the benchmark.
#[derive(Debug, Default)]
pub struct RedisStats {
    /// Budget operations asked for.
    pub ops: AtomicU64,
    /// Script calls made (round trips).
    pub round_trips: AtomicU64,
    /// Script calls that found the copy changed by another proxy.
    pub conflicts: AtomicU64,
    /// Operations decided alone, Redis being out of reach.
    pub degraded_ops: AtomicU64,
    /// Operations decided alone after losing every compare-and-set round,
    /// the store staying shared.
    pub contended_ops: AtomicU64,
}

/// Shared host budgets. See the module docs.
pub struct RedisHosts {
    params: super::BudgetTable,
    settings: RedisSettings,
    conn: Link,
    script: redis::Script,
    instance: String,
    next_lease: AtomicU64,
    /// The last shared copy this proxy saw of each host, at most
    /// `budget.max_hosts` of them (least recently used dropped first).
    seen: DashMap<Box<str>, Seen>,
    bound: super::bound::Bound,
    /// The stand-ins used while degraded or contended.
    fallback: Fallback,
    /// Starts decided (and leased) with their admit, for the request's
    /// `try_start_since` to pick up: one per host, as the proxy lets one
    /// request of a host through its line at a time.
    early: DashMap<Box<str>, (Instant, Lease)>,
    /// Admits decided (and stored) with the previous request's start, for
    /// the next request of the host's line to pick up (`early.rs`).
    early_admits: DashMap<Box<str>, early::EarlyAdmit>,
    stats: RedisStats,
    /// This proxy's subscriber, once there is one: its hearings of its own
    /// channels.
    hearing: std::sync::OnceLock<crate::wake::Waiters>,
}

struct Seen {
    bytes: Vec<u8>,
    leases: u32,
    budget: HostBudget,
    /// An admit decided on `budget` and not yet stored: its budget. Every
    /// operation decides on it and stores it with its own decision.
    pending: Option<HostBudget>,
    /// A reservation kept unstored was lost (another proxy changed the
    /// copy, or Redis went away): the next start must reserve again.
    voided: bool,
    /// When another proxy was last seen changing the copy (a lost
    /// compare-and-set, or its change told on this proxy's channel).
    conflict_at: Option<Instant>,
    /// When the script last told that another proxy calls the host too.
    shared_at: Option<Instant>,
    /// The server time (µs) the copy is at least as new as: a change heard
    /// later replaces it only if it was made after.
    at: u64,
    /// When this proxy last decided on the copy (a `Bound` stamp).
    used: u64,
}

enum LeaseAction<'a> {
    None,
    /// No lease change; the decision ends a pause early, so the other
    /// proxies' waiters are told to ask again.
    Announce,
    Take,
    Release(&'a str),
    /// Give back a slot of the local stand-in (taken while degraded or
    /// contended) while deciding on whichever copy answers now.
    ReleaseLocal,
}

/// Why an operation was not decided on the shared copy.
enum Miss {
    /// Redis did not answer in time, or not as the script answers.
    Unreachable(String),
    /// Redis answered every round, with a copy another proxy had changed.
    Contended,
}

impl std::fmt::Debug for RedisHosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisHosts")
            .field("settings", &self.settings)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

// === impl RedisHosts ===

impl RedisHosts {
    /// A store on the Redis at `settings.url` (one node, or a Redis Cluster
    /// by `redis+cluster://`, see [`Link`]). Connects lazily: a proxy
    /// starts (degraded) while Redis is still down. Needs a tokio runtime.
    /// `wall` is the wall time now: it tells this process's leases from
    /// those of an earlier process with the same host name and pid.
    pub fn new(
        params: BudgetParams,
        settings: RedisSettings,
        wall: SystemTime,
    ) -> Result<Self, RedisHostsError> {
        let params = params.validate()?;
        let conn =
            Link::open(&settings.url, settings.command_timeout).map_err(RedisHostsError::Url)?;
        Ok(RedisHosts {
            params: super::BudgetTable::new(params),
            script: redis::Script::new(SCRIPT),
            instance: instance_id(wall),
            next_lease: AtomicU64::new(0),
            seen: DashMap::new(),
            bound: super::bound::Bound::default(),
            fallback: Fallback::new(&settings),
            early: DashMap::new(),
            early_admits: DashMap::new(),
            stats: RedisStats::default(),
            hearing: std::sync::OnceLock::new(),
            conn,
            settings,
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

    /// The resolved parameters of `host`.
    pub fn params(&self, host: &str) -> HostParams {
        self.table().for_host(&host_key(host))
    }

    /// The counters.
    pub fn stats(&self) -> &RedisStats {
        &self.stats
    }

    /// Whether the store is deciding alone right now.
    pub fn is_degraded(&self) -> bool {
        self.fallback.is_degraded()
    }

    /// The key prefix, for other shared state of the same crawl.
    pub fn settings(&self) -> &RedisSettings {
        &self.settings
    }

    /// A connection handle (cheap clone) for other shared state.
    pub fn connection(&self) -> Link {
        self.conn.clone()
    }

    /// [`HostBudget::admit_within`] on the shared budget.
    pub async fn admit(
        &self,
        host: &str,
        now: Instant,
        wall: SystemTime,
        hold_left: Duration,
    ) -> Decided<Reservation> {
        let key = host_key(host);
        // A new request's admit: whatever reservation an earlier request
        // lost, that request has started (or given up) since.
        if let Some(mut s) = self.seen.get_mut(key.as_ref()) {
            s.voided = false;
        }
        if let Some(wait) = self.keep_unstored(&key, now, hold_left) {
            self.stats.ops.fetch_add(1, Ordering::Relaxed);
            return Decided {
                value: wait,
                basis: Basis::Shared,
            };
        }
        // A slot that is now is started in the same call, unless a start
        // decided earlier still waits to be picked up.
        let fuse = !self.early.contains_key(key.as_ref());
        let d = self
            .run(&key, now, wall, LeaseAction::Take, |b, p, _| {
                let r = b.admit_within(p, now, hold_left);
                if r == Reservation::Go && fuse {
                    let mut started = b.clone();
                    if started.try_start_since(p, now, hold_left, now) == Start::Go {
                        *b = started;
                        return (r, true, Waiting::Left);
                    }
                }
                let waiting = Waiting::after_admit(&r);
                (r, false, waiting)
            })
            .await;
        if let Some(lease) = d.value.1 {
            self.early.insert(Box::from(key.as_ref()), (now, lease));
        }
        Decided {
            value: d.value.0,
            basis: d.basis,
        }
    }

    /// An admit that must wait, decided on the copy seen last and kept
    /// here, when this proxy alone has been changing the host lately.
    fn keep_unstored(&self, key: &str, now: Instant, hold_left: Duration) -> Option<Reservation> {
        if self.is_degraded() {
            return None;
        }
        let p = self.table().for_host(key);
        let mut seen = self.seen.get_mut(key)?;
        let quiet = seen
            .conflict_at
            .is_none_or(|t| now.saturating_duration_since(t) >= QUIET);
        if !quiet || seen.pending.is_some() || seen.voided {
            return None;
        }
        let mut budget = seen.budget.clone();
        let r = budget.admit_within(&p, now, hold_left);
        if !matches!(r, Reservation::Wait(_)) {
            return None;
        }
        seen.pending = Some(budget);
        Some(r)
    }

    /// [`HostBudget::try_start_since`] on the shared budget; on `Go` the
    /// in-flight slot is a lease.
    pub async fn try_start_since(
        &self,
        host: &str,
        now: Instant,
        wall: SystemTime,
        hold_left: Duration,
        reserved: Instant,
    ) -> Decided<(Start, Option<Lease>)> {
        self.try_start_then_admit(host, now, wall, hold_left, reserved, None)
            .await
    }

    /// [`RedisHosts::try_start_since`], and on `Go` with `next_hold` the
    /// admit of the next request of the host's line in the same call
    /// (held at most `next_hold`), for [`RedisHosts::take_early_admit`]
    /// to hand it: the slot it would have reserved the moment this one
    /// left the line, without a round trip of its own.
    pub async fn try_start_then_admit(
        &self,
        host: &str,
        now: Instant,
        wall: SystemTime,
        hold_left: Duration,
        reserved: Instant,
        next_hold: Option<Duration>,
    ) -> Decided<(Start, Option<Lease>)> {
        let key = host_key(host);
        if let Some((_, (_, lease))) = self.early.remove(key.as_ref()) {
            self.stats.ops.fetch_add(1, Ordering::Relaxed);
            let basis = match lease {
                Lease::Shared(_) => Basis::Shared,
                Lease::Local => Basis::Degraded,
            };
            return Decided {
                value: (Start::Go, Some(lease)),
                basis,
            };
        }
        let d = self
            .run(&key, now, wall, LeaseAction::Take, |b, p, lost| {
                // A reservation that was never stored is reserved again,
                // on the copy that replaced it.
                let s = if lost {
                    match b.admit_within(p, now, hold_left) {
                        Reservation::Go => b.try_start_since(p, now, hold_left, now),
                        Reservation::Wait(d) => Start::Wait(d),
                        Reservation::Refuse(r) => Start::Refuse(r),
                    }
                } else {
                    b.try_start_since(p, now, hold_left, reserved)
                };
                let go = s == Start::Go;
                let next = next_hold
                    .filter(|_| go)
                    .and_then(|h| early::admit_next(b, p, now, h));
                let waiting = Waiting::after_start(&s, next);
                ((s, next), go, waiting)
            })
            .await;
        if let Some(mut s) = self.seen.get_mut(key.as_ref()) {
            s.voided = false;
        }
        let ((start, next), lease) = d.value;
        if let Some(wait) = next {
            self.keep_early_admit(&key, now, wait, d.basis);
        }
        Decided {
            value: (start, lease),
            basis: d.basis,
        }
    }

    /// [`HostBudget::on_timed_answer`] on the shared budget, giving `lease`
    /// back: a slow answer on one proxy slows the host for all.
    #[allow(clippy::too_many_arguments)]
    pub async fn on_response(
        &self,
        host: &str,
        lease: &Lease,
        now: Instant,
        wall: SystemTime,
        status: u16,
        retry_after: Option<&str>,
        announced: Option<&Announced>,
        ttfb_ms: Option<u64>,
        jitter: f64,
    ) -> Decided<Reaction> {
        // A request started on the stand-in still teaches the cluster when
        // Redis answers now: a 429 kept local would leave the other proxies
        // at the rate that drew it.
        let action = match lease {
            Lease::Shared(id) => LeaseAction::Release(id),
            Lease::Local => LeaseAction::ReleaseLocal,
        };
        self.run(host, now, wall, action, |b, p, _| {
            let r = b.on_timed_answer(
                p,
                now,
                wall,
                status,
                retry_after,
                announced,
                ttfb_ms,
                jitter,
            );
            (r, false, Waiting::Unchanged)
        })
        .await
        .map(|(r, _)| r)
    }

    /// [`HostBudget::on_failure`] on the shared budget, giving `lease`
    /// back: a timeout on one proxy counts towards the host's pause for
    /// every proxy of the cluster.
    pub async fn on_failure(
        &self,
        host: &str,
        lease: &Lease,
        now: Instant,
        wall: SystemTime,
        failure: Failure,
        jitter: f64,
    ) -> Decided<Option<Reaction>> {
        let action = match lease {
            Lease::Shared(id) => LeaseAction::Release(id),
            Lease::Local => LeaseAction::ReleaseLocal,
        };
        self.run(host, now, wall, action, |b, p, _| {
            (
                b.on_failure(p, now, failure, jitter),
                false,
                Waiting::Unchanged,
            )
        })
        .await
        .map(|(r, _)| r)
    }

    /// Gives `lease` back without a response to learn from.
    pub async fn finish(&self, host: &str, lease: &Lease, now: Instant, wall: SystemTime) {
        match lease {
            Lease::Local => {
                self.local(host, now, |b, p| b.finish(p, now));
            }
            Lease::Shared(id) => {
                self.run(host, now, wall, LeaseAction::Release(id), |b, p, _| {
                    (b.finish(p, now), false, Waiting::Unchanged)
                })
                .await;
            }
        }
    }

    /// [`HostBudget::set_crawl_delay`] on the shared budget. Skips the round
    /// trip when the copy seen last already has this delay.
    pub async fn set_crawl_delay(
        &self,
        host: &str,
        now: Instant,
        wall: SystemTime,
        delay_secs: Option<f64>,
    ) {
        let key = host_key(host);
        let want = delay_secs
            .filter(|d| d.is_finite() && *d > 0.0)
            .map(|d| Duration::from_millis((d * 1000.0).round() as u64));
        if let Some(seen) = self.seen.get(key.as_ref()) {
            let p = self.table().for_host(&key);
            if seen.budget.view(&p, now).crawl_delay == want {
                return;
            }
        } else if want.is_none() {
            return;
        }
        // A slot reserved ahead for the next request was spaced without
        // this delay: that request reserves its own.
        self.early_admits.remove(key.as_ref());
        self.run(&key, now, wall, LeaseAction::None, |b, p, _| {
            (
                b.set_crawl_delay(p, now, delay_secs),
                false,
                Waiting::Unchanged,
            )
        })
        .await;
    }

    /// An operator's reset ([`HostBudget::reset`]) of the shared budget:
    /// every proxy of the cluster sees it at its next request to `host`.
    pub async fn reset(&self, host: &str, now: Instant, wall: SystemTime) -> Decided<ResetReport> {
        // Slots reserved behind the old pause are void: so is one decided
        // here for the next request.
        self.early_admits.remove(host_key(host).as_ref());
        self.run(host, now, wall, LeaseAction::Announce, |b, p, _| {
            (b.reset(p, now), false, Waiting::Unchanged)
        })
        .await
        .map(|(r, _)| r)
    }

    // --- internals ---

    /// Runs `decide` on the shared budget of `host` until a decision is
    /// stored, or on the local stand-in when Redis is out of reach or the
    /// host's copy keeps changing under this proxy. The `bool` of `decide`
    /// asks for a lease (with `LeaseAction::Take`); its own `bool` argument
    /// says that a reservation this proxy kept unstored is not in the copy
    /// it decides on.
    async fn run<R>(
        &self,
        host: &str,
        now: Instant,
        wall: SystemTime,
        action: LeaseAction<'_>,
        mut decide: impl FnMut(&mut HostBudget, &HostParams, bool) -> (R, bool, Waiting),
    ) -> Decided<(R, Option<Lease>)> {
        self.stats.ops.fetch_add(1, Ordering::Relaxed);
        let key = host_key(host);
        let p = self.table().for_host(&key);
        let basis = if self.fallback.may_try_shared(now) {
            match self.shared(&key, &p, now, wall, &action, &mut decide).await {
                Ok(value) => {
                    self.fallback.back_to_shared();
                    let releasing_local = matches!(action, LeaseAction::ReleaseLocal);
                    self.fallback.settle(&key, &p, now, releasing_local);
                    return Decided {
                        value,
                        basis: Basis::Shared,
                    };
                }
                Err(Miss::Unreachable(why)) => {
                    self.fallback.degrade(now, &why);
                    Basis::Degraded
                }
                Err(Miss::Contended) => {
                    // Redis answered every round, so it is not out of reach.
                    self.fallback.back_to_shared();
                    self.stats.contended_ops.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        "{key}: other proxies changed its shared budget {MAX_ROUNDS} times in a \
                         row; this step is decided alone at 1/{} of the shared rate, the \
                         store stays shared",
                        self.settings.instances_hint
                    );
                    Basis::Contended
                }
            }
        } else {
            Basis::Degraded
        };
        if basis == Basis::Degraded {
            self.stats.degraded_ops.fetch_add(1, Ordering::Relaxed);
        }
        // The stand-in is made from the stored copy: a reservation kept
        // unstored is not in it.
        let lost = self.void_pending(&key);
        let (r, lease, _) = self.local(&key, now, |b, p| decide(b, p, lost));
        let lease = (lease && matches!(action, LeaseAction::Take)).then_some(Lease::Local);
        Decided {
            value: (r, lease),
            basis,
        }
    }

    /// Drops the reservation of `key` kept unstored, if any; `true` when
    /// one is lost, now or by an earlier operation.
    fn void_pending(&self, key: &str) -> bool {
        let Some(mut s) = self.seen.get_mut(key) else {
            return false;
        };
        if s.pending.take().is_some() {
            s.voided = true;
        }
        s.voided
    }

    /// Runs `f` on the local stand-in of `host`, made on first use from the
    /// last shared copy seen (or a new host) at the degraded rate.
    fn local<R>(
        &self,
        host: &str,
        now: Instant,
        f: impl FnOnce(&mut HostBudget, &HostParams) -> R,
    ) -> R {
        let key = host_key(host);
        let p = self.table().for_host(&key);
        let shared = || self.seen.get(key.as_ref()).map(|s| s.budget.clone());
        self.fallback
            .run(&key, &p, now, self.table().max_hosts, shared, f)
    }
}

/// The budget in `bytes` (empty: none yet). Bytes from another version
/// count as no budget: the next store replaces them.
fn decode_or_new(p: &HostParams, bytes: &[u8], now: Instant, wall: SystemTime) -> HostBudget {
    if bytes.is_empty() {
        return HostBudget::new(p, now);
    }
    HostBudget::decode(p, bytes, 0, now, wall).unwrap_or_else(|_| HostBudget::new(p, now))
}

/// Names this proxy's leases: the host name and process id, with the start
/// time `wall` so that a restarted process does not reuse a dead one's leases.
fn instance_id(wall: SystemTime) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_default();
    let t = wall
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    format!("{host}:{}:{t:x}", std::process::id())
}

#[cfg(test)]
mod tests;
