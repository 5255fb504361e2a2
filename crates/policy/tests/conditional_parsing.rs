//! Cache-Control, Age and Expires read as RFC 9111 / RFC 9110 have them,
//! where the library underneath reads them otherwise (the cases of the
//! public cache test suite).

use std::time::{Duration, SystemTime};

use mannerly_policy::conditional::http::Method;
use mannerly_policy::conditional::{plan, storable, CacheKey, CacheParams, Plan};

#[path = "support/heads.rs"]
mod heads;
use heads::{get, resp};

const URL: &str = "https://example.com/page";
const DATE: &str = "Tue, 14 Nov 2023 22:13:20 GMT";

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

/// Whether a response with these fields, stored at `t0`, is answered from
/// the store ten seconds later (serve_fresh on), for a request with
/// `req_h`.
fn served_fresh(resp_h: &[(&str, &str)], req_h: &[(&str, &str)]) -> bool {
    let params = CacheParams {
        serve_fresh: true,
        ..CacheParams::default()
    };
    let key = CacheKey::new(&Method::GET, URL).unwrap();
    let mut h = vec![("etag", "\"v1\""), ("date", DATE)];
    h.extend_from_slice(resp_h);
    let meta = storable(&get(URL, &[]), &key, &resp(200, &h), &params, t0()).unwrap();
    let later = t0() + Duration::from_secs(10);
    let planned = plan(&get(URL, req_h), &key, Some(&meta), &params, later);
    matches!(planned, Plan::ServeStored { .. })
}

#[test]
fn cache_control_directives_are_case_insensitive() {
    assert!(served_fresh(&[("cache-control", "max-age=3600")], &[]));
    assert!(!served_fresh(
        &[("cache-control", "max-age=3600, No-CaChE")],
        &[]
    ));
    assert!(!served_fresh(&[("cache-control", "MAX-AGE=0")], &[]));
    assert!(served_fresh(&[("cache-control", "Max-Age=3600")], &[]));
    let request_no_cache = [("cache-control", "No-Cache")];
    assert!(!served_fresh(
        &[("cache-control", "max-age=3600")],
        &request_no_cache
    ));
}

#[test]
fn age_uses_the_first_member_and_an_unreadable_age_is_ignored() {
    let fresh = |age: &str| served_fresh(&[("cache-control", "max-age=3600"), ("age", age)], &[]);
    assert!(fresh("0"));
    assert!(fresh("0,7200"));
    assert!(fresh("0, 0"));
    assert!(!fresh("7200"));
    assert!(!fresh("7200, 0"));
    assert!(!fresh("3600, 3600"));
    // RFC 9111 §5.1: not delta-seconds, "a cache SHOULD ignore the field".
    for unreadable in ["abc", "-7200", "7200.0", "", "7200;foo=bar"] {
        assert!(fresh(unreadable), "Age: {unreadable:?}");
    }
    // §1.2.2: past what can be represented is 2^31, never 0.
    for huge in ["2147483647", "2147483648", "99999999999999999999999"] {
        assert!(!fresh(huge), "Age: {huge:?}");
    }
    // Several lines are one list (RFC 9110 §5.3): the first line's first
    // member.
    let lines = |a: &str, b: &str| {
        served_fresh(
            &[("cache-control", "max-age=3600"), ("age", a), ("age", b)],
            &[],
        )
    };
    assert!(!lines("7200", "0"));
    assert!(lines("0", "7200"));
    assert!(lines("0", "0"));
}

#[test]
fn an_expires_that_is_not_an_http_date_has_expired() {
    let fresh = |expires: &str| served_fresh(&[("expires", expires)], &[]);
    assert!(fresh("Thu, 18 Aug 2050 02:01:18 GMT"));
    // The obsolete forms are HTTP-dates too.
    assert!(fresh("Thursday, 18-Aug-50 02:01:18 GMT"));
    assert!(fresh("Thu Aug 18 02:01:18 2050"));
    for invalid in [
        "Thu, 18  Aug  2050 02:01:18 GMT",
        "0",
        "never",
        "2050-08-18",
    ] {
        assert!(!fresh(invalid), "Expires: {invalid:?}");
    }
}

#[test]
fn the_stored_fields_are_the_origins_as_sent() {
    let key = CacheKey::new(&Method::GET, URL).unwrap();
    let h = [
        ("etag", "\"v1\""),
        ("cache-control", "Max-Age=60, No-CaChE"),
        ("age", "7200, 0"),
        ("expires", "Thu, 18  Aug  2050 02:01:18 GMT"),
    ];
    let p = CacheParams::default();
    let meta = storable(&get(URL, &[]), &key, &resp(200, &h), &p, t0()).unwrap();
    for (name, value) in &h {
        assert_eq!(meta.headers()[*name], *value);
    }
}
