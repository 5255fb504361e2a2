//! Any bytes as Visit-time / Request-rate values, inside a robots.txt and
//! alone, judged at a time taken from the input: none may panic, a closed
//! host always opens within a day, and an unreadable line binds nothing.
//! The properties are in `fuzz/checks/visit_times.rs`.
#![no_main]

#[path = "../checks/visit_times.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::check(data));
