//! Any bytes as Visit-time / Request-rate values, inside a robots.txt and
//! alone, judged at a time taken from the input: none may panic, a closed
//! host always opens within a day, and an unreadable line binds nothing.
//!
//! Shared by the cargo-fuzz target of the same name and by
//! `crates/policy/tests/fuzz_replay.rs`, which runs it without libFuzzer.

use mannerly_policy::robots::Robots;
use mannerly_policy::visit::{judge, parse_request_rate, Visit, Window};
use std::time::{Duration, UNIX_EPOCH};

/// Panics when `data` breaks a property.
pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = Window::parse(&text);
    if let Some(i) = parse_request_rate(&text) {
        assert!(i.is_finite() && i >= 0.0);
    }
    let secs = data
        .iter()
        .fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(u64::from(b)));
    let now = UNIX_EPOCH + Duration::from_secs(secs % (1 << 40));
    let file = format!("User-agent: *\nVisit-time: {text}\nRequest-rate: {text}\nDisallow: /x\n");
    let robots = Robots::parse(file.as_bytes());
    let windows = robots.visit_times(["bot"]);
    if let Visit::Closed { opens_in, why } = judge(&windows, &[], now) {
        assert!(opens_in <= Duration::from_secs(86_400));
        // The line is quoted as the site wrote it, key case included.
        assert!(why.to_ascii_lowercase().contains("visit-time"), "{why}");
    }
    if let Some((interval, source)) = robots.request_interval(["bot"]) {
        assert!(interval.is_finite() && interval >= 0.0);
        // The value may hold line breaks of its own, which move the
        // template's Request-rate line down but never above line 3.
        let (line, said) = source
            .strip_prefix("robots.txt line ")
            .and_then(|rest| rest.split_once(": "))
            .unwrap_or_else(|| panic!("no line named: {source}"));
        assert!(line.parse::<usize>().is_ok_and(|n| n >= 3), "{source}");
        assert!(
            said.to_ascii_lowercase().starts_with("request-rate"),
            "{source}"
        );
    }
}
