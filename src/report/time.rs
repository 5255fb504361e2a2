//! Audit timestamps (RFC 3339, UTC, as the proxy writes them) to seconds,
//! without allocating: the report reads millions of them.

use anyhow::{anyhow, Result};

/// Seconds since the Unix epoch of `2025-01-31T12:00:00.123Z` (offsets
/// `+hh:mm` are honoured); `None` when it is not such a time.
pub fn parse_ts(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || (b[10] != b'T' && b[10] != b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let mut v = 0i64;
        for &c in b.get(r)? {
            if !c.is_ascii_digit() {
                return None;
            }
            v = v * 10 + i64::from(c - b'0');
        }
        Some(v)
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac = 0.0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let mut scale = 0.1;
        while let Some(c) = b.get(i).filter(|c| c.is_ascii_digit()) {
            frac += f64::from(c - b'0') * scale;
            scale /= 10.0;
            i += 1;
        }
    }
    let offset = match b.get(i) {
        Some(b'Z') | Some(b'z') => 0,
        Some(&sign @ (b'+' | b'-')) => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            let o = oh * 3600 + om * 60;
            if sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    Some((days * 86_400 + h * 3600 + mi * 60 + se - offset) as f64 + frac)
}

/// Howard Hinnant's days-from-civil.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `--since`: an RFC 3339 time, or an age before now (`90m`, `2h`, `7d`).
pub fn parse_since(s: &str) -> Result<f64> {
    if let Some(t) = parse_ts(s) {
        return Ok(t);
    }
    let age = humantime::parse_duration(s)
        .map_err(|_| anyhow!("not an RFC 3339 time (2025-01-31T12:00:00Z) nor an age (2h, 7d)"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| anyhow!("clock before 1970: {e}"))?;
    Ok(now.as_secs_f64() - age.as_secs_f64())
}

/// Seconds since the epoch back to `YYYY-MM-DD hh:mm:ss` UTC, for labels.
pub fn format_ts(t: f64) -> String {
    let secs = t.floor() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        assert_eq!(parse_ts("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(parse_ts("2025-01-31T12:00:00.500Z"), Some(1_738_324_800.5));
        assert_eq!(parse_ts("2025-01-31T13:00:00+01:00"), Some(1_738_324_800.0));
        assert_eq!(format_ts(1_738_324_800.5), "2025-01-31 12:00:00");
        assert_eq!(parse_ts("yesterday"), None);
        assert_eq!(parse_ts("2025-13-31T12:00:00Z"), None);
    }
}
