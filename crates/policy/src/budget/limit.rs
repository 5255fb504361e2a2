//! What a site's rate limiter is, read from the sends it accepted and
//! refused: an allowance per window, not only the pace that drew a 429.
//!
//! Limiters count in a few ways: a fixed window (N per calendar second or
//! per window from a client's first request: Flask-Limiter's
//! `fixed-window`, express-rate-limit, Apache mod_qos), a sliding window
//! (the last N sends within W: `moving-window`, or its weighted counter),
//! a token bucket or GCRA (nginx `limit_req`: one send per 1/r s, `burst`
//! ahead). Every one of them refuses a send only when enough sends it
//! accepted came just before, and accepts only while few enough did:
//!
//! - a refusal at `t` under A per W means A accepted sends in `[t − W, t)`:
//!   W is at least the span from the A-th latest accepted send to `t`
//!   (`at_least`, the largest over the refusals);
//! - an acceptance at `t` means at most A accepted in `(t − W, t]` under a
//!   sliding window and at most 2A under a fixed one (A at the end of one
//!   window, A at the start of the next): W is at most the span from the
//!   2A-th accepted send before it (`at_most`, the smallest).
//!
//! For each allowance A that leaves a window in between (and whose
//! acceptances bound it at all), the window is the round one inside it,
//! the shortest when several fit: limiters count per whole seconds (or
//! minutes), or space sends at 1/k s (k requests a second, no burst: then
//! A is 1 and every accepted gap is at least the interval, since there is
//! no calendar window to straddle; of the round intervals inside, the
//! longest, the slowest limit the sends fit). The limit learned is
//! the fastest of those, A/W; none is learned when no round window fits
//! (the sends say too little yet, or the limiter counts otherwise).
//!
//! A token bucket of rate r and burst b reads as b per b/r s, and GCRA
//! without a burst as 1 per 1/r s. Refused sends count for nothing (a
//! fixed window that counts them only refuses sooner, which the next
//! refusal shows).

mod phase;

pub use phase::PHASES;

/// Sends remembered per host for the estimate.
pub const LOG_LEN: usize = 16;

/// What became of one send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No answer yet.
    Pending,
    /// Let through.
    Accepted,
    /// Answered 429 (or 503 with Retry-After).
    Refused,
}

/// One send, at a millisecond of the caller's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    /// When it was sent, ms.
    pub at_ms: u64,
    /// What became of it.
    pub outcome: Outcome,
}

/// A limit read from the sends: `allowance` sends per `window_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Learned {
    /// Sends the limiter lets through per window.
    pub allowance: u32,
    /// Its window, ms.
    pub window_ms: u64,
}

impl Sent {
    /// A send at `at_ms` that was let through or refused.
    pub fn answered(at_ms: u64, let_through: bool) -> Sent {
        let outcome = match let_through {
            true => Outcome::Accepted,
            false => Outcome::Refused,
        };
        Sent { at_ms, outcome }
    }
}

impl Learned {
    /// The limit as a steady rate, micro-requests per second.
    pub fn rate_u(self) -> u32 {
        let u = u64::from(self.allowance) * 1_000_000_000 / self.window_ms.max(1);
        u32::try_from(u).unwrap_or(u32::MAX)
    }
}

/// Intervals of a limit of k requests a second without a burst (GCRA,
/// nginx `limit_req`), ms: one send per interval, and no calendar to
/// line up with, so every accepted gap is at least the interval.
const INTERVALS_MS: [u64; 10] = [100, 111, 125, 142, 166, 200, 250, 333, 500, 1_000];
/// Windows of counts per window, ms: whole seconds up to ten minutes.
const WINDOWS_MS: [u64; 14] = [
    1_000, 2_000, 3_000, 4_000, 5_000, 6_000, 10_000, 15_000, 20_000, 30_000, 60_000, 120_000,
    300_000, 600_000,
];

/// The limit the sends show (module docs); `sends` oldest first, the
/// first the host ever had.
pub fn estimate(sends: &[Sent]) -> Option<Learned> {
    fastest(&estimate_from(sends, History::Whole))
}

/// The limit the sends show when older ones may have gone before the
/// first of `sends` (a full log): a refusal with fewer accepted sends
/// before it than an allowance may have had the rest among those, so it
/// bounds nothing for that allowance rather than ruling it out.
pub fn estimate_recent(sends: &[Sent]) -> Option<Learned> {
    fastest(&estimate_from(sends, History::Recent))
}

/// Of limits equally fast, the shortest window: the pause that waits one
/// out is the shortest that suffices.
fn fastest(fits: &[Learned]) -> Option<Learned> {
    fits.iter()
        .copied()
        .max_by_key(|l| (l.rate_u(), std::cmp::Reverse(l.window_ms)))
}

/// The limit the sends show, weighed by the clock's phases (`phase.rs`),
/// for a 429 drawn under a limit read at the one before (`recent` as for
/// [`estimate_recent`]).
///
/// Each 429 of a climb met by a window of whole seconds (mod_qos) can
/// read one allowance a second less than the last (5, then 4 per 1 s
/// against 6 per 2 s), each consistent with the sends so far, because a
/// fixed second at some offset fits them as well. The second episode
/// tells them apart by its phases: 6 per 2 s explains both wherever they
/// began, 4 per 1 s only where a boundary fell within a few milliseconds
/// in each. So when the likeliest fit explains every answer at half the
/// phases or more, the fastest of those within half of it is taken;
/// else (a token bucket with a burst fits no window well, and a long
/// window on a coarse grid would read it far too slow) the fastest fit,
/// as [`estimate`] reads it.
pub fn estimate_weighed(sends: &[Sent], recent: bool) -> Option<Learned> {
    let history = History::of(recent);
    let fits = estimate_from(sends, history);
    let answers = answered(sends);
    let phases: Vec<u64> = fits
        .iter()
        .map(|&l| phase::phases_explained(&answers, l.allowance, l.window_ms, recent))
        .collect();
    let best = phases.iter().copied().max().unwrap_or(0);
    if best * 2 < PHASES {
        return fastest(&fits);
    }
    let likely: Vec<Learned> = fits
        .iter()
        .zip(&phases)
        .filter(|&(_, &n)| n * 2 >= best)
        .map(|(&l, _)| l)
        .collect();
    fastest(&likely)
}

/// The slowest limit the sends fit that is faster than `rate_u`
/// (micro-requests a second); `recent` as for [`estimate_recent`].
///
/// A climb that ran past a window's limit in a burst fits faster limits
/// than its own: six let through in under a second and the seventh
/// refused fit 6 per 1 s as well as 6 per 2 s, and nothing in the sends
/// tells them apart. When the fastest is faster than the pace the origin
/// let through, the slowest above that pace is the guess that explains
/// the 429 and costs least to be wrong about.
pub fn slowest_above(sends: &[Sent], recent: bool, rate_u: u32) -> Option<Learned> {
    let history = History::of(recent);
    estimate_from(sends, history)
        .into_iter()
        .filter(|l| l.rate_u() > rate_u)
        .min_by_key(|l| (l.rate_u(), l.window_ms))
}

/// The answered sends: when each went, and whether it was let through.
fn answered(sends: &[Sent]) -> Vec<(u64, bool)> {
    sends
        .iter()
        .filter(|s| s.outcome != Outcome::Pending)
        .map(|s| (s.at_ms, s.outcome == Outcome::Accepted))
        .collect()
}

/// Whether `sends` start at the host's first send.
#[derive(Clone, Copy, PartialEq, Eq)]
enum History {
    Whole,
    Recent,
}

impl History {
    /// `Recent` for a log that may have dropped older sends.
    fn of(recent: bool) -> History {
        match recent {
            true => History::Recent,
            false => History::Whole,
        }
    }
}

/// Every limit whose window lies inside the bounds the sends set.
fn estimate_from(sends: &[Sent], history: History) -> Vec<Learned> {
    let accepted: Vec<u64> = sends
        .iter()
        .filter(|s| s.outcome == Outcome::Accepted)
        .map(|s| s.at_ms)
        .collect();
    // Each refusal, with the accepted sends that went before it (in the
    // order sent: two sends in one millisecond are still one after the
    // other).
    let mut refused = Vec::new();
    let mut before = 0;
    for s in sends {
        match s.outcome {
            Outcome::Accepted => before += 1,
            Outcome::Refused => refused.push((s.at_ms, before)),
            Outcome::Pending => {}
        }
    }
    if refused.is_empty() {
        return Vec::new();
    }
    // An exact fit first; only when there is none, one with the slack.
    let known = Known {
        accepted: &accepted,
        refused: &refused,
        history,
    };
    let exact = all_fits(known, false);
    match exact.is_empty() {
        true => all_fits(known, true),
        false => exact,
    }
}

/// The answered sends: the accepted ones' times, and each refusal's time
/// with how many accepted went before it.
#[derive(Clone, Copy)]
struct Known<'a> {
    accepted: &'a [u64],
    refused: &'a [(u64, usize)],
    history: History,
}

/// The limits the sends fit (module docs), with the refused gaps of an
/// interval taken `SLACK` shorter when `slack`.
fn all_fits(known: Known<'_>, slack: bool) -> Vec<Learned> {
    let accepted = known.accepted;
    let mut fits = Vec::new();
    for allowance in 1..=accepted.len() {
        let Some(lo) = at_least(known, allowance) else {
            break;
        };
        // An interval: one send each, every accepted gap at least one. The
        // round intervals lie close together (250 and 333 ms, 4/s and 3/s),
        // and a send late on its slot widens what fits: of those between
        // the refused gap and the shortest accepted one, the longest is
        // the one the sends have shown to be let through.
        //
        // The times are our sends, not the limiter's arrivals: a request
        // that reached nginx a few ms after it left makes the next gap read
        // 335 ms when nginx refused it under its 333 ms interval. With the
        // slack a refused gap is taken a twentieth shorter (the accepted
        // ones as they are, so that a faster interval is never made up).
        if allowance == 1 {
            let lo = if slack { lo - lo / SLACK } else { lo };
            let hi = at_most(accepted, 1);
            let longest = hi.and_then(|hi| INTERVALS_MS.iter().rev().find(|&&w| w <= hi));
            fits.extend(longest.and_then(|&w| fit(&[w], 1, lo, hi)));
        }
        // A window: up to twice the allowance where two windows meet (one
        // per window is an interval, above).
        if allowance > 1 && !slack {
            let hi = at_most(accepted, 2 * allowance);
            fits.extend(windows(&WINDOWS_MS, allowance, lo, hi));
        }
    }
    fits
}

/// Each of `rounds` in `[lo, hi]`, as `allowance` per it; none when `hi`
/// is unbounded (as for [`fit`]).
fn windows(rounds: &[u64], allowance: usize, lo: u64, hi: Option<u64>) -> Vec<Learned> {
    let (Some(hi), Ok(allowance)) = (hi, u32::try_from(allowance)) else {
        return Vec::new();
    };
    rounds
        .iter()
        .filter(|&&w| w >= lo && w <= hi)
        .map(|&window_ms| Learned {
            allowance,
            window_ms,
        })
        .collect()
}

/// A refused gap under an interval is read this fraction shorter (1/20).
const SLACK: u64 = 20;

/// The shortest of `rounds` in `[lo, hi]`, as `allowance` per it; `None`
/// when there is none, or when `hi` is unbounded (nothing accepted says
/// how long the window may be, so any round one above the refusals fits).
fn fit(rounds: &[u64], allowance: usize, lo: u64, hi: Option<u64>) -> Option<Learned> {
    windows(rounds, allowance, lo, hi).into_iter().next()
}

/// The shortest window in which `allowance` accepted sends came before
/// every refusal; `None` when a refusal had fewer before it (of a recent
/// history: when every one had, since the older sends are not known).
fn at_least(known: Known<'_>, allowance: usize) -> Option<u64> {
    let mut lo = None;
    for &(t, before) in known.refused {
        let Some(i) = before.checked_sub(allowance) else {
            match known.history {
                History::Whole => return None,
                History::Recent => continue,
            }
        };
        // The nth was inside the window: a send exactly one window after
        // it would have been let through.
        let span = t.saturating_sub(known.accepted[i]) + 1;
        lo = Some(lo.map_or(span, |lo: u64| lo.max(span)));
    }
    lo
}

/// The longest window under which no accepted send had `more` accepted
/// sends within it before (a window counting `more` would have refused
/// it); `None` (unbounded) when no send had that many before it.
fn at_most(accepted: &[u64], more: usize) -> Option<u64> {
    accepted
        .iter()
        .enumerate()
        .skip(more)
        .map(|(i, &t)| t - accepted[i - more])
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sends(list: &[(u64, bool)]) -> Vec<Sent> {
        list.iter()
            .map(|&(at, ok)| Sent::answered(at, ok))
            .collect()
    }

    /// A climb by 20% a send from 1/s, each let through.
    const CLIMB: [(u64, bool); 5] = [
        (0, true),
        (1_000, true),
        (1_833, true),
        (2_527, true),
        (3_106, true),
    ];

    #[test]
    fn nothing_refused_teaches_nothing() {
        assert_eq!(estimate(&sends(&CLIMB)), None);
    }

    #[test]
    fn a_gap_refused_after_a_longer_one_was_let_through_is_a_rate_per_second() {
        // nginx limit_req 2r/s without a burst refuses the next gap, 482 ms.
        let mut s = sends(&CLIMB);
        s.push(Sent::answered(3_588, false));
        let learned = estimate(&s).unwrap();
        let want = Learned {
            allowance: 1,
            window_ms: 500,
        };
        assert_eq!((learned, learned.rate_u()), (want, 2_000_000));
        // Flask-Limiter "2 per second", moving window, lets that one
        // through and refuses the next: two in the second before it.
        s[5] = Sent::answered(3_588, true);
        s.push(Sent::answered(3_990, false));
        assert_eq!(estimate(&s).unwrap().rate_u(), 2_000_000);
    }

    #[test]
    fn a_second_episode_weighs_the_windows_by_their_phases() {
        // mod_qos 6 per 2 s with its second 350 ms on: the climb's seventh
        // in the window refused (read as 5 per 1 s), then one send each
        // 223 ms after a 1 s pause: six let through, the seventh refused.
        // 4 per 1 s (the fastest fit) explains both episodes only where a
        // boundary fell within a few milliseconds; 6 per 2 s wherever
        // they began.
        let mut s = sends(&[
            (0, true),
            (1, true),
            (2_000, true),
            (2_579, true),
            (3_062, true),
            (3_464, true),
            (3_799, true),
            (4_079, true),
            (4_312, true),
            (4_506, true),
            (4_668, true),
            (4_803, true),
            (4_928, false),
        ]);
        for t in [5_930, 6_153, 6_376, 6_599, 6_822, 7_045] {
            s.push(Sent::answered(t, true));
        }
        s.push(Sent::answered(7_268, false));
        let recent = &s[s.len() - LOG_LEN..];
        let four = Learned {
            allowance: 4,
            window_ms: 1_000,
        };
        let six = Learned {
            allowance: 6,
            window_ms: 2_000,
        };
        assert_eq!(estimate_recent(recent), Some(four));
        let answers = answered(recent);
        let phases = |l: Learned| phase::phases_explained(&answers, l.allowance, l.window_ms, true);
        assert_eq!(phases(six), PHASES);
        assert!(phases(four) * 4 < PHASES);
        assert_eq!(estimate_weighed(recent, true), Some(six));
        // A climb alone (one episode) is read as before.
        assert_eq!(estimate_weighed(&s[..13], false), estimate(&s[..13]));
    }
}
