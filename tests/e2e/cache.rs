//! Conditional requests end to end: the proxy stores pages, asks the origin
//! whether they changed, serves the stored page on a 304, never stores what
//! it must not, keeps entries (and budget pauses) across restarts, and falls
//! back to pass-through when the store cannot take a page.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hyper::Response;
use mannerly_policy::conditional::CacheReads;

use super::support::*;

const LM: &str = "Tue, 01 Sep 2026 10:00:00 GMT";

/// What the scripted origin counts.
#[derive(Default)]
struct Counts {
    not_modified: AtomicUsize,
    version: AtomicUsize,
    generation: AtomicUsize,
}

/// A page body that is not all one byte, so a torn copy would show.
fn page_body(path: &str, version: usize, len: usize) -> Vec<u8> {
    let seed = format!("{path}#{version}|");
    seed.bytes().cycle().take(len).collect()
}

fn header(req: &hyper::Request<hyper::body::Incoming>, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A response with validators that answers conditional requests itself.
fn conditional(
    req: &hyper::Request<hyper::body::Incoming>,
    counts: &Counts,
    body: Vec<u8>,
    etag: Option<&str>,
    last_modified: Option<&str>,
) -> Response<OriginBody> {
    let inm = header(req, "if-none-match");
    let ims = header(req, "if-modified-since");
    let etag_matches = matches!((&inm, etag), (Some(a), Some(b)) if a == b);
    let date_matches =
        inm.is_none() && matches!((&ims, last_modified), (Some(a), Some(b)) if a == b);
    let generation = counts.generation.fetch_add(1, Ordering::SeqCst) + 1;
    let mut r = if etag_matches || date_matches {
        counts.not_modified.fetch_add(1, Ordering::SeqCst);
        text(304, "")
    } else {
        text(200, body)
    };
    let h = r.headers_mut();
    if let Some(e) = etag {
        h.insert("etag", e.parse().unwrap());
    }
    if let Some(d) = last_modified {
        h.insert("last-modified", d.parse().unwrap());
    }
    h.insert("x-generation", generation.to_string().parse().unwrap());
    h.insert("cache-control", "max-age=0".parse().unwrap());
    r
}

fn origin(counts: Arc<Counts>) -> Handler {
    handler(move |req| {
        let counts = counts.clone();
        async move {
            let path = req.uri().path().to_string();
            let c = &*counts;
            let tag = format!("\"{}\"", path.len());
            match path.as_str() {
                "/robots.txt" => text(404, "none"),
                p if p.starts_with("/both") => {
                    conditional(&req, c, page_body(p, 0, 6000), Some(&tag), Some(LM))
                }
                p if p.starts_with("/etag") => {
                    conditional(&req, c, page_body(p, 0, 5000), Some(&tag), None)
                }
                p if p.starts_with("/lm") => {
                    conditional(&req, c, page_body(p, 0, 4000), None, Some(LM))
                }
                "/changing" => {
                    let v = c.version.load(Ordering::SeqCst);
                    let tag = format!("\"v{v}\"");
                    conditional(&req, c, page_body(&path, v, 3000), Some(&tag), None)
                }
                "/vary-ae" | "/vary-lang" => {
                    let name = if path == "/vary-ae" {
                        "accept-encoding"
                    } else {
                        "x-lang"
                    };
                    let value = header(&req, name).unwrap_or_default();
                    let tag = format!("\"{value}\"");
                    let body = format!("variant {value}").into_bytes();
                    let mut r = conditional(&req, c, body, Some(&tag), None);
                    r.headers_mut().insert("vary", name.parse().unwrap());
                    r
                }
                "/set-cookie" | "/no-store" | "/private" | "/vary-star" | "/partial" => {
                    let mut r = conditional(&req, c, b"never stored".to_vec(), Some("\"n\""), None);
                    let h = r.headers_mut();
                    match path.as_str() {
                        "/set-cookie" => {
                            h.insert("set-cookie", "id=1".parse().unwrap());
                        }
                        "/no-store" => {
                            h.insert("cache-control", "no-store".parse().unwrap());
                        }
                        "/private" => {
                            h.insert("cache-control", "private".parse().unwrap());
                        }
                        "/vary-star" => {
                            h.insert("vary", "*".parse().unwrap());
                        }
                        _ => {
                            if r.status() == 200 {
                                *r.status_mut() = hyper::StatusCode::PARTIAL_CONTENT;
                                r.headers_mut()
                                    .insert("content-range", "bytes 0-11/100".parse().unwrap());
                            }
                        }
                    }
                    r
                }
                p if p.starts_with("/fill") => {
                    conditional(&req, c, page_body(p, 0, 3900), Some(&tag), Some(LM))
                }
                p if p.starts_with("/crash") => {
                    conditional(&req, c, page_body(p, 0, 16 * 1024), Some(&tag), Some(LM))
                }
                "/fresh" => {
                    let mut r = conditional(&req, c, page_body(&path, 0, 2000), Some(&tag), None);
                    r.headers_mut()
                        .insert("cache-control", "max-age=600".parse().unwrap());
                    r
                }
                "/limited" => {
                    let mut r = text(429, "slow down");
                    r.headers_mut().insert("retry-after", "60".parse().unwrap());
                    r
                }
                _ => text(404, "no such page"),
            }
        }
    })
}

async fn get(
    c: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, String, Vec<u8>, reqwest::header::HeaderMap) {
    let mut b = c.get(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let r = b.send().await.unwrap();
    let status = r.status().as_u16();
    let d = decision(&r);
    let h = r.headers().clone();
    (status, d, r.bytes().await.unwrap().to_vec(), h)
}

fn validators_seen(origin: &Origin, path: &str) -> Vec<(Option<String>, Option<String>)> {
    origin
        .seen
        .all()
        .into_iter()
        .filter(|r| r.path == path)
        .map(|r| {
            let get = |n: &str| r.headers.get(n).map(|v| v.to_str().unwrap().to_string());
            (get("if-none-match"), get("if-modified-since"))
        })
        .collect()
}

#[tokio::test]
async fn second_fetch_is_revalidated_and_served_from_the_store() {
    let counts = Arc::new(Counts::default());
    let origin = Origin::http(origin(counts.clone())).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let url = format!("http://127.0.0.1:{}/both", origin.port());
    let want = page_body("/both", 0, 6000);

    let (status, d, body, _) = get(&c, &url, &[]).await;
    assert_eq!(status, 200);
    assert!(d.starts_with("fetched; waited_ms="), "{d}");
    assert_eq!(body, want);
    let stored = wait_cache_lines(&proxy.audit_path, "/both", "stored", 1).await;
    assert_eq!(stored.len(), 1, "first answer stored");

    for round in 1..=2 {
        let (status, d, body, h) = get(&c, &url, &[]).await;
        assert_eq!(status, 200, "the client gets the stored 200, not a 304");
        assert!(d.starts_with("revalidated; waited_ms="), "{d}");
        assert_eq!(body, want, "exact stored bytes");
        // Headers the 304 carried replace the stored ones (RFC 9111 §4.3.4).
        assert_eq!(h["x-generation"], (round + 1).to_string());
        assert_eq!(h["content-length"], "6000");
    }
    assert_eq!(counts.not_modified.load(Ordering::SeqCst), 2);
    let sent = validators_seen(&origin, "/both");
    assert_eq!(sent[0], (None, None), "first request unconditional");
    assert_eq!(sent[1], (Some("\"5\"".into()), Some(LM.into())));

    let lines = proxy.stop().await;
    let reval = with_outcome(&lines, "revalidated");
    assert_eq!(reval.len(), 2, "{lines:#?}");
    for l in reval {
        assert_eq!(l["cache"], "revalidated");
        assert_eq!(l["status"], 200);
        assert_eq!(l["bytes"], 6000);
        assert_eq!(l["saved_bytes"], 6000);
    }
}

#[tokio::test]
async fn etag_only_and_last_modified_only_origins_are_revalidated() {
    let counts = Arc::new(Counts::default());
    let origin = Origin::http(origin(counts.clone())).await;
    let proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());
    for (path, len) in [("/etag", 5000), ("/lm", 4000)] {
        get(&c, &format!("{base}{path}"), &[]).await;
        wait_cache_lines(&proxy.audit_path, path, "stored", 1).await;
        let (status, d, body, _) = get(&c, &format!("{base}{path}"), &[]).await;
        assert_eq!(status, 200);
        assert!(d.starts_with("revalidated"), "{path}: {d}");
        assert_eq!(body, page_body(path, 0, len));
    }
    assert_eq!(
        validators_seen(&origin, "/etag")[1],
        (Some("\"5\"".into()), None)
    );
    assert_eq!(validators_seen(&origin, "/lm")[1], (None, Some(LM.into())));
    assert_eq!(counts.not_modified.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_clients_own_validators_pass_through_and_its_304_comes_back() {
    let counts = Arc::new(Counts::default());
    let origin = Origin::http(origin(counts.clone())).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let url = format!("http://127.0.0.1:{}/etag", origin.port());
    // Something stored first, so the proxy would have validators of its own.
    get(&c, &url, &[]).await;
    wait_cache_lines(&proxy.audit_path, "/etag", "stored", 1).await;

    let (status, d, body, _) = get(&c, &url, &[("if-none-match", "\"5\"")]).await;
    assert_eq!(status, 304);
    assert!(d.starts_with("unchanged; waited_ms="), "{d}");
    assert!(body.is_empty());
    let (status, d, body, _) = get(&c, &url, &[("if-none-match", "\"old\"")]).await;
    assert_eq!(status, 200);
    assert!(d.starts_with("fetched"), "{d}");
    assert_eq!(body, page_body("/etag", 0, 5000));
    let sent = validators_seen(&origin, "/etag");
    assert_eq!(
        sent[1],
        (Some("\"5\"".into()), None),
        "client's value, as sent"
    );
    assert_eq!(sent[2], (Some("\"old\"".into()), None));

    let lines = proxy.stop().await;
    let unchanged = with_outcome(&lines, "unchanged");
    assert_eq!(unchanged.len(), 1);
    assert_eq!(unchanged[0]["cache"], "bypass");
    assert_eq!(unchanged[0]["status"], 304);
}

#[tokio::test]
async fn vary_keeps_one_stored_page_per_variant() {
    let counts = Arc::new(Counts::default());
    let origin = Origin::http(origin(counts.clone())).await;
    let proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());
    for (path, name) in [("/vary-ae", "accept-encoding"), ("/vary-lang", "x-lang")] {
        let url = format!("{base}{path}");
        for value in ["gzip", "br"] {
            let (_, d, body, _) = get(&c, &url, &[(name, value)]).await;
            assert!(d.starts_with("fetched"), "{path} {value}: {d}");
            assert_eq!(body, format!("variant {value}").into_bytes());
        }
        wait_cache_lines(&proxy.audit_path, path, "stored", 2).await;
        for value in ["br", "gzip"] {
            let (status, d, body, _) = get(&c, &url, &[(name, value)]).await;
            assert_eq!(status, 200);
            assert!(d.starts_with("revalidated"), "{path} {value}: {d}");
            assert_eq!(body, format!("variant {value}").into_bytes(), "{path}");
        }
        // A value never seen is its own variant: fetched, not another's page.
        let (_, d, body, _) = get(&c, &url, &[(name, "zstd")]).await;
        assert!(d.starts_with("fetched"), "{path}: {d}");
        assert_eq!(body, b"variant zstd");
        let sent = validators_seen(&origin, path);
        assert_eq!(sent[2].0.as_deref(), Some("\"br\""));
        assert_eq!(sent[3].0.as_deref(), Some("\"gzip\""));
        assert_eq!(sent[4].0, None);
    }
}

#[tokio::test]
async fn never_stored_responses_are_fetched_every_time() {
    let counts = Arc::new(Counts::default());
    let origin = Origin::http(origin(counts.clone())).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());
    // (path, request headers, the audit's cache value)
    type Case = (
        &'static str,
        &'static [(&'static str, &'static str)],
        &'static str,
    );
    let cases: [Case; 7] = [
        ("/etag-auth", &[("authorization", "Bearer x")], "bypass"),
        ("/etag-cookie", &[("cookie", "a=1")], "bypass"),
        ("/set-cookie", &[], "miss"),
        ("/no-store", &[], "miss"),
        ("/private", &[], "miss"),
        ("/vary-star", &[], "miss"),
        ("/partial", &[], "miss"),
    ];
    for (path, headers, cache) in &cases {
        for _ in 0..2 {
            let (status, d, _, _) = get(&c, &format!("{base}{path}"), headers).await;
            assert!(d.starts_with("fetched"), "{path}: {d}");
            assert!(status == 200 || status == 206, "{path}: {status}");
        }
        // A store write, wrongly started, has landed once the lines say
        // what the store did (a line waits for its write).
        let done = wait_cache_lines(&proxy.audit_path, path, cache, 2).await;
        assert_eq!(done.len(), 2, "{path}");
        let (_, d, _, _) = get(&c, &format!("{base}{path}"), headers).await;
        assert!(d.starts_with("fetched"), "{path}: {d}");
        assert!(
            validators_seen(&origin, path)
                .iter()
                .all(|v| *v == (None, None)),
            "{path}: the proxy never sent validators"
        );
    }
    assert_eq!(counts.not_modified.load(Ordering::SeqCst), 0);
    let lines = proxy.stop().await;
    for (path, _, cache) in &cases {
        let mine: Vec<_> = lines
            .iter()
            .filter(|l| l["url"].as_str().unwrap().ends_with(path))
            .collect();
        assert_eq!(mine.len(), 3, "{path}");
        assert!(
            mine.iter().all(|l| l["cache"] == *cache),
            "{path}: {mine:#?}"
        );
    }
}

#[tokio::test]
async fn a_changed_page_replaces_the_stored_one() {
    let counts = Arc::new(Counts::default());
    let origin = Origin::http(origin(counts.clone())).await;
    let proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let url = format!("http://127.0.0.1:{}/changing", origin.port());
    get(&c, &url, &[]).await;
    wait_cache_lines(&proxy.audit_path, "/changing", "stored", 1).await;

    counts.version.store(1, Ordering::SeqCst);
    let (status, d, body, _) = get(&c, &url, &[]).await;
    assert_eq!(status, 200);
    assert!(d.starts_with("fetched"), "{d}");
    assert_eq!(body, page_body("/changing", 1, 3000), "the new page");
    wait_cache_lines(&proxy.audit_path, "/changing", "stored", 2).await;

    let (_, d, body, _) = get(&c, &url, &[]).await;
    assert!(d.starts_with("revalidated"), "{d}");
    assert_eq!(
        body,
        page_body("/changing", 1, 3000),
        "the new page, stored"
    );
    let sent = validators_seen(&origin, "/changing");
    assert_eq!(sent[1].0.as_deref(), Some("\"v0\""));
    assert_eq!(sent[2].0.as_deref(), Some("\"v1\""));
}

#[tokio::test]
async fn stored_pages_survive_a_restart() {
    let counts = Arc::new(Counts::default());
    let origin = Origin::http(origin(counts.clone())).await;
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_path_buf();
    let url = format!("http://127.0.0.1:{}/both-restart", origin.port());
    {
        let d = dir.clone();
        let mut proxy = TestProxy::start(move |cfg| cfg.data_dir = d).await;
        get(&proxy.client(), &url, &[]).await;
        wait_cache_lines(&proxy.audit_path, "/both-restart", "stored", 1).await;
        proxy.stop().await;
    }
    // A restarted proxy holds nothing in memory: the page is read from
    // disk, on the blocking pool and then on the serving thread.
    for (n, reads) in [CacheReads::Pool, CacheReads::Inline]
        .into_iter()
        .enumerate()
    {
        let d = dir.clone();
        let mut proxy = TestProxy::start(move |cfg| {
            cfg.data_dir = d;
            cfg.cache.reads = reads;
        })
        .await;
        let (status, d, body, _) = get(&proxy.client(), &url, &[]).await;
        assert_eq!(status, 200, "{reads:?}");
        assert!(d.starts_with("revalidated"), "{reads:?}: {d}");
        assert_eq!(body, page_body("/both-restart", 0, 6000), "{reads:?}");
        assert_eq!(counts.not_modified.load(Ordering::SeqCst), n + 1);
        let lines = proxy.stop().await;
        assert_eq!(with_outcome(&lines, "revalidated").len(), 1, "{reads:?}");
    }
}

#[tokio::test]
async fn kill_9_during_store_writes_leaves_no_damaged_page() {
    let counts = Arc::new(Counts::default());
    let origin = Origin::http(origin(counts.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    const N: usize = 240;
    let urls: Vec<String> = (0..N)
        .map(|i| format!("http://127.0.0.1:{}/crash{i}", origin.port()))
        .collect();

    let proxy = RunningBinary::start(dir.path(), &[]);
    let c = proxy.client();
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for chunk in urls.chunks(N / 8) {
        let (c, chunk, done) = (c.clone(), chunk.to_vec(), done.clone());
        tasks.push(tokio::spawn(async move {
            for url in chunk {
                let Ok(r) = c.get(&url).send().await else {
                    return;
                };
                if r.bytes().await.is_err() {
                    return;
                }
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    // Killed mid-way: requests and store writes are in flight.
    until("half the pages answered", || {
        let done = done.load(Ordering::SeqCst);
        async move { done >= N / 2 }
    })
    .await;
    // Pages keep arriving; with the default `sync = "none"` commits are
    // forced to disk in batches. Killed once a forced commit came after
    // some page was committed: that page at least must be replayed.
    let admin = format!("http://{}", proxy.admin);
    let store_metric = |name: &'static str| {
        let admin = admin.clone();
        async move { super::admin::series(&super::admin::metrics_text(&admin).await)[name] }
    };
    let forced_since_stored = std::cell::Cell::new(None);
    until("a forced commit after a stored page", || async {
        // Stored first, then forced: a forced commit counted after a page
        // was seen stored came after that page's commit.
        let forced = || store_metric("mannerly_store_forced_commits_total");
        match forced_since_stored.get() {
            Some(before) => forced().await > before,
            None => {
                if store_metric("mannerly_cache_stored_total").await > 0.0 {
                    forced_since_stored.set(Some(forced().await));
                }
                false
            }
        }
    })
    .await;
    proxy.kill9();
    for t in tasks {
        let _ = t.await;
    }

    let proxy = RunningBinary::start(dir.path(), &[]);
    let c = proxy.client();
    let mut revalidated = 0;
    for (i, url) in urls.iter().enumerate() {
        let r = c.get(url).send().await.unwrap();
        assert_eq!(r.status(), 200);
        if decision(&r).starts_with("revalidated") {
            revalidated += 1;
        }
        let body = r.bytes().await.unwrap();
        assert!(
            body == page_body(&format!("/crash{i}"), 0, 16 * 1024),
            "page {i}: stored copy differs from the origin's"
        );
    }
    proxy.kill9();
    // Store writes trail the responses, and the last tenth of a second of
    // them is not forced yet, so only some pages made it; those must be
    // replayed, and none may be damaged.
    assert!(
        revalidated > 0,
        "pages stored before the kill are replayed ({revalidated})"
    );
}

#[tokio::test]
async fn a_store_too_small_for_the_pages_degrades_to_pass_through() {
    let counts = Arc::new(Counts::default());
    let origin = Origin::http(origin(counts.clone())).await;
    let mut proxy = TestProxy::start(|cfg| {
        // Each page is under max_body, but no page with its headers fits.
        cfg.cache.max_body = 4000;
        cfg.cache.max_size = 4000;
    })
    .await;
    let c = proxy.client();
    for round in 0..2 {
        for i in 0..5 {
            let url = format!("http://127.0.0.1:{}/fill{i}", origin.port());
            let (status, d, body, _) = get(&c, &url, &[]).await;
            assert_eq!(status, 200, "round {round}");
            assert!(d.starts_with("fetched"), "{d}");
            assert_eq!(body, page_body(&format!("/fill{i}"), 0, 3900));
        }
    }
    assert!(origin
        .seen
        .all()
        .iter()
        .all(|r| r.headers.get("if-none-match").is_none()));
    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 10);
    assert!(fetched.iter().all(|l| l["cache"] == "miss"), "{fetched:#?}");
}

#[tokio::test]
async fn a_pause_survives_kill_9_and_restart() {
    let counts = Arc::new(Counts::default());
    let origin = Origin::http(origin(counts.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}/limited", origin.port());

    let proxy = RunningBinary::start(dir.path(), &[]);
    let r = proxy.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(decision(&r).starts_with("throttled"), "{}", decision(&r));
    // At once: the pause was on disk before the 429 was answered.
    proxy.kill9();

    let proxy = RunningBinary::start(dir.path(), &[]);
    let r = proxy.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(decision(&r).starts_with("paused"), "{}", decision(&r));
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((50..=60).contains(&retry), "{retry}");
    proxy.kill9();
    assert_eq!(
        origin.seen.count("/limited"),
        1,
        "the origin was asked once"
    );
}

#[tokio::test]
async fn serve_fresh_answers_fresh_pages_without_asking_the_origin() {
    let counts = Arc::new(Counts::default());
    let origin = Origin::http(origin(counts.clone())).await;
    let mut proxy = TestProxy::start(|cfg| cfg.cache.serve_fresh = true).await;
    let c = proxy.client();
    let url = format!("http://127.0.0.1:{}/fresh", origin.port());
    get(&c, &url, &[]).await;
    wait_cache_lines(&proxy.audit_path, "/fresh", "stored", 1).await;
    let (status, d, body, _) = get(&c, &url, &[]).await;
    assert_eq!(status, 200);
    assert!(d.contains("cache=hit"), "{d}");
    assert_eq!(body, page_body("/fresh", 0, 2000));
    assert_eq!(origin.seen.count("/fresh"), 1, "the origin was asked once");
    let lines = proxy.stop().await;
    let hit: Vec<_> = lines.iter().filter(|l| l["cache"] == "hit").collect();
    assert_eq!(hit.len(), 1, "{lines:#?}");
    assert_eq!(hit[0]["saved_bytes"], 2000);
    assert_eq!(hit[0]["bytes"], 2000);
}

#[tokio::test]
async fn a_store_that_cannot_be_opened_stops_the_start_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = test_config(dir.path());
    // A directory where the store file should be: it cannot be opened.
    std::fs::create_dir_all(cfg.store_path()).unwrap();
    let ca = mannerly_proxy::CertificateAuthority::load_or_create(&cfg.data_dir, 64).unwrap();
    cfg.audit.path = dir.path().join("audit.jsonl").display().to_string();
    let (sink, _writer) = mannerly_proxy::open_audit(&cfg).unwrap();
    let err = match mannerly_proxy::Proxy::bind(cfg, Arc::new(ca), sink).await {
        Ok(_) => panic!("started without its store"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("store.redb"), "{err}");
}

/// A small tmpfs, unmounted on drop; `None` where mounting is not allowed.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test]
async fn a_full_disk_degrades_to_pass_through_and_is_audited_as_error() {
    let Some(disk) = SmallDisk::mount("1m") else {
        eprintln!(
            "skipped: cannot mount a tmpfs here (needs root); the size-cap test covers the rest"
        );
        return;
    };
    let counts = Arc::new(Counts::default());
    let origin = Origin::http(origin(counts.clone())).await;
    let data = disk.dir.path().to_path_buf();
    let mut proxy = TestProxy::start(move |cfg| cfg.data_dir = data).await;
    let c = proxy.client();
    const N: usize = 120;
    for round in 0..2 {
        for i in 0..N {
            let url = format!("http://127.0.0.1:{}/crash{i}", origin.port());
            let (status, _, body, _) = get(&c, &url, &[]).await;
            assert_eq!(status, 200, "round {round} page {i}");
            assert_eq!(body, page_body(&format!("/crash{i}"), 0, 16 * 1024));
        }
        // This round's store writes have finished once every page's line
        // is written (a line waits for its page's write).
        let want = N * (round + 1);
        let written = || {
            audit_lines(&proxy.audit_path)
                .iter()
                .filter(|l| l["url"].as_str().is_some_and(|u| u.contains("/crash")))
                .count()
        };
        until("this round's audit lines", || {
            let n = written();
            async move { n >= want }
        })
        .await;
        assert_eq!(written(), want, "round {round}");
    }
    let lines = proxy.stop().await;
    drop(disk);
    let cache = |v: &str| lines.iter().filter(|l| l["cache"] == v).count();
    // 120 × 16 KiB does not fit in 1 MiB with the store's overhead: writes
    // fail, every answer still came through, and each failure is audited.
    eprintln!(
        "full disk: {} stored, {} revalidated, {} error, {} miss",
        cache("stored"),
        cache("revalidated"),
        cache("error"),
        cache("miss")
    );
    assert!(cache("error") > 0, "{lines:#?}");
    assert_eq!(
        cache("stored") + cache("error") + cache("miss") + cache("revalidated"),
        2 * N
    );
}
