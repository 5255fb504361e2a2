//! What a 429 (or a 503 with Retry-After) does to a host: the pause, the
//! halving, the ceiling, the breaker.

use std::time::{Instant, SystemTime};

use super::super::decision::Throttle;
use super::super::limit::Learned;
use super::super::params::HostParams;
use super::super::retry_after::parse_retry_after;
use super::{
    f, get, put, scale, scale_count, HostBudget, AT_ONCE, BREAKER, DISTRESS, GUESSED, LEARNED,
    LENT, LOAN_SENT, NONE, ON_LOAN, RAW_RETRY_AFTER_MAX, RING,
};

// === impl HostBudget (throttle) ===

impl HostBudget {
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

    pub(super) fn throttle(
        &mut self,
        p: &HostParams,
        n: u64,
        now: Instant,
        wall: SystemTime,
        raw: Option<&str>,
        jitter: f64,
    ) -> Throttle {
        if get(self.pause).is_some_and(|until| until > n) {
            let rate = self.rate_u(p, n);
            return self.echo(p, n, now, wall, raw, rate);
        }
        let rate_before = self.drawn_rate_u(p, n);
        let Verdict {
            ceiling,
            rate,
            learned,
            flags,
        } = self.verdict(p, n, rate_before);

        self.record_throttle(n);
        self.flags &= !(LENT | ON_LOAN | LOAN_SENT | DISTRESS | LEARNED | AT_ONCE | GUESSED);
        self.flags |= flags;
        self.restart_window();
        self.ceiling = ceiling;
        self.rate = rate;
        self.concurrency = scale_count(self.concurrency_limit(p), p.concurrency_factor);
        self.streak = 0;
        self.strikes = self.strikes.saturating_add(1);

        let retry_after = raw.and_then(|r| parse_retry_after(r, wall, p.max_pause()));
        let pause_ms = match retry_after {
            Some(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            None => match learned {
                // The site's own window: by its end the sends that filled
                // it no longer count, whatever way it counts them.
                Some(limit) => limit
                    .window_ms
                    .saturating_mul(1 << u32::from(self.strikes.max(1) - 1).min(20))
                    .min(p.backoff_max_ms())
                    .min(p.max_pause_ms()),
                None => backoff_ms(
                    p,
                    p.backoff_base_ms(),
                    p.backoff_max_ms(),
                    self.strikes,
                    jitter,
                ),
            },
        };
        let (until, breaker_opened) = self.pause_end(p, n, now, pause_ms);
        let until = until.max(get(self.pause).unwrap_or(0));
        self.pause = put(until);
        // No burst after a pause: the first slot is its end, then one per
        // interval. Slots promised before the throttle were spaced for a rate
        // the site refused; their holders reserve again (`try_start_since`),
        // so they must not push the new schedule back.
        self.tat = put(until + self.tau_ms(p, n));
        self.slot = NONE;

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
}

/// What a throttle leaves of the pace: the ceiling, the rate, the limit
/// the sends showed when it is one to go back to at once, and the flags it
/// sets: `LEARNED` when the rate climbs back by the slow-start factor (to
/// a ceiling the sends showed, or past a loan's 429 that showed no rate)
/// rather than a step, `AT_ONCE` and `GUESSED` for the limit gone to.
struct Verdict {
    ceiling: u32,
    rate: u32,
    learned: Option<Learned>,
    flags: u8,
}

/// `flag` when `on`.
fn bit(on: bool, flag: u8) -> u8 {
    match on {
        true => flag,
        false => 0,
    }
}

impl HostBudget {
    /// The ceiling and rate a throttle leaves (docs/budgets.md):
    ///
    /// - a limit the sends show (`limit.rs`; when it is faster than the
    ///   pace which drew the 429, the guess of [`HostBudget::guess`]): the
    ///   ceiling is `learned_share` of it, and the rate goes there at once. Halving is for a limit not known; one
    ///   read from the site's own answers is gone back to after its
    ///   window, with the share's margin below it;
    /// - a 429 on the first slot's loan with no limit shown: two requests
    ///   together drew it, not a rate (the site refused a pair's spacing
    ///   and has not refused any pace yet), so the ceiling is left where it
    ///   stands and the halved rate climbs as before a first 429;
    /// - else `ceiling_factor` of the rate that drew it (twice over after
    ///   a wrong guess), and the rate halved.
    fn verdict(&self, p: &HostParams, n: u64, rate_before: u32) -> Verdict {
        let floor = p.floor_u();
        let before = self.ceiling_u(p, n);
        let weighed = self.flags & AT_ONCE != 0;
        let limit = get(self.sent).and_then(|sent| self.log.learned(sent, weighed));
        let shown = limit.map(|l| scale(l.rate_u(), p.learned_share));
        let loan = self.flags & LOAN_SENT != 0;
        // A limit already held under (the ceiling, relaxing since, within
        // 5% of its share) drew this 429 all the same: the share's margin
        // was not enough, and DESIGN's rule applies.
        let new = shown.filter(|&c| u64::from(c) * 100 < u64::from(before) * 95);
        // The first send after a pause refused as well: the pause fell
        // short of the site's window (mod_qos counts one in whole seconds
        // from its first request), and one send after a pause is no pace to
        // halve or to set a ceiling from. The pause doubles; the pace is a
        // slower limit the sends now show, else it stays.
        if self.log.refused_twice() {
            let ceiling = new.map_or(before, |c| c.min(before).max(floor));
            return Verdict {
                ceiling,
                rate: self.rate_u(p, n).min(ceiling),
                learned: limit,
                flags: bit(new.is_some() || self.flags & LEARNED != 0, LEARNED),
            };
        }
        let wrong_guess = self.flags & GUESSED != 0;
        let (limit, guessed) = self.guess(limit, rate_before);
        let shown = limit.map(|l| scale(l.rate_u(), p.learned_share));
        let new = shown.filter(|&c| u64::from(c) * 100 < u64::from(before) * 95);
        // After a wrong guess DESIGN's factor is taken twice: the guess
        // went past the 80% the first 429 allowed, and the 429 it drew was
        // drawn by that overshoot as much as by the pace (nginx `burst=5`
        // at 2r/s: guessed 2.7/s, 80% of it is 2.16/s, which still drains
        // the bucket and draws a third 429 within 60 pages).
        let drawn = match wrong_guess {
            false => scale(rate_before, p.ceiling_factor),
            true => scale(scale(rate_before, p.ceiling_factor), p.ceiling_factor),
        };
        let ceiling = match (new, shown) {
            (Some(c), _) => c,
            (None, None) if loan => before,
            _ => drawn,
        };
        // A burst of ours above a ceiling already learned reads high; it
        // says nothing new of the site's limit and must not lift it.
        let ceiling = ceiling.min(before).max(floor);
        let learned = limit.filter(|_| new.is_some());
        if learned.is_some() {
            return Verdict {
                ceiling,
                rate: ceiling,
                learned,
                flags: LEARNED | AT_ONCE | bit(guessed, GUESSED),
            };
        }
        // Halved from the rate in force, or from the pace when the sends
        // lagged it: a burst drew the 429, not the rate. Never below the
        // floor, even when the sends lagged it. A 429 on the loan was drawn
        // by two requests together, not by the rate, which the origin has
        // not refused: the pace it saw is what is halved.
        let from = match loan {
            false => self.rate_u(p, n).min(rate_before),
            true => rate_before,
        }
        .max(floor);
        let rate = scale(from, p.throttle_rate_factor)
            .max(floor)
            .min(ceiling)
            .min(from);
        Verdict {
            ceiling,
            rate,
            learned: None,
            flags: bit(limit.is_some() || loan || wrong_guess, LEARNED),
        }
    }

    /// The limit to go to from the one the sends show, and whether it is a
    /// guess. A 429 under a guess shows it on the wrong side of the pace:
    /// the site's limit is below what it let through (a token bucket's
    /// burst let the climb past it), and DESIGN's rule applies: none.
    /// Else a limit faster than the pace that drew the 429 does not
    /// explain it: the climb ran past a limit in a burst, and the sends fit
    /// faster limits than the site's. Whether it was a window's (mod_qos 6
    /// per 2 s lets six through in under a second: 6 per 1 s and 6 per 2 s
    /// fit alike) or a token bucket's (nginx `burst=5`) the first 429 does
    /// not tell; the slowest limit above the pace is the guess gone to, and
    /// the next 429, if it comes, settles it. (DESIGN's 80% of that pace
    /// held mod_qos at 69-74%.)
    fn guess(&self, limit: Option<Learned>, rate_before: u32) -> (Option<Learned>, bool) {
        match limit {
            _ if self.flags & GUESSED != 0 => (None, false),
            Some(l) if l.rate_u() > rate_before => (
                get(self.sent).and_then(|sent| self.log.slowest_above(sent, rate_before)),
                true,
            ),
            other => (other, false),
        }
    }

    /// The end of a pause of `pause_ms` from `now`, or of the breaker's
    /// when the throttle just recorded opens it (and whether it did).
    pub(super) fn pause_end(
        &mut self,
        p: &HostParams,
        n: u64,
        now: Instant,
        pause_ms: u64,
    ) -> (u64, bool) {
        // Round the start up so that a pause is never shorter than asked.
        let from = self.ms_ceil(now);
        let until = from.saturating_add(pause_ms);
        if self.recent_throttles(p, n) < p.breaker_threshold {
            return (until, false);
        }
        self.flags |= BREAKER;
        // Counting starts afresh once the breaker has opened: the same
        // 429s must not open it again when it closes.
        self.mark_counted();
        (until.max(from + p.breaker_open_ms()), true)
    }

    /// Puts a throttle (or a distress pause) at `n` in the breaker's ring.
    pub(super) fn record_throttle(&mut self, n: u64) {
        if let Some(last) = get(self.throttled) {
            let d = u32::try_from(n.saturating_sub(last)).unwrap_or(NONE);
            for i in (1..RING).rev() {
                self.history[i] = super::history::older(self.history[i - 1], d);
            }
            self.history[0] = d;
        }
        self.throttled = put(n);
    }
}

/// `base` doubled for each strike after the first, at most `max`, reduced
/// at random by `backoff_jitter`.
pub(super) fn backoff_ms(p: &HostParams, base: u64, max: u64, strikes: u8, jitter: f64) -> u64 {
    let doublings = u32::from(strikes.max(1) - 1).min(40);
    let d = base.saturating_mul(1u64 << doublings).min(max);
    let j = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let d = (d as f64 * (1.0 - p.backoff_jitter * j)).round() as u64;
    d.min(p.max_pause_ms())
}

fn truncate(raw: &str) -> String {
    let mut end = raw.len().min(RAW_RETRY_AFTER_MAX);
    while !raw.is_char_boundary(end) {
        end -= 1;
    }
    raw[..end].to_owned()
}
