//! Every write of a stored entry passes one storability rule: the first
//! store and the refresh by a 304 alike. Nothing a client must not share
//! (a cookie, a private or no-store page) is written or replayed.

use std::time::{Duration, SystemTime};

use mannerly_policy::conditional::http::{request, Method};
use mannerly_policy::conditional::{
    merge_not_modified, plan, storable, CacheEntryMeta, CacheKey, CacheParams, NoStore, Plan,
    WriteBack,
};

#[path = "support/heads.rs"]
mod heads;
use heads::resp;

const URL: &str = "https://example.com/page";

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn req(headers: &[(&str, &str)]) -> request::Parts {
    heads::get(URL, headers)
}

fn key() -> CacheKey {
    CacheKey::new(&Method::GET, URL).unwrap()
}

fn params(serve_fresh: bool) -> CacheParams {
    CacheParams {
        serve_fresh,
        ..CacheParams::default()
    }
}

fn stored(resp_h: &[(&str, &str)], p: &CacheParams) -> CacheEntryMeta {
    storable(&req(&[]), &key(), &resp(200, resp_h), p, t0()).expect("storable")
}

fn merge(meta: &CacheEntryMeta, nm: &[(&str, &str)], p: &CacheParams) -> (Vec<String>, WriteBack) {
    let later = t0() + Duration::from_secs(60);
    let out = merge_not_modified(meta, &req(&[]), &resp(304, nm), p, later).expect("same page");
    let cookies = out
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    (cookies, out.write)
}

fn cookies_of(meta: &CacheEntryMeta) -> usize {
    meta.headers().get_all("set-cookie").iter().count()
}

#[test]
fn a_304s_cookie_reaches_the_client_that_asked_and_never_the_store() {
    for serve_fresh in [false, true] {
        let p = params(serve_fresh);
        let meta = stored(&[("etag", "\"v1\""), ("cache-control", "max-age=0")], &p);
        // With a new field beside it, the refreshed entry is written: without
        // the cookie.
        let (cookies, write) = merge(
            &meta,
            &[
                ("etag", "\"v1\""),
                ("set-cookie", "session=alice"),
                ("x-new", "1"),
            ],
            &p,
        );
        assert_eq!(cookies, ["session=alice"], "serve_fresh={serve_fresh}");
        let written = write.entry().expect("x-new is worth a write").clone();
        assert_eq!(cookies_of(&written), 0, "serve_fresh={serve_fresh}");
        assert_eq!(written.headers()["x-new"], "1");
        // The next client's 304 carries no cookie, and gets none.
        let (cookies, _) = merge(&written, &[("etag", "\"v1\"")], &p);
        assert!(cookies.is_empty(), "serve_fresh={serve_fresh}: {cookies:?}");
    }
}

#[test]
fn a_304_that_adds_only_a_cookie_writes_nothing_and_its_cookie_is_not_remembered() {
    let p = params(false);
    let meta = stored(&[("etag", "\"v1\"")], &p);
    let (cookies, write) = merge(
        &meta,
        &[("etag", "\"v1\""), ("set-cookie", "session=alice")],
        &p,
    );
    assert_eq!(cookies, ["session=alice"]);
    assert!(matches!(write, WriteBack::Unchanged), "{write:?}");
    // The same entry, asked again (the merge it remembers is not for this
    // 304): no cookie.
    let (cookies, _) = merge(&meta, &[("etag", "\"v1\"")], &p);
    assert!(cookies.is_empty(), "{cookies:?}");
    // And the same 304 again gets its own cookie back, nobody else's.
    let (cookies, _) = merge(
        &meta,
        &[("etag", "\"v1\""), ("set-cookie", "session=bob")],
        &p,
    );
    assert_eq!(cookies, ["session=bob"]);
}

#[test]
fn a_304_that_makes_the_page_unkeepable_removes_it() {
    let cases: [(&[(&str, &str)], NoStore); 4] = [
        (
            &[("etag", "\"v1\""), ("cache-control", "no-store")],
            NoStore::NoStoreDirective,
        ),
        (
            &[("etag", "\"v1\""), ("cache-control", "Private")],
            NoStore::Private,
        ),
        (&[("etag", "\"v1\""), ("vary", "*")], NoStore::VaryStar),
        (
            &[("etag", "\"v1\""), ("vary", "accept-language")],
            NoStore::VaryChanged,
        ),
    ];
    for serve_fresh in [false, true] {
        let p = params(serve_fresh);
        let meta = stored(&[("etag", "\"v1\""), ("vary", "accept-encoding")], &p);
        for (nm, why) in &cases {
            let (_, write) = merge(&meta, nm, &p);
            match write {
                WriteBack::Remove(got) => assert_eq!(&got, why, "{nm:?}"),
                other => panic!("serve_fresh={serve_fresh} {nm:?}: {other:?}"),
            }
        }
    }
}

#[test]
fn an_entry_holding_a_cookie_is_never_replayed() {
    // An entry written before every write passed the rule: its JSON, with a
    // cookie line added, read back as the store would.
    let p = params(true);
    let meta = stored(&[("etag", "\"v1\""), ("cache-control", "max-age=600")], &p);
    let mut json: serde_json::Value = serde_json::to_value(&meta).unwrap();
    json["headers"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!(["set-cookie", "session=alice"]));
    let legacy: CacheEntryMeta = serde_json::from_value(json).unwrap();
    assert_eq!(cookies_of(&legacy), 1, "the entry holds the cookie");
    let r = req(&[]);
    let fresh = plan(&r, &key(), Some(&meta), &p, t0());
    assert!(matches!(fresh, Plan::ServeStored { .. }), "{fresh:?}");
    assert_eq!(plan(&r, &key(), Some(&legacy), &p, t0()), Plan::Fetch);
    // A 304 to it gives the client no cookie of another's, and the
    // rewritten entry none.
    let (cookies, write) = merge(&legacy, &[("etag", "\"v1\"")], &p);
    assert!(cookies.is_empty(), "{cookies:?}");
    assert_eq!(cookies_of(write.entry().expect("serve_fresh writes")), 0);
}

#[test]
fn requests_with_credentials_or_cookies_are_never_written() {
    let p = params(false);
    for (name, value) in [("authorization", "Basic YTpi"), ("cookie", "a=1")] {
        let r = req(&[(name, value)]);
        let got = storable(&r, &key(), &resp(200, &[("etag", "\"v1\"")]), &p, t0());
        assert!(matches!(got, Err(NoStore::Bypass(_))), "{name}: {got:?}");
        let meta = stored(&[("etag", "\"v1\"")], &p);
        let nm = resp(304, &[("etag", "\"v1\""), ("x-new", "1")]);
        let out = merge_not_modified(&meta, &r, &nm, &p, t0()).unwrap();
        assert!(
            matches!(out.write, WriteBack::Remove(NoStore::Bypass(_))),
            "{name}: {:?}",
            out.write
        );
    }
}
