//! The budget against synthetic rate limiters of each kind a site runs:
//! each limiter is a pure function (the sends so far and their answers in,
//! the next send's answer out), the budget runs on a hand-moved clock, and
//! a crawler always has the next page waiting (robots.txt first, as a
//! crawl through the proxy starts).

use std::time::{Duration, Instant, SystemTime};

use mannerly_policy::budget::{
    estimate, BudgetParams, HostBudget, HostParams, Learned, Reaction, Reservation, Sent, Start,
};
use proptest::prelude::*;

/// How a synthetic limiter counts.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `allowance` per calendar window `[offset + k·window, …)`; refused
    /// sends counted too when `counts_refused` (Flask-Limiter's
    /// fixed-window, express-rate-limit count every hit).
    Fixed {
        allowance: u32,
        window_ms: u64,
        offset_ms: u64,
        counts_refused: bool,
    },
    /// At most `allowance` accepted sends in any `window` (a log).
    Sliding { allowance: u32, window_ms: u64 },
    /// This window's count plus the last one's weighted by the share of it
    /// still inside the sliding window (Flask-Limiter's counter).
    SlidingCounter { allowance: u32, window_ms: u64 },
    /// GCRA / token bucket: one send per `interval`, `burst` ahead.
    Gcra { interval_ms: u64, burst: u32 },
    /// Apache mod_qos `QS_ClientEventLimitCount`: every send counts, the
    /// window starts at the first send after the last one ended and ends
    /// once its age in whole seconds of the clock (`offset_ms` into a
    /// second at 0) passes `seconds - 1`; `allowance` let through in it.
    Qos {
        allowance: u32,
        seconds: u64,
        offset_ms: u64,
    },
}

impl Kind {
    /// Requests a second it lets through in the long run.
    fn rate(self) -> f64 {
        match self {
            Kind::Fixed {
                allowance,
                window_ms,
                ..
            }
            | Kind::Sliding {
                allowance,
                window_ms,
            }
            | Kind::SlidingCounter {
                allowance,
                window_ms,
            } => f64::from(allowance) * 1000.0 / window_ms as f64,
            Kind::Gcra { interval_ms, .. } => 1000.0 / interval_ms as f64,
            Kind::Qos {
                allowance, seconds, ..
            } => f64::from(allowance) / seconds as f64,
        }
    }

    /// Whether a send at `t` is let through after `past` (time, let through).
    fn judge(self, past: &[(u64, bool)], t: u64) -> bool {
        let count = |from: u64, to: u64, refused_too: bool| {
            past.iter()
                .filter(|&&(at, ok)| at >= from && at < to && (ok || refused_too))
                .count() as u64
        };
        match self {
            Kind::Fixed {
                allowance,
                window_ms,
                offset_ms,
                counts_refused,
            } => {
                let o = offset_ms % window_ms;
                let start = match t >= o {
                    true => o + (t - o) / window_ms * window_ms,
                    false => 0,
                };
                count(start, t + 1, counts_refused) < u64::from(allowance)
            }
            Kind::Sliding {
                allowance,
                window_ms,
            } => count((t + 1).saturating_sub(window_ms), t + 1, false) < u64::from(allowance),
            Kind::SlidingCounter {
                allowance,
                window_ms,
            } => {
                let start = t / window_ms * window_ms;
                let current = count(start, t + 1, false) as f64;
                let previous = count(start.saturating_sub(window_ms), start, false) as f64;
                let weight = 1.0 - (t - start) as f64 / window_ms as f64;
                if start == 0 {
                    current + 1.0 <= f64::from(allowance)
                } else {
                    (previous * weight).floor() + current + 1.0 <= f64::from(allowance)
                }
            }
            Kind::Gcra { interval_ms, burst } => {
                let mut tat = 0u64;
                for &(at, ok) in past {
                    if ok {
                        tat = tat.max(at) + interval_ms;
                    }
                }
                t + u64::from(burst - 1) * interval_ms >= tat
            }
            Kind::Qos {
                allowance,
                seconds,
                offset_ms,
            } => {
                let second = |at: u64| (at + offset_ms) / 1000;
                let (mut start, mut count) = (0, 0);
                for at in past.iter().map(|p| p.0).chain([t]) {
                    if count == 0 || second(at) - start >= seconds {
                        (start, count) = (second(at), 0);
                    }
                    count += 1;
                }
                count <= allowance
            }
        }
    }
}

/// What a crawl of `sends` requests through the budget met.
#[derive(Debug)]
struct Run {
    /// Every send: ms from the start, let through.
    sent: Vec<(u64, bool)>,
    /// The ceiling the budget showed after the last send.
    ceiling: f64,
}

impl Run {
    fn refusals(&self) -> usize {
        self.sent.iter().filter(|s| !s.1).count()
    }

    /// Sends let through a second from the `from`th send on.
    fn pace_after(&self, from: usize) -> f64 {
        let tail = &self.sent[from..];
        let ok = tail.iter().filter(|s| s.1).count();
        let span = tail.last().map_or(0, |l| l.0) - tail[0].0;
        (ok.saturating_sub(1)) as f64 * 1000.0 / span.max(1) as f64
    }

    fn first_refusal(&self) -> Option<usize> {
        self.sent.iter().position(|s| !s.1)
    }
}

fn params() -> HostParams {
    BudgetParams::default()
        .validate()
        .unwrap()
        .for_host("example.com")
}

/// `sends` requests one after the other, each answered `latency_ms`
/// after it went (429 with `retry_after` when refused).
fn crawl(kind: Kind, sends: usize, latency_ms: u64, retry_after: Option<&str>) -> Run {
    crawl_late(kind, sends, latency_ms, retry_after, &[0])
}

/// [`crawl`] with the `i`th send starting `late[i % late.len()]` ms after
/// its slot came (a busy scheduler, a connection being opened).
fn crawl_late(
    kind: Kind,
    sends: usize,
    latency_ms: u64,
    retry_after: Option<&str>,
    late: &[u64],
) -> Run {
    let p = params();
    #[allow(clippy::disallowed_methods)]
    let t0 = Instant::now();
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut b = HostBudget::new(&p, t0);
    let (mut now, mut sent, mut ceiling) = (0u64, Vec::new(), 0.0);
    let hold = Duration::from_secs(30);
    while sent.len() < sends {
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        match b.admit(&p, at(now)) {
            Reservation::Go => {}
            Reservation::Wait(d) => now += d.as_millis() as u64,
            Reservation::Refuse(r) => panic!("{r:?} at {now} ms"),
        }
        now += late[sent.len() % late.len()];
        loop {
            match b.try_start(&p, at(now), hold) {
                Start::Go => break,
                Start::Wait(d) => now += d.as_millis().max(1) as u64,
                other => panic!("{other:?} at {now} ms"),
            }
        }
        let ok = kind.judge(&sent, now);
        sent.push((now, ok));
        // Two requests may go together on the first slot's loan: the
        // page behind robots.txt is sent before robots.txt is answered.
        if sent.len() == 1 && matches!(b.admit(&p, at(now)), Reservation::Go) {
            let _ = b.try_start(&p, at(now), hold);
            let ok2 = kind.judge(&sent, now + 1);
            sent.push((now + 1, ok2));
            let reply = at(now + latency_ms);
            let _ = b.on_response(&p, reply, wall, 200, None, 0.5);
            now += 1;
            let (status, ra) = if ok2 { (200, None) } else { (429, retry_after) };
            let r = b.on_response(&p, reply, wall, status, ra, 0.5);
            ceiling = shown_ceiling(&r).unwrap_or(ceiling);
            now += latency_ms;
            continue;
        }
        now += latency_ms;
        let (status, ra) = if ok { (200, None) } else { (429, retry_after) };
        let r = b.on_response(&p, at(now), wall, status, ra, 0.5);
        ceiling = shown_ceiling(&r).unwrap_or(ceiling);
    }
    Run { sent, ceiling }
}

fn shown_ceiling(r: &Reaction) -> Option<f64> {
    match r {
        Reaction::Ok { ceiling, .. } | Reaction::SlowedDown { ceiling, .. } => Some(*ceiling),
        Reaction::Throttled(t) => Some(t.ceiling),
        _ => None,
    }
}

fn per_second(allowance: u32) -> [Kind; 5] {
    [
        Kind::Fixed {
            allowance,
            window_ms: 1000,
            offset_ms: 370,
            counts_refused: true,
        },
        Kind::Sliding {
            allowance,
            window_ms: 1000,
        },
        Kind::SlidingCounter {
            allowance,
            window_ms: 1000,
        },
        Kind::Gcra {
            interval_ms: 1000 / u64::from(allowance),
            burst: 1,
        },
        Kind::Gcra {
            interval_ms: 1000 / u64::from(allowance),
            burst: 5,
        },
    ]
}

/// Sends let through after the first refusal's twentieth successor, and
/// refusals there: the pace the budget settled at, and whether it kept it.
fn settled(run: &Run) -> (f64, usize) {
    let from = (run.first_refusal().unwrap_or(0) + 20).min(run.sent.len() - 1);
    let later = run.sent[from..].iter().filter(|s| !s.1).count();
    (run.pace_after(from), later)
}

fn kind_strategy() -> impl Strategy<Value = Kind> {
    let rate = 2u32..=3;
    prop_oneof![
        rate.clone().prop_map(|a| Kind::Sliding {
            allowance: a,
            window_ms: 1000
        }),
        rate.prop_map(|a| Kind::SlidingCounter {
            allowance: a,
            window_ms: 1000
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Against sliding windows (log or counter) at 2 and 3 a second, with
    /// answers 1 to 60 ms after the send, with and without Retry-After: at
    /// most two 429s, twenty sends after the
    /// first the pace is at least 80% of the limit and draws no more, and
    /// the ceiling is not above the limit.
    #[test]
    fn each_kind_is_learned_within_twenty_sends_and_kept(
        kind in kind_strategy(),
        latency_ms in 1u64..60,
        retry_after in prop_oneof![Just(None), Just(Some("1"))],
    ) {
        let run = crawl(kind, 80, latency_ms, retry_after);
        let (pace, later) = settled(&run);
        prop_assert!(run.refusals() <= 2, "{kind:?}: {:?}", run.sent);
        prop_assert_eq!(later, 0, "{:?}: {:?}", kind, run.sent);
        prop_assert!(pace >= 0.8 * kind.rate(), "{kind:?}: {pace} {:?}", run.sent);
        prop_assert!(run.ceiling <= kind.rate(), "{kind:?}: {}", run.ceiling);
    }

    /// Once a window is learned the budget goes back to its pace at once,
    /// not by halving and climbing again: the pause after the first 429 is
    /// the learned window when the site gave no Retry-After (not a 3 s
    /// backoff), and each of the twenty sends after it follows the one
    /// before within the spacing of 80% of the limit.
    #[test]
    fn a_learned_window_is_resumed_at_its_pace_after_one_window(
        kind in kind_strategy(),
        latency_ms in 1u64..60,
        retry_after in prop_oneof![Just(None), Just(Some("1"))],
    ) {
        let run = crawl(kind, 80, latency_ms, retry_after);
        let first = run.first_refusal().expect("the climb meets the limit");
        let pause = run.sent[first + 1].0 - run.sent[first].0;
        prop_assert!(pause <= 1000 + latency_ms + 2, "{kind:?}: {pause} ms {:?}", run.sent);
        let spacing = (1000.0 / (0.8 * kind.rate())).ceil() as u64 + 1;
        let after = &run.sent[first + 1..(first + 21).min(run.sent.len())];
        for pair in after.windows(2) {
            let gap = pair[1].0 - pair[0].0;
            prop_assert!(gap <= spacing, "{kind:?}: {gap} ms at {} {:?}", pair[1].0, run.sent);
        }
    }

    /// Sends that start up to 80 ms after their slot (a loaded machine)
    /// do not bring the next one closer than an interval: against nginx's
    /// `limit_req` without a burst (any gap under its interval refused)
    /// and the sliding windows, at most two 429s in 100 sends, none in the
    /// last 20. (A weighted counter lets a burst through where its
    /// windows meet, so the first 429 can show a faster limit than its
    /// own, and late sends under 90% of it can meet such a burst as late
    /// as the 60th send; the second 429, drawn under it, is halved from,
    /// as DESIGN says, and none comes after.)
    #[test]
    fn late_sends_do_not_draw_429s_once_the_limit_is_learned(
        kind in prop_oneof![
            kind_strategy(),
            (2u64..=3).prop_map(|r| Kind::Gcra { interval_ms: 1000 / r, burst: 1 }),
        ],
        latency_ms in 1u64..30,
        late in proptest::collection::vec(0u64..80, 1..12),
    ) {
        let run = crawl_late(kind, 100, latency_ms, None, &late);
        prop_assert!(run.refusals() <= 2, "{kind:?}: {:?}", run.sent);
        prop_assert!(run.sent[80..].iter().all(|s| s.1), "{kind:?}: {:?}", run.sent);
    }

    /// A fixed window (at any offset) lets the climb run past its rate
    /// where two windows meet, and the sends then fit faster limits too:
    /// at most three 429s, none in the last 40 of 80 sends, and a ceiling
    /// not above the limit (the pace it settles at is not always 80% of
    /// the limit: see the table in docs/budgets.md).
    #[test]
    fn a_fixed_window_is_learned_by_the_third_429_and_kept(
        allowance in 2u32..=3,
        offset_ms in 0u64..1000,
        latency_ms in 1u64..60,
        retry_after in prop_oneof![Just(None), Just(Some("1"))],
    ) {
        let kind = Kind::Fixed { allowance, window_ms: 1000, offset_ms, counts_refused: true };
        let run = crawl(kind, 80, latency_ms, retry_after);
        prop_assert!(run.refusals() <= 3, "{kind:?}: {:?}", run.sent);
        prop_assert!(run.sent[40..].iter().all(|s| s.1), "{kind:?}: {:?}", run.sent);
        prop_assert!(run.ceiling <= kind.rate(), "{kind:?}: {}", run.ceiling);
    }
}

/// mod_qos counts in whole seconds of its clock from a window's first
/// send, so a window is 1 to 2 s long and the climb's first refusal fits
/// faster limits than its own; what it refuses depends on where in a
/// second the crawl began. At every phase of the clock (50 ms apart), none
/// after the twentieth send past the first 429 (the thirtieth where three
/// come), and at most two 429s and at least 80% of the limit there, but
/// where noted (docs/budgets.md has the table):
///
/// - 6 per 2 s at 0–200 ms: the climb's six pass in under a second and
///   the fastest limit they fit, 6 per 1 s, is faster than the pace let
///   through (2.57/s); the slowest they fit above it (3/s) is the guess
///   gone to, and no 429 comes under it (DESIGN's 80% of that pace held
///   it at 69%);
/// - 6 per 2 s at 250–500 ms: the first 429 reads 5 per 1 s, and the
///   second, drawn under it, is read weighed by the clock's phases: 6 per
///   2 s explains both episodes wherever they began, 4 per 1 s (the
///   fastest fit, a third 429 before) only where a boundary fell just so;
/// - 4 per 2 s at 350–500 ms: at the second 429, 3 per 1 s explains the
///   answers at nearly as many phases as 4 per 2 s and is faster, and a
///   third comes;
/// - at 550–950 ms a limit read too fast is read again at the second 429,
///   and 4 per 2 s at 250–300 ms finds the first send after its pause
///   refused too (the pause doubles, the pace stays).
#[test]
fn mod_qos_is_learned_at_every_phase_of_the_clock() {
    for allowance in [4, 6] {
        for offset_ms in (0..1000).step_by(50) {
            for latency_ms in [2, 20] {
                let kind = Kind::Qos {
                    allowance,
                    seconds: 2,
                    offset_ms,
                };
                let run = crawl(kind, 80, latency_ms, None);
                let (most, settle, share) = match (allowance, offset_ms) {
                    (4, 350..=500) => (3, 30, 0.8),
                    _ => (2, 20, 0.8),
                };
                let from = run.first_refusal().unwrap() + settle;
                let later = run.sent[from..].iter().filter(|s| !s.1).count();
                let pace = run.pace_after(from);
                assert!(run.refusals() <= most, "{kind:?}: {:?}", run.sent);
                assert_eq!(later, 0, "{kind:?}: {:?}", run.sent);
                assert!(
                    pace >= share * kind.rate(),
                    "{kind:?}: {pace} {:?}",
                    run.sent
                );
            }
        }
    }
}

/// What the budget learns from each kind at 2 and 3 a second (the table
/// of docs/budgets.md): `cargo test -p mannerly-policy --test budget_limits
/// -- --nocapture`.
#[test]
fn the_table_of_what_is_learned() {
    for allowance in [2, 3] {
        for kind in per_second(allowance) {
            for ra in [None, Some("1")] {
                let run = crawl(kind, 61, 5, ra);
                let first = run.first_refusal().unwrap_or(0);
                if !matches!(kind, Kind::Gcra { burst: 5, .. }) {
                    assert!(run.refusals() <= 2, "{kind:?}: {:?}", run.sent);
                }
                println!(
                    "{kind:?} ra={ra:?}: refusals {} first at {first}, pace after +20 {:.2} ({:.0}%), ceiling {}",
                    run.refusals(),
                    run.pace_after((first + 20).min(60)),
                    100.0 * run.pace_after((first + 20).min(60)) / kind.rate(),
                    run.ceiling
                );
            }
        }
    }
}

#[test]
fn estimate_reads_a_ramp_met_by_each_kind() {
    let ramp = |kind: Kind| {
        let (mut past, mut t, mut gap) = (Vec::new(), 0u64, 1000.0f64);
        loop {
            let ok = kind.judge(&past, t);
            past.push((t, ok));
            if !ok {
                break;
            }
            t += gap as u64;
            gap /= 1.2;
        }
        let sends: Vec<Sent> = past
            .iter()
            .map(|&(at, ok)| Sent::answered(at, ok))
            .collect();
        estimate(&sends)
    };
    // At 2/s every kind but the token bucket with a burst (whose burst
    // lets the climb run past its rate before the first refusal) is read
    // from one refusal. At 3/s this bare climb (no robots.txt first, no
    // halving) runs far enough past the limit before its first refusal that
    // the sends fit faster limits too; the budget's own climb learns it at
    // the next 429 (`each_kind_is_learned_within_twenty_sends_and_kept`).
    let learned = per_second(2).map(|kind| ramp(kind).map(Learned::rate_u));
    assert_eq!(learned[..4], [Some(2_000_000); 4], "{learned:?}");
}

/// A token bucket with a burst (nginx `limit_req burst=5`) hides its rate
/// until the burst is spent, and the climb's sends then fit windows faster
/// than its rate, and faster than the pace let through: the guess above
/// that pace is on the wrong side, and the 429 it draws brings DESIGN's
/// rule, taken twice. However the limit is read, the pace settles under
/// the rate, so the bucket does not drain: no 429 after the first 60 of
/// 110 sends, and 80% of the rate or more there. (Weighing every 429's
/// fits by the clock's phases read it as 7 per 3 s and held nginx
/// `burst=5` at 2.11/s until the breaker opened.)
#[test]
fn a_token_bucket_with_a_burst_is_not_held_above_its_rate() {
    // nginx's `burst=5` lets six through at once (the first is not
    // counted): a bucket of 6 here.
    for (allowance, burst) in [(2u64, 5), (2, 6), (3, 5), (3, 6)] {
        for latency_ms in [2, 20, 40] {
            let kind = Kind::Gcra {
                interval_ms: 1000 / allowance,
                burst,
            };
            let run = crawl(kind, 110, latency_ms, None);
            assert!(
                run.sent[60..].iter().all(|s| s.1),
                "{kind:?}: {:?}",
                run.sent
            );
            assert!(run.ceiling <= kind.rate(), "{kind:?}: {}", run.ceiling);
            assert!(
                run.pace_after(60) >= 0.7 * kind.rate(),
                "{kind:?}: {:?}",
                run.sent
            );
        }
    }
}
