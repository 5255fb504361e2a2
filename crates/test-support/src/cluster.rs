//! The cluster scenario (`examples/cluster_scenario.rs`, and the e2e
//! groups test): three proxies sharing state or not, one limited origin,
//! impatient clients, and what the origin saw.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::redis_cluster::{self, RedisCluster};
use crate::redis_server::RedisServer;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use mannerly_proxy::{CertificateAuthority, Config, Proxy};
use tokio::net::TcpListener;

pub const PROXIES: usize = 3;
pub const PAGES: usize = 40;
const SEND_EVERY: Duration = Duration::from_millis(200);
pub const LIMIT_PER_SEC: usize = 2;

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
    /// PUBLISH and SPUBLISH commands (each goes to the proxies listening on the host).
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
pub fn site_names() -> usize {
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
    let mut cfg: Config = toml::from_str(include_str!("../../../config/mannerly.toml")).unwrap();
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
    let publishes_before = shared.calls(&["publish", "spublish"]);

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
    let publishes = since(shared.calls(&["publish", "spublish"]), publishes_before);
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
