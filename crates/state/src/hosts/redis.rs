//! Host budgets shared by every proxy of a crawl cluster through Redis.
//!
//! Policy runs in Rust; Redis only keeps each host's encoded `HostBudget`
//! ([`HostBudget::encode`]) and its concurrency leases. An operation decides
//! on the copy this proxy saw last and sends the decision with that copy to
//! one Lua script ([`SCRIPT`]), which stores it only if the copy is still
//! current (compare-and-set) and otherwise answers with the current one to
//! decide again. So a request costs one round trip per step (admit, start,
//! response) while one proxy drives a host, and two when another proxy
//! changed it meanwhile.
//!
//! When Redis does not answer within the command timeout the store decides
//! alone ("degraded") on a local copy at the host's last known shared rate
//! divided by `instances_hint`, tries Redis again every `probe_every`, and
//! drops the local copies once Redis answers. It never fails a request and
//! never decides above the shared rate.
//!
//! An operation that loses its compare-and-set [`MAX_ROUNDS`] times is
//! contention on that one host, not an outage: Redis answered every time.
//! Only that operation is decided on the host's local copy, made the same
//! way at the same floor rate ([`Basis::Contended`]); the store stays shared.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use dashmap::DashMap;
use mannerly_policy::budget::{
    host_key, Announced, BudgetParams, HostBudget, HostParams, HostView, Reaction, Reservation,
    ResetReport, Start,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;

/// The Lua script every budget operation runs (see the file for its contract).
pub const SCRIPT: &str = include_str!("redis/op.lua");
/// Compare-and-set rounds before an operation gives up on the shared copy
/// (only reached when other proxies keep changing one host's budget). The
/// operation is then decided locally ([`Basis::Contended`]); other hosts and
/// later operations still go to Redis.
const MAX_ROUNDS: u32 = 8;

/// How to reach Redis and how to behave without it.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// `redis://host:port/db`.
    pub url: String,
    /// Prepended to every key, so that several crawls can share one Redis.
    pub key_prefix: String,
    /// How many proxies share the budgets; a proxy alone takes
    /// 1/`instances_hint` of a host's rate (at least 1).
    pub instances_hint: u32,
    /// A command that takes longer counts as Redis being out of reach.
    pub command_timeout: Duration,
    /// A concurrency lease outlives a proxy that died holding it this long.
    pub lease_ttl: Duration,
    /// An encoded budget nobody touched for this long is forgotten.
    pub budget_ttl: Duration,
    /// While degraded, Redis is tried again at most this often.
    pub probe_every: Duration,
}

impl RedisSettings {
    /// Settings for `url` with the defaults: prefix `mannerly:`, 4
    /// instances, 50 ms command timeout, 45 s leases, 7 h budgets, 1 s probe.
    pub fn new(url: impl Into<String>) -> RedisSettings {
        RedisSettings {
            url: url.into(),
            key_prefix: String::from("mannerly:"),
            instances_hint: 4,
            command_timeout: Duration::from_millis(50),
            lease_ttl: Duration::from_secs(45),
            budget_ttl: Duration::from_secs(7 * 3600),
            probe_every: Duration::from_secs(1),
        }
    }
}

/// Why a Redis store could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RedisHostsError {
    /// The budget parameters are invalid.
    #[error(transparent)]
    Params(#[from] mannerly_policy::ParamError),
    /// The URL is not a Redis URL.
    #[error("state.redis_url: {0}")]
    Url(redis::RedisError),
}

/// An answer of the store and what it was decided on.
#[derive(Clone, Debug, PartialEq)]
pub struct Decided<T> {
    /// The decision.
    pub value: T,
    /// The cluster's copy, or this proxy's stand-in and why.
    pub basis: Basis,
}

/// What a decision of the store was made on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// The cluster's copy in Redis.
    Shared,
    /// This proxy's stand-in at the degraded rate: Redis is out of reach.
    Degraded,
    /// This proxy's stand-in at the degraded rate, for this one operation:
    /// other proxies changed the host's copy under it on every one of its
    /// compare-and-set rounds (8). Redis answers, and the store stays shared.
    Contended,
}

/// An in-flight slot taken by [`RedisHosts::try_start_since`]; give it back
/// with [`RedisHosts::on_response`] or [`RedisHosts::finish`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lease {
    /// A lease in Redis, expiring after `lease_ttl` if never released.
    Shared(String),
    /// A slot of the local stand-in (taken while degraded).
    Local,
}

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
    conn: ConnectionManager,
    script: redis::Script,
    instance: String,
    next_lease: AtomicU64,
    /// The last shared copy this proxy saw of each host.
    seen: DashMap<Box<str>, Seen>,
    /// The stand-ins used while degraded.
    local: DashMap<Box<str>, Local>,
    mode: Mutex<Mode>,
    stats: RedisStats,
}

struct Seen {
    bytes: Vec<u8>,
    leases: u32,
    budget: HostBudget,
}

struct Local {
    budget: HostBudget,
    /// The degraded cap as a minimum spacing, kept over any Crawl-delay.
    spacing_ms: u64,
}

#[derive(Default)]
struct Mode {
    degraded: bool,
    /// While degraded: when the next request may try Redis.
    probe_at: Option<Instant>,
}

enum LeaseAction<'a> {
    None,
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
    /// A store on the Redis at `settings.url`. Connects lazily: a proxy
    /// starts (degraded) while Redis is still down. Needs a tokio runtime.
    /// `wall` is the wall time now: it tells this process's leases from
    /// those of an earlier process with the same host name and pid.
    pub fn new(
        params: BudgetParams,
        settings: RedisSettings,
        wall: SystemTime,
    ) -> Result<Self, RedisHostsError> {
        let params = params.validate()?;
        let client = redis::Client::open(settings.url.as_str()).map_err(RedisHostsError::Url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.command_timeout))
            .set_response_timeout(Some(settings.command_timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(RedisHostsError::Url)?;
        Ok(RedisHosts {
            params: super::BudgetTable::new(params),
            script: redis::Script::new(SCRIPT),
            instance: instance_id(wall),
            next_lease: AtomicU64::new(0),
            seen: DashMap::new(),
            local: DashMap::new(),
            mode: Mutex::new(Mode::default()),
            stats: RedisStats::default(),
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
        self.mode.lock().map(|m| m.degraded).unwrap_or(true)
    }

    /// The key prefix, for other shared state of the same crawl.
    pub fn settings(&self) -> &RedisSettings {
        &self.settings
    }

    /// A connection handle (cheap clone) for other shared state.
    pub fn connection(&self) -> ConnectionManager {
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
        self.reserve(host, now, wall, |b, p| b.admit_within(p, now, hold_left))
            .await
    }

    /// [`HostBudget::admit_robots`] on the shared budget: the slot of a
    /// robots.txt fetch, not charged to the page behind it.
    pub async fn admit_robots(
        &self,
        host: &str,
        now: Instant,
        wall: SystemTime,
        hold_left: Duration,
    ) -> Decided<Reservation> {
        self.reserve(host, now, wall, |b, p| b.admit_robots(p, now, hold_left))
            .await
    }

    /// A slot reservation on the shared budget, no lease involved.
    async fn reserve(
        &self,
        host: &str,
        now: Instant,
        wall: SystemTime,
        mut decide: impl FnMut(&mut HostBudget, &HostParams) -> Reservation,
    ) -> Decided<Reservation> {
        self.run(host, now, wall, LeaseAction::None, |b, p| {
            (decide(b, p), false)
        })
        .await
        .map(|(a, _)| a)
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
        self.run(host, now, wall, LeaseAction::Take, |b, p| {
            let s = b.try_start_since(p, now, hold_left, reserved);
            let go = s == Start::Go;
            (s, go)
        })
        .await
    }

    /// [`HostBudget::on_response`] on the shared budget, giving `lease` back.
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
        jitter: f64,
    ) -> Decided<Reaction> {
        // A request started on the stand-in still teaches the cluster when
        // Redis answers now: a 429 kept local would leave the other proxies
        // at the rate that drew it.
        let action = match lease {
            Lease::Shared(id) => LeaseAction::Release(id),
            Lease::Local => LeaseAction::ReleaseLocal,
        };
        self.run(host, now, wall, action, |b, p| {
            (
                b.on_answer(p, now, wall, status, retry_after, announced, jitter),
                false,
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
                self.run(host, now, wall, LeaseAction::Release(id), |b, p| {
                    (b.finish(p, now), false)
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
        self.run(&key, now, wall, LeaseAction::None, |b, p| {
            (b.set_crawl_delay(p, now, delay_secs), false)
        })
        .await;
    }

    /// An operator's reset ([`HostBudget::reset`]) of the shared budget:
    /// every proxy of the cluster sees it at its next request to `host`.
    pub async fn reset(&self, host: &str, now: Instant, wall: SystemTime) -> Decided<ResetReport> {
        self.run(host, now, wall, LeaseAction::None, |b, p| {
            (b.reset(p, now), false)
        })
        .await
        .map(|(r, _)| r)
    }

    /// The host as this proxy saw it last (its stand-in while degraded).
    pub fn view(&self, host: &str, now: Instant) -> Option<HostView> {
        let key = host_key(host);
        let p = self.table().for_host(&key);
        if self.is_degraded() {
            if let Some(l) = self.local.get(key.as_ref()) {
                return Some(l.budget.view(&p, now));
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
        let before = self.seen.len() + self.local.len();
        self.seen
            .retain(|h, s| !s.budget.forgettable(&self.table().for_host(h), now));
        self.local
            .retain(|h, l| !l.budget.forgettable(&self.table().for_host(h), now));
        before.saturating_sub(self.seen.len() + self.local.len())
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

    // --- internals ---

    /// Runs `decide` on the shared budget of `host` until a decision is
    /// stored, or on the local stand-in when Redis is out of reach or the
    /// host's copy keeps changing under this proxy. The `bool` of `decide`
    /// asks for a lease (with `LeaseAction::Take`).
    async fn run<R>(
        &self,
        host: &str,
        now: Instant,
        wall: SystemTime,
        action: LeaseAction<'_>,
        mut decide: impl FnMut(&mut HostBudget, &HostParams) -> (R, bool),
    ) -> Decided<(R, Option<Lease>)> {
        self.stats.ops.fetch_add(1, Ordering::Relaxed);
        let key = host_key(host);
        let p = self.table().for_host(&key);
        let basis = if self.may_try_shared(now) {
            match self.shared(&key, &p, now, wall, &action, &mut decide).await {
                Ok(value) => {
                    self.back_to_shared();
                    self.settle_local(&key, &p, now, &action);
                    return Decided {
                        value,
                        basis: Basis::Shared,
                    };
                }
                Err(Miss::Unreachable(why)) => {
                    self.degrade(now, &why);
                    Basis::Degraded
                }
                Err(Miss::Contended) => {
                    // Redis answered every round, so it is not out of reach.
                    self.back_to_shared();
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
        let (r, lease) = self.local(&key, now, |b, p| decide(b, p));
        let lease = (lease && matches!(action, LeaseAction::Take)).then_some(Lease::Local);
        Decided {
            value: (r, lease),
            basis,
        }
    }

    /// After a decision stored in Redis: gives back the stand-in's slot the
    /// operation was releasing, and drops a stand-in that holds no slot, so
    /// that the next fallback starts from the newest shared copy instead of
    /// one that may miss a pause learned since.
    fn settle_local(&self, key: &str, p: &HostParams, now: Instant, action: &LeaseAction<'_>) {
        if matches!(action, LeaseAction::ReleaseLocal) {
            if let Some(mut l) = self.local.get_mut(key) {
                l.budget.finish(p, now);
            }
        }
        self.local.remove_if(key, |_, l| l.budget.in_flight() == 0);
    }

    async fn shared<R>(
        &self,
        key: &str,
        p: &HostParams,
        now: Instant,
        wall: SystemTime,
        action: &LeaseAction<'_>,
        decide: &mut impl FnMut(&mut HostBudget, &HostParams) -> (R, bool),
    ) -> Result<(R, Option<Lease>), Miss> {
        let releasing_shared = matches!(action, LeaseAction::Release(_));
        // The slot being given back is in flight until the decision frees it.
        let releasing = releasing_shared || matches!(action, LeaseAction::ReleaseLocal);
        let (mut bytes, mut leases) = match self.seen.get(key) {
            // Our own release leaves one lease fewer.
            Some(s) => (
                s.bytes.clone(),
                s.leases.saturating_sub(u32::from(releasing_shared)),
            ),
            None => (Vec::new(), 0),
        };
        let blob_key = format!("{}h:{key}", self.settings.key_prefix);
        let lease_key = format!("{}l:{key}", self.settings.key_prefix);
        for _ in 0..MAX_ROUNDS {
            let mut budget = decode_or_new(p, &bytes, now, wall);
            budget.set_in_flight(leases + u32::from(releasing));
            let (value, wants_lease) = decide(&mut budget, p);
            let take = wants_lease && matches!(action, LeaseAction::Take);
            let new_bytes = budget.encode(now, wall);
            let changed = new_bytes != bytes;
            let lease_id = match action {
                LeaseAction::Release(id) => (*id).to_string(),
                _ if take => format!(
                    "{}:{}",
                    self.instance,
                    self.next_lease.fetch_add(1, Ordering::Relaxed)
                ),
                _ => String::new(),
            };
            let mut inv = self.script.key(&blob_key);
            inv.key(&lease_key)
                .arg(&bytes[..])
                .arg(leases)
                .arg(if changed { &new_bytes[..] } else { &[][..] })
                .arg(ms(self.settings.budget_ttl))
                .arg(match action {
                    LeaseAction::Release(_) => "-",
                    _ if take => "+",
                    _ => "",
                })
                .arg(&lease_id)
                .arg(ms(self.settings.lease_ttl));
            let mut conn = self.conn.clone();
            self.stats.round_trips.fetch_add(1, Ordering::Relaxed);
            let answer: Vec<Value> = match tokio::time::timeout(
                self.settings.command_timeout,
                inv.invoke_async(&mut conn),
            )
            .await
            {
                Ok(Ok(v)) => v,
                Ok(Err(e)) => return Err(Miss::Unreachable(e.to_string())),
                Err(_) => {
                    return Err(Miss::Unreachable(format!(
                        "no answer within {:?}",
                        self.settings.command_timeout
                    )))
                }
            };
            let stored = matches!(answer.first(), Some(Value::Int(1)));
            let now_leases = match answer.get(1) {
                Some(Value::Int(n)) => u32::try_from(*n).unwrap_or(u32::MAX),
                _ => {
                    return Err(Miss::Unreachable(String::from(
                        "unexpected answer from the budget script",
                    )))
                }
            };
            if stored {
                budget.set_in_flight(now_leases);
                self.seen.insert(
                    Box::from(key),
                    Seen {
                        bytes: if changed { new_bytes } else { bytes },
                        leases: now_leases,
                        budget,
                    },
                );
                let lease = take.then_some(Lease::Shared(lease_id));
                return Ok((value, lease));
            }
            self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
            bytes = match answer.get(2) {
                Some(Value::BulkString(b)) => b.clone(),
                _ => Vec::new(),
            };
            leases = now_leases;
        }
        // The newest copy Redis answered: the stand-in this operation falls
        // back to is made from it (with any pause another proxy learned),
        // and the next operation starts from it.
        let mut budget = decode_or_new(p, &bytes, now, wall);
        budget.set_in_flight(leases);
        self.seen.insert(
            Box::from(key),
            Seen {
                bytes,
                leases,
                budget,
            },
        );
        Err(Miss::Contended)
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
        let mut entry = self
            .local
            .entry(Box::from(key.as_ref()))
            .or_insert_with(|| {
                let shared = self
                    .seen
                    .get(key.as_ref())
                    .map(|s| s.budget.clone())
                    .unwrap_or_else(|| HostBudget::new(&p, now));
                let (budget, spacing_ms) = shared.degraded(&p, now, self.settings.instances_hint);
                Local { budget, spacing_ms }
            });
        let spacing = entry.spacing_ms;
        let before = entry.budget.view(&p, now).crawl_delay;
        let r = f(&mut entry.budget, &p);
        // A Crawl-delay applied meanwhile must not lift the degraded cap.
        let after = entry.budget.view(&p, now).crawl_delay;
        if after != before && after.is_none_or(|d| (d.as_millis() as u64) < spacing) {
            entry
                .budget
                .set_crawl_delay(&p, now, Some(spacing as f64 / 1000.0));
        }
        r
    }

    fn may_try_shared(&self, now: Instant) -> bool {
        let Ok(mut m) = self.mode.lock() else {
            return false;
        };
        if !m.degraded {
            return true;
        }
        // One request at a time probes; the others stay local meanwhile.
        match m.probe_at {
            Some(at) if now < at => false,
            _ => {
                m.probe_at = Some(now + self.settings.probe_every);
                true
            }
        }
    }

    fn degrade(&self, now: Instant, why: &str) {
        if let Ok(mut m) = self.mode.lock() {
            if !m.degraded {
                tracing::warn!(
                    "redis out of reach ({why}): deciding alone at 1/{} of the shared rates",
                    self.settings.instances_hint
                );
                m.degraded = true;
            }
            m.probe_at = Some(now + self.settings.probe_every);
        }
    }

    fn back_to_shared(&self) {
        let Ok(mut m) = self.mode.lock() else {
            return;
        };
        if m.degraded {
            m.degraded = false;
            m.probe_at = None;
            self.local.clear();
            tracing::info!("redis answers again: budgets are shared again");
        }
    }
}

impl<T> Decided<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Decided<U> {
        Decided {
            value: f(self.value),
            basis: self.basis,
        }
    }
}

// === impl Basis ===

impl Basis {
    /// The audit line's `state`: `shared`, `degraded` or `contended`.
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Shared => "shared",
            Basis::Degraded => "degraded",
            Basis::Contended => "contended",
        }
    }

    /// Decided on this proxy's stand-in rather than the cluster's copy.
    pub fn is_local(self) -> bool {
        self != Basis::Shared
    }

    /// What a request let go was decided on, from its slot's reservation
    /// and its start: local if either was (a slot reserved on the stand-in
    /// makes the request a local decision even when its start was shared),
    /// the start's otherwise.
    pub fn of_request(reserved: Option<Basis>, started: Option<Basis>) -> Option<Basis> {
        match started {
            Some(b) if b.is_local() => Some(b),
            _ => reserved.filter(|b| b.is_local()).or(started),
        }
    }
}

#[cfg(test)]
mod basis_tests {
    use super::Basis::{self, Contended, Degraded, Shared};

    #[test]
    fn a_request_is_local_if_its_slot_or_its_start_was() {
        let of = Basis::of_request;
        assert_eq!(of(Some(Shared), Some(Shared)), Some(Shared));
        assert_eq!(of(Some(Contended), Some(Shared)), Some(Contended));
        assert_eq!(of(Some(Shared), Some(Degraded)), Some(Degraded));
        assert_eq!(of(Some(Degraded), Some(Contended)), Some(Contended));
        assert_eq!(of(None, Some(Shared)), Some(Shared));
        assert_eq!(of(Some(Degraded), None), Some(Degraded));
        assert_eq!(of(None, None), None);
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

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
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
