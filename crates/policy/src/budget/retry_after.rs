//! Reading a Retry-After header (RFC 9110 §10.2.3) without trusting it.

use std::time::{Duration, SystemTime};

/// A Retry-After further away than this (365 days) is not a request to wait
/// but a broken or hostile header: it is treated as absent, like garbage.
pub const RETRY_AFTER_ABSURD: Duration = Duration::from_secs(365 * 86_400);

/// How long a Retry-After value asks us to wait, clamped to `max`.
///
/// Accepts delta-seconds (`120`) and HTTP-dates in any of the three RFC 9110
/// forms, read against `wall`. Returns `None` — "as if absent", so the caller
/// falls back to exponential backoff — for garbage, negative or fractional
/// numbers, dates in the past (a skewed clock must not turn into "retry at
/// once"), and anything beyond [`RETRY_AFTER_ABSURD`].
pub fn parse_retry_after(raw: &str, wall: SystemTime, max: Duration) -> Option<Duration> {
    let raw = raw.trim_matches(|c| c == ' ' || c == '\t');
    let wait = if !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()) {
        // More digits than a u64 holds is absurd by definition.
        Duration::from_secs(raw.parse::<u64>().ok()?)
    } else {
        let at = httpdate::parse_http_date(raw).ok()?;
        at.duration_since(wall).ok()?
    };
    if wait > RETRY_AFTER_ABSURD {
        return None;
    }
    Some(wait.min(max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    const HOUR: Duration = Duration::from_secs(3600);

    fn wall() -> SystemTime {
        // Sun, 06 Nov 1994 08:49:37 GMT, the RFC's own example date.
        UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    #[test]
    fn delta_seconds() {
        assert_eq!(
            parse_retry_after("120", wall(), HOUR),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", wall(), HOUR), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("86400", wall(), HOUR), Some(HOUR));
    }

    #[test]
    fn http_dates_in_all_three_forms() {
        let s = |v| parse_retry_after(v, wall(), HOUR);
        assert_eq!(
            s("Sun, 06 Nov 1994 08:50:37 GMT"),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            s("Sunday, 06-Nov-94 08:50:37 GMT"),
            Some(Duration::from_secs(60))
        );
        assert_eq!(s("Sun Nov  6 08:50:37 1994"), Some(Duration::from_secs(60)));
        assert_eq!(s("Sun, 06 Nov 1994 10:49:37 GMT"), Some(HOUR));
    }

    #[test]
    fn garbage_negative_past_and_absurd_are_absent() {
        for raw in [
            "",
            "soon",
            "-5",
            "+5",
            "1.5",
            "5s",
            "0x10",
            "Sun, 06 Nov 1994 08:48:37 GMT",
            "99999999999999999999999",
            "31536001",
            "Sun, 06 Nov 2094 08:49:37 GMT",
        ] {
            assert_eq!(parse_retry_after(raw, wall(), HOUR), None, "{raw:?}");
        }
    }
}
