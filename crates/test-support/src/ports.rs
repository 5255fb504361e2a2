//! Ports for servers a test starts and names by number (a proxy binary, a
//! redis-server, nginx).
//!
//! Binding port 0, reading the port and letting it go left the port to the
//! kernel's ephemeral range, where any connection the tests open meanwhile
//! may take it before the server binds it ("Address already in use", once
//! in six CI runs). These come from below that range (Linux's is
//! 32768-60999 unless set otherwise), which outgoing connections and
//! port-0 binds never use, each at most once a process, checked free.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

const FIRST: u32 = 20_000;
const COUNT: u32 = 12_000;

/// The next offset into the range; `u32::MAX` until the first call.
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

/// A loopback port free now, not handed out before by this process.
pub fn free_port() -> u16 {
    // Processes that start together begin apart.
    let start = std::process::id().wrapping_mul(2_654_435_761) % COUNT;
    let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..COUNT {
        let port = FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % COUNT;
        let port = u16::try_from(port).expect("the range is below 65536");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {FIRST}-{}", FIRST + COUNT - 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_below_the_ephemeral_range_and_never_repeated() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len());
        assert!(
            ports.iter().all(|&p| (20_000..32_000).contains(&p)),
            "{ports:?}"
        );
        for p in ports {
            TcpListener::bind(("127.0.0.1", p)).expect("still free");
        }
    }
}
