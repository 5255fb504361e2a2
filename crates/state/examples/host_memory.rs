//! Memory per host of `MemoryHosts` at 1,000,000 hosts, then what budget
//! groups cost: the same hosts as 20 names of each of 50,000 sites
//! (`budget.group_by = "site"`), one budget per site, and the map of each
//! host to its group that the proxy keeps (`hosts/budget/groups.rs`:
//! host name → `Group`, as `DashMap<String, Group>`).
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
    drop(store);
    groups(t0, wall);
}

/// Sites of 20 names each: budgets per group, and the host → group map.
fn groups(t0: Instant, wall: SystemTime) {
    const NAMES: usize = 20;
    let params = mannerly_policy::budget::BudgetParams::default();
    let names: Vec<String> = (0..HOSTS)
        .map(|i| format!("n{}.site{}.com", i % NAMES, i / NAMES))
        .collect();
    let before = LIVE.load(Ordering::Relaxed);
    let store = MemoryHosts::default();
    let placed = dashmap::DashMap::new();
    for name in &names {
        let group = params.group_of(name, None);
        store.admit(&group.key, t0, Duration::from_secs(30));
        store.on_response(&group.key, t0, wall, 429, Some("60"), None, None, 0.5);
        placed.insert(name.clone(), group);
    }
    let after = LIVE.load(Ordering::Relaxed);
    let sites = HOSTS / NAMES;
    assert_eq!(store.len(), sites);
    let budgets_then = LIVE.load(Ordering::Relaxed);
    drop(placed);
    let map = budgets_then - LIVE.load(Ordering::Relaxed);
    let budgets = (after - before) - map;
    println!("sites of {NAMES} names:   {sites} (one budget each)");
    println!(
        "bytes per group:       {:.1} (its budget)",
        budgets as f64 / sites as f64
    );
    println!(
        "bytes per host placed: {:.1} (host name -> group)",
        map as f64 / HOSTS as f64
    );
}
