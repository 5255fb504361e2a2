//! The seed scenario of the budget issue, as a rerunnable benchmark:
//!
//! - an origin that answers 429 (`Retry-After: 2`, or none) to any request
//!   above 2 per second (sliding 1 s window over the requests it served,
//!   robots.txt counted like every other path), ETag on every page;
//! - an impatient client that sends 40 GETs at 5/s and does nothing about
//!   429s (a 429 is a page not delivered);
//! - the proxy in between, on its embedded defaults (only loopback origins
//!   allowed, since the origin runs here).
//!
//! Three runs: with Retry-After, without it, and with the 40 GETs spread over
//! 8 client connections; then the same origin announcing its limit
//! (`RateLimit-Policy: "default";q=2;w=1` and `RateLimit: "default";r=R;t=T`
//! on every answer, `R` = what its window has left, `T` = whole seconds
//! until a unit frees, rounded down, then rounded up). Everything listens on
//! 127.0.0.1 and stops by itself. `SEED_PAGES=200` runs 200 GETs instead
//! of 40; `SEED_ONLY=a|b` runs only the runs whose name contains `a` or
//! `b`; `SEED_BUDGET='slow_start_factor = 1.3'` sets the proxy's
//! `[budget]` table (to try a ramp).
//!
//!     cargo run --release --example seed_scenario

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use mannerly_proxy::{CertificateAuthority, Config, Proxy};
use tokio::net::TcpListener;

const PAGES: usize = 40;
const SEND_EVERY: Duration = Duration::from_millis(200);
const LIMIT_PER_SEC: usize = 2;

struct Limiter {
    served: Mutex<VecDeque<Instant>>,
    throttled: AtomicUsize,
    ok: AtomicUsize,
    retry_after: Option<&'static str>,
    announce: Option<Round>,
}

/// How the origin turns "a unit frees in 0.47 s" into the whole seconds of
/// the `t` parameter.
#[derive(Clone, Copy)]
enum Round {
    Down,
    Up,
}

impl Limiter {
    fn announce(&self, r: &mut Response<Full<Bytes>>, served: &VecDeque<Instant>, now: Instant) {
        let Some(round) = self.announce else {
            return;
        };
        let left = LIMIT_PER_SEC.saturating_sub(served.len());
        let frees_in = match served.front() {
            Some(t) if left == 0 => {
                (Duration::from_secs(1).saturating_sub(now.duration_since(*t))).as_secs_f64()
            }
            _ => 0.0,
        };
        let t = match round {
            Round::Down => frees_in.floor(),
            Round::Up => frees_in.ceil(),
        } as u64;
        let h = r.headers_mut();
        h.insert(
            "ratelimit-policy",
            format!("\"default\";q={LIMIT_PER_SEC};w=1")
                .parse()
                .unwrap(),
        );
        h.insert(
            "ratelimit",
            format!("\"default\";r={left};t={t}").parse().unwrap(),
        );
    }
}

impl Limiter {
    /// Every request counts against the window, robots.txt included, as a
    /// real rate limiter counts it: it limits a client, not a path.
    fn answer(&self, path: &str) -> Response<Full<Bytes>> {
        let now = Instant::now();
        let mut served = self.served.lock().unwrap();
        while served
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
        {
            served.pop_front();
        }
        if served.len() >= LIMIT_PER_SEC {
            self.throttled.fetch_add(1, Ordering::SeqCst);
            let mut r = Response::new(Full::new(Bytes::from_static(b"slow down\n")));
            *r.status_mut() = hyper::StatusCode::TOO_MANY_REQUESTS;
            if let Some(ra) = self.retry_after {
                r.headers_mut().insert("retry-after", ra.parse().unwrap());
            }
            self.announce(&mut r, &served, now);
            return r;
        }
        served.push_back(now);
        let mut r = if path == "/robots.txt" {
            Response::new(Full::new(Bytes::from_static(b"User-agent: *\nAllow: /\n")))
        } else {
            self.ok.fetch_add(1, Ordering::SeqCst);
            Response::new(Full::new(Bytes::from(format!("page {path}\n"))))
        };
        r.headers_mut()
            .insert("etag", format!("\"{}\"", path.len()).parse().unwrap());
        self.announce(&mut r, &served, now);
        r
    }
}

async fn origin(retry_after: Option<&'static str>, announce: Option<Round>) -> (u16, Arc<Limiter>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let limiter = Arc::new(Limiter {
        served: Mutex::new(VecDeque::new()),
        throttled: AtomicUsize::new(0),
        ok: AtomicUsize::new(0),
        retry_after,
        announce,
    });
    let l = limiter.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let l = l.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let l = l.clone();
                    async move { Ok::<_, Infallible>(l.answer(req.uri().path())) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (port, limiter)
}

async fn get(c: &reqwest::Client, url: String) -> Option<(u16, Instant)> {
    let r = match c.get(url).send().await {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "request failed: {e:?} at {:?}",
                std::time::SystemTime::now()
            );
            return None;
        }
    };
    let status = r.status().as_u16();
    r.bytes().await.ok()?;
    Some((status, Instant::now()))
}

struct Report {
    name: &'static str,
    upstream_429: usize,
    delivered: usize,
    seconds: f64,
    client_429: usize,
}

/// The embedded defaults on `dir`, loopback origins allowed, with
/// `SEED_RECOVERY_STEP` and `SEED_BUDGET` laid over them.
fn seed_config(dir: &std::path::Path) -> Config {
    let mut cfg: Config = toml::from_str(include_str!("../config/mannerly.toml")).unwrap();
    cfg.data_dir = dir.to_path_buf();
    if let Some(step) = std::env::var("SEED_RECOVERY_STEP")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        cfg.budget.recovery_step = step;
    }
    if let Ok(budget) = std::env::var("SEED_BUDGET") {
        cfg.budget = toml::from_str(&budget).expect("SEED_BUDGET is a [budget] table");
    }
    cfg.proxy.listen = "127.0.0.1:0".parse().unwrap();
    cfg.admin.listen = String::new();
    cfg.upstream.allow_private = true;
    cfg.audit.path = dir.join("audit.jsonl").display().to_string();
    cfg
}

/// A client's answers: status and arrival, `None` for a failed request.
type Answers = tokio::task::JoinHandle<Vec<Option<(u16, Instant)>>>;

/// Pages delivered, 429s the clients got, and when the last page came.
async fn tally(tasks: Vec<Answers>, start: Instant) -> (usize, usize, Instant) {
    let mut delivered = 0;
    let mut client_429 = 0;
    let mut last = start;
    for t in tasks {
        for (status, at) in t.await.unwrap_or_default().into_iter().flatten() {
            if status == 200 {
                delivered += 1;
                last = last.max(at);
            } else if status == 429 {
                client_429 += 1;
            }
        }
    }
    (delivered, client_429, last)
}

async fn run(
    name: &'static str,
    retry_after: Option<&'static str>,
    announce: Option<Round>,
    connections: usize,
    pages: usize,
) -> Report {
    let (port, limiter) = origin(retry_after, announce).await;
    let dir = std::env::temp_dir().join(format!("mannerly-seed-{}-{port}", std::process::id()));
    let cfg = seed_config(&dir);
    let ca = CertificateAuthority::load_or_create(&dir, 16).unwrap();
    let (sink, writer) = mannerly_proxy::open_audit(&cfg).unwrap();
    let proxy = Proxy::bind(cfg, Arc::new(ca), sink).await.unwrap();
    let addr = proxy.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(proxy.run(async {
        let _ = stopped.await;
    }));

    let clients: Vec<reqwest::Client> = (0..connections)
        .map(|_| {
            reqwest::Client::builder()
                .proxy(reqwest::Proxy::all(format!("http://{addr}")).unwrap())
                .pool_max_idle_per_host(if connections == 1 { usize::MAX } else { 1 })
                .timeout(Duration::from_secs(120))
                .build()
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    let mut tasks = Vec::new();
    if connections == 1 {
        // Fire and forget at 5/s: each GET goes out on schedule, whatever
        // happened to the ones before it.
        for i in 0..pages {
            let c = clients[0].clone();
            let url = format!("http://127.0.0.1:{port}/page/{i}");
            tasks.push(tokio::spawn(async move { vec![get(&c, url).await] }));
            tokio::time::sleep(SEND_EVERY).await;
        }
    } else {
        // Each connection sends its share back to back, as fast as answers come.
        for (w, c) in clients.iter().enumerate() {
            let c = c.clone();
            let urls: Vec<String> = (w..pages)
                .step_by(connections)
                .map(|i| format!("http://127.0.0.1:{port}/page/{i}"))
                .collect();
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                for url in urls {
                    out.push(get(&c, url).await);
                }
                out
            }));
        }
    }
    let (delivered, client_429, last) = tally(tasks, start).await;
    let _ = stop.send(());
    let _ = served.await;
    let _ = tokio::task::spawn_blocking(move || writer.close()).await;
    if std::env::var_os("SEED_KEEP").is_some() {
        eprintln!("{name}: audit log kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = limiter.ok.load(Ordering::SeqCst);
    Report {
        name,
        upstream_429: limiter.throttled.load(Ordering::SeqCst),
        delivered,
        seconds: last.duration_since(start).as_secs_f64(),
        client_429,
    }
}

#[tokio::main]
async fn main() {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let pages = std::env::var("SEED_PAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(PAGES);
    println!("seed scenario: {pages} GETs at 5/s, origin limit 2/s (sliding 1 s window), proxy on default budgets");
    println!(
        "{:<34} {:>13} {:>10} {:>10} {:>11}",
        "run", "upstream 429s", "pages/s", "delivered", "client 429s"
    );
    let only = std::env::var("SEED_ONLY").ok();
    for (name, ra, announce, conns) in [
        ("Retry-After: 2, 1 client at 5/s", Some("2"), None, 1),
        ("no Retry-After, 1 client at 5/s", None, None, 1),
        ("Retry-After: 2, 8 connections", Some("2"), None, 8),
        (
            "announced (t down), 1 client",
            Some("2"),
            Some(Round::Down),
            1,
        ),
        ("announced (t up), 1 client", Some("2"), Some(Round::Up), 1),
        (
            "announced (t down), 8 connections",
            Some("2"),
            Some(Round::Down),
            8,
        ),
    ] {
        if only
            .as_deref()
            .is_some_and(|o| !o.split('|').any(|o| name.contains(o)))
        {
            continue;
        }
        let r = run(name, ra, announce, conns, pages).await;
        let rate = if r.seconds > 0.0 {
            r.delivered as f64 / r.seconds
        } else {
            0.0
        };
        println!(
            "{:<34} {:>13} {:>10.2} {:>7}/{pages} {:>11}",
            r.name, r.upstream_429, rate, r.delivered, r.client_429
        );
    }
}
