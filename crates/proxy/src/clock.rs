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
}

/// `t` as the audit log writes times: RFC 3339, ms, UTC.
///
/// Every request takes two, so the date and time of day are formatted once
/// per second and thread, and only the milliseconds for each stamp.
pub(crate) fn stamp(t: SystemTime) -> String {
    thread_local! {
        /// The second last stamped, and its text up to the seconds.
        static SECOND: std::cell::RefCell<(u64, String)> =
            const { std::cell::RefCell::new((u64::MAX, String::new())) };
    }
    let Ok(since) = t.duration_since(std::time::UNIX_EPOCH) else {
        return humantime::format_rfc3339_millis(t).to_string();
    };
    let (secs, millis) = (since.as_secs(), since.subsec_millis());
    SECOND.with_borrow_mut(|(second, text)| {
        if *second != secs {
            let whole = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            let full = humantime::format_rfc3339_seconds(whole).to_string();
            // "YYYY-MM-DDTHH:MM:SSZ" without its "Z".
            *text = full.trim_end_matches('Z').to_string();
            *second = secs;
        }
        let mut out = String::with_capacity(text.len() + 5);
        out.push_str(text);
        out.push('.');
        let digits = [millis / 100, millis / 10 % 10, millis % 10];
        out.extend(digits.map(|d| char::from(b'0' + d as u8)));
        out.push('Z');
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stamps_are_what_humantime_writes() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_633_599_990);
        // Across second, minute, day and year boundaries, in and out of
        // order (the cache is per second, not per run of stamps).
        let mut times: Vec<SystemTime> = (0..40)
            .map(|i| start + Duration::from_millis(i * 7))
            .collect();
        times.push(SystemTime::UNIX_EPOCH + Duration::from_millis(1_767_225_599_999));
        times.push(SystemTime::UNIX_EPOCH + Duration::from_millis(1_767_225_600_000));
        times.push(start);
        times.push(SystemTime::UNIX_EPOCH);
        times.push(SystemTime::UNIX_EPOCH + Duration::from_nanos(999_999));
        for t in times {
            assert_eq!(stamp(t), humantime::format_rfc3339_millis(t).to_string());
        }
    }

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
