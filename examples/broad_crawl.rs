//! Broad-crawl benchmark: N distinct host names, one page each, through
//! the `mannerly` binary (default budget and pool settings) and straight to
//! the origin, over plain HTTP and intercepted HTTPS (one CONNECT per
//! host). Prints pages/s, p50/p99 page latency, and the proxy's peak open
//! descriptors and RSS, sampled from /proc every 20 ms.
//!
//!     cargo build --release --bin mannerly --example broad_crawl
//!     target/release/examples/broad_crawl                 # the table: 10,000 hosts, 256 and 16 clients
//!     target/release/examples/broad_crawl table 10000 256 # one client count only
//!     target/release/examples/broad_crawl memory 100000   # RSS growth per host once idle connections closed
//!     target/release/examples/broad_crawl rss 1000000      # RSS after every 100,000 distinct hosts (HTTP)
//!
//! The origin runs in this process on 127.0.0.1 (robots.txt 404, every
//! other path a 1 KiB page; HTTPS with a wildcard certificate for
//! `*.crawl.test` from a throwaway CA, HTTP/1.1). Every name
//! `h<i>.crawl.test` is mapped to it by `upstream.resolve` with a wildcard.
//! Every name is its own budget group (`budget.group_by = "host"`: they
//! all share the registrable domain `crawl.test`, which would pace the
//! whole crawl as one site). Each page is its own client connection, as a crawler fetching one page
//! per host does; the proxy's descriptors are then its client connections
//! plus its upstream connections plus ~20 of its own.
//!
//! Loopback only; the proxy runs with `upstream.allow_private = true`.

use std::convert::Infallible;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

#[path = "support/mannerly_bin.rs"]
mod mannerly_bin;
use mannerly_bin::mannerly_bin;

type Error = Box<dyn std::error::Error + Send + Sync>;

const PAGE: usize = 1024;
const DOMAIN: &str = "crawl.test";

#[derive(Clone, Copy, PartialEq)]
enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

struct Origin {
    http: SocketAddr,
    https: SocketAddr,
    ca_pem: String,
}

async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let mut r = if req.uri().path() == "/robots.txt" {
        let mut r = Response::new(Full::new(Bytes::from_static(b"none\n")));
        *r.status_mut() = StatusCode::NOT_FOUND;
        r
    } else {
        Response::new(Full::new(Bytes::from(vec![b'x'; PAGE])))
    };
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    Ok(r)
}

async fn serve(listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let tls = tls.clone();
        tokio::spawn(async move {
            let http = hyper::server::conn::http1::Builder::new();
            match tls {
                Some(acceptor) => {
                    if let Ok(s) = acceptor.accept(stream).await {
                        let _ = http
                            .serve_connection(TokioIo::new(s), service_fn(answer))
                            .await;
                    }
                }
                None => {
                    let _ = http
                        .serve_connection(TokioIo::new(stream), service_fn(answer))
                        .await;
                }
            }
        });
    }
}

async fn start_origin() -> Result<Origin, Error> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca = rcgen::CertificateParams::default();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "broad_crawl origin CA");
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key)?;
    let key = rcgen::KeyPair::generate()?;
    let leaf = rcgen::CertificateParams::new(vec![format!("*.{DOMAIN}")])?
        .signed_by(&key, &ca_cert, &ca_key)?;
    let mut cfg = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let plain = TcpListener::bind("127.0.0.1:0").await?;
    let tls = TcpListener::bind("127.0.0.1:0").await?;
    let origin = Origin {
        http: plain.local_addr()?,
        https: tls.local_addr()?,
        ca_pem: ca_cert.pem(),
    };
    tokio::spawn(serve(plain, None));
    tokio::spawn(serve(
        tls,
        Some(tokio_rustls::TlsAcceptor::from(Arc::new(cfg))),
    ));
    Ok(origin)
}

/// Every name resolves to the origin (the direct runs).
struct ToOrigin(SocketAddr);

impl reqwest::dns::Resolve for ToOrigin {
    fn resolve(&self, _: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let addr = self.0;
        Box::pin(async move { Ok(Box::new(std::iter::once(addr)) as reqwest::dns::Addrs) })
    }
}

struct Mannerly {
    child: std::process::Child,
    addr: String,
    dir: PathBuf,
}

impl Drop for Mannerly {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_mannerly(origin: &Origin, extra: &[(&str, &str)]) -> Result<Mannerly, Error> {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mannerly-broad-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let roots = dir.join("origin-ca.pem");
    std::fs::write(&roots, &origin.ca_pem)?;
    let config = format!(
        "data_dir = {dir:?}\n\
         [proxy]\nlisten = \"127.0.0.1:0\"\nconnect_ports = [{https_port}]\n\
         [upstream]\nallow_private = true\nextra_roots = [{roots:?}]\n\
         [upstream.resolve]\n\"*.{DOMAIN}:{http_port}\" = \"{http}\"\n\"*.{DOMAIN}:{https_port}\" = \"{https}\"\n\
         [budget]\ngroup_by = \"host\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [audit]\npath = {audit:?}\n",
        dir = dir.display().to_string(),
        roots = roots.display().to_string(),
        audit = dir.join("audit.jsonl").display().to_string(),
        http_port = origin.http.port(),
        https_port = origin.https.port(),
        http = origin.http,
        https = origin.https,
    );
    let cfg_path = dir.join("mannerly.toml");
    std::fs::write(&cfg_path, config)?;
    let mut cmd = std::process::Command::new(mannerly_bin()?);
    cmd.arg("run")
        .arg("--config")
        .arg(&cfg_path)
        // This example's own knob: the proxy reads every MANNERLY_* as a
        // config key and refuses an unknown one.
        .env_remove("MANNERLY_BIN")
        .env("MANNERLY_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn()?;
    // The banner ("mannerly listening on http://ADDR") is on stdout; the
    // log, whose warnings are worth showing, on stderr.
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err("no stdout or stderr from the proxy".into());
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(a) = line.strip_prefix("mannerly listening on http://") {
                let _ = tx.send(a.to_string());
            }
        }
    });
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("WARN") || line.contains("ERROR") || line.contains("panick") {
                eprintln!("  mannerly: {line}");
            }
        }
    });
    let Ok(addr) = rx.recv_timeout(Duration::from_secs(30)) else {
        // Never leave the proxy running behind a failed run.
        let _ = child.kill();
        let _ = child.wait();
        return Err("proxy did not print its address within 30 s".into());
    };
    Ok(Mannerly { child, addr, dir })
}

/// Peak and last open descriptors and RSS of a process, sampled.
#[derive(Default, Clone, Copy)]
struct Usage {
    fds: usize,
    rss_kb: u64,
}

fn usage(pid: u32) -> Usage {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let rss_kb = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0);
    Usage { fds, rss_kb }
}

struct Sampler {
    stop: Arc<AtomicBool>,
    peak: Arc<Mutex<Usage>>,
    /// Every RSS sample, for the median.
    rss_kb: Arc<Mutex<Vec<u64>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(Mutex::new(Usage::default()));
        let rss_kb = Arc::new(Mutex::new(Vec::new()));
        let (s, p, all) = (stop.clone(), peak.clone(), rss_kb.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let u = usage(pid);
                if let Ok(mut p) = p.lock() {
                    p.fds = p.fds.max(u.fds);
                    p.rss_kb = p.rss_kb.max(u.rss_kb);
                }
                if let Ok(mut all) = all.lock() {
                    all.push(u.rss_kb);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Sampler {
            stop,
            peak,
            rss_kb,
            thread: Some(thread),
        }
    }

    fn finish(self) -> Usage {
        self.finish_with_median().0
    }

    /// The peaks, and the median RSS over the samples: what the process
    /// held through the run, where one sample at its end catches the
    /// allocator wherever its last round of work left it.
    fn finish_with_median(mut self) -> (Usage, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut all = self.rss_kb.lock().map(|a| a.clone()).unwrap_or_default();
        all.sort_unstable();
        let median = all.get(all.len() / 2).copied().unwrap_or(0);
        (self.peak.lock().map(|p| *p).unwrap_or_default(), median)
    }
}

struct Crawl {
    pages_per_s: f64,
    p50: Duration,
    p99: Duration,
    failed: usize,
}

/// Fetches `h<first>..h<first+n>` once each with `clients` workers.
async fn crawl(
    client: reqwest::Client,
    scheme: Scheme,
    port: u16,
    first: usize,
    n: usize,
    clients: usize,
) -> Crawl {
    let next = Arc::new(AtomicUsize::new(first));
    let failed = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..clients {
        let (client, next, failed) = (client.clone(), next.clone(), failed.clone());
        workers.push(tokio::spawn(async move {
            let mut times = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= first + n {
                    return times;
                }
                let url = format!("{}://h{i}.{DOMAIN}:{port}/page", scheme.as_str());
                let t = Instant::now();
                let ok = match client.get(&url).send().await {
                    Ok(r) if r.status() == 200 => r.bytes().await.is_ok_and(|b| b.len() == PAGE),
                    Ok(r) => {
                        if failed.load(Ordering::Relaxed) < 3 {
                            let head = format!(
                                "{} {:?}",
                                r.status(),
                                r.headers().get("mannerly-decision")
                            );
                            eprintln!("  {url}: {head}");
                        }
                        false
                    }
                    Err(e) => {
                        if failed.load(Ordering::Relaxed) < 3 {
                            eprintln!("  {url}: {e}");
                        }
                        false
                    }
                };
                if ok {
                    times.push(t.elapsed());
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let mut times = Vec::new();
    for w in workers {
        times.extend(w.await.unwrap_or_default());
    }
    let elapsed = started.elapsed();
    times.sort();
    let pct = |q: f64| {
        times
            .get(((times.len() as f64 * q) as usize).min(times.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Crawl {
        pages_per_s: times.len() as f64 / elapsed.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
        failed: failed.load(Ordering::Relaxed),
    }
}

/// A crawler's client through mannerly: trusts its CA, one connection
/// (one CONNECT for HTTPS) per page.
fn through(addr: &str, ca_pem: &str) -> Result<reqwest::Client, Error> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(60))
        .proxy(reqwest::Proxy::all(format!("http://{addr}"))?)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes())?)
        .build()?)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

async fn table(origin: &Origin, hosts: usize, clients: &[usize]) -> Result<(), Error> {
    println!(
        "| scheme | clients | route | pages/s | p50 | p99 | failed | proxy peak fds | proxy peak RSS |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|");
    for scheme in [Scheme::Http, Scheme::Https] {
        let port = match scheme {
            Scheme::Http => origin.http.port(),
            Scheme::Https => origin.https.port(),
        };
        for &clients in clients {
            // Straight to the origin.
            let direct_resolver = match scheme {
                Scheme::Http => origin.http,
                Scheme::Https => origin.https,
            };
            let direct = reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .no_proxy()
                .dns_resolver(Arc::new(ToOrigin(direct_resolver)))
                .add_root_certificate(reqwest::Certificate::from_pem(origin.ca_pem.as_bytes())?)
                .timeout(Duration::from_secs(60))
                .build()?;
            let c = crawl(direct, scheme, port, 0, hosts, clients).await;
            println!(
                "| {} | {clients} | direct | {:.0} | {} | {} | {} | | |",
                scheme.as_str(),
                c.pages_per_s,
                ms(c.p50),
                ms(c.p99),
                c.failed
            );
            // Through a fresh mannerly: every host is new to it.
            let m = start_mannerly(origin, &[])?;
            let ca_pem = std::fs::read_to_string(m.dir.join("ca.pem"))?;
            let through = through(&m.addr, &ca_pem)?;
            let sampler = Sampler::start(m.child.id());
            let c = crawl(through, scheme, port, 0, hosts, clients).await;
            let peak = sampler.finish();
            println!(
                "| {} | {clients} | mannerly | {:.0} | {} | {} | {} | {} | {:.1} MB |",
                scheme.as_str(),
                c.pages_per_s,
                ms(c.p50),
                ms(c.p99),
                c.failed,
                peak.fds,
                peak.rss_kb as f64 / 1024.0
            );
        }
    }
    Ok(())
}

/// RSS growth per host: a warm-up crawl, RSS, then `hosts` more hosts,
/// then the pool's idle time passes (idle connections close; the minute
/// sweep of idle budgets may or may not have run) and RSS again.
async fn memory(origin: &Origin, hosts: usize) -> Result<(), Error> {
    const WARM: usize = 2_000;
    for scheme in [Scheme::Http, Scheme::Https] {
        let port = match scheme {
            Scheme::Http => origin.http.port(),
            Scheme::Https => origin.https.port(),
        };
        let m = start_mannerly(origin, &[("MANNERLY_UPSTREAM__POOL_IDLE_SECS", "2")])?;
        let pid = m.child.id();
        let ca_pem = std::fs::read_to_string(m.dir.join("ca.pem"))?;
        let through = through(&m.addr, &ca_pem)?;
        crawl(through.clone(), scheme, port, 0, WARM, 256).await;
        tokio::time::sleep(Duration::from_secs(4)).await;
        let before = usage(pid);
        let sampler = Sampler::start(pid);
        let c = crawl(through, scheme, port, WARM, hosts, 256).await;
        let peak = sampler.finish();
        tokio::time::sleep(Duration::from_secs(4)).await;
        let after = usage(pid);
        let per_host = (after.rss_kb.saturating_sub(before.rss_kb) * 1024) as f64 / hosts as f64;
        println!(
            "{}: {hosts} hosts after {WARM} warm-up, {:.0} pages/s, {} failed; RSS {:.1} MB -> {:.1} MB \
             (peak {:.1} MB): {per_host:.0} bytes per host; fds {} -> {} (peak {})",
            scheme.as_str(),
            c.pages_per_s,
            c.failed,
            before.rss_kb as f64 / 1024.0,
            after.rss_kb as f64 / 1024.0,
            peak.rss_kb as f64 / 1024.0,
            before.fds,
            after.fds,
            peak.fds
        );
    }
    Ok(())
}

/// RSS over a long broad crawl: `hosts` distinct hosts over plain HTTP,
/// 64 clients, the proxy's RSS printed after every 100,000 (and the
/// highest sampled meanwhile), so that growth with the number of hosts
/// seen shows as a slope.
async fn rss(origin: &Origin, hosts: usize) -> Result<(), Error> {
    const STEP: usize = 100_000;
    let m = start_mannerly(origin, &[])?;
    let pid = m.child.id();
    let ca_pem = std::fs::read_to_string(m.dir.join("ca.pem"))?;
    let through = through(&m.addr, &ca_pem)?;
    let port = origin.http.port();
    println!(
        "| hosts crawled | pages/s (this step) | failed | RSS MB | RSS MB 3 s idle | \
         median RSS MB (this step) | peak RSS MB (this step) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut done = 0;
    while done < hosts {
        let n = STEP.min(hosts - done);
        let sampler = Sampler::start(pid);
        let c = crawl(through.clone(), Scheme::Http, port, done, n, 64).await;
        let (peak, median_kb) = sampler.finish_with_median();
        done += n;
        let at_end = usage(pid).rss_kb;
        // What the crawl still had under way (audit lines queued for the
        // writer, connections closing) is done after a few idle seconds;
        // what remains is what the proxy holds.
        tokio::time::sleep(Duration::from_secs(3)).await;
        println!(
            "| {done} | {:.0} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            c.pages_per_s,
            c.failed,
            at_end as f64 / 1024.0,
            usage(pid).rss_kb as f64 / 1024.0,
            median_kb as f64 / 1024.0,
            peak.rss_kb as f64 / 1024.0
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let origin = start_origin().await?;
    match args.first().map(String::as_str) {
        Some("memory") => {
            let hosts = args.get(1).map_or(Ok(100_000), |s| s.parse())?;
            memory(&origin, hosts).await
        }
        Some("rss") => {
            let hosts = args.get(1).map_or(Ok(1_000_000), |s| s.parse())?;
            rss(&origin, hosts).await
        }
        None | Some("table") => {
            let hosts = args.get(1).map_or(Ok(10_000), |s| s.parse())?;
            let clients = match args.get(2) {
                Some(c) => vec![c.parse()?],
                None => vec![256, 16],
            };
            table(&origin, hosts, &clients).await
        }
        Some(other) => Err(format!(
            "usage: broad_crawl [table [HOSTS [CLIENTS]]] | memory [HOSTS] | rss [HOSTS]; got {other}"
        )
        .into()),
    }
}
