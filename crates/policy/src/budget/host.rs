//! The budget of one host: rate slots, pause, breaker, concurrency gate.

use std::time::{Duration, Instant, SystemTime};

use super::decision::{Reaction, Refusal, Reservation, Start};
use super::limit::Outcome;
use super::params::{millis, HostParams, MAX_BREAKER_THRESHOLD};
use super::Distress;

mod distress;
pub(super) mod history;
mod pace;
pub(super) mod sends;
mod shared;
mod throttle;
mod turn;
mod view;
pub use shared::{DecodeError, ENCODED_LEN};

/// Marks an empty time slot in the compact clock.
const NONE: u32 = u32::MAX;
/// Longest gap between two sends that counts towards the short read
/// (`pace.rs`).
const MAX_SEND_GAP_MS: u64 = 10_000;
/// Marks an unknown gap between sends.
const GAP_NONE: u16 = u16::MAX;
/// Earlier throttles remembered besides the last one.
const RING: usize = MAX_BREAKER_THRESHOLD as usize - 1;
/// The compact clock counts u32 milliseconds from `base`; well before it
/// would overflow (49 days) `base` moves forward.
const REBASE_AFTER_MS: u64 = 1 << 31;
/// History kept across a re-base: more than the longest ceiling relaxation
/// (7 days, enforced by `validate`), so nothing that still matters is lost.
pub(super) const KEEP_MS: u64 = 8 * 86_400_000;
/// Slowest spacing between two requests (a Crawl-delay of a day).
const MAX_INTERVAL_MS: u64 = 86_400_000;
/// Retry-After values are logged raw, but not at any length.
const RAW_RETRY_AFTER_MAX: usize = 64;
/// The budget state of one host: 88 bytes.
///
/// Times are `u32` milliseconds after `base` (`NONE` when unset), rates are
/// micro-requests per second. Rate slots follow GCRA: `tat` is the
/// theoretical arrival time of the next request; a request may go at
/// `tat − (burst − 1) × interval`, which makes reservations FIFO and spaced
/// at exactly one interval.
#[derive(Clone, Debug)]
pub struct HostBudget {
    pub(super) base: Instant,
    pub(super) tat: u32,
    /// The latest slot given (`NONE` when unknown, or given up after a
    /// throttle): an announced pace re-spaces the queue behind it exactly.
    pub(super) slot: u32,
    pub(super) pause: u32,
    /// Last throttle: the ceiling was set then and relaxes from then.
    pub(super) throttled: u32,
    /// Earlier throttles, as milliseconds before `throttled`.
    pub(super) history: [u32; RING],
    pub(super) rate: u32,
    pub(super) ceiling: u32,
    pub(super) crawl_delay_ms: u32,
    /// Rate cap from a limit the origin announced (already scaled by
    /// `announced_share`), micro-requests/s; 0 when none.
    pub(super) announced: u32,
    /// Last send, and the last two gaps between sends (ms, newest first,
    /// `GAP_NONE` when unknown): the pace the host was really driven at,
    /// which lags the rate while the rate climbs.
    pub(super) sent: u32,
    pub(super) gaps: [u16; 2],
    /// Start of the window the long read of the pace covers (`pace.rs`),
    /// the sends inside it, and the fastest short pace the origin accepted
    /// in it (hundredths of a request/s).
    pub(super) since: u32,
    pub(super) sends: u16,
    pub(super) accepted: u16,
    pub(super) concurrency: u16,
    pub(super) in_flight: u16,
    pub(super) streak: u16,
    pub(super) strikes: u8,
    /// `BREAKER`: the pause is the breaker's. `LENT`: the host's first
    /// reservation lent the second its slot ([`HostBudget::admit_within`]).
    pub(super) flags: u8,
    /// The latest distress event (`NONE` when none): the window of
    /// `distress_threshold` counts from the events inside it.
    pub(super) distressed: u32,
    /// Time to first byte, ms: the baseline (falls fast, rises slowly) and
    /// the fast average; 0 when nothing was measured.
    pub(super) latency_base: u16,
    pub(super) latency_fast: u16,
    /// Distress events in the current window, 500s in a row, and the
    /// latest event's code ([`Distress::from_code`]).
    pub(super) events: u8,
    pub(super) errors: u8,
    pub(super) event: u8,
    /// Rate cap from slow answers, micro-requests/s (0 when none): lowered
    /// with the rate when the answers slow down, raised a step by each
    /// answer that is quick again.
    pub(super) latency_cap: u32,
    /// The last cut for slowness: one a second at most, since the answers
    /// to requests sent before it cannot show its effect.
    pub(super) slowed: u32,
    /// The last sends and what became of each: the site's limit is read
    /// from them on a 429.
    pub(super) log: sends::SendLog,
}

/// `flags`: the pause in force is an open breaker.
pub(super) const BREAKER: u8 = 1;
/// `flags`: the next reservation may take the slot the first one lent.
pub(super) const LENT: u8 = 2;
/// `flags`: the latest reservation went early on the loan; its send is
/// read as half a second after the one it borrowed from (`pace.rs`).
pub(super) const ON_LOAN: u8 = 4;
/// `flags`: the latest send went on the loan.
pub(super) const LOAN_SENT: u8 = 8;
/// `flags`: the pause in force is for distress: requests are answered at
/// once, not held to its end.
pub(super) const DISTRESS: u8 = 16;
/// `flags`: the ceiling is a share of the limit the sends showed
/// (`limit.rs`): the rate climbs back to it as it climbs before a first
/// 429, by a factor, not a step.
pub(super) const LEARNED: u8 = 32;
/// `flags`: the last throttle read a limit from the sends and went to its
/// share at once; a 429 under it shows it was read too fast, and the next
/// is read weighed by the clock's phases (`limit.rs`).
pub(super) const AT_ONCE: u8 = 64;
/// `flags`: the limit gone to at once was a guess, the slowest the sends
/// fit above the pace let through (`limit::slowest_above`); a 429 under
/// it shows the guess was on the wrong side, and DESIGN's rule applies.
pub(super) const GUESSED: u8 = 128;

// === impl HostBudget ===

impl HostBudget {
    /// A host never seen before: start rate, full burst, nothing learned.
    pub fn new(p: &HostParams, now: Instant) -> HostBudget {
        HostBudget {
            base: now,
            tat: NONE,
            slot: NONE,
            pause: NONE,
            throttled: NONE,
            history: [NONE; RING],
            rate: p.start_u(),
            ceiling: p.max_u(),
            crawl_delay_ms: 0,
            announced: 0,
            sent: NONE,
            gaps: [GAP_NONE; 2],
            since: NONE,
            sends: 0,
            accepted: 0,
            concurrency: p.concurrency_u(),
            in_flight: 0,
            streak: 0,
            strikes: 0,
            flags: 0,
            distressed: NONE,
            latency_base: 0,
            latency_fast: 0,
            events: 0,
            errors: 0,
            event: 0,
            latency_cap: 0,
            slowed: NONE,
            log: sends::SendLog::default(),
        }
    }

    /// Reserves the next rate slot, holding at most `max_hold`.
    pub fn admit(&mut self, p: &HostParams, now: Instant) -> Reservation {
        self.admit_within(p, now, p.max_hold())
    }

    /// Reserves the next rate slot if it comes within `hold_left` (for a
    /// request already held a while, e.g. a retry after a throttle).
    ///
    /// A slot is never before the end of a pause. Nothing is reserved when
    /// the answer is `Refuse`.
    ///
    /// A host never sent to (nor throttled) lends its first reservation's
    /// slot to the second: the two may go together, and the third waits
    /// two intervals from the first. For a new origin the first request
    /// is its robots.txt fetch, which sites count like any request; without
    /// the loan the page a crawler asked for would wait a whole interval
    /// behind it (a second at the start rate), and a crawl of many new
    /// hosts would go at one page per client per second. Over the first
    /// three requests the pace is still the rate's. A Crawl-delay, a burst
    /// above one, or any throttle leaves nothing to lend.
    pub fn admit_within(
        &mut self,
        p: &HostParams,
        now: Instant,
        hold_left: Duration,
    ) -> Reservation {
        let n = self.tick(now);
        if let Some(refusal) = self.pause_refusal(n, now, hold_left) {
            return Reservation::Refuse(refusal);
        }
        let interval = self.interval_ms(p, n);
        let lend = self.tat == NONE
            && self.sent == NONE
            && self.throttled == NONE
            && self.crawl_delay_ms == 0
            && p.burst <= 1;
        let owed = self.flags & LENT != 0;
        let tau = self.tau_ms(p, n);
        let pause = get(self.pause).unwrap_or(0);
        let tat = match (get(self.tat), get(self.slot).max(get(self.sent))) {
            // The last slot was spaced at the rate when it was given; a
            // rate that rose since (an answer came in between) spaces this
            // one already, or each step of a climb lags a request behind.
            // (With a burst, `tat` runs ahead of the last slot by design,
            // and the slot after a loan repays it.)
            (Some(t), Some(last)) if self.flags & (LENT | ON_LOAN | LOAN_SENT) == 0 && tau == 0 => {
                t.min(last + interval)
            }
            (t, _) => t.unwrap_or(0),
        };
        let slot = n.max(tat.saturating_sub(tau)).max(pause);
        let wait = self.at(slot).saturating_duration_since(now);
        if slot > n {
            let open = n.max(pause);
            let waiters = (slot - open).div_ceil(interval) + u64::from(pause > n);
            if waiters > u64::from(p.queue_limit) || (wait > hold_left && waiters > 1) {
                return Reservation::Refuse(Refusal::QueueFull { retry_after: wait });
            }
            if wait > hold_left {
                // First in line: the pace, not a queue, is what is too slow.
                return Reservation::Refuse(Refusal::Paced { retry_after: wait });
            }
        }
        // The lending slot leaves `tat` where it is; the one on the loan
        // pays for both.
        self.tat = put(match (lend, owed) {
            (true, _) => slot,
            (false, true) => (tat + interval).max(slot) + interval,
            (false, false) => tat.max(slot) + interval,
        });
        let early = owed && slot < tat + interval;
        self.slot = put(slot);
        self.flags &= !(LENT | ON_LOAN);
        self.flags |= if lend { LENT } else { 0 } | if early { ON_LOAN } else { 0 };
        if slot > n {
            Reservation::Wait(wait)
        } else {
            Reservation::Go
        }
    }

    /// [`HostBudget::admit_within`] for a request that may not go on the
    /// first slot's loan: a redirect of the robots.txt fetch that lent it.
    /// The loan is called in (the lending slot takes its whole interval),
    /// so the page behind the redirect waits its turn as well.
    pub fn admit_own_within(
        &mut self,
        p: &HostParams,
        now: Instant,
        hold_left: Duration,
    ) -> Reservation {
        let n = self.tick(now);
        if self.flags & LENT != 0 {
            if let Some(tat) = get(self.tat) {
                self.tat = put(tat + self.interval_ms(p, n));
            }
            self.flags &= !LENT;
        }
        self.admit_within(p, now, hold_left)
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
                Reservation::Wait(d) => return Start::Wait(d),
                Reservation::Refuse(r) => return Start::Refuse(r),
                Reservation::Go => {}
            }
        }
        if self.in_flight >= self.concurrency_limit(p) {
            return Start::WaitConcurrency;
        }
        self.in_flight = self.in_flight.saturating_add(1);
        self.note_send(n);
        // The origin counts sends, not slots: one late on its slot (a busy
        // scheduler, a connection being opened, a concurrency wait) must not
        // bring the next closer than an interval to it. nginx `limit_req`
        // without a burst refuses a gap 20 ms short of its interval. A slot
        // lent to the next request is left where it is.
        if self.flags & LENT == 0 {
            let next = n + self.interval_ms(p, n);
            self.tat = put(get(self.tat).map_or(next, |t| t.max(next)));
        }
        Start::Go
    }

    /// Releases an in-flight slot without a response to learn from (network
    /// error, timeout, client gone). Returns whether a concurrency waiter
    /// could start now. After `on_response`, waking one waiter is always
    /// safe: a waiter that finds the gate still full waits again.
    pub fn finish(&mut self, p: &HostParams, now: Instant) -> bool {
        let _ = self.tick(now);
        // The send log is left alone: with a shared store a slot may be
        // given back twice (a lease already gone), and a second mark would
        // change the budget and tell every proxy of nothing. A send left
        // waiting takes the next answer, one off until it leaves the log.
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
    /// - 502, 503, 504 (without Retry-After) and every `server_error_run`th
    ///   500 in a row: a distress event ([`HostBudget::on_failure`]).
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
            self.errors = 0;
            self.log.answer(Outcome::Refused);
            return Reaction::Throttled(self.throttle(p, n, now, wall, retry_after, jitter));
        }
        self.log.answer(Outcome::Accepted);
        if let Some(event) = Distress::of_status(status) {
            self.errors = 0;
            return Reaction::Distressed(self.distress(p, n, now, event, jitter));
        }
        if status == 500 {
            self.errors = self.errors.saturating_add(1);
            if u32::from(self.errors) >= p.server_error_run {
                self.errors = 0;
                let event = Distress::ServerErrors;
                return Reaction::Distressed(self.distress(p, n, now, event, jitter));
            }
        } else {
            self.errors = 0;
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
                ceiling: f(self.shown_ceiling_u(p, n)),
            };
        }
        self.strikes = 0;
        self.streak = self.streak.saturating_add(1);
        self.note_accepted();
        // Before the first 429 nothing is known of the host's limit, so the
        // rate grows geometrically to find it; afterwards it creeps back
        // under the ceiling that 429 taught.
        let grown = match get(self.throttled) {
            Some(_) if self.flags & LEARNED == 0 => 0,
            _ => scale(rate, p.slow_start_factor),
        };
        self.rate = rate
            .saturating_add(p.step_u())
            .max(grown)
            .min(self.cap_u(p, n));
        if self.concurrency < p.concurrency_u()
            && u32::from(self.streak) % p.concurrency_recovery_successes.max(1) == 0
        {
            self.concurrency += 1;
        }
        Reaction::Ok {
            rate: f(self.rate_u(p, n)),
            ceiling: f(self.shown_ceiling_u(p, n)),
        }
    }

    /// Whether a Crawl-delay is in force. Without one,
    /// [`HostBudget::set_crawl_delay`] with `None` changes nothing that can
    /// be seen, so a caller may skip it and the parameters it needs (nearly
    /// every request asks, and nearly every site has no delay).
    pub fn has_crawl_delay(&self) -> bool {
        self.crawl_delay_ms > 0
    }

    /// Applies a robots.txt Crawl-delay (seconds): the rate is capped at
    /// 1/delay. `None`, zero, negative or non-finite lift the cap; a delay
    /// above a day counts as a day. Cheap and idempotent, so the proxy may
    /// call it after every robots lookup.
    ///
    /// A delay that is new or changed counts from the host's last send: the
    /// robots.txt fetch that brought it was given its slot at the rate
    /// before it, so without this the page behind it would wait that
    /// rate's interval, not the delay.
    pub fn set_crawl_delay(&mut self, p: &HostParams, now: Instant, delay_secs: Option<f64>) {
        let n = self.tick(now);
        let tau = self.tau_ms(p, n);
        let before = self.crawl_delay_ms;
        self.crawl_delay_ms = match delay_secs {
            Some(d) if d.is_finite() && d > 0.0 => {
                millis(d).min(MAX_INTERVAL_MS) as u32 // bounded just above
            }
            _ => 0,
        };
        self.keep_next_slot(p, n, tau);
        if self.crawl_delay_ms > 0 {
            // The site asked for its spacing: nothing goes early.
            self.flags &= !(LENT | ON_LOAN);
        }
        if self.crawl_delay_ms != before && self.crawl_delay_ms > 0 {
            if let Some(sent) = get(self.sent) {
                let next = sent + u64::from(self.crawl_delay_ms) + self.tau_ms(p, n);
                self.tat = put(get(self.tat).unwrap_or(0).max(next));
            }
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
        // A loan outstanding is owed for one interval after the lending
        // slot; a fresh budget would lend again.
        let owed =
            self.flags & LENT != 0 && get(self.tat).is_some_and(|t| n < t + self.interval_ms(p, n));
        self.is_idle(now) && !owed && self.ceiling_u(p, n) >= p.max_u() && (!slow || long_idle)
    }

    // --- internals ---

    pub(super) fn breaker(&self) -> bool {
        self.flags & BREAKER != 0
    }

    /// Moves the stored times `shift` ms earlier after the base moved that
    /// far ahead; those that would fall before the new base are dropped
    /// (they are long past).
    pub(super) fn shift_times(&mut self, shift: u64) {
        for t in [
            &mut self.tat,
            &mut self.slot,
            &mut self.pause,
            &mut self.throttled,
            &mut self.sent,
            &mut self.since,
            &mut self.distressed,
            &mut self.slowed,
        ] {
            *t = match get(*t) {
                Some(v) if v > shift => put(v - shift),
                _ => NONE,
            };
        }
    }

    /// Milliseconds since `base` (saturating), re-basing first if the
    /// compact clock is running out, and expiring a past pause.
    pub(super) fn tick(&mut self, now: Instant) -> u64 {
        let mut n = self.ms(now);
        if n >= REBASE_AFTER_MS {
            let shift = n - KEEP_MS;
            self.base = self.at(shift);
            self.shift_times(shift);
            n = self.ms(now);
        }
        if get(self.pause).is_some_and(|u| u <= n) {
            self.pause = NONE;
            self.flags &= !(BREAKER | DISTRESS);
        }
        n
    }

    fn pause_refusal(&self, n: u64, now: Instant, hold_left: Duration) -> Option<Refusal> {
        let until = get(self.pause).filter(|&u| u > n)?;
        let retry_after = self.at(until).saturating_duration_since(now);
        if self.flags & DISTRESS != 0 {
            if let Some(event) = Distress::from_code(self.event) {
                let breaker = self.breaker();
                return Some(Refusal::Distressed {
                    retry_after,
                    event,
                    breaker,
                });
            }
        }
        if retry_after <= hold_left {
            return None;
        }
        Some(if self.breaker() {
            Refusal::BreakerOpen { retry_after }
        } else {
            Refusal::Paused { retry_after }
        })
    }

    pub(super) fn ms(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }

    pub(super) fn ms_ceil(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.base);
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        ms.saturating_add(u64::from(!d.subsec_nanos().is_multiple_of(1_000_000)))
    }

    pub(super) fn at(&self, ms: u64) -> Instant {
        self.base
            .checked_add(Duration::from_millis(ms))
            .unwrap_or(self.base)
    }

    /// The learned ceiling at `n`: from its value at the last throttle,
    /// linearly back to `max_rate` over `ceiling_relax_secs`.
    pub(super) fn ceiling_u(&self, p: &HostParams, n: u64) -> u32 {
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

    /// The ceiling as told: the one learned from 429s, or the cap slow
    /// answers set when it is lower.
    pub(super) fn shown_ceiling_u(&self, p: &HostParams, n: u64) -> u32 {
        match self.latency_cap {
            0 => self.ceiling_u(p, n),
            c => self.ceiling_u(p, n).min(c),
        }
    }

    /// Time until the ceiling is back at `max_rate`, while it is lowered.
    fn ceiling_relaxes_in(&self, p: &HostParams, n: u64) -> Option<Duration> {
        let t = get(self.throttled)?;
        if self.ceiling_u(p, n) >= p.max_u() {
            return None;
        }
        let left = p.relax_ms().saturating_sub(n.saturating_sub(t));
        Some(Duration::from_millis(left))
    }

    /// Highest rate allowed now: ceiling, Crawl-delay and announced limit.
    pub(super) fn cap_u(&self, p: &HostParams, n: u64) -> u32 {
        let crawl = match self.crawl_delay_ms {
            0 => u32::MAX,
            d => u32::try_from(1_000_000_000 / u64::from(d)).unwrap_or(u32::MAX),
        };
        let announced = match self.announced {
            0 => u32::MAX,
            a => a,
        };
        let slow = match self.latency_cap {
            0 => u32::MAX,
            c => c,
        };
        self.ceiling_u(p, n)
            .min(crawl)
            .min(announced)
            .min(slow)
            .max(1)
    }

    fn rate_u(&self, p: &HostParams, n: u64) -> u32 {
        self.rate.min(self.cap_u(p, n)).max(1)
    }

    /// Spacing between slots, rounded up to whole milliseconds so that the
    /// budget is never faster than its rate.
    pub(super) fn interval_ms(&self, p: &HostParams, n: u64) -> u64 {
        1_000_000_000u64
            .div_ceil(u64::from(self.rate_u(p, n)))
            .max(u64::from(self.crawl_delay_ms))
            .clamp(1, MAX_INTERVAL_MS)
    }

    /// How far `tat` runs ahead of the next slot: the unused burst.
    pub(super) fn tau_ms(&self, p: &HostParams, n: u64) -> u64 {
        u64::from(p.burst.max(1) - 1) * self.interval_ms(p, n)
    }

    /// After a rate drop the burst allowance is longer in time; moving `tat`
    /// with it keeps the next slot where it was, so that no reservation
    /// lands before one already given.
    ///
    /// `tat` moves by the change in the allowance, and not at all when it
    /// did not change. Taking the allowance off first (floored at 0) moved
    /// a `tat` below it up: within the first `tau` ms of a budget every
    /// robots lookup's `set_crawl_delay(None)` took a slot of the burst.
    pub(super) fn keep_next_slot(&mut self, p: &HostParams, n: u64, tau_before: u64) {
        let tau = self.tau_ms(p, n);
        if let Some(tat) = get(self.tat).filter(|_| tau != tau_before) {
            self.tat = put((tat + tau).saturating_sub(tau_before));
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
}

pub(super) fn get(v: u32) -> Option<u64> {
    (v != NONE).then_some(u64::from(v))
}

pub(super) fn put(ms: u64) -> u32 {
    u32::try_from(ms).unwrap_or(NONE - 1).min(NONE - 1)
}

pub(super) fn f(micro: u32) -> f64 {
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

#[cfg(test)]
mod tests;
