//! Any bytes as audit log lines through `mannerly audit verify`'s parser,
//! with and without a key: no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mannerly_policy::{SigningKey, Verifier};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for key in [None, Some(SigningKey::from_bytes(&[7u8; 32]).verifying_key())] {
        let mut v = Verifier::new(key);
        v.start_file("fuzz");
        for (i, line) in text.split('\n').enumerate() {
            if i == 3 {
                v.start_file("next");
            }
            v.line(line);
        }
        let report = v.finish(|s| s.len().checked_sub(10).map(|n| n as f64));
        let _ = report.unsealed_tail();
    }
});
