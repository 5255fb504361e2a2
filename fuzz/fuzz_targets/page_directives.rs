//! Any bytes as an HTML head and as X-Robots-Tag values, judged for two
//! identities: none may panic, a refusal must name what said it, and a
//! directive bound only with a word the site wrote.
//! The properties are in `fuzz/checks/page_directives.rs`.
#![no_main]

#[path = "../checks/page_directives.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| check::check(data));
