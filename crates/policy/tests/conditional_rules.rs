//! The conditional-request rules, driven with hand-built requests, responses
//! and clocks.

use std::time::{Duration, SystemTime};

use mannerly_policy::conditional::http::{header, request, HeaderMap, Method, StatusCode};
use mannerly_policy::conditional::{
    admit, admit_under, invalidates_stored, merge_not_modified, plan, storable, Admission,
    BypassReason, CacheEntryMeta, CacheKey, CacheParams, NoStore, Plan,
};

#[path = "support/heads.rs"]
mod heads;
use heads::resp;

const URL: &str = "https://example.com/page";

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn req(headers: &[(&str, &str)]) -> request::Parts {
    heads::get("/page", headers)
}

fn key() -> CacheKey {
    CacheKey::new(&Method::GET, URL).unwrap()
}

fn stored(req_h: &[(&str, &str)], resp_h: &[(&str, &str)]) -> CacheEntryMeta {
    storable(
        &req(req_h),
        &key(),
        &resp(200, resp_h),
        &CacheParams::default(),
        t0(),
    )
    .expect("storable")
}

fn lookup_key(r: &request::Parts) -> CacheKey {
    match admit(r, URL, &CacheParams::default()) {
        Admission::Lookup(k) => k,
        other => panic!("expected lookup, got {other:?}"),
    }
}

fn validators(p: Plan) -> HeaderMap {
    match p {
        Plan::Revalidate { validators } => validators,
        other => panic!("expected revalidate, got {other:?}"),
    }
}

#[test]
fn etag_only_sends_if_none_match() {
    let meta = stored(&[], &[("etag", "\"v1\""), ("content-length", "5")]);
    let r = req(&[]);
    let k = lookup_key(&r);
    let v = validators(plan(&r, &k, Some(&meta), &CacheParams::default(), t0()));
    assert_eq!(v.get(header::IF_NONE_MATCH).unwrap(), "\"v1\"");
    assert!(v.get(header::IF_MODIFIED_SINCE).is_none());
    assert_eq!(v.len(), 1);
    assert_eq!(meta.etag(), Some("\"v1\""));
    assert_eq!(meta.last_modified(), None);
}

#[test]
fn last_modified_only_sends_if_modified_since() {
    let lm = "Tue, 14 Nov 2023 22:00:00 GMT";
    let meta = stored(&[], &[("last-modified", lm)]);
    let r = req(&[]);
    let v = validators(plan(
        &r,
        &lookup_key(&r),
        Some(&meta),
        &CacheParams::default(),
        t0(),
    ));
    assert_eq!(v.get(header::IF_MODIFIED_SINCE).unwrap(), lm);
    assert!(v.get(header::IF_NONE_MATCH).is_none());
}

#[test]
fn always_revalidates_by_default_even_when_fresh() {
    let meta = stored(
        &[],
        &[("etag", "\"v1\""), ("cache-control", "max-age=3600")],
    );
    let r = req(&[]);
    let p = plan(
        &r,
        &lookup_key(&r),
        Some(&meta),
        &CacheParams::default(),
        t0(),
    );
    assert!(matches!(p, Plan::Revalidate { .. }), "{p:?}");
}

#[test]
fn a_plan_asked_once_per_entry_is_the_one_each_request_would_get() {
    let lm = "Tue, 14 Nov 2023 22:00:00 GMT";
    let entry = || stored(&[], &[("etag", "W/\"v1\""), ("last-modified", lm)]);
    let params = CacheParams::default();
    let plain = req(&[("user-agent", "a")]);
    let k = lookup_key(&plain);
    // Every request, planned against an entry that already answered
    // another one, gets what it gets against an entry planned for nothing.
    let requests = [
        req(&[("user-agent", "b"), ("accept", "text/html")]),
        // The library sends no weak validator beside Accept-Ranges.
        req(&[("accept-ranges", "bytes")]),
        req(&[("cache-control", "max-age=0")]),
        req(&[("pragma", "no-cache")]),
    ];
    let used = entry();
    let first = validators(plan(&plain, &k, Some(&used), &params, t0()));
    assert_eq!(first.get(header::IF_NONE_MATCH).unwrap(), "W/\"v1\"");
    assert_eq!(first.get(header::IF_MODIFIED_SINCE).unwrap(), lm);
    for r in &requests {
        let later = t0() + Duration::from_secs(86_400);
        let again = plan(r, &k, Some(&used), &params, later);
        let fresh = plan(r, &k, Some(&entry()), &params, later);
        assert_eq!(again, fresh, "{:?}", r.headers);
    }
    assert_eq!(
        plan(&requests[1], &k, Some(&used), &params, t0()),
        Plan::Fetch,
        "a weak ETag and a date are all this entry has"
    );
}

#[test]
fn serve_fresh_answers_fresh_entries_without_the_origin() {
    let params = CacheParams {
        serve_fresh: true,
        ..CacheParams::default()
    };
    let meta = storable(
        &req(&[]),
        &key(),
        &resp(200, &[("etag", "\"v1\""), ("cache-control", "max-age=60")]),
        &params,
        t0(),
    )
    .unwrap();
    let r = req(&[]);
    let k = lookup_key(&r);
    match plan(&r, &k, Some(&meta), &params, t0() + Duration::from_secs(10)) {
        Plan::ServeStored { status, headers } => {
            assert_eq!(status, StatusCode::OK);
            assert_eq!(headers.get(header::AGE).unwrap(), "10");
            assert_eq!(headers.get(header::ETAG).unwrap(), "\"v1\"");
        }
        other => panic!("expected a hit, got {other:?}"),
    }
    let later = plan(&r, &k, Some(&meta), &params, t0() + Duration::from_secs(61));
    assert!(matches!(later, Plan::Revalidate { .. }), "{later:?}");
    // The client can still insist on the origin.
    let nc = req(&[("cache-control", "no-cache")]);
    let p = plan(&nc, &k, Some(&meta), &params, t0());
    assert!(matches!(p, Plan::Revalidate { .. }), "{p:?}");
}

#[test]
fn nothing_stored_is_a_plain_fetch() {
    let r = req(&[]);
    assert_eq!(
        plan(&r, &lookup_key(&r), None, &CacheParams::default(), t0()),
        Plan::Fetch
    );
}

#[test]
fn clients_own_validators_pass_through() {
    for (name, value) in [
        ("if-none-match", "\"abc\""),
        ("if-modified-since", "Tue, 14 Nov 2023 22:00:00 GMT"),
        ("if-match", "\"abc\""),
        ("if-unmodified-since", "Tue, 14 Nov 2023 22:00:00 GMT"),
    ] {
        let r = req(&[(name, value)]);
        assert_eq!(
            admit(&r, URL, &CacheParams::default()),
            Admission::PassThrough(key()),
            "{name}"
        );
    }
}

#[test]
fn several_reasons_at_once_give_the_first_in_order_and_admit_under_agrees() {
    let params = CacheParams::default();
    let cases: [(&[(&str, &str)], Admission); 6] = [
        (
            &[
                ("range", "bytes=0-1"),
                ("cookie", "a=b"),
                ("authorization", "x"),
            ],
            Admission::Bypass(BypassReason::Authorization),
        ),
        (
            &[
                ("cache-control", "no-store"),
                ("if-range", "\"v\""),
                ("cookie", "a=b"),
            ],
            Admission::Bypass(BypassReason::Cookie),
        ),
        (
            &[
                ("if-none-match", "\"v\""),
                ("cache-control", "no-store"),
                ("range", "bytes=0-1"),
            ],
            Admission::Bypass(BypassReason::Range),
        ),
        (
            &[
                ("if-match", "\"v\""),
                ("cache-control", "max-age=0, No-Store"),
            ],
            Admission::Bypass(BypassReason::NoStore),
        ),
        (
            &[("cache-control", "max-age=0"), ("if-unmodified-since", "x")],
            Admission::PassThrough(key()),
        ),
        (
            &[("accept", "*/*"), ("cache-control", "no-cache")],
            Admission::Lookup(key()),
        ),
    ];
    for (headers, want) in cases {
        let r = req(headers);
        assert_eq!(admit(&r, URL, &params), want, "{headers:?}");
        let under = admit_under(&r, "https://example.com", &params);
        assert_eq!(under, want, "{headers:?}");
    }
}

#[test]
fn requests_that_bypass_the_store() {
    let params = CacheParams::default();
    let cases: [(&[(&str, &str)], BypassReason); 5] = [
        (
            &[("authorization", "Bearer x")],
            BypassReason::Authorization,
        ),
        (&[("cookie", "a=b")], BypassReason::Cookie),
        (&[("range", "bytes=0-10")], BypassReason::Range),
        (
            &[("if-range", "\"v1\""), ("if-none-match", "\"v1\"")],
            BypassReason::Range,
        ),
        (&[("cache-control", "no-store")], BypassReason::NoStore),
    ];
    for (headers, reason) in cases {
        let r = req(headers);
        assert_eq!(admit(&r, URL, &params), Admission::Bypass(reason.clone()));
        // And never stored either, whatever the origin says.
        let got = storable(&r, &key(), &resp(200, &[("etag", "\"v1\"")]), &params, t0());
        assert_eq!(got.unwrap_err(), NoStore::Bypass(reason));
    }
    let mut post = req(&[]);
    post.method = Method::POST;
    assert_eq!(
        admit(&post, URL, &params),
        Admission::Bypass(BypassReason::Method)
    );
    assert_eq!(
        admit(&req(&[]), "/relative", &params),
        Admission::Bypass(BypassReason::InvalidUrl)
    );
    let off = CacheParams {
        enabled: false,
        ..CacheParams::default()
    };
    assert_eq!(
        admit(&req(&[]), URL, &off),
        Admission::Bypass(BypassReason::Disabled)
    );
}

#[test]
fn each_never_store_rule() {
    let params = CacheParams::default();
    let no = |status: u16, h: &[(&str, &str)]| {
        storable(&req(&[]), &key(), &resp(status, h), &params, t0()).unwrap_err()
    };
    let e = ("etag", "\"v1\"");
    assert_eq!(no(200, &[e, ("set-cookie", "s=1")]), NoStore::SetCookie);
    assert_eq!(
        no(200, &[e, ("cache-control", "max-age=60, no-store")]),
        NoStore::NoStoreDirective
    );
    assert_eq!(
        no(200, &[e, ("cache-control", "private")]),
        NoStore::Private
    );
    assert_eq!(
        no(206, &[e, ("content-range", "bytes 0-1/10")]),
        NoStore::PartialContent
    );
    assert_eq!(
        no(200, &[e, ("vary", "Accept-Encoding, *")]),
        NoStore::VaryStar
    );
    assert_eq!(
        no(200, &[e, ("content-length", "8388609")]),
        NoStore::TooLarge { length: 8_388_609 }
    );
    assert_eq!(no(200, &[("content-length", "5")]), NoStore::NoValidator);
    assert_eq!(no(500, &[e]), NoStore::NotStorable);
    // `private` is fine for a cache of one.
    let single = CacheParams {
        shared: false,
        ..CacheParams::default()
    };
    let private = resp(200, &[e, ("cache-control", "private")]);
    assert!(storable(&req(&[]), &key(), &private, &single, t0()).is_ok());
    // A transient server error must not wipe a good entry; a real change may.
    assert!(!invalidates_stored(StatusCode::SERVICE_UNAVAILABLE));
    assert!(invalidates_stored(StatusCode::OK));
    assert!(invalidates_stored(StatusCode::NOT_FOUND));
}

#[test]
fn hop_by_hop_fields_are_not_stored() {
    let meta = stored(
        &[],
        &[
            ("etag", "\"v1\""),
            ("connection", "x-trace"),
            ("x-trace", "1"),
            ("keep-alive", "timeout=5"),
            ("content-encoding", "gzip"),
        ],
    );
    let h = meta.headers();
    assert!(h.get("connection").is_none() && h.get("x-trace").is_none());
    assert!(h.get("keep-alive").is_none());
    assert_eq!(h.get("content-encoding").unwrap(), "gzip");
}

#[test]
fn vary_on_accept_encoding_selects_the_variant() {
    let meta = stored(
        &[("accept-encoding", "gzip, br")],
        &[
            ("etag", "\"gz\""),
            ("vary", "Accept-Encoding"),
            ("content-encoding", "gzip"),
        ],
    );
    let same = req(&[("accept-encoding", "gzip,br")]);
    let k = lookup_key(&same);
    assert!(matches!(
        plan(&same, &k, Some(&meta), &CacheParams::default(), t0()),
        Plan::Revalidate { .. }
    ));
    for other in [req(&[("accept-encoding", "identity")]), req(&[])] {
        assert_eq!(
            plan(&other, &k, Some(&meta), &CacheParams::default(), t0()),
            Plan::Fetch
        );
    }
}

#[test]
fn vary_on_a_custom_header_selects_the_variant() {
    let meta = stored(
        &[("x-lang", "de")],
        &[("etag", "\"de\""), ("vary", "X-Lang")],
    );
    let de = req(&[("x-lang", "de"), ("user-agent", "other")]);
    let fr = req(&[("x-lang", "fr")]);
    let k = lookup_key(&de);
    assert!(matches!(
        plan(&de, &k, Some(&meta), &CacheParams::default(), t0()),
        Plan::Revalidate { .. }
    ));
    assert_eq!(
        plan(&fr, &k, Some(&meta), &CacheParams::default(), t0()),
        Plan::Fetch
    );
    assert_eq!(meta.vary(), ["x-lang".to_string()]);
}

#[test]
fn a_304_merged_once_per_entry_is_merged_as_the_library_would_each_time() {
    let entry = || {
        stored(
            &[],
            &[
                ("etag", "\"v1\""),
                ("last-modified", "Tue, 14 Nov 2023 22:00:00 GMT"),
                ("date", "Tue, 14 Nov 2023 22:13:20 GMT"),
                ("expires", "Tue, 14 Nov 2023 23:13:20 GMT"),
                ("server", "nginx"),
                ("content-length", "5"),
                ("link", "</a.css>; rel=preload"),
                ("link", "</b.js>; rel=preload"),
            ],
        )
    };
    let params = CacheParams::default();
    let answer = |extra: &[(&'static str, &'static str)]| {
        let mut h = vec![
            ("server", "nginx"),
            ("etag", "\"v1\""),
            ("connection", "keep-alive"),
        ];
        h.extend_from_slice(extra);
        resp(304, &h)
    };
    let used = entry();
    let first = answer(&[("date", "Wed, 15 Nov 2023 08:00:00 GMT")]);
    let merged = merge_not_modified(&used, &req(&[]), &first, &params, t0()).unwrap();
    assert!(merged.write.entry().is_none(), "only Date changed");
    let later_answers = [
        answer(&[("date", "Thu, 16 Nov 2023 08:00:00 GMT")]),
        answer(&[]),
        answer(&[("age", "5"), ("expires", "Fri, 17 Nov 2023 08:00:00 GMT")]),
        answer(&[
            ("date", "Thu, 16 Nov 2023 08:00:00 GMT"),
            ("cache-control", "max-age=60"),
        ]),
        answer(&[("x-new", "1")]),
        answer(&[("warning", "110 - \"stale\"")]),
        resp(304, &[("server", "other"), ("etag", "\"v1\"")]),
        resp(304, &[("etag", "\"v2\"")]),
        resp(304, &[("etag", "\"v1\""), ("server", "nginx")]),
    ];
    for nm in &later_answers {
        let later = t0() + Duration::from_secs(2 * 86_400);
        let again = merge_not_modified(&used, &req(&[]), nm, &params, later);
        let fresh = merge_not_modified(&entry(), &req(&[]), nm, &params, later);
        match (again, fresh) {
            (Ok(again), Ok(fresh)) => {
                assert_eq!(again.status, fresh.status);
                assert_eq!(again.headers, fresh.headers, "{:?}", nm.headers);
                assert_eq!(
                    again.write.entry().is_some(),
                    fresh.write.entry().is_some(),
                    "{:?}",
                    nm.headers
                );
            }
            (Err(_), Err(_)) => {}
            (again, fresh) => panic!("{:?}: {again:?} against {fresh:?}", nm.headers),
        }
    }
}

#[test]
fn a_304_refreshes_the_stored_headers() {
    let meta = stored(
        &[],
        &[
            ("etag", "\"v1\""),
            ("last-modified", "Tue, 14 Nov 2023 22:00:00 GMT"),
            ("date", "Tue, 14 Nov 2023 22:13:20 GMT"),
            ("cache-control", "max-age=60"),
            ("content-length", "5"),
            ("content-encoding", "gzip"),
            ("content-md5", "N7UdGUp1E+RbVvZSTy1R8g=="),
            ("link", "</a.css>; rel=preload"),
            ("link", "</b.js>; rel=preload"),
        ],
    );
    // A 304 need not repeat Last-Modified; it may bring new fields.
    let nm = resp(
        304,
        &[
            ("etag", "\"v1\""),
            ("date", "Wed, 15 Nov 2023 08:00:00 GMT"),
            ("cache-control", "max-age=120"),
            ("x-new", "yes"),
            ("content-length", "0"),
            ("content-md5", "rL0Y20zC+Fzt72VPzMSk2A=="),
        ],
    );
    let later = t0() + Duration::from_secs(600);
    let out = merge_not_modified(&meta, &req(&[]), &nm, &CacheParams::default(), later).unwrap();
    let h = &out.headers;
    assert_eq!(out.status, StatusCode::OK);
    assert_eq!(h.get("date").unwrap(), "Wed, 15 Nov 2023 08:00:00 GMT");
    assert_eq!(h.get("cache-control").unwrap(), "max-age=120");
    assert_eq!(h.get("x-new").unwrap(), "yes");
    assert_eq!(h.get("content-length").unwrap(), "5", "body fields stay");
    assert_eq!(h.get("content-encoding").unwrap(), "gzip");
    assert_eq!(h.get("content-md5").unwrap(), "N7UdGUp1E+RbVvZSTy1R8g==");
    assert_eq!(
        h.get("last-modified").unwrap(),
        "Tue, 14 Nov 2023 22:00:00 GMT"
    );
    assert_eq!(
        h.get_all("link").iter().count(),
        2,
        "every line of a field is kept"
    );
    assert!(h.get("age").is_none());
    let meta = out.write.entry().expect("new fields: worth a write");
    assert_eq!(meta.stored_at(), later);
    assert_eq!(meta.headers(), h);
    // The refreshed entry revalidates with the same validators.
    let r = req(&[]);
    let v = validators(plan(
        &r,
        &lookup_key(&r),
        Some(meta),
        &CacheParams::default(),
        later,
    ));
    assert_eq!(v.get(header::IF_NONE_MATCH).unwrap(), "\"v1\"");
}

#[test]
fn a_304_that_changes_only_per_answer_fields_is_not_worth_a_write() {
    let meta = stored(
        &[],
        &[
            ("etag", "\"v1\""),
            ("date", "Tue, 14 Nov 2023 22:13:20 GMT"),
            ("expires", "Tue, 14 Nov 2023 22:14:20 GMT"),
            ("cache-control", "max-age=60"),
            ("vary", "Accept-Encoding"),
        ],
    );
    let later = t0() + Duration::from_secs(600);
    let merge = |headers: &[(&str, &str)], params: &CacheParams| {
        let nm = resp(304, headers);
        merge_not_modified(&meta, &req(&[]), &nm, params, later).unwrap()
    };
    let per_answer = [
        ("etag", "\"v1\""),
        ("date", "Tue, 14 Nov 2023 22:23:20 GMT"),
        ("expires", "Tue, 14 Nov 2023 22:24:20 GMT"),
        ("age", "3"),
    ];
    let out = merge(&per_answer, &CacheParams::default());
    assert!(
        out.write.entry().is_none(),
        "only Date, Expires and Age changed"
    );
    // The client still gets the 304's Date.
    assert_eq!(
        out.headers.get("date").unwrap(),
        "Tue, 14 Nov 2023 22:23:20 GMT"
    );
    // A 304 that repeats what is stored changes nothing either.
    let same = merge(
        &[("etag", "\"v1\""), ("cache-control", "max-age=60")],
        &CacheParams::default(),
    );
    assert!(same.write.entry().is_none());
    // A changed field that later answers replay is worth a write.
    let changed = merge(
        &[("etag", "\"v1\""), ("cache-control", "max-age=120")],
        &CacheParams::default(),
    );
    assert!(changed.write.entry().is_some());
    let added = merge(
        &[("etag", "\"v1\""), ("x-new", "1")],
        &CacheParams::default(),
    );
    assert!(added.write.entry().is_some());
    // Serving fresh entries: the freshness restarts, so always.
    let fresh = CacheParams {
        serve_fresh: true,
        ..CacheParams::default()
    };
    assert!(merge(&per_answer, &fresh).write.entry().is_some());
}

#[test]
fn a_304_for_another_representation_is_refused() {
    let meta = stored(&[], &[("etag", "\"v1\"")]);
    let nm = resp(304, &[("etag", "\"v2\"")]);
    assert!(merge_not_modified(&meta, &req(&[]), &nm, &CacheParams::default(), t0()).is_err());
    let lm = stored(&[], &[("last-modified", "Tue, 14 Nov 2023 22:00:00 GMT")]);
    let nm = resp(304, &[("last-modified", "Wed, 15 Nov 2023 22:00:00 GMT")]);
    assert!(merge_not_modified(&lm, &req(&[]), &nm, &CacheParams::default(), t0()).is_err());
    // Weak and strong spellings of one tag are the same representation.
    let weak = resp(304, &[("etag", "W/\"v1\"")]);
    assert!(merge_not_modified(&meta, &req(&[]), &weak, &CacheParams::default(), t0()).is_ok());
}

#[test]
fn a_changed_page_gives_new_validators() {
    let old = stored(&[], &[("etag", "\"v1\"")]);
    let new = stored(&[], &[("etag", "\"v2\"")]);
    assert_eq!(
        old.variant(),
        new.variant(),
        "same slot: the new one replaces the old"
    );
    let r = req(&[]);
    let v = validators(plan(
        &r,
        &lookup_key(&r),
        Some(&new),
        &CacheParams::default(),
        t0(),
    ));
    assert_eq!(v.get(header::IF_NONE_MATCH).unwrap(), "\"v2\"");
}

#[test]
fn entries_survive_serialisation_exactly() {
    let meta = stored(
        &[("accept-encoding", "gzip")],
        &[
            ("etag", "\"v1\""),
            ("vary", "accept-encoding"),
            ("x-bin", "caf\u{e9}"),
        ],
    );
    let json = serde_json::to_string(&meta).unwrap();
    let back: CacheEntryMeta = serde_json::from_str(&json).unwrap();
    assert_eq!(back.headers(), meta.headers());
    assert_eq!(back.variant(), meta.variant());
    let r = req(&[("accept-encoding", "gzip")]);
    let k = lookup_key(&r);
    assert_eq!(
        plan(&r, &k, Some(&back), &CacheParams::default(), t0()),
        plan(&r, &k, Some(&meta), &CacheParams::default(), t0())
    );
}

#[test]
fn origin_form_and_absolute_form_requests_share_entries() {
    let meta = stored(&[], &[("etag", "\"v1\"")]);
    let mut absolute = req(&[("host", "example.com")]);
    absolute.uri = "https://EXAMPLE.com:443/page".parse().unwrap();
    let k = lookup_key(&absolute);
    assert_eq!(k, key());
    assert!(matches!(
        plan(&absolute, &k, Some(&meta), &CacheParams::default(), t0()),
        Plan::Revalidate { .. }
    ));
}

#[test]
fn params_validate_and_reject_unknown_keys() {
    let p: CacheParams = serde_json::from_str(r#"{"serve_fresh": true}"#).unwrap();
    assert!(p.serve_fresh && p.enabled && p.shared);
    assert_eq!(p.max_body, 8 * 1024 * 1024);
    assert!(serde_json::from_str::<CacheParams>(r#"{"max_bodyy": 1}"#).is_err());
    assert!(CacheParams {
        max_body: 0,
        ..CacheParams::default()
    }
    .validate()
    .is_err());
    assert!(CacheParams {
        max_size: 10,
        ..CacheParams::default()
    }
    .validate()
    .is_err());
    assert!(CacheParams::default().validate().is_ok());
}

#[test]
fn a_providers_answer_around_another_status_is_not_the_targets_page() {
    use mannerly_policy::conditional::is_targets_page;
    assert!(is_targets_page(None, StatusCode::OK), "no provider: always");
    assert!(is_targets_page(Some(200), StatusCode::OK));
    assert!(!is_targets_page(Some(404), StatusCode::OK));
    assert!(!is_targets_page(Some(200), StatusCode::BAD_GATEWAY));
}
