//! The cluster scenario of the shared-state issue, as a rerunnable benchmark:
//! three mannerly proxies, one origin limited to 2 requests/s (sliding 1 s
//! window over every request, robots.txt included; `Retry-After: 2` on a
//! 429), three impatient clients — one per proxy — each sending 40 GETs at
//! 5/s and doing nothing about 429s.
//!
//! The proxies may hold a request up to 300 s (`budget.max_hold_secs`), so
//! that a page is late rather than refused.
//!
//! Run three times: proxies on their own (`memory`), sharing one
//! redis-server (`redis`, started here on a free loopback port and stopped
//! at the end), and sharing a Redis Cluster of three masters and three
//! replicas (`cluster`, six redis-servers started here the same way).
//! Reports pages delivered, upstream 429s, the origin's aggregate rate, the
//! most requests it served in any 5-second window, and for redis the budget
//! script calls and the PUBLISHes (each delivered to every proxy) per
//! delivered page (from `INFO commandstats`).
//!
//!     cargo run --release --example cluster_scenario
//!
//! `CLUSTER_RUNS=redis,cluster` picks runs by name. `CLUSTER_SITE_NAMES=3`
//! spreads the GETs over that many names of one site (`n0.site.test`, …,
//! resolved to the origin through `upstream.resolve`), so the proxies
//! share the site's budget group rather than one host's (one robots.txt
//! per name).

#[allow(dead_code)]
#[path = "../crates/state/tests/support/redis_cluster.rs"]
pub mod redis_cluster;
#[allow(dead_code)]
#[path = "../crates/state/tests/support/redis_server.rs"]
pub mod redis_server;

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
use redis_cluster::RedisCluster;
use redis_server::RedisServer;
use tokio::net::TcpListener;

const PROXIES: usize = 3;
const PAGES: usize = 40;
const SEND_EVERY: Duration = Duration::from_millis(200);
const LIMIT_PER_SEC: usize = 2;

struct Limiter {
    served: Mutex<VecDeque<Instant>>,
    all_served: Mutex<Vec<Instant>>,
    throttled: AtomicUsize,
    robots: AtomicUsize,
}

impl Limiter {
    /// Every request counts against the window, robots.txt included, as a
    /// real rate limiter counts it.
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
            r.headers_mut().insert("retry-after", "2".parse().unwrap());
            return r;
        }
        served.push_back(now);
        self.all_served.lock().unwrap().push(now);
        if path == "/robots.txt" {
            self.robots.fetch_add(1, Ordering::SeqCst);
            return Response::new(Full::new(Bytes::from_static(b"User-agent: *\nAllow: /\n")));
        }
        Response::new(Full::new(Bytes::from(format!("page {path}\n"))))
    }

    /// Most pages served inside any 5-second window.
    fn max_in_5s(&self) -> usize {
        let all = self.all_served.lock().unwrap();
        let mut best = 0;
        let mut from = 0;
        for (i, t) in all.iter().enumerate() {
            while t.duration_since(all[from]) >= Duration::from_secs(5) {
                from += 1;
            }
            best = best.max(i + 1 - from);
        }
        best
    }
}

async fn origin() -> (u16, Arc<Limiter>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let limiter = Arc::new(Limiter {
        served: Mutex::new(VecDeque::new()),
        all_served: Mutex::new(Vec::new()),
        throttled: AtomicUsize::new(0),
        robots: AtomicUsize::new(0),
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
    let r = c.get(url).send().await.ok()?;
    let status = r.status().as_u16();
    r.bytes().await.ok()?;
    Some((status, Instant::now()))
}

pub struct Report {
    pub delivered: usize,
    pub upstream_429: usize,
    pub seconds: f64,
    pub max_5s: usize,
    pub robots_fetches: usize,
    pub script_calls: Option<u64>,
    /// PUBLISH commands (each goes to every proxy's subscriber).
    pub publishes: Option<u64>,
}

/// Where the proxies share their state.
#[derive(Clone, Copy)]
pub enum Shared<'a> {
    Alone,
    Node(&'a RedisServer),
    Cluster(&'a RedisCluster),
}

impl Shared<'_> {
    fn url(&self) -> Option<String> {
        match self {
            Shared::Alone => None,
            Shared::Node(r) => Some(r.url()),
            Shared::Cluster(c) => Some(c.url()),
        }
    }

    /// EVALSHA + EVAL calls so far, over every node.
    fn script_calls(&self) -> Option<u64> {
        self.calls(&["evalsha", "eval"])
    }

    /// Calls of `stats` so far (scripts' own commands included), over
    /// every node.
    fn calls(&self, stats: &[&str]) -> Option<u64> {
        match self {
            Shared::Alone => None,
            Shared::Node(r) => Some(redis_cluster::commandstats(
                &r.cli(&["INFO", "commandstats"]),
                stats,
            )),
            Shared::Cluster(c) => Some(c.calls(stats)),
        }
    }
}

/// `CLUSTER_SITE_NAMES`: names of one site the GETs are spread over (0:
/// the origin's address).
fn site_names() -> usize {
    std::env::var("CLUSTER_SITE_NAMES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Proxy `i` of a run against the origin on `port`: its address, what
/// stops it, and its data dir.
async fn start_proxy(
    shared: Shared<'_>,
    port: u16,
    i: usize,
    edit: &impl Fn(&mut Config),
) -> (
    std::net::SocketAddr,
    (
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ),
    std::path::PathBuf,
) {
    let dir = std::env::temp_dir().join(format!(
        "mannerly-cluster-{}-{port}-{i}",
        std::process::id()
    ));
    let mut cfg: Config = toml::from_str(include_str!("../config/mannerly.toml")).unwrap();
    cfg.data_dir = dir.clone();
    cfg.proxy.listen = "127.0.0.1:0".parse().unwrap();
    // Three proxies in one process: no admin listeners (they would share a port).
    cfg.admin.listen = String::new();
    cfg.upstream.allow_private = true;
    cfg.upstream.resolve.insert(
        format!("*.site.test:{port}"),
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
    );
    // Impatient clients, patient proxies: 120 pages at 2/s take a
    // minute, and a page held is better than a 503.
    cfg.budget.max_hold_secs = 300.0;
    cfg.audit.path = dir.join("audit.jsonl").display().to_string();
    if let Some(url) = shared.url() {
        cfg.state.backend = mannerly_proxy::StateBackend::Redis;
        cfg.state.redis_url = url;
        cfg.state.key_prefix = format!("bench{port}:");
        cfg.state.instances_hint = PROXIES as u32;
    }
    edit(&mut cfg);
    let cfg = cfg.validate().unwrap();
    let ca = CertificateAuthority::load_or_create(&dir, 16).unwrap();
    let (sink, writer) = mannerly_proxy::open_audit(&cfg).unwrap();
    let proxy = Proxy::bind(cfg, Arc::new(ca), sink).await.unwrap();
    let addr = proxy.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        proxy
            .run(async {
                let _ = stopped.await;
            })
            .await;
        let _ = tokio::task::spawn_blocking(move || writer.close()).await;
    });
    (addr, (stop, served), dir)
}

/// One run: the proxies sharing state as `shared` says, the GETs spread
/// over `names` names of one site (0: the origin's address), each proxy's
/// configuration last changed by `edit`.
pub async fn run(shared: Shared<'_>, names: usize, edit: impl Fn(&mut Config)) -> Report {
    let (port, limiter) = origin().await;
    let mut stops = Vec::new();
    let mut addrs = Vec::new();
    let mut dirs = Vec::new();
    for i in 0..PROXIES {
        let (addr, stop, dir) = start_proxy(shared, port, i, &edit).await;
        addrs.push(addr);
        stops.push(stop);
        dirs.push(dir);
    }
    let calls_before = shared.script_calls();
    let publishes_before = shared.calls(&["publish"]);

    let start = Instant::now();
    let mut tasks = Vec::new();
    let clients: Vec<reqwest::Client> = addrs
        .iter()
        .map(|addr| {
            reqwest::Client::builder()
                .proxy(reqwest::Proxy::all(format!("http://{addr}")).unwrap())
                .timeout(Duration::from_secs(300))
                .build()
                .unwrap()
        })
        .collect();
    // Fire and forget at 5/s per client: each GET goes out on schedule,
    // whatever happened to the ones before it.
    for i in 0..PAGES {
        for (k, c) in clients.iter().enumerate() {
            let c = c.clone();
            let host = match names {
                0 => "127.0.0.1".to_string(),
                n => format!("n{}.site.test", (i * PROXIES + k) % n),
            };
            let url = format!("http://{host}:{port}/c{k}/page/{i}");
            tasks.push(tokio::spawn(async move { get(&c, url).await }));
        }
        tokio::time::sleep(SEND_EVERY).await;
    }
    let mut delivered = 0;
    let mut last = start;
    for t in tasks {
        if let Ok(Some((status, at))) = t.await {
            if status == 200 {
                delivered += 1;
                last = last.max(at);
            }
        }
    }
    let since = |after: Option<u64>, before: Option<u64>| match (after, before) {
        (Some(after), Some(before)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    let script_calls = since(shared.script_calls(), calls_before);
    let publishes = since(shared.calls(&["publish"]), publishes_before);
    for (stop, served) in stops {
        let _ = stop.send(());
        let _ = served.await;
    }
    for dir in dirs {
        if std::env::var_os("CLUSTER_KEEP").is_some() {
            eprintln!("audit log kept in {}", dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Report {
        delivered,
        upstream_429: limiter.throttled.load(Ordering::SeqCst),
        seconds: last.duration_since(start).as_secs_f64(),
        max_5s: limiter.max_in_5s(),
        robots_fetches: limiter.robots.load(Ordering::SeqCst),
        script_calls,
        publishes,
    }
}

#[tokio::main]
async fn main() {
    let total = PROXIES * PAGES;
    println!(
        "cluster scenario: {PROXIES} proxies, {PROXIES} clients × {PAGES} GETs at 5/s, origin limit {LIMIT_PER_SEC}/s with Retry-After: 2"
    );
    println!(
        "{:<8} {:>10} {:>13} {:>9} {:>12} {:>14} {:>18} {:>16}",
        "state",
        "delivered",
        "upstream 429s",
        "pages/s",
        "max in 5 s",
        "robots fetches",
        "script calls/page",
        "publishes/page"
    );
    let redis = RedisServer::start("cluster_scenario");
    let cluster = RedisCluster::start("cluster_scenario");
    let mut runs: Vec<(&str, Shared<'_>)> = vec![("memory", Shared::Alone)];
    match &redis {
        Some(r) => runs.push(("redis", Shared::Node(r))),
        None => println!("(redis run skipped: no redis-server)"),
    }
    if let Some(c) = &cluster {
        runs.push(("cluster", Shared::Cluster(c)));
    }
    if let Ok(only) = std::env::var("CLUSTER_RUNS") {
        runs.retain(|(name, _)| only.split(',').any(|o| o == *name));
    }
    if std::env::var_os("CLUSTER_ONLY_REDIS").is_some() {
        runs.retain(|(name, _)| *name != "memory");
    }
    for (name, r) in runs {
        let rep = run(r, site_names(), |_| {}).await;
        let rate = if rep.seconds > 0.0 {
            rep.delivered as f64 / rep.seconds
        } else {
            0.0
        };
        let per_page = |n: Option<u64>| {
            n.map(|c| format!("{:.2}", c as f64 / rep.delivered.max(1) as f64))
                .unwrap_or_else(|| "-".into())
        };
        println!(
            "{:<8} {:>6}/{total} {:>13} {:>9.2} {:>12} {:>14} {:>18} {:>16}",
            name,
            rep.delivered,
            rep.upstream_429,
            rate,
            rep.max_5s,
            rep.robots_fetches,
            per_page(rep.script_calls),
            per_page(rep.publishes)
        );
    }
}
