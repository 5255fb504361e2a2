//! The budget of one host: rate slots, pause, breaker, concurrency gate.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize, Serializer};

use super::params::{micro, millis, HostParams, MAX_BREAKER_THRESHOLD};
use super::retry_after::parse_retry_after;
use crate::Outcome;

mod shared;
pub use shared::{DecodeError, ENCODED_LEN};

/// Marks an empty time slot in the compact clock.
const NONE: u32 = u32::MAX;
/// Longest gap between two sends that counts towards the observed pace.
const MAX_SEND_GAP_MS: u64 = 10_000;
/// Earlier throttles remembered besides the last one.
const RING: usize = MAX_BREAKER_THRESHOLD as usize - 1;
/// The compact clock counts u32 milliseconds from `base`; well before it
/// would overflow (49 days) `base` moves forward.
const REBASE_AFTER_MS: u64 = 1 << 31;
/// History kept across a re-base: more than the longest ceiling relaxation
/// (7 days, enforced by `validate`), so nothing that still matters is lost.
const KEEP_MS: u64 = 8 * 86_400_000;
/// Slowest spacing between two requests (a Crawl-delay of a day).
const MAX_INTERVAL_MS: u64 = 86_400_000;
/// Retry-After values are logged raw, but not at any length.
const RAW_RETRY_AFTER_MAX: usize = 64;

/// What [`HostBudget::admit`] decided for a new request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The rate slot is now: call [`HostBudget::try_start`].
    Go,
    /// A rate slot is reserved this far ahead, in arrival order: sleep, then
    /// call [`HostBudget::try_start`].
    Wait(Duration),
    /// Not held: answer the client at once.
    Refuse(Refusal),
}

/// What [`HostBudget::try_start`] decided for a request whose slot has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Send it; an in-flight slot is taken until `on_response` or `finish`.
    Go,
    /// The host was paused meanwhile: a new slot after the pause is reserved
    /// this far ahead; sleep, then call `try_start` again.
    Wait(Duration),
    /// The concurrency limit is reached: wait until `finish`/`on_response`
    /// of another request (or the end of the hold), then call again.
    WaitConcurrency,
    /// Not held any longer: answer the client at once.
    Refuse(Refusal),
}

/// Why a request is answered by the proxy instead of being held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The host is paused for longer than the request may be held.
    Paused {
        /// Remaining pause.
        retry_after: Duration,
    },
    /// The breaker is open for longer than the request may be held.
    BreakerOpen {
        /// Remaining time until the breaker closes.
        retry_after: Duration,
    },
    /// The rate queue is full, or the reserved slot would be later than the
    /// hold allows.
    QueueFull {
        /// When the refused slot would have come.
        retry_after: Duration,
    },
}

impl Refusal {
    /// The Retry-After the client should get.
    pub fn retry_after(&self) -> Duration {
        match *self {
            Refusal::Paused { retry_after }
            | Refusal::BreakerOpen { retry_after }
            | Refusal::QueueFull { retry_after } => retry_after,
        }
    }

    /// The audit outcome and `Mannerly-Decision` of this refusal.
    pub fn outcome(&self) -> Outcome {
        match self {
            Refusal::Paused { .. } => Outcome::Paused,
            Refusal::BreakerOpen { .. } => Outcome::BreakerOpen,
            Refusal::QueueFull { .. } => Outcome::QueueFull,
        }
    }

    /// The status the client gets: 429 for a paused host, 503 for a full queue.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Paused { .. } | Refusal::BreakerOpen { .. } => 429,
            Refusal::QueueFull { .. } => 503,
        }
    }
}

/// What the budget learned from a response.
#[derive(Clone, Debug, PartialEq)]
pub enum Reaction {
    /// A success (anything but 429 and 5xx): the rate recovered a step.
    Ok {
        /// Rate now, requests/s.
        rate: f64,
        /// Ceiling now, requests/s.
        ceiling: f64,
    },
    /// A 5xx that is not a throttle: the rate was lowered mildly.
    SlowedDown {
        /// Rate now, requests/s.
        rate: f64,
        /// Ceiling now (unchanged), requests/s.
        ceiling: f64,
    },
    /// A 429, or a 503 with Retry-After: the host is paused and slowed.
    Throttled(Throttle),
}

impl Reaction {
    /// Rate after the reaction, requests/s (audit `rate`).
    pub fn rate(&self) -> f64 {
        match self {
            Reaction::Ok { rate, .. } | Reaction::SlowedDown { rate, .. } => *rate,
            Reaction::Throttled(t) => t.rate,
        }
    }

    /// Ceiling after the reaction, requests/s (audit `ceiling`).
    pub fn ceiling(&self) -> f64 {
        match self {
            Reaction::Ok { ceiling, .. } | Reaction::SlowedDown { ceiling, .. } => *ceiling,
            Reaction::Throttled(t) => t.ceiling,
        }
    }
}

/// The details of a throttle, for the retry decision and the audit line.
#[derive(Clone, Debug, PartialEq)]
pub struct Throttle {
    /// How long the host is now paused for, from `now` (audit `pause_s`).
    /// With an open breaker this is the breaker's remaining time.
    pub pause: Duration,
    /// The Retry-After that was used, if it was usable.
    pub retry_after: Option<Duration>,
    /// The Retry-After header as received (first 64 bytes), for audit `retry_after`.
    pub retry_after_raw: Option<String>,
    /// The rate that drew the throttle, requests/s.
    pub rate_before: f64,
    /// Rate now, requests/s.
    pub rate: f64,
    /// Ceiling now, requests/s.
    pub ceiling: f64,
    /// Concurrency limit now.
    pub concurrency: u32,
    /// This throttle opened the breaker.
    pub breaker_opened: bool,
}

/// A host's budget as seen from outside: audit lines and the `/hosts` API.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostView {
    /// Current rate, requests/s (after ceiling and Crawl-delay caps).
    pub rate: f64,
    /// Current learned ceiling, requests/s (`max_rate` when nothing is learned).
    pub ceiling: f64,
    /// Current concurrency limit.
    pub concurrency: u32,
    /// Requests in flight.
    pub in_flight: u32,
    /// Requests holding a future rate slot, estimated from the reserved time
    /// ahead at the current rate (exact while the rate is steady).
    pub queued: u32,
    /// Remaining pause (any cause, breaker included), in seconds when serialised.
    #[serde(serialize_with = "opt_secs")]
    pub paused_for: Option<Duration>,
    /// Remaining time the breaker stays open, in seconds when serialised.
    #[serde(serialize_with = "opt_secs")]
    pub breaker_open_for: Option<Duration>,
    /// The Crawl-delay in force, in seconds when serialised.
    #[serde(serialize_with = "opt_secs")]
    pub crawl_delay: Option<Duration>,
    /// Throttles inside the breaker window.
    pub recent_throttles: u32,
}

impl HostView {
    /// Why a request that ran out of hold while waiting in the host's line
    /// is answered by the proxy: the open breaker or the pause if there is
    /// one (with its remaining time), else a full queue.
    pub fn hold_refusal(&self) -> Refusal {
        match (self.breaker_open_for, self.paused_for) {
            (Some(d), _) => Refusal::BreakerOpen { retry_after: d },
            (None, Some(d)) => Refusal::Paused { retry_after: d },
            (None, None) => Refusal::QueueFull {
                retry_after: QUEUE_RETRY_AFTER,
            },
        }
    }
}

/// Retry-After for a full queue: the line moves at the host's rate, so a
/// second is a fair first guess.
pub const QUEUE_RETRY_AFTER: Duration = Duration::from_secs(1);

fn opt_secs<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

/// What of a host must survive a restart, with wall-clock deadlines
/// (unix milliseconds) since `Instant`s do not outlive a process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PersistedHost {
    /// Rate, requests/s.
    pub rate: f64,
    /// Ceiling as set by the last throttle, requests/s (it relaxes from there).
    pub ceiling: f64,
    /// When the last throttle came (unix ms).
    pub throttled_at_ms: Option<u64>,
    /// Earlier throttles still in the breaker history (unix ms, newest first).
    pub earlier_throttles_ms: Vec<u64>,
    /// End of the pause (unix ms).
    pub paused_until_ms: Option<u64>,
    /// The pause is an open breaker.
    pub breaker: bool,
    /// Concurrency limit.
    pub concurrency: u32,
    /// Throttles since the last success (the backoff exponent).
    pub strikes: u8,
    /// Crawl-delay in force, seconds.
    pub crawl_delay_secs: Option<f64>,
}

/// The budget state of one host: 72 bytes.
///
/// Times are `u32` milliseconds after `base` (`NONE` when unset), rates are
/// micro-requests per second. Rate slots follow GCRA: `tat` is the
/// theoretical arrival time of the next request; a request may go at
/// `tat − (burst − 1) × interval`, which makes reservations FIFO and spaced
/// at exactly one interval.
#[derive(Clone, Debug)]
pub struct HostBudget {
    base: Instant,
    tat: u32,
    pause: u32,
    /// Last throttle: the ceiling was set then and relaxes from then.
    throttled: u32,
    /// Earlier throttles, as milliseconds before `throttled`.
    history: [u32; RING],
    rate: u32,
    ceiling: u32,
    crawl_delay_ms: u32,
    /// Last send, and the smoothed gap between sends (ms): the pace the host
    /// was really driven at, which lags the rate while old slots drain.
    sent: u32,
    gap: u32,
    concurrency: u16,
    in_flight: u16,
    streak: u16,
    strikes: u8,
    breaker: bool,
}

// === impl HostBudget ===

impl HostBudget {
    /// A host never seen before: start rate, full burst, nothing learned.
    pub fn new(p: &HostParams, now: Instant) -> HostBudget {
        HostBudget {
            base: now,
            tat: NONE,
            pause: NONE,
            throttled: NONE,
            history: [NONE; RING],
            rate: p.start_u(),
            ceiling: p.max_u(),
            crawl_delay_ms: 0,
            sent: NONE,
            gap: NONE,
            concurrency: p.concurrency_u(),
            in_flight: 0,
            streak: 0,
            strikes: 0,
            breaker: false,
        }
    }

    /// Reserves the next rate slot, holding at most `max_hold`.
    pub fn admit(&mut self, p: &HostParams, now: Instant) -> Admission {
        self.admit_within(p, now, p.max_hold())
    }

    /// Reserves the next rate slot if it comes within `hold_left` (for a
    /// request already held a while, e.g. a retry after a throttle).
    ///
    /// A slot is never before the end of a pause. Nothing is reserved when
    /// the answer is `Refuse`.
    pub fn admit_within(&mut self, p: &HostParams, now: Instant, hold_left: Duration) -> Admission {
        let n = self.tick(now);
        if let Some(refusal) = self.pause_refusal(n, now, hold_left) {
            return Admission::Refuse(refusal);
        }
        let interval = self.interval_ms(p, n);
        let tau = self.tau_ms(p, n);
        let pause = get(self.pause).unwrap_or(0);
        let tat = get(self.tat).unwrap_or(0);
        let slot = n.max(tat.saturating_sub(tau)).max(pause);
        let wait = self.at(slot).saturating_duration_since(now);
        if slot > n {
            let open = n.max(pause);
            let waiters = (slot - open).div_ceil(interval) + u64::from(pause > n);
            if waiters > u64::from(p.queue_limit) || wait > hold_left {
                return Admission::Refuse(Refusal::QueueFull { retry_after: wait });
            }
        }
        self.tat = put(tat.max(slot) + interval);
        if slot > n {
            Admission::Wait(wait)
        } else {
            Admission::Go
        }
    }

    /// Called when a reserved slot has come (or a concurrency waiter woke):
    /// re-checks the pause, then the concurrency gate. `hold_left` is what
    /// remains of the request's hold.
    pub fn try_start(&mut self, p: &HostParams, now: Instant, hold_left: Duration) -> Start {
        self.try_start_since(p, now, hold_left, now)
    }

    /// [`HostBudget::try_start`] for a waiter whose slot was reserved at
    /// `reserved`. A slot reserved before the last throttle was spaced for
    /// a rate the site has since refused: it is given up and a new one is
    /// reserved at the lowered rate (in wake-up order, which is the old
    /// FIFO order). On `Wait`, the waiter's new reservation time is `now`.
    pub fn try_start_since(
        &mut self,
        p: &HostParams,
        now: Instant,
        hold_left: Duration,
        reserved: Instant,
    ) -> Start {
        let n = self.tick(now);
        let reserved_ms = self.ms(reserved);
        let stale = get(self.throttled).is_some_and(|t| reserved_ms < t);
        if stale || get(self.pause).is_some_and(|u| u > n) {
            match self.admit_within(p, now, hold_left) {
                Admission::Wait(d) => return Start::Wait(d),
                Admission::Refuse(r) => return Start::Refuse(r),
                Admission::Go => {}
            }
        }
        if self.in_flight >= self.concurrency_limit(p) {
            return Start::WaitConcurrency;
        }
        self.in_flight = self.in_flight.saturating_add(1);
        self.note_send(n);
        Start::Go
    }

    /// Releases an in-flight slot without a response to learn from (network
    /// error, timeout, client gone). Returns whether a concurrency waiter
    /// could start now. After `on_response`, waking one waiter is always
    /// safe: a waiter that finds the gate still full waits again.
    pub fn finish(&mut self, p: &HostParams, now: Instant) -> bool {
        let _ = self.tick(now);
        self.in_flight = self.in_flight.saturating_sub(1);
        self.in_flight < self.concurrency_limit(p)
    }

    /// Learns from a response and releases its in-flight slot.
    ///
    /// - 429, or 503 with a Retry-After header: pause for the Retry-After
    ///   (see [`parse_retry_after`]) or else exponential backoff reduced by
    ///   `jitter` ∈ [0, 1); rate × `throttle_rate_factor`; ceiling =
    ///   `ceiling_factor` × the rate that drew it; concurrency ×
    ///   `concurrency_factor` (min 1); `breaker_threshold` throttles younger
    ///   than `breaker_window_secs` open the breaker (a pause of
    ///   `breaker_open_secs`).
    /// - other 5xx: rate × `server_error_factor`.
    /// - anything else: rate + `recovery_step`, capped by the ceiling.
    pub fn on_response(
        &mut self,
        p: &HostParams,
        now: Instant,
        wall: SystemTime,
        status: u16,
        retry_after: Option<&str>,
        jitter: f64,
    ) -> Reaction {
        let n = self.tick(now);
        self.in_flight = self.in_flight.saturating_sub(1);
        if status == 429 || (status == 503 && retry_after.is_some()) {
            return Reaction::Throttled(self.throttle(p, n, now, wall, retry_after, jitter));
        }
        let rate = self.rate_u(p, n);
        if (500..600).contains(&status) {
            self.streak = 0;
            let tau = self.tau_ms(p, n);
            self.rate = scale(rate, p.server_error_factor)
                .max(p.floor_u())
                .min(rate);
            self.keep_next_slot(p, n, tau);
            return Reaction::SlowedDown {
                rate: f(self.rate_u(p, n)),
                ceiling: f(self.ceiling_u(p, n)),
            };
        }
        self.strikes = 0;
        self.streak = self.streak.saturating_add(1);
        self.rate = rate.saturating_add(p.step_u()).min(self.cap_u(p, n));
        if self.concurrency < p.concurrency_u()
            && u32::from(self.streak) % p.concurrency_recovery_successes.max(1) == 0
        {
            self.concurrency += 1;
        }
        Reaction::Ok {
            rate: f(self.rate_u(p, n)),
            ceiling: f(self.ceiling_u(p, n)),
        }
    }

    /// Applies a robots.txt Crawl-delay (seconds): the rate is capped at
    /// 1/delay. `None`, zero, negative or non-finite lift the cap; a delay
    /// above a day counts as a day. Cheap and idempotent, so the proxy may
    /// call it after every robots lookup.
    pub fn set_crawl_delay(&mut self, p: &HostParams, now: Instant, delay_secs: Option<f64>) {
        let n = self.tick(now);
        let tau = self.tau_ms(p, n);
        self.crawl_delay_ms = match delay_secs {
            Some(d) if d.is_finite() && d > 0.0 => {
                millis(d).min(MAX_INTERVAL_MS) as u32 // bounded just above
            }
            _ => 0,
        };
        self.keep_next_slot(p, n, tau);
    }

    /// The host as seen at `now`.
    pub fn view(&self, p: &HostParams, now: Instant) -> HostView {
        let n = self.ms(now);
        let paused = get(self.pause)
            .filter(|&u| u > n)
            .map(|u| self.at(u).saturating_duration_since(now));
        HostView {
            rate: f(self.rate_u(p, n)),
            ceiling: f(self.ceiling_u(p, n)),
            concurrency: u32::from(self.concurrency_limit(p)),
            in_flight: u32::from(self.in_flight),
            queued: u32::try_from(self.queued(p, n)).unwrap_or(u32::MAX),
            paused_for: paused,
            breaker_open_for: paused.filter(|_| self.breaker),
            crawl_delay: (self.crawl_delay_ms > 0)
                .then(|| Duration::from_millis(u64::from(self.crawl_delay_ms))),
            recent_throttles: self.recent_throttles(p, n),
        }
    }

    /// Nothing in flight, no reserved slot ahead (the bucket has refilled),
    /// no pause.
    pub fn is_idle(&self, now: Instant) -> bool {
        let n = self.ms(now);
        self.in_flight == 0
            && get(self.tat).is_none_or(|t| t <= n)
            && get(self.pause).is_none_or(|u| u <= n)
    }

    /// Idle and with nothing left to remember: no pause or breaker, the
    /// ceiling fully relaxed, and the rate not below the start rate (a rate
    /// slowed by 5xx is forgotten too once the host has been idle for
    /// `ceiling_relax_secs`). Such a host may be dropped; a fresh one is
    /// indistinguishable. A Crawl-delay is not kept: robots.txt gives it
    /// again.
    pub fn forgettable(&self, p: &HostParams, now: Instant) -> bool {
        let n = self.ms(now);
        let slow = self.rate_u(p, n) < p.start_u().min(self.cap_u(p, n));
        let long_idle = get(self.tat).is_none_or(|t| n >= t.saturating_add(p.relax_ms()));
        self.is_idle(now) && self.ceiling_u(p, n) >= p.max_u() && (!slow || long_idle)
    }

    /// The state worth keeping across a restart, or `None` when there is no
    /// live pause, open breaker or lowered ceiling.
    pub fn persist(&self, p: &HostParams, now: Instant, wall: SystemTime) -> Option<PersistedHost> {
        let n = self.ms(now);
        let paused = get(self.pause).filter(|&u| u > n);
        if paused.is_none() && self.ceiling_u(p, n) >= p.max_u() {
            return None;
        }
        let unix = |ms: u64| unix_ms(self.at(ms), now, wall);
        let throttled = get(self.throttled);
        let earlier = match throttled {
            Some(t) => self
                .history
                .iter()
                .filter_map(|&h| get(h))
                .filter_map(|h| t.checked_sub(h))
                .map(unix)
                .collect(),
            None => Vec::new(),
        };
        Some(PersistedHost {
            rate: f(self.rate.max(1)),
            ceiling: f(self.ceiling),
            throttled_at_ms: throttled.map(unix),
            earlier_throttles_ms: earlier,
            paused_until_ms: paused.map(unix),
            breaker: self.breaker && paused.is_some(),
            concurrency: u32::from(self.concurrency),
            strikes: self.strikes,
            crawl_delay_secs: (self.crawl_delay_ms > 0)
                .then(|| f64::from(self.crawl_delay_ms) / 1000.0),
        })
    }

    /// Rebuilds a host from [`HostBudget::persist`] output, trusting none of
    /// it: values are clamped to the parameters, past deadlines dropped.
    pub fn restore(
        p: &HostParams,
        saved: &PersistedHost,
        now: Instant,
        wall: SystemTime,
    ) -> HostBudget {
        // The base lies in the past so that past throttles fit the clock.
        let (base, n) = match now.checked_sub(Duration::from_millis(KEEP_MS)) {
            Some(base) => (base, KEEP_MS),
            None => (now, 0),
        };
        let wall_ms = wall
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let local = |unix: u64| -> Option<u64> {
            if unix >= wall_ms {
                n.checked_add(unix - wall_ms)
            } else {
                // Where the clock cannot reach that far back, a past event
                // counts as just now: the conservative side.
                Some(n.saturating_sub(wall_ms - unix))
            }
        };
        let mut b = HostBudget::new(p, now);
        b.base = base;
        b.set_crawl_delay(p, now, saved.crawl_delay_secs);
        let floor = p.floor_u();
        b.rate = micro(saved.rate).clamp(1, p.max_u());
        b.ceiling = micro(saved.ceiling).clamp(floor, p.max_u());
        if let Some(t) = saved.throttled_at_ms.and_then(local) {
            b.throttled = put(t);
            let mut earlier: Vec<u64> = saved
                .earlier_throttles_ms
                .iter()
                .filter_map(|&e| local(e))
                .filter_map(|e| t.checked_sub(e))
                .collect();
            earlier.sort_unstable();
            for (slot, e) in b.history.iter_mut().zip(earlier) {
                *slot = put(e);
            }
        }
        if let Some(u) = saved.paused_until_ms.and_then(local).filter(|&u| u > n) {
            let u = u.min(n + KEEP_MS);
            b.pause = put(u);
            b.breaker = saved.breaker;
            b.tat = put(u + b.tau_ms(p, n));
        }
        b.concurrency = u16::try_from(saved.concurrency)
            .unwrap_or(u16::MAX)
            .clamp(1, p.concurrency_u());
        b.strikes = saved.strikes;
        b
    }

    // --- internals ---

    /// A 429 that arrives while the host is already paused answers a request
    /// sent before the pause began (nothing is sent during one): it is the
    /// same episode, so it may lengthen the pause but neither halves the
    /// rate again nor counts towards the breaker.
    fn echo(
        &mut self,
        p: &HostParams,
        n: u64,
        now: Instant,
        wall: SystemTime,
        raw: Option<&str>,
        rate: u32,
    ) -> Throttle {
        let retry_after = raw.and_then(|r| parse_retry_after(r, wall, p.max_pause()));
        let current = get(self.pause).unwrap_or(n);
        let until = match retry_after {
            Some(d) => current.max(
                self.ms_ceil(now)
                    .saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            ),
            None => current,
        };
        if until > current {
            let tau = self.tau_ms(p, n);
            self.pause = put(until);
            let next = get(self.tat).map_or(0, |t| t.saturating_sub(tau));
            self.tat = put(next.max(until) + tau);
        }
        Throttle {
            pause: self.at(until).saturating_duration_since(now),
            retry_after,
            retry_after_raw: raw.map(truncate),
            rate_before: f(rate),
            rate: f(self.rate_u(p, n)),
            ceiling: f(self.ceiling_u(p, n)),
            concurrency: u32::from(self.concurrency_limit(p)),
            breaker_opened: false,
        }
    }

    fn note_send(&mut self, n: u64) {
        if let Some(last) = get(self.sent) {
            // Long idle gaps are capped so one quiet spell does not read as
            // a crawl of one request a day.
            let gap = n.saturating_sub(last).clamp(1, MAX_SEND_GAP_MS);
            self.gap = put(match get(self.gap) {
                // Half-weight smoothing: follows a climbing pace within a
                // couple of sends, which is what a throttle must judge.
                Some(g) => (g + gap) / 2,
                None => gap,
            });
        }
        self.sent = put(n);
    }

    /// The rate that drew a throttle: the nominal rate, or the pace requests
    /// really went out at when that was slower (slots reserved at an older,
    /// lower rate are still draining while the rate climbs).
    fn drawn_rate_u(&self, p: &HostParams, n: u64) -> u32 {
        let nominal = self.rate_u(p, n);
        match get(self.gap) {
            Some(g) => nominal
                .min(u32::try_from(1_000_000_000 / g.max(1)).unwrap_or(u32::MAX))
                .max(1),
            None => nominal,
        }
    }

    fn throttle(
        &mut self,
        p: &HostParams,
        n: u64,
        now: Instant,
        wall: SystemTime,
        raw: Option<&str>,
        jitter: f64,
    ) -> Throttle {
        let tau_before = self.tau_ms(p, n);
        if get(self.pause).is_some_and(|until| until > n) {
            let rate = self.rate_u(p, n);
            return self.echo(p, n, now, wall, raw, rate);
        }
        let rate_before = self.drawn_rate_u(p, n);
        let floor = p.floor_u();
        let ceiling = scale(rate_before, p.ceiling_factor).max(floor);
        let rate = scale(rate_before, p.throttle_rate_factor)
            .max(floor)
            .min(ceiling)
            .min(rate_before);

        if let Some(last) = get(self.throttled) {
            let d = u32::try_from(n.saturating_sub(last)).unwrap_or(NONE);
            for i in (1..RING).rev() {
                self.history[i] = self.history[i - 1].saturating_add(d);
            }
            self.history[0] = d;
        }
        self.throttled = put(n);
        self.ceiling = ceiling;
        self.rate = rate;
        self.concurrency = scale_count(self.concurrency_limit(p), p.concurrency_factor);
        self.streak = 0;
        self.strikes = self.strikes.saturating_add(1);

        let retry_after = raw.and_then(|r| parse_retry_after(r, wall, p.max_pause()));
        let pause_ms = match retry_after {
            Some(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            None => backoff_ms(p, self.strikes, jitter),
        };
        // Round the start up so that a pause is never shorter than asked.
        let from = self.ms_ceil(now);
        let mut until = from.saturating_add(pause_ms);
        let breaker_opened = self.recent_throttles(p, n) >= p.breaker_threshold;
        if breaker_opened {
            until = until.max(from + p.breaker_open_ms());
            self.breaker = true;
            // Counting starts afresh once the breaker has opened: the same
            // 429s must not open it again when it closes.
            self.history = [NONE; RING];
        }
        let until = until.max(get(self.pause).unwrap_or(0));
        self.pause = put(until);
        // No burst after a pause: the first slot is its end, then one per
        // interval. Slots promised before the throttle were spaced for a rate
        // the site refused; their holders reserve again (`try_start_since`),
        // so they must not push the new schedule back.
        let _ = tau_before;
        self.tat = put(until + self.tau_ms(p, n));

        Throttle {
            pause: self.at(until).saturating_duration_since(now),
            retry_after,
            retry_after_raw: raw.map(truncate),
            rate_before: f(rate_before),
            rate: f(self.rate_u(p, n)),
            ceiling: f(self.ceiling_u(p, n)),
            concurrency: u32::from(self.concurrency_limit(p)),
            breaker_opened,
        }
    }

    /// Milliseconds since `base` (saturating), re-basing first if the
    /// compact clock is running out, and expiring a past pause.
    fn tick(&mut self, now: Instant) -> u64 {
        let mut n = self.ms(now);
        if n >= REBASE_AFTER_MS {
            let shift = n - KEEP_MS;
            self.base = self.at(shift);
            for t in [
                &mut self.tat,
                &mut self.pause,
                &mut self.throttled,
                &mut self.sent,
            ] {
                *t = match get(*t) {
                    Some(v) if v > shift => put(v - shift),
                    _ => NONE,
                };
            }
            n = self.ms(now);
        }
        if get(self.pause).is_some_and(|u| u <= n) {
            self.pause = NONE;
            self.breaker = false;
        }
        n
    }

    fn pause_refusal(&self, n: u64, now: Instant, hold_left: Duration) -> Option<Refusal> {
        let until = get(self.pause).filter(|&u| u > n)?;
        let retry_after = self.at(until).saturating_duration_since(now);
        if retry_after <= hold_left {
            return None;
        }
        Some(if self.breaker {
            Refusal::BreakerOpen { retry_after }
        } else {
            Refusal::Paused { retry_after }
        })
    }

    fn ms(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }

    fn ms_ceil(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.base);
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        ms.saturating_add(u64::from(!d.subsec_nanos().is_multiple_of(1_000_000)))
    }

    fn at(&self, ms: u64) -> Instant {
        self.base
            .checked_add(Duration::from_millis(ms))
            .unwrap_or(self.base)
    }

    /// The learned ceiling at `n`: from its value at the last throttle,
    /// linearly back to `max_rate` over `ceiling_relax_secs`.
    fn ceiling_u(&self, p: &HostParams, n: u64) -> u32 {
        let max = p.max_u();
        let Some(t) = get(self.throttled) else {
            return max;
        };
        let relax = p.relax_ms();
        let elapsed = n.saturating_sub(t);
        if elapsed >= relax {
            return max;
        }
        let c0 = u64::from(self.ceiling.min(max));
        let c = c0 + (u64::from(max) - c0) * elapsed / relax;
        u32::try_from(c).unwrap_or(max)
    }

    /// Highest rate allowed now: ceiling and Crawl-delay.
    fn cap_u(&self, p: &HostParams, n: u64) -> u32 {
        let crawl = match self.crawl_delay_ms {
            0 => u32::MAX,
            d => u32::try_from(1_000_000_000 / u64::from(d)).unwrap_or(u32::MAX),
        };
        self.ceiling_u(p, n).min(crawl).max(1)
    }

    fn rate_u(&self, p: &HostParams, n: u64) -> u32 {
        self.rate.min(self.cap_u(p, n)).max(1)
    }

    /// Spacing between slots, rounded up to whole milliseconds so that the
    /// budget is never faster than its rate.
    fn interval_ms(&self, p: &HostParams, n: u64) -> u64 {
        1_000_000_000u64
            .div_ceil(u64::from(self.rate_u(p, n)))
            .max(u64::from(self.crawl_delay_ms))
            .clamp(1, MAX_INTERVAL_MS)
    }

    /// How far `tat` runs ahead of the next slot: the unused burst.
    fn tau_ms(&self, p: &HostParams, n: u64) -> u64 {
        u64::from(p.burst.max(1) - 1) * self.interval_ms(p, n)
    }

    /// After a rate drop the burst allowance is longer in time; moving `tat`
    /// with it keeps the next slot where it was, so that no reservation
    /// lands before one already given.
    fn keep_next_slot(&mut self, p: &HostParams, n: u64, tau_before: u64) {
        if let Some(tat) = get(self.tat) {
            let next = tat.saturating_sub(tau_before);
            self.tat = put(next + self.tau_ms(p, n));
        }
    }

    fn concurrency_limit(&self, p: &HostParams) -> u16 {
        self.concurrency.min(p.concurrency_u()).max(1)
    }

    fn queued(&self, p: &HostParams, n: u64) -> u64 {
        let interval = self.interval_ms(p, n);
        let tau = self.tau_ms(p, n);
        let pause = get(self.pause).filter(|&u| u > n).unwrap_or(0);
        let tat = get(self.tat).unwrap_or(0);
        let next = n.max(tat.saturating_sub(tau)).max(pause);
        let ahead = (next - n.max(pause)).div_ceil(interval) + u64::from(pause > n);
        ahead.saturating_sub(1)
    }

    fn recent_throttles(&self, p: &HostParams, n: u64) -> u32 {
        let Some(last) = get(self.throttled) else {
            return 0;
        };
        let window = p.window_ms();
        let age = n.saturating_sub(last);
        if age >= window {
            return 0;
        }
        let earlier = self
            .history
            .iter()
            .filter(|&&h| h != NONE && age + u64::from(h) < window)
            .count();
        1 + earlier as u32
    }
}

fn get(v: u32) -> Option<u64> {
    (v != NONE).then_some(u64::from(v))
}

fn put(ms: u64) -> u32 {
    u32::try_from(ms).unwrap_or(NONE - 1).min(NONE - 1)
}

fn f(micro: u32) -> f64 {
    f64::from(micro) / 1e6
}

fn scale(micro: u32, factor: f64) -> u32 {
    (f64::from(micro) * factor)
        .round()
        .clamp(0.0, f64::from(u32::MAX)) as u32
}

fn scale_count(n: u16, factor: f64) -> u16 {
    ((f64::from(n) * factor).floor() as u16).max(1)
}

fn backoff_ms(p: &HostParams, strikes: u8, jitter: f64) -> u64 {
    let doublings = u32::from(strikes.max(1) - 1).min(40);
    let d = p
        .backoff_base_ms()
        .saturating_mul(1u64 << doublings)
        .min(p.backoff_max_ms());
    let j = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let d = (d as f64 * (1.0 - p.backoff_jitter * j)).round() as u64;
    d.min(p.max_pause_ms())
}

fn unix_ms(t: Instant, now: Instant, wall: SystemTime) -> u64 {
    let at = if t >= now {
        wall.checked_add(t - now)
    } else {
        wall.checked_sub(now - t)
    };
    at.and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn truncate(raw: &str) -> String {
    let mut end = raw.len().min(RAW_RETRY_AFTER_MAX);
    while !raw.is_char_boundary(end) {
        end -= 1;
    }
    raw[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_72_bytes() {
        assert_eq!(std::mem::size_of::<HostBudget>(), 72);
    }
}
