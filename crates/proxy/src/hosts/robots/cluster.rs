//! One robots.txt fetch per origin for the whole cluster (redis backend):
//! the proxy that takes the lock fetches and publishes; the others use its
//! copy, aged by its fetch time so that it expires on every proxy at once.

use mannerly_policy::robots_cache::{FetchResult, RobotsParams};
use mannerly_state::robots::{Claim, SharedRobots};
use tokio::time::Instant;

use crate::hosts::budget::Budgets;

/// What the caller does next.
pub(super) enum Next {
    /// Use this result, fetched at this instant (on this process's clock).
    Use(FetchResult, std::time::Instant),
    /// Fetch, then [`publish`] with this.
    Fetch(Option<(SharedRobots, bool)>),
}

pub(super) async fn claim(
    budgets: &Budgets,
    origin: &str,
    params: &RobotsParams,
    deadline: Instant,
    now: std::time::Instant,
) -> Next {
    let Some(shared) = budgets.shared_robots() else {
        return Next::Fetch(None);
    };
    match shared
        .claim(
            origin,
            params.max_age(),
            params.cluster_lock(),
            deadline,
            || budgets.now(),
            || budgets.wall(),
        )
        .await
    {
        Claim::Copy { result, age } => {
            // `now` was read before the wait, so the fetch time worked out
            // here is, if anything, a little early: the copy expires a
            // little early, never late.
            Next::Use(result, now.checked_sub(age).unwrap_or(now))
        }
        Claim::Fetch { locked } => Next::Fetch(Some((shared, locked))),
    }
}

pub(super) async fn publish(
    claim: Option<(SharedRobots, bool)>,
    origin: &str,
    result: &FetchResult,
    params: &RobotsParams,
    wall: std::time::SystemTime,
) {
    let Some((shared, locked)) = claim else {
        return;
    };
    shared
        .publish(origin, result, wall, params.cluster_keep(result), locked)
        .await;
}
