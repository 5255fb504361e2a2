//! Memory per host of `MemoryHosts` at 1,000,000 hosts.
//!
//! Every host gets one admit and one 429, so none of them is forgettable,
//! and bytes are counted by a global allocator that tracks live heap bytes
//! (what the process asked for; malloc's own per-chunk overhead comes on
//! top). Run with:
//!
//! ```text
//! cargo run --release -p mannerly-state --example host_memory
//! ```

// The example is the store's caller: it reads the system clocks and
// passes them in, as the proxy does.
#![allow(clippy::disallowed_methods)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use mannerly_policy::budget::HostBudget;
use mannerly_state::hosts::{HostStore, MemoryHosts};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const HOSTS: usize = 1_000_000;

fn main() {
    let t0 = Instant::now();
    let wall = SystemTime::now();
    let names: Vec<String> = (0..HOSTS).map(|i| format!("host{i}.example.com")).collect();
    let key_bytes: usize = names.iter().map(String::len).sum();

    let before = LIVE.load(Ordering::Relaxed);
    let store = MemoryHosts::default();
    for name in &names {
        store.admit(name, t0, Duration::from_secs(30));
        store.on_response(name, t0, wall, 429, Some("60"), None, None, 0.5);
    }
    let after = LIVE.load(Ordering::Relaxed);

    assert_eq!(store.len(), HOSTS);
    assert_eq!(
        store.sweep(t0 + Duration::from_secs(1)),
        0,
        "throttled hosts must be kept"
    );
    let total = after - before;
    println!("hosts:                 {HOSTS}");
    println!(
        "size_of::<HostBudget>: {} bytes",
        std::mem::size_of::<HostBudget>()
    );
    println!(
        "host names (average):  {:.1} bytes",
        key_bytes as f64 / HOSTS as f64
    );
    println!(
        "heap for the store:    {:.1} MiB",
        total as f64 / (1024.0 * 1024.0)
    );
    println!(
        "bytes per host:        {:.1} (goal <= 256)",
        total as f64 / HOSTS as f64
    );
}
