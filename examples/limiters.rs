//! Real rate limiters as sites run them, against an impatient crawler
//! through mannerly and against a naive retry loop going direct. Each is
//! started here on a free 127.0.0.1 port, counts every request (robots.txt
//! included) and logs each answer; its log is what is counted: pages
//! served, 429s sent.
//!
//! - Debian's nginx `limit_req rate=Nr/s` without a burst, and `2r/s
//!   burst=5 nodelay` (a refused request gets 429 with `Retry-After: 1`
//!   through `error_page 429` and `add_header ... always`);
//! - Flask-Limiter (`tests/limiters/flask_limited.py`): `N per second` as
//!   an application limit in its `fixed-window`, `moving-window` and
//!   `sliding-window-counter` strategies, memory storage, headers off as
//!   by default (429 without Retry-After);
//! - express-rate-limit (`tests/limiters/express_limited.js`, `npm ci`
//!   there): `{ windowMs: 1000, limit: N }`, otherwise its defaults (a
//!   fixed window, `X-RateLimit-*` headers, 429 with Retry-After);
//! - Debian's Apache with mod_qos (`QS_ClientEventLimitCount`, 429 without
//!   Retry-After): 2N requests per 2 s window (see [`Limit::Qos`]).
//!
//! - **mannerly**: the proxy on its embedded defaults (`allow_private`
//!   only, since the limiter is on loopback); the client fires `PAGES` GETs at
//!   5/s, whatever happened to earlier ones, and does nothing about 429s.
//! - **naive loop**: one request at a time straight to the limiter; a 429 is
//!   waited out for its Retry-After, then sent again.
//!
//! pages/s = pages delivered / time from the first send to the last page.
//! "of limit" is pages/s over the limiter's requests a second.
//! `LIMITERS_PAGES=200` sends 200; `LIMITERS_ONLY='Flask'` runs the
//! limiters whose name contains it (`'no burst'`, `'burst=5'`, `'3/s'`…); `LIMITERS_BUDGET='start_rate = 1.5'` sets
//! the proxy's `[budget]` table (to try a ramp); `LIMITERS_NO_NAIVE=1`
//! skips the naive loop.
//!
//!     cargo run --release --example limiters

use std::sync::Arc;
use std::time::Duration;

use mannerly_test_support::limiters::{impatient, naive_loop, Crawl, Limit, Limiter, PAGES};

/// Through a proxy on the embedded defaults, `allow_private` only.
async fn through_mannerly(limiter: &Limiter, pages: usize) -> Crawl {
    use mannerly_proxy::{CertificateAuthority, Config, Proxy};
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut cfg: Config =
        toml::from_str(include_str!("../config/mannerly.toml")).expect("the embedded defaults");
    cfg.data_dir = dir.path().to_path_buf();
    cfg.proxy.listen = "127.0.0.1:0".parse().expect("an address");
    cfg.admin.listen = String::new();
    cfg.upstream.allow_private = true;
    cfg.audit.path = dir.path().join("audit.jsonl").display().to_string();
    if let Ok(budget) = std::env::var("LIMITERS_BUDGET") {
        cfg.budget = toml::from_str(&budget).expect("LIMITERS_BUDGET is a [budget] table");
    }
    let ca = CertificateAuthority::load_or_create(dir.path(), 16).expect("a CA");
    let (sink, writer) = mannerly_proxy::open_audit(&cfg).expect("an audit log");
    let proxy = Proxy::bind(cfg, Arc::new(ca), sink)
        .await
        .expect("the proxy binds");
    let addr = proxy.local_addr().expect("its address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(proxy.run(async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{addr}")).expect("a proxy URL"))
        .timeout(Duration::from_secs(120))
        .build()
        .expect("a client");
    let base = format!("http://127.0.0.1:{}", limiter.port);
    let crawl = impatient(&client, &base, pages).await;
    let _ = stop.send(());
    let _ = served.await;
    let _ = tokio::task::spawn_blocking(move || writer.close()).await;
    if let Ok(keep) = std::env::var("LIMITERS_KEEP") {
        let _ = std::fs::copy(dir.path().join("audit.jsonl"), keep);
    }
    crawl
}

#[tokio::main]
async fn main() {
    let pages = std::env::var("LIMITERS_PAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(PAGES);
    let only = std::env::var("LIMITERS_ONLY").ok();
    println!("{pages} pages; mannerly: GETs at 5/s through the proxy on its defaults; naive: one at a time, direct, Retry-After honoured");
    println!(
        "{:<44} {:<11} {:>13} {:>8} {:>9} {:>10} {:>11}",
        "origin", "route", "upstream 429s", "pages/s", "of limit", "delivered", "robots.txt"
    );
    for limit in Limit::all() {
        if only.as_deref().is_some_and(|o| !limit.name().contains(o)) {
            continue;
        }
        for route in ["mannerly", "naive loop"] {
            if route == "naive loop" && std::env::var_os("LIMITERS_NO_NAIVE").is_some() {
                continue;
            }
            let Some(limiter) = Limiter::start(limit) else {
                eprintln!("{}: not installed ({})", limit.name(), limit.install());
                break;
            };
            let crawl = match route {
                "mannerly" => through_mannerly(&limiter, pages).await,
                _ => naive_loop(&format!("http://127.0.0.1:{}", limiter.port), pages).await,
            };
            let served = limiter.served();
            println!(
                "{:<44} {:<11} {:>13} {:>8.2} {:>8.0}% {:>7}/{pages} {:>11}",
                limit.name(),
                route,
                served.throttled,
                crawl.pages_per_s(),
                100.0 * crawl.pages_per_s() / f64::from(limit.rate()),
                crawl.delivered,
                served.robots
            );
        }
    }
}
