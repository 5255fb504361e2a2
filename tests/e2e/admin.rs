//! The admin listener after real traffic through the proxy: health,
//! readiness, /metrics equal to the audit lines, /hosts and /hosts/{host},
//! the reset path and its audit line, the token rule, the CLI front.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::support::*;

/// robots.txt disallows /private; /limit answers 429 with a long Retry-After.
pub fn site() -> Handler {
    handler(|req| async move {
        match req.uri().path() {
            "/robots.txt" => text(200, "User-agent: *\nDisallow: /private\n"),
            "/limit" => {
                let mut r = text(429, "slow down");
                r.headers_mut()
                    .insert("retry-after", "120".parse().unwrap());
                r
            }
            p => text(200, format!("page {p}")),
        }
    })
}

pub fn admin_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

pub async fn get_json(url: &str) -> (u16, Value) {
    let r = admin_client().get(url).send().await.unwrap();
    let status = r.status().as_u16();
    (
        status,
        serde_json::from_str(&r.text().await.unwrap()).unwrap_or(Value::Null),
    )
}

/// The `/metrics` text of the admin listener at `admin` (`http://host:port`).
pub async fn metrics_text(admin: &str) -> String {
    admin_client()
        .get(format!("{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// `name{labels} value` lines of a Prometheus text, by series.
pub fn series(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Sends the traffic every admin test starts from: three pages, one
/// robots refusal, one 429 (the host is then paused for 120 s), one request
/// refused because of the pause.
pub async fn traffic(proxy: &TestProxy, origin: &Origin) {
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());
    for p in ["/a", "/b", "/c"] {
        let r = c.get(format!("{base}{p}")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let r = c.get(format!("{base}/private/x")).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let r = c.get(format!("{base}/limit")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(decision(&r).starts_with("throttled"), "{}", decision(&r));
    let r = c.get(format!("{base}/d")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(decision(&r).starts_with("paused"), "{}", decision(&r));
}

/// Waits until the audit file holds `n` lines (the writer flushes when idle).
async fn audit_settles(proxy: &TestProxy, n: usize) -> Vec<Value> {
    for _ in 0..500 {
        let lines = audit_lines(&proxy.audit_path);
        if lines.len() >= n {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    audit_lines(&proxy.audit_path)
}

#[tokio::test]
async fn every_endpoint_answers_after_real_traffic_and_metrics_equal_the_audit_lines() {
    let origin = Origin::http(site()).await;
    let mut proxy = TestProxy::start(|c| {
        c.admin.listen = "127.0.0.1:0".into();
        c.admin.host_labels = vec!["127.0.0.1".into()];
    })
    .await;
    let admin = format!("http://{}", proxy.admin.expect("admin listener"));
    let (s, ready) = get_json(&format!("{admin}/readyz")).await;
    assert_eq!((s, &ready["ready"]), (200, &Value::Bool(true)));
    let health = admin_client()
        .get(format!("{admin}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), "ok\n");

    traffic(&proxy, &origin).await;

    // /hosts: the one host with its budget, pause and robots status.
    let (s, list) = get_json(&format!("{admin}/hosts")).await;
    assert_eq!(s, 200);
    assert_eq!(list["hosts_tracked"], 1);
    assert_eq!(list["total"], 1);
    assert_eq!(list["page"], 1);
    assert_eq!(list["per_page"], 50);
    assert_eq!(list["totals"]["paused"], 1);
    assert_eq!(list["totals"]["throttles_last_hour"], 1);
    let h = &list["hosts"][0];
    let mut keys: Vec<&str> = h.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "breaker_open",
            "breaker_open_for_s",
            "ceiling",
            "ceiling_relaxes_in_s",
            "concurrency",
            "crawl_delay_s",
            "decisions",
            "distress",
            "group",
            "history",
            "host",
            "in_flight",
            "kind",
            "last_distress",
            "last_seen",
            "latency_baseline_ms",
            "latency_ms",
            "max_rate",
            "members",
            "next_turn",
            "next_turn_at",
            "next_turn_in_s",
            "pause_reason",
            "paused",
            "paused_for_s",
            "paused_until",
            "queued",
            "rate",
            "recent_distress",
            "recent_throttles",
            "robots",
            "throttles_last_hour"
        ]
    );
    assert_eq!(h["host"], "127.0.0.1");
    assert_eq!(
        (&h["group"], &h["kind"]),
        (&"127.0.0.1".into(), &"ip".into())
    );
    assert_eq!(h["members"], serde_json::json!(["127.0.0.1"]));
    assert_eq!(h["paused"], true);
    let left = h["paused_for_s"].as_f64().unwrap();
    assert!(left > 100.0 && left <= 120.0, "{left}");
    assert_eq!(h["next_turn"], "paused");
    assert_eq!(h["next_turn_in_s"], h["paused_for_s"]);
    assert_eq!(
        h["pause_reason"],
        "origin answered 429 with Retry-After: 120"
    );
    assert_eq!(h["breaker_open"], false);
    assert_eq!(h["throttles_last_hour"], 1);
    assert_eq!(h["recent_throttles"], 1);
    assert_eq!(h["in_flight"], 0);
    assert_eq!(h["robots"]["status"], 200);
    assert_eq!(h["robots"]["ok"], true);
    // Six request decisions and the robots.txt fetch.
    assert_eq!(h["decisions"], 7);
    assert!(h["ceiling"].as_f64().unwrap() < h["max_rate"].as_f64().unwrap());
    assert!(h["ceiling_relaxes_in_s"].as_f64().unwrap() > 21_000.0);
    assert!(!h["history"].as_array().unwrap().is_empty());
    assert_eq!(list["latest"][0]["outcome"], "paused");

    // /hosts/{host}: the same plus the last decisions, newest first.
    let (s, one) = get_json(&format!("{admin}/hosts/127.0.0.1")).await;
    assert_eq!(s, 200);
    assert_eq!(one["host"], "127.0.0.1");
    assert_eq!(one["paused"], true);
    let outcomes: Vec<&str> = one["last_decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        [
            "paused",
            "throttled",
            "disallowed",
            "fetched",
            "fetched",
            "fetched",
            "robots_fetched"
        ]
    );
    let (s, missing) = get_json(&format!("{admin}/hosts/nowhere.example")).await;
    assert_eq!(s, 404);
    assert_eq!(missing["error"], "nowhere.example is not tracked");

    // /metrics: every decision count equals the audit lines of its outcome.
    let lines = audit_settles(&proxy, 7).await;
    assert_eq!(lines.len(), 7);
    let text = metrics_text(&admin).await;
    let m = series(&text);
    for outcome in [
        "fetched",
        "disallowed",
        "throttled",
        "paused",
        "robots_fetched",
        "revalidated",
        "breaker_open",
        "operator_reset",
    ] {
        let in_log = with_outcome(&lines, outcome).len() as f64;
        let key = format!("mannerly_decisions_total{{outcome=\"{outcome}\"}}");
        assert_eq!(m.get(&key), Some(&in_log), "{key}\n{text}");
        let host_key =
            format!("mannerly_host_decisions_total{{host=\"127.0.0.1\",outcome=\"{outcome}\"}}");
        assert_eq!(m.get(&host_key), Some(&in_log), "{host_key}");
    }
    let total: f64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("mannerly_decisions_total{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(total, lines.len() as f64);
    assert_eq!(m["mannerly_audit_lines_total"], lines.len() as f64);
    assert_eq!(m["mannerly_audit_write_errors_total"], 0.0);
    // Origin answers: three 200 pages, the 200 robots.txt, one 429.
    assert_eq!(m["mannerly_upstream_responses_total{class=\"2xx\"}"], 4.0);
    assert_eq!(m["mannerly_upstream_responses_total{class=\"4xx\"}"], 1.0);
    assert_eq!(m["mannerly_robots_fetches_total"], 1.0);
    assert_eq!(m["mannerly_robots_fetch_failures_total"], 0.0);
    assert_eq!(m["mannerly_hosts_tracked"], 1.0);
    assert_eq!(m["mannerly_hosts_paused"], 1.0);
    assert_eq!(m["mannerly_hosts_breaker_open"], 0.0);
    assert_eq!(m["mannerly_state_backend_degraded"], 0.0);
    assert_eq!(m["mannerly_store_errors_total"], 0.0);
    // Waits are recorded for the five requests that reached the budget
    // (three pages, the 429, the paused one), latencies for the four sent
    // upstream.
    assert_eq!(m["mannerly_wait_seconds_count"], 5.0);
    assert_eq!(m["mannerly_upstream_latency_seconds_count"], 4.0);
    assert!(
        m.contains_key("mannerly_wait_seconds_bucket{le=\"0.1\"}"),
        "{text}"
    );
    assert!(m.contains_key("mannerly_host_rate{host=\"127.0.0.1\"}"));
    assert!(text.contains("# TYPE mannerly_decisions_total counter"));

    // Wrong method, unknown path.
    let r = admin_client()
        .delete(format!("{admin}/hosts"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let r = admin_client()
        .get(format!("{admin}/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    let dash = admin_client().get(&admin).send().await.unwrap();
    assert_eq!(dash.status(), 200);
    let html = dash.text().await.unwrap();
    assert!(html.contains("<title>mannerly</title>"));
    // Self-contained: no external scripts, styles or fonts.
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));

    proxy.stop().await;
}

#[tokio::test]
async fn reset_clears_the_pause_writes_an_operator_reset_line_and_refuses_cross_site_posts() {
    let origin = Origin::http(site()).await;
    let mut proxy = TestProxy::start(|c| c.admin.listen = "127.0.0.1:0".into()).await;
    let admin = format!("http://{}", proxy.admin.unwrap());
    traffic(&proxy, &origin).await;

    // A page on another site cannot make the browser reset hosts.
    let r = admin_client()
        .post(format!("{admin}/hosts/127.0.0.1/reset"))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let (_, still) = get_json(&format!("{admin}/hosts/127.0.0.1")).await;
    assert_eq!(still["paused"], true);

    let r = admin_client()
        .post(format!("{admin}/hosts/127.0.0.1/reset"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(v["host"], "127.0.0.1");
    let was = v["before"]["paused_for"].as_f64().unwrap();
    assert!(was > 100.0, "{was}");
    assert_eq!(v["after"]["paused_for"], Value::Null);
    assert_eq!(v["after"]["ceiling"], v["after"]["ceiling"]);
    assert!(v["after"]["ceiling"].as_f64() > v["before"]["ceiling"].as_f64());

    let (_, h) = get_json(&format!("{admin}/hosts/127.0.0.1")).await;
    assert_eq!(h["paused"], false);
    assert_eq!(h["pause_reason"], Value::Null);
    assert_eq!(h["ceiling"], h["max_rate"]);
    assert_eq!(h["last_decisions"][0]["outcome"], "operator_reset");

    // The host is served again at once.
    let r = proxy
        .client()
        .get(format!("http://127.0.0.1:{}/after", origin.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    let r = admin_client()
        .post(format!("{admin}/hosts/nowhere.example/reset"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);

    let lines = proxy.stop().await;
    let resets = with_outcome(&lines, "operator_reset");
    assert_eq!(resets.len(), 1);
    let line = resets[0];
    assert_eq!(line["id"], v["audit_id"]);
    assert_eq!(line["host"], "127.0.0.1");
    assert_eq!(line["status"], 200);
    assert_eq!(line["method"], "POST");
    assert_eq!(line["url"], "/hosts/127.0.0.1/reset");
    // The previous state: the pause that was cleared, the lowered rate
    // and ceiling.
    assert!(line["pause_s"].as_f64().unwrap() > 100.0);
    assert_eq!(line["ceiling"], v["before"]["ceiling"]);
    assert_eq!(line["rate"], v["before"]["rate"]);
    let reason = line["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("operator reset; before: rate "),
        "{reason}"
    );
    assert!(reason.contains("breaker closed"), "{reason}");
    assert_eq!(with_outcome(&lines, "fetched").len(), 4);
}

#[tokio::test]
async fn a_non_loopback_admin_address_needs_a_token_and_then_requires_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = test_config(dir.path());
    cfg.admin.listen = "0.0.0.0:0".into();
    let ca = mannerly_proxy::CertificateAuthority::load_or_create(dir.path(), 4).unwrap();
    cfg.audit.path = dir.path().join("a.jsonl").display().to_string();
    let (sink, _writer) = mannerly_proxy::open_audit(&cfg).unwrap();
    let err = match mannerly_proxy::Proxy::bind(cfg, std::sync::Arc::new(ca), sink).await {
        Ok(_) => panic!("a non-loopback admin listener without a token started"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("admin.listen"), "{err}");
    assert!(err.contains("admin.token"), "{err}");

    let mut proxy = TestProxy::start(|c| {
        c.admin.listen = "0.0.0.0:0".into();
        c.admin.token = "s3cret".into();
    })
    .await;
    let port = proxy.admin.unwrap().port();
    let admin = format!("http://127.0.0.1:{port}");
    let c = admin_client();
    for path in ["/metrics", "/hosts", "/hosts/x"] {
        let r = c.get(format!("{admin}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
        assert!(r.headers().contains_key("www-authenticate"));
        let r = c
            .get(format!("{admin}{path}"))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
    let r = c
        .post(format!("{admin}/hosts/x/reset"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .get(format!("{admin}/hosts"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .get(format!("{admin}/metrics"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Probes and the (data-free) page need no token.
    for path in ["/healthz", "/readyz", "/"] {
        let r = c.get(format!("{admin}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    proxy.stop().await;
}

#[test]
fn the_hosts_command_lists_shows_and_resets_through_the_admin_listener() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let origin = rt.block_on(Origin::http(site()));
    let dir = tempfile::tempdir().unwrap();
    let bin = RunningBinary::start(dir.path(), &[]);
    let c = bin.client();
    let base = format!("http://127.0.0.1:{}", origin.port());
    rt.block_on(async {
        assert_eq!(
            c.get(format!("{base}/a")).send().await.unwrap().status(),
            200
        );
        assert_eq!(
            c.get(format!("{base}/limit"))
                .send()
                .await
                .unwrap()
                .status(),
            429
        );
    });
    let admin = bin.admin.clone();
    let env = [("MANNERLY_DATA_DIR", dir.path().to_str().unwrap())];
    let (code, out) = mannerly(&["hosts", "list", "--admin", &admin], &env);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("HOST"), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("127.0.0.1"))
        .unwrap_or("");
    assert!(row.contains("s "), "paused column in: {out}");
    assert!(
        out.contains("1 hosts matching, 1 tracked; 1 paused"),
        "{out}"
    );

    let (code, out) = mannerly(&["hosts", "show", "127.0.0.1", "--admin", &admin], &env);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("origin answered 429 with Retry-After: 120"),
        "{out}"
    );
    assert!(out.contains("429s in the last hour  1"), "{out}");
    assert!(out.contains("throttled"), "{out}");

    let (code, out) = mannerly(&["hosts", "reset", "127.0.0.1", "--admin", &admin], &env);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("127.0.0.1: reset (was paused "), "{out}");

    let (code, out) = mannerly(
        &["hosts", "show", "127.0.0.1", "--admin", &admin, "--json"],
        &env,
    );
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["paused"], false);

    let (code, out) = mannerly(
        &["hosts", "reset", "nowhere.example", "--admin", &admin],
        &env,
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("nowhere.example is not tracked"), "{out}");
    bin.kill9();
}
