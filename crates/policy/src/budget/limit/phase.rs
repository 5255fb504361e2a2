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

use super::{Learned, Outcome, Sent};

/// Phases tried across a grid step.
pub const PHASES: u64 = 50;

/// At how many of [`PHASES`] phases windows of `limit` explain every
/// answer in `sends` (oldest first), the best of the grids; all of them
/// when a sliding log does. With `recent`, sends older than the first may
/// have counted, so answers whose window reaches back before it are not
/// judged.
pub(super) fn phases_explained(sends: &[Sent], limit: Learned, recent: bool) -> u64 {
    // One send per interval is read from the gaps alone (limit.rs).
    if limit.allowance <= 1 || sliding_explains(sends, limit, recent) {
        return PHASES;
    }
    let mut grids = [limit.window_ms, 1_000];
    grids.sort_unstable();
    let mut best = 0;
    for grid in grids.into_iter().filter(|&g| g <= limit.window_ms) {
        let n = (0..PHASES)
            .filter(|&k| windows_explain(sends, limit, grid, k * grid / PHASES, recent))
            .count() as u64;
        best = best.max(n);
    }
    best
}

fn sliding_explains(sends: &[Sent], limit: Learned, recent: bool) -> bool {
    let Some(first) = sends.first().map(|s| s.at_ms) else {
        return true;
    };
    let allowance = u64::from(limit.allowance);
    sends.iter().enumerate().all(|(i, s)| {
        if recent && s.at_ms.saturating_sub(first) < limit.window_ms {
            return true;
        }
        let within = sends[..i]
            .iter()
            .filter(|b| b.outcome == Outcome::Accepted && s.at_ms - b.at_ms < limit.window_ms)
            .count() as u64;
        match s.outcome {
            Outcome::Accepted => within < allowance,
            Outcome::Refused => within >= allowance,
            Outcome::Pending => true,
        }
    })
}

/// Windows of `limit.window_ms`, each begun at the grid point (`phase`
/// plus whole `grid` steps) at or before the first send after the last
/// window ended; every send counts, as these limiters count every hit.
fn windows_explain(sends: &[Sent], limit: Learned, grid: u64, phase: u64, recent: bool) -> bool {
    let allowance = u64::from(limit.allowance);
    // Shifted a step on so that a grid point before the first send is
    // never below zero.
    let (mut end, mut count, mut windows) = (0u64, 0u64, 0u32);
    for s in sends.iter().filter(|s| s.outcome != Outcome::Pending) {
        let t = s.at_ms + grid;
        if windows == 0 || t >= end {
            let start = phase + (t - phase) / grid * grid;
            end = start + limit.window_ms;
            count = 0;
            windows += 1;
        }
        let judged = !(recent && windows == 1);
        let ok = match s.outcome {
            Outcome::Accepted => count < allowance,
            _ => count >= allowance,
        };
        if judged && !ok {
            return false;
        }
        count += 1;
    }
    true
}
