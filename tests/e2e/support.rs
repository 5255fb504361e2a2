//! Test origins, a proxy started in-process, clients that use it.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use mannerly_proxy::{Config, Proxy};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// nginx's access log line for the tests of Host and kept connections.
const HOSTS_LOG: &str = "log_format hosts '$request $status host=[$http_host] conn=$connection';";

/// Ports for servers a test names by number: below the ephemeral range.
pub use mannerly_test_support::ports::free_port;

pub type OriginBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;
pub type Handler = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<OriginBody>> + Send>>
        + Send
        + Sync,
>;

pub fn text(status: u16, body: impl Into<Bytes>) -> Response<OriginBody> {
    let mut r = Response::new(Full::new(body.into()).map_err(|e| match e {}).boxed());
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    r
}

/// An origin with no robots rules (robots.txt is 404) that answers every
/// page 200 "page". A query of digits (`/slow?800`) holds the answer that
/// many milliseconds, for tests that need requests in flight at the origin.
pub fn ok_origin() -> Handler {
    handler(|req| async move {
        if req.uri().path() == "/robots.txt" {
            return text(404, "");
        }
        if let Some(ms) = req.uri().query().and_then(|q| q.parse().ok()) {
            // Slow on purpose, as long as the query asks.
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        text(200, "page")
    })
}

/// What an origin saw.
#[derive(Default)]
pub struct Seen {
    pub requests: Mutex<Vec<SeenRequest>>,
    pub connections: AtomicUsize,
    /// Connections open now (accepted, not yet ended).
    pub live: AtomicUsize,
}

#[derive(Clone, Debug)]
pub struct SeenRequest {
    pub path: String,
    pub version: hyper::Version,
    pub headers: hyper::HeaderMap,
}

impl Seen {
    pub fn count(&self, path: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .count()
    }
    pub fn total(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
    pub fn all(&self) -> Vec<SeenRequest> {
        self.requests.lock().unwrap().clone()
    }
}

/// An origin server on 127.0.0.1, HTTP or HTTPS (h2 + http/1.1 by ALPN).
pub struct Origin {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
    _stop: oneshot::Sender<()>,
}

pub struct TestCa {
    pub pem_path: PathBuf,
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl TestCa {
    pub fn new(dir: &std::path::Path) -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "origin test CA");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        let pem_path = dir.join("origin-ca.pem");
        std::fs::write(&pem_path, cert.pem()).unwrap();
        TestCa {
            pem_path,
            cert,
            key,
        }
    }

    fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let leaf = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let mut cfg = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(cfg)
    }
}

pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<OriginBody>> + Send + 'static,
{
    Arc::new(move |req| Box::pin(f(req)))
}

impl Origin {
    pub async fn http(h: Handler) -> Origin {
        Self::start(h, None).await
    }

    /// An origin on a given loopback port (to bring a dead origin back).
    pub async fn http_on(h: Handler, port: u16) -> Origin {
        Self::start_on(h, None, port).await
    }

    pub async fn https(h: Handler, ca: &TestCa, names: &[&str]) -> Origin {
        Self::start(h, Some(ca.server_config(names))).await
    }

    async fn start(h: Handler, tls: Option<Arc<rustls::ServerConfig>>) -> Origin {
        Self::start_on(h, tls, 0).await
    }

    async fn start_on(h: Handler, tls: Option<Arc<rustls::ServerConfig>>, port: u16) -> Origin {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let (stop, mut stopped) = oneshot::channel::<()>();
        let seen2 = seen.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    a = listener.accept() => match a { Ok(a) => a, Err(_) => continue },
                    _ = &mut stopped => return,
                };
                seen2.connections.fetch_add(1, Ordering::SeqCst);
                seen2.live.fetch_add(1, Ordering::SeqCst);
                let h = h.clone();
                let seen = seen2.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let live = seen.clone();
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let h = h.clone();
                        let seen = seen.clone();
                        async move {
                            seen.requests.lock().unwrap().push(SeenRequest {
                                path: req
                                    .uri()
                                    .path_and_query()
                                    .map(|p| p.to_string())
                                    .unwrap_or_default(),
                                version: req.version(),
                                headers: req.headers().clone(),
                            });
                            Ok::<_, Infallible>(h(req).await)
                        }
                    });
                    let builder = auto::Builder::new(TokioExecutor::new());
                    match tls {
                        Some(cfg) => {
                            if let Ok(tls) =
                                tokio_rustls::TlsAcceptor::from(cfg).accept(stream).await
                            {
                                let _ = builder.serve_connection(TokioIo::new(tls), svc).await;
                            }
                        }
                        None => {
                            let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                        }
                    }
                    live.live.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Origin {
            addr,
            seen,
            _stop: stop,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

/// A proxy running in this process, with its own data dir and audit log.
pub struct TestProxy {
    pub addr: SocketAddr,
    /// The admin listener, when the test turned it on.
    pub admin: Option<SocketAddr>,
    pub ca_pem: String,
    pub audit_path: PathBuf,
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

/// A config for tests: loopback allowed (the origins live there), a fresh
/// data dir, robots retries fast.
pub fn test_config(dir: &std::path::Path) -> Config {
    let mut cfg = Config {
        data_dir: dir.to_path_buf(),
        ..Config::default()
    };
    cfg.proxy.listen = "127.0.0.1:0".parse().unwrap();
    // Off unless a test turns it on (on port 0): many proxies run at once.
    cfg.admin.listen = String::new();
    cfg.upstream.allow_private = true;
    cfg.upstream.resolve = BTreeMap::new();
    cfg.robots.retry_min_secs = 0.2;
    cfg.robots.retry_max_secs = 0.4;
    // Budgets out of the way: tests about budgets set their own numbers.
    cfg.budget.start_rate = 1000.0;
    cfg.budget.max_rate = 1000.0;
    cfg.budget.burst = 1000;
    cfg.budget.concurrency = 1000;
    cfg.budget.queue_limit = 10_000;
    cfg
}

impl TestProxy {
    pub async fn start(edit: impl FnOnce(&mut Config)) -> TestProxy {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = test_config(dir.path());
        cfg.audit.path = dir.path().join("audit.jsonl").display().to_string();
        edit(&mut cfg);
        let audit_path = PathBuf::from(&cfg.audit.path);
        let ca = mannerly_proxy::CertificateAuthority::load_or_create(&cfg.data_dir, 64).unwrap();
        let ca_pem = ca.cert_pem().to_string();
        let (sink, writer) = mannerly_proxy::open_audit(&cfg).unwrap();
        let proxy = Proxy::bind(cfg, Arc::new(ca), sink).await.unwrap();
        let addr = proxy.local_addr().unwrap();
        let admin = proxy.admin_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(async move {
            proxy
                .run(async {
                    let _ = stopped.await;
                })
                .await;
            tokio::task::spawn_blocking(move || writer.close().unwrap())
                .await
                .unwrap();
        });
        TestProxy {
            addr,
            admin,
            ca_pem,
            audit_path,
            dir,
            stop: Some(stop),
            done: Some(done),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A reqwest client that uses the proxy and trusts its CA.
    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .proxy(reqwest::Proxy::all(self.url()).unwrap())
            .add_root_certificate(reqwest::Certificate::from_pem(self.ca_pem.as_bytes()).unwrap())
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap()
    }

    /// Stops the proxy, flushes the audit log and returns its lines.
    pub async fn stop(&mut self) -> Vec<serde_json::Value> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            d.await.unwrap();
        }
        audit_lines(&self.audit_path)
    }
}

/// The decision lines of an audit log (signed checkpoints left out).
pub fn audit_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    audit_lines_all(path)
        .into_iter()
        .filter(|l| l["outcome"] != "checkpoint")
        .collect()
}

/// Every line of an audit log, checkpoints included.
pub fn audit_lines_all(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Lines of one outcome.
pub fn with_outcome<'a>(
    lines: &'a [serde_json::Value],
    outcome: &str,
) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["outcome"] == outcome).collect()
}

/// Sends `authority` (`host:port`, as the client asks for it) to the
/// loopback `port`.
pub fn resolve_to_loopback(c: &mut Config, authority: &str, port: u16) {
    c.upstream.resolve.insert(
        authority.into(),
        format!("127.0.0.1:{port}").parse().unwrap(),
    );
}

/// GETs `url` through `c`, asserts a 200 and returns the body.
pub async fn get_ok(c: &reqwest::Client, url: &str) -> Bytes {
    let r = c.get(url).send().await.unwrap();
    assert_eq!(r.status(), 200, "{url}: {}", decision(&r));
    r.bytes().await.unwrap()
}

pub fn decision(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("mannerly-decision")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// Sends one proxied GET on a raw connection and reads its answer: the
/// head, and the body as long as its Content-Length says, so that a
/// kept-alive connection is ready for the next request.
pub fn raw_get(conn: &mut std::net::TcpStream, url: &str) -> String {
    use std::io::{Read, Write};
    let host = url.trim_start_matches("http://").split('/').next().unwrap();
    write!(
        conn,
        "GET {url} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: RawBot/1\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
            let body = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|n| n.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + body {
                return String::from_utf8_lossy(&got).to_string();
            }
        }
        let n = conn.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed before a whole answer: {got:?}");
        got.extend_from_slice(&chunk[..n]);
    }
}

/// The `mannerly` binary running on a data dir, with budgets out of the way.
pub struct RunningBinary {
    pub child: std::process::Child,
    pub addr: String,
    /// The admin listener (`host:port`).
    pub admin: String,
    /// Its log (stderr) so far, passed on to the test's stderr as it comes.
    log: Arc<Mutex<Vec<String>>>,
}

impl RunningBinary {
    pub fn start(dir: &std::path::Path, env: &[(&str, &str)]) -> RunningBinary {
        Self::start_with(dir, env, |_| {})
    }

    /// [`start`](Self::start), the command changed by `edit` before it runs
    /// (limits set in `pre_exec`).
    pub fn start_with(
        dir: &std::path::Path,
        env: &[(&str, &str)],
        edit: impl FnOnce(&mut std::process::Command),
    ) -> RunningBinary {
        use std::io::BufRead;
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_mannerly"));
        cmd.arg("run")
            .env("MANNERLY_DATA_DIR", dir)
            .env("MANNERLY_PROXY__LISTEN", "127.0.0.1:0")
            .env("MANNERLY_ADMIN__LISTEN", "127.0.0.1:0")
            .env("MANNERLY_UPSTREAM__ALLOW_PRIVATE", "true")
            .env("MANNERLY_AUDIT__PATH", dir.join("audit.jsonl"))
            .env("MANNERLY_BUDGET__START_RATE", "1000")
            .env("MANNERLY_BUDGET__MAX_RATE", "1000")
            .env("MANNERLY_BUDGET__BURST", "1000")
            .env("MANNERLY_BUDGET__CONCURRENCY", "1000")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        edit(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        // Read unless `edit` sent stderr elsewhere.
        if let Some(stderr) = child.stderr.take() {
            let kept = log.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stderr)
                    .lines()
                    .map_while(Result::ok)
                {
                    eprintln!("{line}");
                    kept.lock().unwrap().push(line);
                }
            });
        }
        // The banner is on stdout; logs stay on stderr.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(a) = line.strip_prefix("admin: http://") {
                    let _ = tx.send(("admin", a.split(' ').next().unwrap_or("").to_string()));
                }
                if let Some(a) = line.strip_prefix("mannerly listening on http://") {
                    let _ = tx.send(("proxy", a.to_string()));
                }
            }
        });
        let (mut addr, mut admin) = (String::new(), String::new());
        while addr.is_empty() || admin.is_empty() {
            let (what, a) = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("proxy started");
            match what {
                "admin" => admin = a,
                _ => addr = a,
            }
        }
        RunningBinary {
            child,
            addr,
            admin,
            log,
        }
    }

    /// Waits (up to 10 s) until a line of its log holds `needle`; whether
    /// one did.
    pub async fn logged(&self, needle: &str) -> bool {
        for _ in 0..500 {
            if self.log.lock().unwrap().iter().any(|l| l.contains(needle)) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .proxy(reqwest::Proxy::all(format!("http://{}", self.addr)).unwrap())
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap()
    }

    /// Sends the proxy a signal by name (`HUP`, `TERM`) with kill(1), as an
    /// operator would.
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{name} {pid}");
    }

    /// `kill -9`: no shutdown code runs.
    pub fn kill9(mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
    }
}

impl Drop for RunningBinary {
    /// A test that fails midway leaves no proxy running (it would hold the
    /// test's output pipe open).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child's stdout, read on a thread of its own and handed over a line at
/// a time, so that a test can wait for a line with a timeout. The thread
/// reads on after the receiver is gone: a full pipe would stall the child.
pub fn stdout_lines(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Waits until the audit log has `n` lines for URLs ending in `url_end`
/// with the given `cache` value, and returns them (store writes finish after
/// the response, and the line is written once they have).
pub async fn wait_cache_lines(
    path: &std::path::Path,
    url_end: &str,
    cache: &str,
    n: usize,
) -> Vec<serde_json::Value> {
    let matching = || -> Vec<serde_json::Value> {
        audit_lines(path)
            .into_iter()
            .filter(|l| {
                l["cache"] == cache && l["url"].as_str().is_some_and(|u| u.ends_with(url_end))
            })
            .collect()
    };
    for _ in 0..250 {
        let found = matching();
        if found.len() >= n {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    matching()
}

/// Waits until `holds` says so, looking every 20 ms for at most 30 s:
/// the poll of a condition, never a guess at how long something takes.
/// Panics naming `what` when it never holds, so a test fails, not hangs.
pub async fn until<F, Fut>(what: &str, mut holds: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !holds().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited 30 s for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (up to 10 s) until the audit log has a line `found` accepts, and
/// returns it.
pub async fn line_where(
    path: &std::path::Path,
    found: impl Fn(&serde_json::Value) -> bool,
) -> Option<serde_json::Value> {
    for _ in 0..500 {
        if let Some(l) = audit_lines(path).into_iter().find(|l| found(l)) {
            return Some(l);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Runs the `mannerly` binary to completion: exit code, stdout + stderr.
pub fn mannerly(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mannerly"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Runs `cmd` off the runtime and returns its stdout; fails the test, with
/// its stderr, if it does not exit 0.
pub async fn tool_stdout(mut cmd: std::process::Command) -> String {
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Whether a tool the test needs is here. Absent: the test is skipped with
/// a message, except under CI (`CI` set), where `.ci/run` installs it and
/// its absence is a failure.
pub fn have_tool(program: &str, package: &str) -> bool {
    let found = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var_os("CI").is_some() {
            panic!("{program} is needed by this test: apt-get install {package}");
        }
        eprintln!("skipped: {program} not installed (apt-get install {package})");
    }
    found
}

impl TestCa {
    /// A leaf certificate and its key (PEM) for `names`, for servers we
    /// do not write (nginx).
    pub fn leaf_pem(&self, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let leaf = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (leaf.pem(), key.serialize_pem())
    }
}

/// Debian's nginx on a loopback port with TLS and HTTP/2, as strict as the
/// real web: `location` blocks are given as nginx config text.
pub struct Nginx {
    pub port: u16,
    pub dir: tempfile::TempDir,
    child: std::process::Child,
}

impl Nginx {
    /// Starts nginx serving `name` over TLS (h2 and http/1.1 by ALPN) with
    /// a certificate from `ca`; `None` where nginx is not installed.
    pub fn start_tls(ca: &TestCa, name: &str, locations: &str) -> Option<Nginx> {
        Nginx::tls(ca, name, locations, true)
    }

    /// As [`Nginx::start_tls`] without h2: ALPN leaves HTTP/1.1, where a
    /// request needs its one Host (400 without). The access log is
    /// [`Nginx::start_http`]'s.
    pub fn start_tls_http1(ca: &TestCa, name: &str, locations: &str) -> Option<Nginx> {
        Nginx::tls(ca, name, locations, false)
    }

    fn tls(ca: &TestCa, name: &str, locations: &str, h2: bool) -> Option<Nginx> {
        if !have_tool("nginx", "nginx-light") {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        let (cert, key) = ca.leaf_pem(&[name]);
        std::fs::write(dir.path().join("cert.pem"), cert).unwrap();
        std::fs::write(dir.path().join("key.pem"), key).unwrap();
        let port = free_port();
        let servers = format!(
            "server {{
    listen 127.0.0.1:{port} ssl{http2};
    server_name {name};
    ssl_certificate {d}/cert.pem; ssl_certificate_key {d}/key.pem;
    {locations}
  }}",
            http2 = if h2 { " http2" } else { "" }
        );
        let format = if h2 { "" } else { HOSTS_LOG };
        Some(Nginx::run(dir, port, format, &servers))
    }

    /// Starts nginx serving `name` over plain HTTP/1.1 by name: a request
    /// whose Host names anything else gets the default server's 421. Its
    /// access log holds `$request $status host=[$http_host]` a line, every
    /// Host field the request carried joined by nginx. `None` where nginx
    /// is not installed.
    pub fn start_http(name: &str, locations: &str) -> Option<Nginx> {
        if !have_tool("nginx", "nginx-light") {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let servers = format!(
            "server {{
    listen 127.0.0.1:{port} default_server;
    return 421 \"not this host\";
  }}
  server {{
    listen 127.0.0.1:{port};
    server_name {name};
    {locations}
  }}"
        );
        Some(Nginx::run(dir, port, HOSTS_LOG, &servers))
    }

    /// Writes the config (`head` before the access log, then `servers`),
    /// starts nginx in `dir` and waits for `port`.
    fn run(dir: tempfile::TempDir, port: u16, head: &str, servers: &str) -> Nginx {
        let d = dir.path().display().to_string();
        let log_as = if head.is_empty() { "" } else { " hosts" };
        let conf = format!(
            "daemon off; master_process off; worker_processes 1;
pid {d}/nginx.pid; error_log {d}/error.log info;
events {{ worker_connections 128; }}
http {{
  {head}
  access_log {d}/access.log{log_as};
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  {servers}
}}
"
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = std::process::Command::new("nginx")
            .arg("-c")
            .arg(&conf_path)
            .arg("-p")
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "nginx did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Nginx { port, dir, child }
    }

    /// nginx's access log so far.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }

    /// nginx's access log once it holds `n` lines containing `needle`, or
    /// after 5 s (nginx logs a request after its answer has gone out).
    pub fn access_log_with(&self, needle: &str, n: usize) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let log = self.access_log();
            if log.matches(needle).count() >= n || std::time::Instant::now() > deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// nginx's error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `npm install`s `packages` into `dir` (created). `false` when the install
/// failed outside CI (the caller skips); under `CI` a failure fails.
pub fn npm_install(dir: &std::path::Path, packages: &[&str]) -> bool {
    std::fs::create_dir_all(dir).unwrap();
    let out = std::process::Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent"])
        .args(packages)
        .current_dir(dir)
        .output()
        .unwrap();
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            std::env::var_os("CI").is_none(),
            "npm install {packages:?}: {why}"
        );
        eprintln!("skipped: npm install {packages:?} failed: {why}");
    }
    out.status.success()
}
