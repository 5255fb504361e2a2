use super::*;

fn params() -> RobotsParams {
    RobotsParams::default()
}

fn head(validators: Validators) -> Head {
    Head {
        validators,
        declared_age: None,
    }
}

fn answer(fields: &[(&'static str, &'static str)]) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    for (k, v) in fields {
        h.append(*k, http::HeaderValue::from_static(v));
    }
    h
}

#[test]
fn cache_control_gives_a_copy_its_own_age_within_the_cap_and_over_a_minute() {
    let secs = |fields: &[(&'static str, &'static str)]| {
        declared_age(&answer(fields)).map(|d| d.as_secs())
    };
    assert_eq!(secs(&[]), None);
    assert_eq!(
        secs(&[("cache-control", "public, max-age=3600")]),
        Some(3600)
    );
    assert_eq!(secs(&[("cache-control", "MAX-AGE=\"7200\"")]), Some(7200));
    // Its age so far is spent already.
    assert_eq!(
        secs(&[("cache-control", "max-age=3600"), ("age", "600")]),
        Some(3000)
    );
    // Never under a minute: not stored, stale or nonsense is fetched again
    // soon, not on every request.
    assert_eq!(secs(&[("cache-control", "max-age=0")]), Some(60));
    assert_eq!(
        secs(&[("cache-control", "max-age=90"), ("age", "80")]),
        Some(60)
    );
    assert_eq!(secs(&[("cache-control", "no-store")]), Some(60));
    assert_eq!(
        secs(&[("cache-control", "max-age=3600, no-cache")]),
        Some(60)
    );
    assert_eq!(secs(&[("cache-control", "max-age=soon")]), Some(60));
    assert_eq!(secs(&[("cache-control", "max-age=-5")]), Some(60));
    assert_eq!(
        secs(&[("cache-control", "max-age=10, max-age=20")]),
        Some(60)
    );
    // The same twice is one statement; a shared cache's own is not ours.
    assert_eq!(
        secs(&[
            ("cache-control", "max-age=120"),
            ("cache-control", "max-age=120")
        ]),
        Some(120)
    );
    assert_eq!(secs(&[("cache-control", "s-maxage=5")]), None);
    // Past u64: "very long", which the cap cuts.
    let p = RobotsParams {
        max_age_secs: 86_400.0,
        ..params()
    };
    let h = Head::read(&answer(&[(
        "cache-control",
        "max-age=99999999999999999999999",
    )]));
    assert_eq!(h.fresh_for(&p), Duration::from_secs(86_400));
    let h = Head::read(&answer(&[("cache-control", "max-age=172800")]));
    assert_eq!(h.fresh_for(&p), Duration::from_secs(86_400));
    // The cap is a cap on the floor too.
    let short = RobotsParams {
        max_age_secs: 2.0,
        ..params()
    };
    assert_eq!(
        Head::read(&answer(&[("cache-control", "no-store")])).fresh_for(&short),
        Duration::from_secs(2)
    );
}

#[test]
fn a_copy_is_fetched_again_when_its_own_age_runs_out_and_a_304_may_restate_it() {
    let t0 = Instant::now();
    let p = params();
    let body = FetchResult::Body(b"User-agent: *\nDisallow: /x".to_vec());
    let h = Head::read(&answer(&[
        ("cache-control", "max-age=300"),
        ("etag", "\"a\""),
    ]));
    let e = RobotsEntry::<Robots>::after_fetch(None, &body, &p, t0).with_head(&body, h);
    assert!(matches!(
        e.lookup(&p, t0 + Duration::from_secs(299)),
        Lookup::Use(_)
    ));
    let t1 = t0 + Duration::from_secs(300);
    assert!(matches!(e.lookup(&p, t1), Lookup::Fetch));
    // A 304 that restates no age keeps the copy's 300 s and its validators.
    let same = RobotsEntry::after_fetch(Some(&e), &FetchResult::NotModified, &p, t1)
        .with_head(&FetchResult::NotModified, Head::default());
    assert_eq!(same.fresh_for(&p), Duration::from_secs(300));
    assert_eq!(
        same.validators().and_then(|v| v.etag.as_deref()),
        Some("\"a\"")
    );
    // One that does replaces it (RFC 9111 §4.3.4), and a new ETag with it.
    let h = Head::read(&answer(&[
        ("cache-control", "max-age=900"),
        ("etag", "\"b\""),
    ]));
    let longer = RobotsEntry::after_fetch(Some(&same), &FetchResult::NotModified, &p, t1)
        .with_head(&FetchResult::NotModified, h);
    assert_eq!(longer.fresh_for(&p), Duration::from_secs(900));
    assert_eq!(
        longer.validators().and_then(|v| v.etag.as_deref()),
        Some("\"b\"")
    );
    assert!(matches!(
        longer.lookup(&p, t1 + Duration::from_secs(899)),
        Lookup::Use(_)
    ));
    assert!(matches!(
        longer.lookup(&p, t1 + Duration::from_secs(900)),
        Lookup::Fetch
    ));
    // A failure changes nothing of the copy's head.
    let failed = RobotsEntry::after_fetch(Some(&longer), &FetchResult::Status(503), &p, t1)
        .with_head(&FetchResult::Status(503), Head::default());
    assert_eq!(failed.head(), longer.head());
}

fn allowed(rules: &Rules, path: &str) -> Option<bool> {
    match rules {
        Rules::Known(r) => Some(r.check("bot", path).allowed),
        Rules::Unavailable { .. } => None,
    }
}

#[test]
fn a_fetched_file_is_used_for_24_hours_then_fetched_again() {
    let t0 = Instant::now();
    let p = params();
    let e = RobotsEntry::after_fetch(
        None,
        &FetchResult::Body(b"User-agent: *\nDisallow: /x".to_vec()),
        &p,
        t0,
    );
    match e.lookup(&p, t0 + Duration::from_secs(86_399)) {
        Lookup::Use(r) => assert_eq!(allowed(&r, "/x"), Some(false)),
        Lookup::Fetch => panic!("still fresh"),
    }
    assert!(matches!(
        e.lookup(&p, t0 + Duration::from_secs(86_400)),
        Lookup::Fetch
    ));
}

#[test]
fn an_expired_copy_is_revalidated_and_a_304_restarts_its_age() {
    let t0 = Instant::now();
    let p = RobotsParams {
        max_age_secs: 600.0,
        ..params()
    };
    let body = FetchResult::Body(b"User-agent: *\nDisallow: /x".to_vec());
    let v = Validators::read(Some("\"r1\""), Some("Sat, 05 Dec 2026 10:00:00 GMT"));
    let e = RobotsEntry::after_fetch(None, &body, &p, t0).with_head(&body, head(v.clone()));
    assert_eq!(e.validators(), Some(&v));
    let t1 = t0 + Duration::from_secs(600);
    assert!(matches!(e.lookup(&p, t1), Lookup::Fetch));
    let kept = RobotsEntry::after_fetch(Some(&e), &FetchResult::NotModified, &p, t1);
    assert_eq!(kept.validators(), Some(&v));
    assert_eq!(fetch_reason(&FetchResult::NotModified), None);
    // Fresh again for a whole age from the 304, with the same rules.
    match kept.lookup(&p, t1 + Duration::from_secs(599)) {
        Lookup::Use(r) => assert_eq!(allowed(&r, "/x"), Some(false)),
        Lookup::Fetch => panic!("the 304 restarted the age"),
    }
    assert!(matches!(
        kept.lookup(&p, t1 + Duration::from_secs(600)),
        Lookup::Fetch
    ));
    // A failure keeps the copy and its validators for the retry.
    let failed = RobotsEntry::after_fetch(Some(&kept), &FetchResult::Status(503), &p, t1);
    assert_eq!(failed.validators(), Some(&v));
    // A new body replaces them with its own (here none).
    let none = Validators::read(None, Some(""));
    assert!(none.is_empty());
    let fresh = RobotsEntry::after_fetch(Some(&failed), &body, &p, t1).with_head(&body, head(none));
    assert_eq!(fresh.validators(), None);
}

#[test]
fn a_304_without_a_copy_held_says_nothing() {
    let t0 = Instant::now();
    let p = params();
    let e = RobotsEntry::<Robots>::after_fetch(None, &FetchResult::NotModified, &p, t0);
    match e.rules_now(t0) {
        Rules::Unavailable { reason, .. } => {
            assert_eq!(reason, "robots.txt answered 304 but no copy is held")
        }
        Rules::Known(_) => panic!("nothing to keep"),
    }
    // A 4xx's "no rules" has no validators to send.
    let none = RobotsEntry::<Robots>::after_fetch(None, &FetchResult::Status(404), &p, t0)
        .with_head(
            &FetchResult::Status(404),
            head(Validators::read(Some("\"x\""), None)),
        );
    assert_eq!(none.validators(), None);
    // An over-long validator is not kept.
    let long = "x".repeat(MAX_VALIDATOR + 1);
    assert!(Validators::read(Some(&long), None).is_empty());
}

#[test]
fn client_errors_mean_no_rules_but_429_and_5xx_mean_unavailable() {
    let t0 = Instant::now();
    let p = params();
    for s in [400, 401, 403, 404, 410] {
        let e = RobotsEntry::after_fetch(None, &FetchResult::Status(s), &p, t0);
        assert_eq!(allowed(&e.rules_now(t0), "/anything"), Some(true), "{s}");
    }
    for r in [
        FetchResult::Status(429),
        FetchResult::Status(500),
        FetchResult::Status(503),
        FetchResult::Status(301),
        FetchResult::TooManyRedirects,
        FetchResult::Failed("connection refused".into()),
    ] {
        let e = RobotsEntry::<Robots>::after_fetch(None, &r, &p, t0);
        assert!(
            matches!(e.rules_now(t0), Rules::Unavailable { .. }),
            "{r:?}"
        );
    }
}

#[test]
fn tdmrep_json_is_read_retried_and_kept_as_robots_txt_is() {
    let t0 = Instant::now();
    let p = params();
    let reserved = |rules: &Rules<TdmFile>, path: &str| match rules {
        Rules::Known(f) => Some(f.rule_for(path).and_then(|r| r.reservation) == Some(true)),
        Rules::Unavailable { .. } => None,
    };
    let body = br#"[{"location": "/a/", "tdm-reservation": 1}]"#.to_vec();
    let good = RobotsEntry::<TdmFile>::after_fetch(None, &FetchResult::Body(body), &p, t0);
    assert_eq!(reserved(&good.rules_now(t0), "/a/x"), Some(true));
    assert_eq!(reserved(&good.rules_now(t0), "/b"), Some(false));
    // 404 (the common answer: the site does not use the file): no rules.
    let none = RobotsEntry::<TdmFile>::after_fetch(None, &FetchResult::Status(404), &p, t0);
    assert_eq!(reserved(&none.rules_now(t0), "/a/x"), Some(false));
    // 503: unknown for now, retried with the same backoff, the good copy
    // used meanwhile; the reason names the file.
    let failed = RobotsEntry::<TdmFile>::after_fetch(None, &FetchResult::Status(503), &p, t0);
    match failed.rules_now(t0) {
        Rules::Unavailable { reason, retry_in } => {
            assert_eq!(reason, "tdmrep.json answered 503");
            assert_eq!(retry_in, Duration::from_secs(5));
        }
        Rules::Known(_) => panic!("a 503 says nothing"),
    }
    let t1 = t0 + Duration::from_secs(86_400);
    let kept = RobotsEntry::<TdmFile>::after_fetch(Some(&good), &FetchResult::Status(503), &p, t1);
    assert!(matches!(kept.lookup(&p, t1), Lookup::Use(_)));
    assert_eq!(reserved(&kept.rules_now(t1), "/a/x"), Some(true));
    assert_eq!(
        fetch_reason_of::<TdmFile>(&FetchResult::Failed("refused".into())).as_deref(),
        Some("tdmrep.json unreachable: refused")
    );
    let html = FetchResult::Body(b"<html>soft 404</html>".to_vec());
    let why = fetch_reason_of::<TdmFile>(&html).unwrap();
    assert!(why.starts_with("not JSON"), "{why}");
    assert!(why.ends_with(": no reservation read"), "{why}");
    assert_eq!(fetch_reason_of::<Robots>(&html), None);
}

#[test]
fn a_cluster_keeps_usable_answers_for_twice_their_age_and_failures_until_the_first_retry() {
    let p = RobotsParams {
        max_age_secs: 3600.0,
        retry_min_secs: 7.0,
        fetch_timeout_secs: 20.0,
        ..params()
    };
    let usable = [
        FetchResult::Body(b"User-agent: *\nDisallow: /x\n".to_vec()),
        FetchResult::Status(404),
        FetchResult::Status(410),
    ];
    for r in &usable {
        assert!(classify(r).is_ok(), "{r:?}");
        // Twice the age: an expired copy's validators are still there for
        // the proxy that revalidates it.
        assert_eq!(p.cluster_keep(r), Duration::from_secs(7200), "{r:?}");
    }
    let failed = [
        FetchResult::Status(429),
        FetchResult::Status(503),
        FetchResult::TooManyRedirects,
        FetchResult::Failed("connection refused".into()),
    ];
    for r in &failed {
        assert!(classify(r).is_err(), "{r:?}");
        assert_eq!(p.cluster_keep(r), Duration::from_secs(7), "{r:?}");
    }
    assert_eq!(p.cluster_lock(), Duration::from_secs(21));
}

#[test]
fn an_audit_line_tells_a_failed_fetch_as_classify_does() {
    let cases = [
        (Some(200), FetchResult::Body(b"User-agent: *\n".to_vec())),
        (Some(200), FetchResult::Body(Vec::new())),
        (Some(404), FetchResult::Status(404)),
        (Some(401), FetchResult::Status(401)),
        (Some(429), FetchResult::Status(429)),
        (Some(503), FetchResult::Status(503)),
        (Some(101), FetchResult::Status(101)),
        (Some(301), FetchResult::TooManyRedirects),
        (Some(200), FetchResult::Failed("body cut short".into())),
        (None, FetchResult::Failed("connection refused".into())),
        (Some(304), FetchResult::Status(304)),
    ];
    for (status, result) in &cases {
        let reason = fetch_reason(result);
        assert_eq!(
            fetch_failed(*status, reason.as_deref()),
            classify(result).is_err(),
            "{status:?} {result:?}: {reason:?}"
        );
    }
}

#[test]
fn failures_back_off_exponentially_up_to_the_cap() {
    let t0 = Instant::now();
    let p = RobotsParams {
        retry_min_secs: 5.0,
        retry_max_secs: 30.0,
        ..params()
    };
    let mut e = RobotsEntry::<Robots>::after_fetch(None, &FetchResult::Status(500), &p, t0);
    let mut waits = vec![];
    for _ in 0..5 {
        match e.lookup(&p, t0) {
            Lookup::Use(Rules::Unavailable { retry_in, .. }) => waits.push(retry_in.as_secs()),
            other => panic!("{other:?}"),
        }
        e = RobotsEntry::after_fetch(Some(&e), &FetchResult::Status(500), &p, t0);
    }
    assert_eq!(waits, vec![5, 10, 20, 30, 30]);
    assert!(matches!(
        e.lookup(&p, t0 + Duration::from_secs(30)),
        Lookup::Fetch
    ));
    let healed = RobotsEntry::after_fetch(Some(&e), &FetchResult::Status(404), &p, t0);
    assert_eq!(healed.failures(), 0);
}

#[test]
fn a_good_copy_is_used_while_the_file_is_unavailable() {
    let t0 = Instant::now();
    let p = params();
    let good = RobotsEntry::after_fetch(
        None,
        &FetchResult::Body(b"User-agent: *\nDisallow: /x".to_vec()),
        &p,
        t0,
    );
    let t1 = t0 + Duration::from_secs(86_400);
    let failed = RobotsEntry::after_fetch(Some(&good), &FetchResult::Status(503), &p, t1);
    match failed.lookup(&p, t1) {
        Lookup::Use(r) => {
            assert_eq!(allowed(&r, "/x"), Some(false));
            assert_eq!(allowed(&r, "/y"), Some(true));
        }
        Lookup::Fetch => panic!("retry time not reached"),
    }
}

#[test]
fn params_are_validated() {
    assert!(RobotsParams::default().validate().is_ok());
    let e = RobotsParams {
        max_age_secs: 90_000.0,
        ..params()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.key, "robots.max_age_secs");
    let e = RobotsParams {
        retry_min_secs: -1.0,
        ..params()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.key, "robots.retry_min_secs");
}
