//! Fleet benchmark (issue 49): N real `mannerly` processes sharing one
//! Redis Cluster of three masters (and three replicas, all started here on
//! free loopback ports), one origin, N = 2, 4, 8, in two shapes:
//!
//! - `own`: every proxy crawls hosts of its own (3 each), as a broad crawl
//!   sharded by host does;
//! - `contended`: every proxy crawls the same 3 hosts.
//!
//! Each host is paced at `FLEET_RATE` pages/s (default 10), so the page rate
//! is modest (8 debug processes on 2 cores) and every figure is per page:
//! Redis calls (scripts and subscription commands, `INFO commandstats` over
//! the masters), lost compare-and-sets (the proxies'
//! `mannerly_state_redis_conflicts_total`), PUBLISH/SPUBLISH per page, messages delivered per page
//! (the proxies' `mannerly_state_redis_messages_heard_total`), Redis CPU
//! per page (`INFO cpu`, user + sys over the masters), and `PUBSUB NUMPAT`
//! read mid-run.
//!
//!     cargo build --release --bin mannerly --example fleet
//!     target/release/examples/fleet            # N = 2, 4, 8
//!     FLEET_N=2,8 FLEET_PAGES=60 target/release/examples/fleet
//!
//! Loopback only; the proxies run with `upstream.allow_private = true`.

use std::convert::Infallible;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use mannerly_test_support::redis_cluster::{commandstats, RedisCluster, PROXY_CALLS};
use tokio::net::TcpListener;

#[path = "support/mannerly_bin.rs"]
mod mannerly_bin;
use mannerly_bin::mannerly_bin;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Every host is a site of its own (`<name>.test`), so its own budget group.
const DOMAIN: &str = "test";
/// Hosts each proxy crawls (own), or all share (contended).
const HOSTS: usize = 3;
/// A page for every path, a 404 robots.txt.
async fn origin() -> Result<SocketAddr, Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<hyper::body::Incoming>| async move {
                    let (status, body) = if req.uri().path() == "/robots.txt" {
                        (404, "none\n")
                    } else {
                        (200, "a page\n")
                    };
                    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
                    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
                    Ok::<_, Infallible>(r)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// One proxy process, killed on drop.
struct Process {
    child: std::process::Child,
    addr: String,
    admin: String,
    dir: PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start(
    id: &str,
    origin: SocketAddr,
    redis_url: &str,
    prefix: &str,
    n: usize,
) -> Result<Process, Error> {
    let dir = std::env::temp_dir().join(format!("mannerly-fleet-{}-{id}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let rate = rate();
    let config = format!(
        "data_dir = {dir:?}\n\
         [proxy]\nlisten = \"127.0.0.1:0\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [upstream]\nallow_private = true\n\
         [upstream.resolve]\n\"*.{DOMAIN}:{port}\" = \"{origin}\"\n\
         [budget]\nstart_rate = {rate}\nmax_rate = {rate}\nburst = 1\nmax_hold_secs = 300.0\n\
         [state]\nbackend = \"redis\"\nredis_url = {redis_url:?}\nkey_prefix = {prefix:?}\n\
         instances_hint = {n}\ncommand_timeout_ms = 1000.0\n\
         [audit]\npath = {audit:?}\n",
        dir = dir.display().to_string(),
        port = origin.port(),
        audit = dir.join("audit.jsonl").display().to_string(),
    );
    let cfg_path = dir.join("mannerly.toml");
    std::fs::write(&cfg_path, config)?;
    let mut child = std::process::Command::new(mannerly_bin()?)
        .arg("run")
        .arg("--config")
        .arg(&cfg_path)
        // This example's own knob: the proxy reads every MANNERLY_* as a
        // config key and refuses an unknown one.
        .env_remove("MANNERLY_BIN")
        .env("MANNERLY_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        return Err("no stdout from the proxy".into());
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(a) = line.strip_prefix("admin: http://") {
                let _ = tx.send((true, a.split(' ').next().unwrap_or("").to_string()));
            }
            if let Some(a) = line.strip_prefix("mannerly listening on http://") {
                let _ = tx.send((false, a.to_string()));
            }
        }
    });
    let mut p = Process {
        child,
        addr: String::new(),
        admin: String::new(),
        dir,
    };
    while p.addr.is_empty() || p.admin.is_empty() {
        let (admin, a) = rx
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| "the proxy did not print its addresses within 60 s")?;
        if admin {
            p.admin = a;
        } else {
            p.addr = a;
        }
    }
    Ok(p)
}

fn rate() -> f64 {
    env_or("FLEET_RATE", 10.0)
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `name`'s value summed over `text` (Prometheus text).
fn series(text: &str, name: &str) -> f64 {
    text.lines()
        // '\x7b' is the opening brace of a label set.
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '\x7b']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The proxies' messages heard and lost compare-and-sets, summed.
async fn heard(procs: &[Process]) -> (f64, f64) {
    let mut sum = (0.0, 0.0);
    for p in procs {
        let url = format!("http://{}/metrics", p.admin);
        if let Ok(r) = reqwest::get(&url).await {
            if let Ok(t) = r.text().await {
                sum.0 += series(&t, "mannerly_state_redis_messages_heard_total");
                sum.1 += series(&t, "mannerly_state_redis_conflicts_total");
            }
        }
    }
    sum
}

/// `args`' answers from the three masters (as created: no failover here).
fn masters(cluster: &RedisCluster, args: &[&str]) -> Vec<String> {
    cluster.nodes[..3]
        .iter()
        .map(|n| cluster.cli(n.port, args))
        .collect()
}

/// Calls of `commands` over the masters (a script's own commands count
/// too: replicas are left out, as they count what is replicated).
fn calls(cluster: &RedisCluster, commands: &[&str]) -> u64 {
    masters(cluster, &["INFO", "commandstats"])
        .iter()
        .map(|info| commandstats(info, commands))
        .sum()
}

/// Redis CPU seconds (user + sys) over the masters.
fn cpu(cluster: &RedisCluster) -> f64 {
    let mut sum = 0.0;
    for info in masters(cluster, &["INFO", "cpu"]) {
        for l in info.lines() {
            if let Some(v) = l
                .strip_prefix("used_cpu_sys:")
                .or_else(|| l.strip_prefix("used_cpu_user:"))
            {
                sum += v.trim().parse::<f64>().unwrap_or(0.0);
            }
        }
    }
    sum
}

struct Row {
    pages: usize,
    failed: usize,
    secs: f64,
    calls: u64,
    publishes: u64,
    messages: f64,
    lost: f64,
    cpu: f64,
    numpat: u64,
}

/// One client through each proxy.
fn clients(procs: &[Process]) -> Vec<reqwest::Client> {
    procs
        .iter()
        .map(|p| {
            reqwest::Client::builder()
                .proxy(reqwest::Proxy::all(format!("http://{}", p.addr)).expect("proxy url"))
                .timeout(Duration::from_secs(300))
                .build()
                .expect("client")
        })
        .collect()
}

/// Every GET at once; pages delivered, failed, and `PUBSUB NUMPAT` over the
/// masters read while the proxies crawl.
async fn crawl(
    cluster: &RedisCluster,
    gets: Vec<(reqwest::Client, String)>,
) -> (usize, usize, u64) {
    let tasks: Vec<_> = gets
        .into_iter()
        .map(|(c, url)| {
            tokio::spawn(
                async move { matches!(c.get(url).send().await, Ok(r) if r.status() == 200) },
            )
        })
        .collect();
    // The proxies are crawling: none listens to every host.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let numpat: u64 = masters(cluster, &["PUBSUB", "NUMPAT"])
        .iter()
        .filter_map(|a| a.trim().parse::<u64>().ok())
        .sum();
    let (mut pages, mut failed) = (0, 0);
    for t in tasks {
        if t.await.unwrap_or(false) {
            pages += 1;
        } else {
            failed += 1;
        }
    }
    (pages, failed, numpat)
}

async fn run(cluster: &RedisCluster, origin: SocketAddr, n: usize, contended: bool) -> Row {
    let pages_each: usize = env_or("FLEET_PAGES", 60);
    let tag = format!("{}{}", if contended { "c" } else { "o" }, n);
    let prefix = format!("fleet-{tag}:");
    let procs: Vec<Process> = (0..n)
        .map(|i| start(&format!("{tag}-{i}"), origin, &cluster.url(), &prefix, n))
        .collect::<Result<_, _>>()
        .expect("the proxies start");
    let host = |proxy: usize, k: usize| {
        let owner = if contended {
            "all".to_string()
        } else {
            format!("p{proxy}")
        };
        format!("{owner}-h{}-{tag}.{DOMAIN}", k % HOSTS)
    };
    let clients = clients(&procs);
    let port = origin.port();
    // robots.txt of every host stored, and the scripts loaded, before counting.
    for (i, c) in clients.iter().enumerate() {
        for k in 0..HOSTS {
            let _ = c
                .get(format!("http://{}:{port}/warm", host(i, k)))
                .send()
                .await;
        }
    }
    let (calls0, pubs0, cpu0, heard0) = (
        calls(cluster, PROXY_CALLS),
        calls(cluster, &["publish", "spublish"]),
        cpu(cluster),
        heard(&procs).await,
    );
    let start = Instant::now();
    let urls = clients.iter().enumerate().flat_map(|(i, c)| {
        (0..pages_each).map(move |k| (c.clone(), format!("http://{}:{port}/p/{i}/{k}", host(i, k))))
    });
    let (pages, failed, numpat) = crawl(cluster, urls.collect()).await;
    let (secs, heard1) = (start.elapsed().as_secs_f64(), heard(&procs).await);
    Row {
        pages,
        failed,
        secs,
        calls: calls(cluster, PROXY_CALLS) - calls0,
        publishes: calls(cluster, &["publish", "spublish"]) - pubs0,
        messages: heard1.0 - heard0.0,
        lost: heard1.1 - heard0.1,
        cpu: cpu(cluster) - cpu0,
        numpat,
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let Some(cluster) = RedisCluster::start("fleet") else {
        return Err("no redis-server / redis-cli: the fleet needs a Redis Cluster".into());
    };
    let origin = origin().await?;
    let sizes: Vec<usize> = std::env::var("FLEET_N")
        .unwrap_or_else(|_| "2,4,8".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    println!(
        "fleet: {HOSTS} hosts per proxy (own) or for all (contended), each at {} pages/s; Redis Cluster of 3 masters",
        rate()
    );
    println!(
        "| shape | N | pages | failed | pages/s | Redis calls/page | lost compare-and-sets/page | publishes/page | messages delivered/page | Redis CPU µs/page | NUMPAT mid-run |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for contended in [false, true] {
        for &n in &sizes {
            let r = run(&cluster, origin, n, contended).await;
            let per = |x: f64| x / r.pages.max(1) as f64;
            println!(
                "| {} | {n} | {} | {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {} |",
                if contended { "contended" } else { "own" },
                r.pages,
                r.failed,
                r.pages as f64 / r.secs,
                per(r.calls as f64),
                per(r.lost),
                per(r.publishes as f64),
                per(r.messages),
                per(r.cpu) * 1e6,
                r.numpat
            );
        }
    }
    Ok(())
}
