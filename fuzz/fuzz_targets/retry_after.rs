//! Any text as a Retry-After value: no panic, never above the cap.
#![no_main]

use std::time::{Duration, SystemTime};

use libfuzzer_sys::fuzz_target;
use mannerly_policy::budget::parse_retry_after;

fuzz_target!(|data: &[u8]| {
    let raw = String::from_utf8_lossy(data);
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let max = Duration::from_secs(3600);
    if let Some(d) = parse_retry_after(&raw, wall, max) {
        assert!(d <= max);
    }
});
