//! How well a limit explains the answers: the share of the clock's phases
//! at which windows of its length would have let through and refused
//! exactly the sends the site did.
//!
//! The bounds in `limit.rs` keep every limit that some window could fit;
//! a climb met by a window of 6 per 2 s fits 5 per 1 s as well, but only
//! where a second's boundary fell just so. Counted over the phases, the
//! limit that explains the answers wherever its windows began is the
//! likelier one, and a second episode (the pace held after a pause) tells
//! them apart: each needs its own lucky boundary under the wrong limit.
//!
//! Windows are laid on a grid of the clock: calendar windows (Flask-Limiter's
//! `fixed-window`: the grid is the window), or windows of whole seconds
//! started by the first send after the last one ended (Apache mod_qos: the
//! grid is a second); a sliding log (`moving-window`) explains the answers
//! at every phase or at none.

/// Phases tried across a grid step.
pub const PHASES: u64 = 50;

/// At how many of [`PHASES`] phases windows of `allowance` per
/// `window_ms` explain every answer (time sent, ms, and whether it was let
/// through; oldest first), the best of the grids; all of them when a
/// sliding log does. With `recent`, sends older than the first may have
/// counted, so answers whose window reaches back before it are not judged.
pub(super) fn phases_explained(
    answers: &[(u64, bool)],
    allowance: u32,
    window_ms: u64,
    recent: bool,
) -> u64 {
    let limit = Limit {
        allowance: u64::from(allowance),
        window_ms,
    };
    // One send per interval is read from the gaps alone (limit.rs).
    if allowance <= 1 || sliding_explains(answers, limit, recent) {
        return PHASES;
    }
    let mut grids = [window_ms, 1_000];
    grids.sort_unstable();
    let mut best = 0;
    for grid in grids.into_iter().filter(|&g| g <= window_ms) {
        let n = (0..PHASES)
            .filter(|&k| windows_explain(answers, limit, grid, k * grid / PHASES, recent))
            .count() as u64;
        best = best.max(n);
    }
    best
}

#[derive(Clone, Copy)]
struct Limit {
    allowance: u64,
    window_ms: u64,
}

fn sliding_explains(answers: &[(u64, bool)], limit: Limit, recent: bool) -> bool {
    let Some(&(first, _)) = answers.first() else {
        return true;
    };
    answers.iter().enumerate().all(|(i, &(at, let_through))| {
        if recent && at.saturating_sub(first) < limit.window_ms {
            return true;
        }
        let within = answers[..i]
            .iter()
            .filter(|&&(b, ok)| ok && at.saturating_sub(b) < limit.window_ms)
            .count() as u64;
        (within < limit.allowance) == let_through
    })
}

/// Windows of `limit.window_ms`, each begun at the grid point (`phase`
/// plus whole `grid` steps) at or before the first send after the last
/// window ended; every send counts, as these limiters count every hit.
fn windows_explain(
    answers: &[(u64, bool)],
    limit: Limit,
    grid: u64,
    phase: u64,
    recent: bool,
) -> bool {
    // Shifted a step on so that a grid point before the first send is
    // never below zero.
    let (mut end, mut count, mut windows) = (0u64, 0u64, 0u32);
    for &(at, let_through) in answers {
        let t = at + grid;
        if windows == 0 || t >= end {
            let start = phase + (t - phase) / grid * grid;
            end = start + limit.window_ms;
            count = 0;
            windows += 1;
        }
        let judged = !(recent && windows == 1);
        if judged && (count < limit.allowance) != let_through {
            return false;
        }
        count += 1;
    }
    true
}
