//! The proxy's one clock. Monotonic time is tokio's (so tests on paused
//! time move it by hand); wall time, for Retry-After dates, persistence and
//! audit timestamps, is the system's, or in tests a fixed start moved along
//! with tokio's time. The policy crate never reads a clock: it gets these.

use std::time::SystemTime;

use tokio::time::Instant;

/// Where every time reading of the proxy comes from.
#[derive(Clone, Debug)]
pub(crate) struct Clock {
    /// `None`: the system's wall clock. `Some((at, wall))`: `wall` at the
    /// monotonic instant `at`, moving with monotonic time.
    wall_at: Option<(Instant, SystemTime)>,
}

impl Clock {
    /// The system clocks.
    pub(crate) fn system() -> Clock {
        Clock { wall_at: None }
    }

    /// A clock whose wall time starts at `wall` now and then follows
    /// tokio's (possibly paused) monotonic time.
    #[cfg(test)]
    #[allow(clippy::disallowed_methods)] // the monotonic start of the wall clock
    pub(crate) fn starting_at(wall: SystemTime) -> Clock {
        Clock {
            wall_at: Some((Instant::now(), wall)),
        }
    }

    /// Monotonic now.
    #[allow(clippy::disallowed_methods)] // the one place that reads it
    pub(crate) fn now(&self) -> Instant {
        Instant::now()
    }

    /// Monotonic now, as the policy crate takes it.
    pub(crate) fn now_std(&self) -> std::time::Instant {
        self.now().into_std()
    }

    /// Wall-clock now.
    #[allow(clippy::disallowed_methods)] // the one place that reads it
    pub(crate) fn wall(&self) -> SystemTime {
        match self.wall_at {
            None => SystemTime::now(),
            Some((at, wall)) => wall + self.now().saturating_duration_since(at),
        }
    }

    /// Wall-clock now as the audit log writes times: RFC 3339, ms, UTC.
    pub(crate) fn stamp(&self) -> String {
        stamp(self.wall())
    }
}

/// `t` as the audit log writes times: RFC 3339, ms, UTC.
pub(crate) fn stamp(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn wall_time_follows_paused_monotonic_time() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let clock = Clock::starting_at(start);
        let t0 = clock.now();
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(clock.now() - t0, Duration::from_millis(1500));
        assert_eq!(clock.wall(), start + Duration::from_millis(1500));
    }
}
