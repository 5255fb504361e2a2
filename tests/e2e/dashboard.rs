//! The dashboard in a real browser: headless Chromium loads `/` from a
//! running proxy after real traffic; a host row appears, a paused host shows
//! its time left, and the page's reset button clears it.

use std::time::Duration;

use serde_json::Value;

use super::admin::get_json;
use super::browser::Browser;
use super::support::*;

const HOSTS: [&str; 6] = [
    "news.example",
    "shop.example",
    "blog.example",
    "docs.example",
    "maps.example",
    "api.example",
];

/// One origin serving every name: api.example throttles /limit with a long
/// Retry-After, docs.example asks for a Crawl-delay.
fn sites() -> Handler {
    handler(|req| async move {
        let host = req
            .headers()
            .get("host")
            .and_then(|h| h.to_str().ok())
            .unwrap_or("")
            .split(':')
            .next()
            .unwrap_or("")
            .to_string();
        match (host.as_str(), req.uri().path()) {
            ("docs.example", "/robots.txt") => text(200, "User-agent: *\nCrawl-delay: 2\n"),
            (_, "/robots.txt") => text(200, "User-agent: *\nDisallow: /private\n"),
            ("api.example", "/limit") => {
                let mut r = text(429, "slow down");
                r.headers_mut()
                    .insert("retry-after", "300".parse().unwrap());
                r
            }
            (_, p) => text(200, format!("{host} {p}")),
        }
    })
}

#[test]
fn the_dashboard_shows_hosts_and_a_paused_host_and_its_reset_button_clears_it() {
    let Some(mut browser) = Browser::start() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let origin = rt.block_on(Origin::http(sites()));
    let port = origin.port();
    let proxy = rt.block_on(TestProxy::start(|c| {
        c.admin.listen = "127.0.0.1:0".into();
        for h in HOSTS {
            c.upstream
                .resolve
                .insert(format!("{h}:{port}"), origin.addr);
        }
        c.budget.start_rate = 2.0;
        c.budget.max_rate = 6.0;
        c.budget.burst = 2;
        c.budget.concurrency = 4;
    }));
    let admin = format!("http://{}", proxy.admin.unwrap());
    let client = proxy.client();

    // A first round on every host, and the 429 that pauses api.example.
    rt.block_on(async {
        for h in HOSTS {
            let r = client
                .get(format!("http://{h}:{port}/"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{h}");
        }
        let r = client
            .get(format!("http://api.example:{port}/limit"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 429);
        let r = client
            .get(format!("http://blog.example:{port}/private/x"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
    });
    // A crawl keeps going while the page is open.
    let load = {
        let client = client.clone();
        rt.spawn(async move {
            let mut tasks = Vec::new();
            for (i, h) in HOSTS.iter().take(5).enumerate() {
                let client = client.clone();
                tasks.push(tokio::spawn(async move {
                    for n in 0.. {
                        let _ = client
                            .get(format!("http://{h}:{port}/page/{n}"))
                            .send()
                            .await;
                        // The crawler's own pace, a different one per host.
                        tokio::time::sleep(Duration::from_millis(50 * (i as u64 + 1))).await;
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        })
    };

    browser.open(&format!("{admin}/"));
    let rows = browser.wait_for(
        "document.querySelectorAll('#rows tr').length === 6 && document.querySelectorAll('#rows tr').length",
    );
    assert_eq!(rows, Value::from(6));
    let news = browser
        .wait_for("document.querySelector('tr[data-host=\"news.example\"] td.host')?.textContent");
    assert_eq!(news, "news.example");
    let left = browser.wait_for(
        "document.querySelector('tr[data-host=\"api.example\"].paused .left')?.textContent",
    );
    let left = left.as_str().unwrap_or("").to_string();
    assert!(left.starts_with("paused, "), "{left}");
    assert!(left.ends_with(" left"), "{left}");
    let mins: f64 = left
        .trim_start_matches("paused, ")
        .trim_end_matches(" min left")
        .parse()
        .unwrap_or_else(|_| panic!("{left}"));
    assert!(mins > 4.0 && mins <= 5.0, "{left}");
    assert_eq!(
        browser.eval(
            "document.querySelector('tr[data-host=\"api.example\"] td:nth-child(8)').textContent"
        ),
        "1"
    );
    // Crawl-delay shows for the host that asked for it.
    let delay = browser.wait_for(
        "document.querySelector('tr[data-host=\"docs.example\"] td:nth-child(9)')?.textContent !== '–' && document.querySelector('tr[data-host=\"docs.example\"] td:nth-child(9)').textContent",
    );
    assert_eq!(delay, "2 s");
    // Totals and the latest decisions are on the page.
    assert_eq!(
        browser.eval("document.getElementById('t-paused').textContent"),
        "1"
    );
    let latest = browser.eval("document.querySelectorAll('#latest-rows tr').length");
    assert!(latest.as_u64().unwrap_or(0) > 0, "{latest}");

    if let Some(dir) = std::env::var_os("MANNERLY_SCREENSHOTS") {
        // Until five hosts' sparklines have a line, not a dot: a second
        // 10 s bucket of their rate history, drawn by a refresh.
        let drawn = browser.wait_for(
            "[...document.querySelectorAll('svg.spark polyline')].filter((l) => l.points.length >= 2).length >= 5",
        );
        assert_eq!(drawn, Value::Bool(true), "sparklines never drew a line");
        browser.screenshot(&std::path::Path::new(&dir).join("dashboard.png"));
    }

    // The page's reset button clears the pause.
    let clicked = browser.eval(
        "(() => { const b = document.querySelector('button.reset[data-host=\"api.example\"]'); if (!b) return false; b.click(); return true; })()",
    );
    assert_eq!(clicked, Value::Bool(true));
    let cleared = browser.wait_for(
        "(() => { const r = document.querySelector('tr[data-host=\"api.example\"]'); return !!r && !r.classList.contains('paused') && !r.querySelector('.left'); })()",
    );
    assert_eq!(cleared, Value::Bool(true));
    let (_, h) = rt.block_on(get_json(&format!("{admin}/hosts/api.example")));
    assert_eq!(h["paused"], false);
    assert_eq!(h["last_decisions"][0]["outcome"], "operator_reset");
    let r = rt.block_on(async {
        client
            .get(format!("http://api.example:{port}/again"))
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(r, 200);

    load.abort();
    drop(browser);
    let mut proxy = proxy;
    let lines = rt.block_on(proxy.stop());
    assert_eq!(with_outcome(&lines, "operator_reset").len(), 1);
}
