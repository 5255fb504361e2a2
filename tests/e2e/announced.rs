//! Limits an origin announces in its response headers, through the proxy:
//! the pace they set, the pause when nothing remains, and the audit record.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::support::*;

/// An origin that counts page requests and announces on every answer what
/// `announce` returns for the request's number (1-based).
fn announcing(announce: fn(usize) -> Vec<(&'static str, String)>) -> (Arc<AtomicUsize>, Handler) {
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let h = handler(move |req| {
        let s = s.clone();
        async move {
            if req.uri().path() == "/robots.txt" {
                return text(404, "");
            }
            let n = s.fetch_add(1, Ordering::SeqCst) + 1;
            let mut resp = text(200, format!("page {n}"));
            for (k, v) in announce(n) {
                resp.headers_mut().insert(k, v.parse().unwrap());
            }
            resp
        }
    });
    (seen, h)
}

#[tokio::test]
async fn an_announced_quota_sets_the_rate_and_is_in_the_audit_line() {
    let (seen, h) = announcing(|n| {
        vec![
            ("ratelimit-policy", "\"default\";q=4;w=2".to_string()),
            ("ratelimit", format!("\"default\";r={};t=2", 4 - n.min(3))),
        ]
    });
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    for i in 0..3 {
        get_ok(&c, &format!("http://127.0.0.1:{}/p{i}", origin.port())).await;
    }
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 3);
    // 4 per 2 s is 2/s; paced at 95% of it from the first answer on, not
    // probed up to from the start rate (1/s + 0.2 per success).
    for l in &fetched {
        assert_eq!(l["rate"].as_f64(), Some(1.9), "{l}");
        assert_eq!(l["announced"]["by"], "ratelimit");
        assert_eq!(l["announced"]["limit"], 4);
        assert_eq!(l["announced"]["window_s"], 2);
        assert_eq!(l["announced"]["reset_s"], 2);
    }
    assert_eq!(fetched[0]["announced"]["remaining"], 3);
}

#[tokio::test]
async fn nothing_remaining_keeps_requests_away_until_the_reset() {
    let (seen, h) = announcing(|_| {
        vec![
            ("x-ratelimit-limit", "100".to_string()),
            ("x-ratelimit-remaining", "0".to_string()),
            ("x-ratelimit-reset", "600".to_string()),
        ]
    });
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    let url = |i: usize| format!("http://127.0.0.1:{}/q{i}", origin.port());
    let first = c.get(url(0)).send().await.unwrap();
    assert_eq!(first.status(), 200);
    // The reset is beyond the hold (30 s): the proxy answers at once, with
    // the remaining pause, and the origin sees nothing.
    let second = c.get(url(1)).send().await.unwrap();
    assert_eq!(second.status(), 429);
    assert_eq!(decision(&second), "paused");
    let ra: u64 = second.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((590..=600).contains(&ra), "{ra}");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    let lines = proxy.stop().await;
    // Not a throttle: no throttled line, the rate not halved.
    assert!(with_outcome(&lines, "throttled").is_empty());
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched[0]["announced"]["by"], "x_ratelimit");
    assert_eq!(fetched[0]["announced"]["remaining"], 0);
    assert_eq!(fetched[0]["announced"]["reset_s"], 600);
}
