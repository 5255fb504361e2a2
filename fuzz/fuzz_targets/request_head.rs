//! Any bytes as the first request head a client sends: no panic, and a
//! refusal is always a 4xx status the proxy can send.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for (max_bytes, max_headers) in [(65536, 100), (1024, 4)] {
        if let Some(Err(status)) = mannerly_proxy::check_request_head(data, max_bytes, max_headers) {
            assert!((400..500).contains(&status), "{status}");
        }
    }
});
