//! Usage preferences through the proxy: robots.txt `Content-Usage` and
//! `Content-Signal: use=` refuse before anything is sent; a page's
//! `Content-Usage` header withholds it (or annotates it, by config); observe
//! mode forwards everything and records `would`.

use std::sync::Arc;

use mannerly_policy::prefs::{DeclaredUse, ResponsePreferences};
use mannerly_policy::robots::Purpose;

use super::support::*;

const ROBOTS: &str = "User-agent: *\nContent-Signal: search=yes, use=reference\nContent-Usage: /articles/ train-ai=n\nAllow: /\n";

/// robots.txt as above; `/page` answers with `Content-Usage: ai-use=n`.
async fn origin() -> (Origin, Arc<Seen>) {
    let h = handler(|req| async move {
        match req.uri().path() {
            "/robots.txt" => text(200, ROBOTS),
            "/page" => {
                let mut r = text(200, "the page body");
                r.headers_mut()
                    .insert("content-usage", "ai-use=n, search=y".parse().unwrap());
                r.headers_mut()
                    .insert("cache-control", "max-age=600".parse().unwrap());
                r
            }
            _ => text(200, "an article"),
        }
    });
    let origin = Origin::http(h).await;
    let seen = origin.seen.clone();
    (origin, seen)
}

fn purposes(c: &mut mannerly_proxy::Config, p: &[Purpose]) {
    c.crawler.purposes = p.to_vec();
}

/// `url` through a proxy that declares `ai-input` and annotates: the
/// `Mannerly-Preferences` header, the body (a 200) and the audit lines.
async fn annotated_ai_input(url: &str) -> (Option<String>, String, Vec<serde_json::Value>) {
    let mut proxy = TestProxy::start(|c| {
        purposes(c, &[Purpose::AiInput]);
        c.policy.response_preferences = ResponsePreferences::Annotate;
    })
    .await;
    let r = proxy.client().get(url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let note = r
        .headers()
        .get("mannerly-preferences")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = r.text().await.unwrap();
    (note, body, proxy.stop().await)
}

#[tokio::test]
async fn content_usage_in_robots_txt_refuses_ai_train_under_its_path_only() {
    let (origin, seen) = origin().await;
    let base = format!("http://127.0.0.1:{}", origin.port());
    let mut proxy = TestProxy::start(|c| purposes(c, &[Purpose::AiTrain])).await;
    let client = proxy.client();

    let r = client
        .get(format!("{base}/articles/1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(decision(&r), "signal_refused; purpose=ai-train; line=3");
    let body = r.text().await.unwrap();
    assert!(
        body.contains("ai-train refused by Content-Usage (robots.txt line 3: Content-Usage: /articles/ train-ai=n)"),
        "{body}"
    );
    assert_eq!(seen.count("/articles/1"), 0, "nothing was sent");

    let r = client.get(format!("{base}/news/1")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(seen.count("/news/1"), 1);

    let lines = proxy.stop().await;
    let refused = with_outcome(&lines, "signal_refused");
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["prefs"]["ai-train"], "disallowed");
    assert_eq!(refused[0]["prefs"]["use"], "reference");
    assert_eq!(
        refused[0]["rule"],
        "robots.txt line 3: Content-Usage: /articles/ train-ai=n"
    );
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 1);
    assert_eq!(fetched[0]["prefs"]["ai-train"], "unknown");
    assert_eq!(fetched[0]["prefs"]["search"], "allowed");
}

#[tokio::test]
async fn use_reference_refuses_a_crawl_that_declares_full_use() {
    let (origin, seen) = origin().await;
    let url = format!("http://127.0.0.1:{}/news/1", origin.port());
    let mut full = TestProxy::start(|c| c.crawler.usage = DeclaredUse::Full).await;
    let r = full.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(decision(&r), "signal_refused; use=full; line=2");
    assert_eq!(seen.count("/news/1"), 0);
    full.stop().await;

    let mut reference = TestProxy::start(|c| c.crawler.usage = DeclaredUse::Reference).await;
    let r = reference.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(seen.count("/news/1"), 1);
    reference.stop().await;
}

#[tokio::test]
async fn a_page_whose_header_refuses_the_purpose_is_withheld_or_annotated() {
    let (origin, seen) = origin().await;
    let url = format!("http://127.0.0.1:{}/page", origin.port());

    // withhold (the default): 403 with the header's text; no body, nothing stored.
    let mut proxy = TestProxy::start(|c| purposes(c, &[Purpose::AiInput])).await;
    let client = proxy.client();
    for _ in 0..2 {
        let r = client.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 403);
        assert_eq!(decision(&r), "signal_refused; purpose=ai-input");
        let body = r.text().await.unwrap();
        assert!(
            body.contains("header Content-Usage: ai-use=n, search=y"),
            "{body}"
        );
        assert!(!body.contains("the page body"), "{body}");
    }
    // Not stored: the second request went to the origin again.
    assert_eq!(seen.count("/page"), 2);
    let lines = proxy.stop().await;
    let refused = with_outcome(&lines, "signal_refused");
    assert_eq!(refused.len(), 2);
    assert_eq!(refused[0]["prefs"]["ai-input"], "disallowed");
    assert_eq!(
        refused[0]["prefs"]["sources"][1],
        "header Content-Usage: ai-use=n, search=y"
    );

    // annotate: the page, with what the site refuses.
    let (note, body, lines) = annotated_ai_input(&url).await;
    assert_eq!(
        note.as_deref(),
        Some(
            "refused; ai-input refused by Content-Usage (header Content-Usage: ai-use=n, search=y)"
        )
    );
    assert_eq!(body, "the page body");
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 1);
    assert_eq!(fetched[0]["prefs"]["ai-input"], "disallowed");

    // A crawl that does not declare ai-input gets the page as it is.
    let mut proxy = TestProxy::start(|c| purposes(c, &[Purpose::Search])).await;
    let r = proxy.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("mannerly-preferences").is_none());
    proxy.stop().await;
}

#[tokio::test]
async fn observe_mode_forwards_everything_and_records_would() {
    let (origin, seen) = origin().await;
    let base = format!("http://127.0.0.1:{}", origin.port());
    let mut proxy = TestProxy::start(|c| {
        purposes(c, &[Purpose::AiTrain, Purpose::AiInput]);
        c.crawler.usage = DeclaredUse::Full;
        c.policy.enforce = false;
    })
    .await;
    let client = proxy.client();
    for path in ["/articles/1", "/page"] {
        let r = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(seen.count(path), 1, "{path}");
    }
    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 2);
    for line in fetched {
        assert_eq!(line["would"], "signal_refused", "{line}");
    }
}

/// robots.txt with an earlier draft's label and a `use=immediate` path;
/// `/live/*` pages also say `use=immediate` in their header; all pages
/// carry an ETag, so a stored one would be revalidated.
async fn immediate_origin() -> (Origin, Arc<Seen>) {
    let h = handler(|req| async move {
        let path = req.uri().path().to_string();
        if path == "/robots.txt" {
            return text(
                200,
                "User-agent: *\nContent-Usage: /genai/ train-genai=n\nContent-Signal: /now/ use=immediate\nAllow: /\n",
            );
        }
        let mut r = text(200, "a page");
        r.headers_mut().insert("etag", "\"v1\"".parse().unwrap());
        if path.starts_with("/live/") {
            r.headers_mut()
                .insert("content-signal", "use=immediate".parse().unwrap());
        }
        r
    });
    let origin = Origin::http(h).await;
    let seen = origin.seen.clone();
    (origin, seen)
}

#[tokio::test]
async fn use_immediate_pages_are_not_stored_and_old_drafts_refusals_are_heard() {
    let (origin, seen) = immediate_origin().await;
    let base = format!("http://127.0.0.1:{}", origin.port());
    let mut proxy = TestProxy::start(|c| purposes(c, &[Purpose::AiTrain])).await;
    let c = proxy.client();

    // Control: an ordinary page is stored, so its second fetch carries our
    // validator.
    get_ok(&c, &format!("{base}/kept")).await;
    let stored = wait_cache_lines(&proxy.audit_path, "/kept", "stored", 1).await;
    assert_eq!(stored.len(), 1);
    get_ok(&c, &format!("{base}/kept")).await;
    // `use=immediate` in the header: never stored, never revalidated.
    for _ in 0..2 {
        get_ok(&c, &format!("{base}/live/a")).await;
    }
    let sent = |path: &str| -> Vec<bool> {
        seen.all()
            .iter()
            .filter(|r| r.path == path)
            .map(|r| r.headers.contains_key("if-none-match"))
            .collect()
    };
    assert_eq!(sent("/kept"), [false, true]);
    assert_eq!(sent("/live/a"), [false, false]);

    // `train-genai=n` (an earlier draft's label) refuses ai-train.
    let r = c.get(format!("{base}/genai/x")).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(decision(&r), "signal_refused; purpose=ai-train; line=2");
    let lines = proxy.stop().await;
    let refused = with_outcome(&lines, "signal_refused");
    assert_eq!(
        refused[0]["prefs"]["legacy"],
        serde_json::json!([
            "train-genai=n read as ai-train=n (label of draft-ietf-aipref-vocab-04)"
        ])
    );
    let live = lines
        .iter()
        .find(|l| l["url"].as_str().is_some_and(|u| u.ends_with("/live/a")))
        .unwrap();
    assert_eq!(live["prefs"]["use"], "immediate", "{live}");

    // A crawl declaring `reference` is refused where the site allows only
    // `immediate`, before anything is sent.
    let mut proxy = TestProxy::start(|c| c.crawler.usage = DeclaredUse::Reference).await;
    let before = seen.count("/now/x");
    let r = proxy
        .client()
        .get(format!("{base}/now/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(decision(&r), "signal_refused; use=reference; line=3");
    assert_eq!(seen.count("/now/x"), before);
    proxy.stop().await;
}

#[tokio::test]
async fn a_tdmrep_reservation_withholds_pages_from_tdm_purposes_only() {
    let h = handler(|req| async move {
        match req.uri().path() {
            "/robots.txt" => text(200, "User-agent: *\nAllow: /\n"),
            _ => {
                // TDMRep's own example of a reservation with a policy.
                let mut r = text(200, "a reserved page");
                let h = r.headers_mut();
                h.insert("tdm-reservation", "1".parse().unwrap());
                h.insert(
                    "tdm-policy",
                    "https://provider.com/policies/policy.json".parse().unwrap(),
                );
                r
            }
        }
    });
    let origin = Origin::http(h).await;
    let url = format!("http://127.0.0.1:{}/article", origin.port());

    let mut proxy = TestProxy::start(|c| purposes(c, &[Purpose::Search, Purpose::AiTrain])).await;
    let r = proxy.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(decision(&r), "signal_refused; purpose=ai-train");
    let body = r.text().await.unwrap();
    assert!(body.contains("header tdm-reservation: 1"), "{body}");
    assert!(!body.contains("a reserved page"), "{body}");
    let lines = proxy.stop().await;
    let refused = with_outcome(&lines, "signal_refused");
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["prefs"]["ai-train"], "disallowed");
    assert_eq!(refused[0]["prefs"]["ai-input"], "disallowed");
    assert_eq!(refused[0]["prefs"]["search"], "unknown");
    assert_eq!(
        refused[0]["prefs"]["tdm_policy"],
        "https://provider.com/policies/policy.json"
    );

    // A search crawl is not text and data mining: the page passes.
    let mut proxy = TestProxy::start(|c| purposes(c, &[Purpose::Search])).await;
    let r = proxy.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "a reserved page");
    proxy.stop().await;

    // annotate: passed on, saying what was reserved.
    let (note, body, _) = annotated_ai_input(&url).await;
    assert_eq!(
        note.as_deref(),
        Some("refused; ai-input refused by tdm-reservation (header tdm-reservation: 1)")
    );
    assert_eq!(body, "a reserved page");
}
