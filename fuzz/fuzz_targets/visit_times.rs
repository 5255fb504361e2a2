//! Any bytes as Visit-time / Request-rate values, inside a robots.txt and
//! alone, judged at a time taken from the input: none may panic, a closed
//! host always opens within a day, and an unreadable line binds nothing.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use mannerly_policy::robots::Robots;
use mannerly_policy::visit::{judge, parse_request_rate, Visit, Window};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = Window::parse(&text);
    if let Some(i) = parse_request_rate(&text) {
        assert!(i.is_finite() && i >= 0.0);
    }
    let secs = data.iter().fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(u64::from(b)));
    let now = UNIX_EPOCH + Duration::from_secs(secs % (1 << 40));
    let file = format!("User-agent: *\nVisit-time: {text}\nRequest-rate: {text}\nDisallow: /x\n");
    let robots = Robots::parse(file.as_bytes());
    let windows = robots.visit_times(["bot"]);
    if let Visit::Closed { opens_in, why } = judge(&windows, &[], now) {
        assert!(opens_in <= Duration::from_secs(86_400));
        assert!(why.contains("Visit-time"));
    }
    if let Some((interval, source)) = robots.request_interval(["bot"]) {
        assert!(interval.is_finite() && interval >= 0.0);
        assert!(source.starts_with("robots.txt line 3"));
    }
});
