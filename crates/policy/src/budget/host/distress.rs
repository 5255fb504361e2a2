//! What a site shows when it struggles without saying 429 (cbcp-01 §3):
//! timeouts, resets, 502/503/504 without Retry-After, runs of 500s, and
//! answers slower than the host's own baseline.
//!
//! Each distress event cuts the rate by `server_error_factor`;
//! `distress_threshold` of them inside `distress_window_secs` pause the
//! host with a jittered exponential pause (`distress_backoff_*`), which
//! the breaker counts as it counts a 429. While such a pause lasts,
//! requests are refused at once ([`Refusal::Distressed`]): a client is
//! better told now than after another timeout.
//!
//! Latency is a rate cap of its own (`latency_cap`): when the fast average
//! time to first byte (and the answer itself) climbs past `latency_factor`
//! × the baseline, and 100 ms above it, rate and
//! cap fall by `server_error_factor` (once a second at most); each quick
//! answer lifts the cap a `recovery_step`, so the pace comes back only as
//! the latency does, and never above the learned ceiling.
//!
//! [`Refusal::Distressed`]: super::super::Refusal::Distressed

use std::time::Instant;

use super::super::decision::{Reaction, Strain};
use super::super::params::HostParams;
use super::super::{Distress, Failure};
use super::throttle::backoff_ms;
use super::{f, get, put, scale, HostBudget, DISTRESS, LENT, LOAN_SENT, NONE, ON_LOAN};

/// How far above its baseline an answer must be, besides the factor, to
/// be slow: on a quick origin (a few ms) jitter alone doubles an answer.
const SLOW_MARGIN_MS: f64 = 100.0;
/// Shortest time between two cuts for slowness.
const SLOW_COOLDOWN_MS: u64 = 1_000;
/// The fast average weighs a new answer by 1/`FAST_WEIGHT`.
const FAST_WEIGHT: u32 = 4;
/// The baseline rises by 1/`BASE_CLIMB` of itself per slower answer, at
/// least a millisecond: a median that moves slowly, so neither one slow
/// answer nor a short slow spell becomes the norm.
const BASE_CLIMB: u16 = 64;

// === impl HostBudget (distress) ===

impl HostBudget {
    /// Learns from a request that got no response, and releases its
    /// in-flight slot: a timeout or reset is a distress event; a request
    /// abandoned after a while is a time to first byte at least that long.
    pub fn on_failure(
        &mut self,
        p: &HostParams,
        now: Instant,
        failure: Failure,
        jitter: f64,
    ) -> Option<Reaction> {
        let n = self.tick(now);
        self.in_flight = self.in_flight.saturating_sub(1);
        self.log.answer(super::super::limit::Outcome::Pending);
        match failure {
            Failure::Distress(event) => Some(Reaction::Distressed(
                self.distress(p, n, now, event, jitter),
            )),
            Failure::Abandoned { after_ms } => self
                .latency(p, n, now, after_ms, true)
                .map(Reaction::Distressed),
            Failure::Nothing => None,
        }
    }

    /// Learns a time to first byte (`ms`): a cut when the answers have
    /// slowed past `latency_factor` × the baseline, else a step back up.
    /// Call it before [`HostBudget::on_answer`] with the same `now`.
    pub fn note_latency(&mut self, p: &HostParams, now: Instant, ms: u64) -> Option<Strain> {
        let n = self.tick(now);
        self.latency(p, n, now, ms, false)
    }

    fn latency(
        &mut self,
        p: &HostParams,
        n: u64,
        now: Instant,
        ms: u64,
        at_least: bool,
    ) -> Option<Strain> {
        if p.latency_factor == 0.0 {
            return None;
        }
        let sample = ms.clamp(1, u64::from(u16::MAX)) as u16;
        if self.latency_base == 0 {
            // A first answer abandoned says nothing of the norm.
            if !at_least {
                (self.latency_base, self.latency_fast) = (sample, sample);
            }
            return None;
        }
        if at_least && sample <= self.latency_fast {
            // Gone before the average: says nothing.
            return None;
        }
        let fast =
            (u32::from(self.latency_fast) * (FAST_WEIGHT - 1) + u32::from(sample)) / FAST_WEIGHT;
        self.latency_fast = fast.clamp(1, u32::from(u16::MAX)) as u16;
        let base = self.latency_base;
        if !at_least {
            self.latency_base = if sample < base {
                // Quicker answers are the norm at once (halfway), so one
                // slow first answer is soon forgotten.
                base - (base - sample).div_ceil(2)
            } else {
                base.saturating_add((base / BASE_CLIMB).max(1)).min(sample)
            };
        }
        let slow_at = (f64::from(base) * p.latency_factor).max(f64::from(base) + SLOW_MARGIN_MS);
        let fast = f64::from(self.latency_fast);
        // Both the average and this answer: the average lags, and must
        // not cut again once quick answers are back.
        if fast <= slow_at || f64::from(sample) <= slow_at {
            if fast * 2.0 <= slow_at + f64::from(base) && self.latency_cap != 0 {
                // Quick again: the cap comes back a step per answer.
                let cap = self.latency_cap.saturating_add(p.step_u());
                self.latency_cap = if cap >= p.max_u() { 0 } else { cap };
            }
            return None;
        }
        let cooled = get(self.slowed).is_none_or(|t| n.saturating_sub(t) >= SLOW_COOLDOWN_MS);
        if !cooled {
            return None;
        }
        self.slowed = put(n);
        let tau = self.tau_ms(p, n);
        let before = self.rate_u(p, n);
        let cut = scale(before, p.server_error_factor)
            .max(p.floor_u())
            .min(before);
        self.rate = cut;
        self.latency_cap = cut.max(1);
        self.keep_next_slot(p, n, tau);
        self.event = Distress::Slow.code();
        Some(self.strain(p, n, now, Distress::Slow, None, false))
    }

    /// [`HostBudget::on_answer`] with the answer's time to first byte
    /// learned first: a cut for slowness is the reaction then, unless the
    /// answer itself is a throttle or distress.
    #[allow(clippy::too_many_arguments)]
    pub fn on_timed_answer(
        &mut self,
        p: &HostParams,
        now: Instant,
        wall: std::time::SystemTime,
        status: u16,
        retry_after: Option<&str>,
        announced: Option<&super::super::Announced>,
        ttfb_ms: Option<u64>,
        jitter: f64,
    ) -> Reaction {
        let slow = ttfb_ms.and_then(|ms| self.note_latency(p, now, ms));
        match (
            self.on_answer(p, now, wall, status, retry_after, announced, jitter),
            slow,
        ) {
            (Reaction::Ok { rate, ceiling } | Reaction::SlowedDown { rate, ceiling }, Some(s)) => {
                Reaction::Distressed(Strain { rate, ceiling, ..s })
            }
            (r, _) => r,
        }
    }

    /// A distress event: the rate is cut; one too many in the window, or
    /// one before a success since the last pause, pauses the host and
    /// counts towards the breaker.
    pub(super) fn distress(
        &mut self,
        p: &HostParams,
        n: u64,
        now: Instant,
        event: Distress,
        jitter: f64,
    ) -> Strain {
        self.event = event.code();
        self.streak = 0;
        if let Some(until) = get(self.pause).filter(|&u| u > n) {
            // Sent before the pause began (nothing is sent during one):
            // the same episode, which it neither lengthens nor counts.
            return self.strain(p, n, now, event, Some(until), false);
        }
        let within =
            get(self.distressed).is_some_and(|d| n.saturating_sub(d) < p.distress_window_ms());
        self.events = if within {
            self.events.saturating_add(1)
        } else {
            1
        };
        self.distressed = put(n);
        let tau = self.tau_ms(p, n);
        let rate = self.rate_u(p, n);
        self.rate = scale(rate, p.server_error_factor)
            .max(p.floor_u())
            .min(rate);
        self.keep_next_slot(p, n, tau);
        // After a pause, the first request's distress (no success since)
        // pauses again at once, for twice as long.
        if u32::from(self.events) < p.distress_threshold && self.strikes == 0 {
            return self.strain(p, n, now, event, None, false);
        }
        self.events = 0;
        self.strikes = self.strikes.saturating_add(1);
        let pause_ms = backoff_ms(
            p,
            p.distress_base_ms(),
            p.distress_max_ms(),
            self.strikes,
            jitter,
        );
        // The ceiling relaxes from the last throttle: it is kept where it
        // stands now, since a struggling site said nothing of its limit.
        self.ceiling = self.ceiling_u(p, n);
        self.record_throttle(n);
        let (until, breaker_opened) = self.pause_end(p, n, now, pause_ms);
        self.flags &= !(LENT | ON_LOAN | LOAN_SENT);
        self.flags |= DISTRESS;
        self.restart_window();
        self.pause = put(until);
        // No burst after the pause; slots promised before it reserve again.
        self.tat = put(until + self.tau_ms(p, n));
        self.slot = NONE;
        self.strain(p, n, now, event, Some(until), breaker_opened)
    }

    fn strain(
        &self,
        p: &HostParams,
        n: u64,
        now: Instant,
        event: Distress,
        until: Option<u64>,
        breaker_opened: bool,
    ) -> Strain {
        Strain {
            event,
            pause: until.map(|u| self.at(u).saturating_duration_since(now)),
            breaker_opened,
            rate: f(self.rate_u(p, n)),
            ceiling: f(self.shown_ceiling_u(p, n)),
        }
    }

    /// Distress events inside the window.
    pub(super) fn recent_distress(&self, p: &HostParams, n: u64) -> u32 {
        match get(self.distressed) {
            Some(d) if n.saturating_sub(d) < p.distress_window_ms() => u32::from(self.events),
            _ => 0,
        }
    }
}
