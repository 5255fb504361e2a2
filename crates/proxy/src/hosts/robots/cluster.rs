//! One robots.txt fetch per origin for the whole cluster (redis backend):
//! the proxy that takes the lock fetches and publishes; the others use its
//! copy, aged by its fetch time so that it expires on every proxy at once.

use mannerly_policy::robots_cache::{FetchResult, Head, RobotsParams};
use mannerly_state::robots::{Claim, Fetched, SharedRobots};
use tokio::time::Instant;

use crate::hosts::budget::Budgets;

/// What the caller does next.
pub(super) enum Next {
    /// Use this copy, fetched at this instant (on this process's clock).
    Use(Copy, std::time::Instant),
    /// Fetch, then [`publish`] with this.
    Fetch(Option<(SharedRobots, bool)>),
}

/// Another proxy's fetch.
pub(super) struct Copy {
    pub result: FetchResult,
    pub head: Head,
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
        Claim::Copy { result, age, head } => {
            // `now` was read before the wait, so the fetch time worked out
            // here is, if anything, a little early: the copy expires a
            // little early, never late.
            let at = now.checked_sub(age).unwrap_or(now);
            Next::Use(Copy { result, head }, at)
        }
        Claim::Fetch { locked } => Next::Fetch(Some((shared, locked))),
    }
}

pub(super) async fn publish(
    claim: Option<(SharedRobots, bool)>,
    origin: &str,
    fetched: Fetched<'_>,
    params: &RobotsParams,
    wall: std::time::SystemTime,
) {
    let Some((shared, locked)) = claim else {
        return;
    };
    let keep = params.cluster_keep(fetched.result);
    shared.publish(origin, fetched, wall, keep, locked).await;
}
