use http::Uri;

use super::fetch::resolve_location;
use super::*;
use mannerly_policy::robots::MAX_ROBOTS_BYTES;

/// `robots.max_bytes` at its smallest: room for two 200 kB bodies.
const CAP: u64 = MAX_ROBOTS_BYTES as u64;
const BODY: usize = 200_000;

fn cache() -> RobotsCache {
    let params = RobotsParams {
        max_bytes: CAP,
        ..RobotsParams::default()
    }
    .validate()
    .expect("valid");
    RobotsCache::new(params, Clock::system(), None)
}

/// A robots.txt of `len` bytes fetched for `origin` and put in the cache.
fn fetched(c: &RobotsCache, origin: &str, len: usize) {
    let slot = c.slot(origin);
    let mut body = format!("User-agent: *\nDisallow: /private\n# {origin}\n").into_bytes();
    body.resize(len, b'#');
    let body = FetchResult::Body(body);
    c.install_with(origin, &slot, &body, Default::default(), c.clock.now_std());
}

fn held(c: &RobotsCache, origin: &str) -> bool {
    c.slots.get(origin).is_some_and(|s| c.cached(&s).is_some())
}

/// What the cache counts against the cap, and what its listed entries hold.
fn counted_and_held(c: &RobotsCache) -> (u64, u64) {
    let held = c
        .slots
        .iter()
        .map(|s| s.bytes.load(Ordering::Relaxed))
        .sum();
    (c.bytes.load(Ordering::Relaxed), held)
}

#[test]
fn the_byte_cap_evicts_older_entries_and_keeps_the_one_just_fetched() {
    let c = cache();
    fetched(&c, "http://a.test/", BODY);
    fetched(&c, "http://b.test/", BODY);
    assert!(held(&c, "http://a.test/") && held(&c, "http://b.test/"));
    assert_eq!(counted_and_held(&c), (2 * BODY as u64, 2 * BODY as u64));

    // A third body would pass the cap: the oldest makes room, and only as
    // much as it takes (b and c fit together).
    fetched(&c, "http://c.test/", BODY);
    assert!(held(&c, "http://c.test/"), "the newest entry is kept");
    assert!(!held(&c, "http://a.test/") && held(&c, "http://b.test/"));
    let (counted, held_bytes) = counted_and_held(&c);
    assert_eq!(counted, held_bytes);
    assert!(counted <= CAP, "{counted} bytes held over a cap of {CAP}");
}

#[test]
fn the_byte_cap_holds_through_many_fetches_of_any_size() {
    let c = cache();
    for (i, len) in [
        150_000, 300_000, 20_000, 500_000, 90_000, 260_000, 400_000, 10,
    ]
    .into_iter()
    .cycle()
    .take(40)
    .enumerate()
    {
        let origin = format!("http://o{i}.test/");
        fetched(&c, &origin, len);
        assert!(held(&c, &origin), "{origin} is kept");
        let (counted, held_bytes) = counted_and_held(&c);
        assert_eq!(counted, held_bytes, "after {origin}");
        assert!(counted <= CAP, "{counted} bytes over {CAP} after {origin}");
    }
}

#[test]
fn the_byte_cap_holds_when_evicting_an_eighth_is_not_enough() {
    let c = cache();
    for i in 0..5 {
        fetched(&c, &format!("http://o{i}.test/"), 100_000);
    }
    // The entry cap frees one; the bodies left and the new one still pass
    // the byte cap, so the others go too, least recently used first.
    fetched(&c, "http://big.test/", MAX_ROBOTS_BYTES);
    assert!(held(&c, "http://big.test/"));
    assert_eq!(c.slots.len(), 1);
    assert_eq!(counted_and_held(&c), (CAP, CAP));
}

#[test]
fn an_entry_evicted_while_its_fetch_ran_holds_no_bytes() {
    let c = cache();
    // A fetch for x starts; while it runs, others fill the cache over
    // the cap and x's empty slot is evicted.
    let x = c.slot("http://x.test/");
    fetched(&c, "http://a.test/", BODY);
    fetched(&c, "http://b.test/", BODY);
    fetched(&c, "http://c.test/", BODY);
    assert!(c.slots.get("http://x.test/").is_none());
    // Its answer still serves the requests that waited for it, but
    // counts against the cap only if it is in the cache.
    let x_body = FetchResult::Body(vec![b'#'; BODY]);
    c.install_with(
        "http://x.test/",
        &x,
        &x_body,
        Default::default(),
        c.clock.now_std(),
    );
    let (counted, held_bytes) = counted_and_held(&c);
    assert_eq!(counted, held_bytes);
}

#[test]
fn the_entry_cap_frees_an_eighth_least_recently_used_first() {
    let params = RobotsParams {
        max_entries: 16,
        ..RobotsParams::default()
    }
    .validate()
    .expect("valid");
    let c = RobotsCache::new(params, Clock::system(), None);
    for i in 0..16 {
        fetched(&c, &format!("http://o{i}.test/"), 100);
    }
    // o0 is used again after every other came in.
    c.slot("http://o0.test/");
    fetched(&c, "http://new.test/", 100);
    // 16 - 16/8 = 14 stay, then the new one: o1 and o2 went, not half.
    assert_eq!(c.slots.len(), 15);
    for i in 0..16 {
        assert_eq!(
            held(&c, &format!("http://o{i}.test/")),
            i != 1 && i != 2,
            "o{i}"
        );
    }
    assert!(held(&c, "http://new.test/"));
    // The next pass waits for the cap again: one more origin evicts none.
    fetched(&c, "http://next.test/", 100);
    assert_eq!(c.slots.len(), 16);
}

#[test]
fn locations_resolve_against_the_request() {
    let base: Uri = "http://a.test/robots.txt".parse().unwrap();
    assert_eq!(resolve_location(&base, "/r2").unwrap(), "http://a.test/r2");
    assert_eq!(resolve_location(&base, "r3").unwrap(), "http://a.test/r3");
    assert_eq!(
        resolve_location(&base, "//b.test/x").unwrap(),
        "http://b.test/x"
    );
    assert_eq!(
        resolve_location(&base, "https://c.test/y").unwrap(),
        "https://c.test/y"
    );
    // RFC 3986: a scheme is case-insensitive, and a query alone keeps the
    // base's path.
    assert_eq!(
        resolve_location(&base, "HTTPS://c.test/y").unwrap(),
        "https://c.test/y"
    );
    assert_eq!(
        resolve_location(&base, "?v=2").unwrap(),
        "http://a.test/robots.txt?v=2"
    );
}
