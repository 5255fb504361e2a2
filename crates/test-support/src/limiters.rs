//! The origins behind real rate limiters, as sites run them (nginx
//! `limit_req`, Flask-Limiter, express-rate-limit, Apache mod_qos), and the
//! crawls against them that `examples/limiters.rs` and the e2e tests
//! compare. Each limiter starts on a free 127.0.0.1 port, counts every
//! request (robots.txt included) and logs each answer; its log is what is
//! counted.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The pages each run asks for.
pub const PAGES: usize = 60;
const SEND_EVERY: Duration = Duration::from_millis(200);

/// How a Flask-Limiter limit counts (the `limits` package's strategies).
#[derive(Clone, Copy, Debug)]
pub enum Strategy {
    /// `fixed-window`: a count per calendar window, refused requests counted.
    Fixed,
    /// `moving-window`: the accepted requests of the last window (a log).
    Moving,
    /// `sliding-window-counter`: this window's count plus the last one's,
    /// weighted by how much of it still overlaps.
    SlidingCounter,
}

impl Strategy {
    fn flag(self) -> &'static str {
        match self {
            Strategy::Fixed => "fixed-window",
            Strategy::Moving => "moving-window",
            Strategy::SlidingCounter => "sliding-window-counter",
        }
    }
}

/// The rate limiter of a run, each set to `N` requests a second.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    /// nginx `limit_req rate=Nr/s`, no burst: two requests closer than
    /// 1/N s draw a 429.
    Nginx(u32),
    /// nginx `rate=2r/s burst=5 nodelay`: five requests ahead of the rate,
    /// then 2/s.
    NginxBurst5,
    /// Flask-Limiter `N per second` over the whole application.
    Flask(Strategy, u32),
    /// express-rate-limit `{ windowMs: 1000, limit: N }`, its default store.
    Express(u32),
    /// Apache mod_qos `QS_ClientEventLimitCount 2N+1 1`: mod_qos refuses
    /// the event that reaches the count and ends its window once the
    /// window's age in whole seconds passes the period, so this is 2N
    /// requests per 2 s window from the client's first request.
    Qos(u32),
}

impl Limit {
    /// nginx `limit_req rate=2r/s`, no burst.
    pub const NO_BURST: Limit = Limit::Nginx(2);

    pub fn name(self) -> String {
        match self {
            Limit::Nginx(n) => format!("nginx limit_req {n}r/s, no burst"),
            Limit::NginxBurst5 => "nginx limit_req 2r/s burst=5 nodelay".into(),
            Limit::Flask(s, n) => format!("Flask-Limiter {} {n}/s", s.flag()),
            Limit::Express(n) => format!("express-rate-limit {n}/s"),
            Limit::Qos(n) => format!("Apache mod_qos {}/2s", 2 * n),
        }
    }

    /// The requests a second the limiter lets through.
    pub fn rate(self) -> u32 {
        match self {
            Limit::NginxBurst5 => 2,
            Limit::Nginx(n) | Limit::Flask(_, n) | Limit::Express(n) | Limit::Qos(n) => n,
        }
    }

    /// Every limiter of the table, at 2 and at 3 requests a second.
    pub fn all() -> Vec<Limit> {
        let mut all = vec![Limit::NginxBurst5];
        for n in [2, 3] {
            all.extend([
                Limit::Nginx(n),
                Limit::Flask(Strategy::Fixed, n),
                Limit::Flask(Strategy::Moving, n),
                Limit::Flask(Strategy::SlidingCounter, n),
                Limit::Express(n),
                Limit::Qos(n),
            ]);
        }
        all
    }

    /// What to install where the limiter is missing.
    pub fn install(self) -> &'static str {
        match self {
            Limit::Nginx(_) | Limit::NginxBurst5 => "apt-get install nginx-light",
            Limit::Flask(..) => "pip install flask-limiter",
            Limit::Express(_) => "cd tests/limiters && npm ci",
            Limit::Qos(_) => "apt-get install apache2 libapache2-mod-qos",
        }
    }
}

/// A rate limiter on a free 127.0.0.1 port, stopped on drop.
pub struct Limiter {
    pub port: u16,
    dir: tempfile::TempDir,
    child: std::process::Child,
}

/// What the limiter's access log says.
#[derive(Debug, Default, PartialEq)]
pub struct Served {
    /// Requests for /robots.txt, whatever the answer.
    pub robots: usize,
    /// Pages answered 200.
    pub pages: usize,
    /// Requests answered 429.
    pub throttled: usize,
    /// The status of each request, in the order the limiter logged them.
    pub statuses: Vec<(String, u16)>,
}

fn binary(name: &str, fallback: &str) -> Option<PathBuf> {
    let on_path = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    on_path.or_else(|| Some(PathBuf::from(fallback)).filter(|p| p.exists()))
}

/// tests/limiters, where the Flask and express apps are.
fn apps() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/limiters")
}

impl Limiter {
    /// Starts the limiter; `None` where it is not installed.
    pub fn start(limit: Limit) -> Option<Limiter> {
        Limiter::start_for(limit, "")
    }

    /// The same; nginx's one server block named `server_names` (`.site.test`:
    /// the domain and every name under it, one zone for them all).
    pub fn start_for(limit: Limit, server_names: &str) -> Option<Limiter> {
        let dir = tempfile::tempdir().ok()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .ok()?
            .port();
        let log = dir.path().join("access.log").display().to_string();
        let mut cmd = match limit {
            Limit::Nginx(_) | Limit::NginxBurst5 => nginx(limit, dir.path(), port, server_names)?,
            Limit::Flask(strategy, n) => {
                let ok = std::process::Command::new("python3")
                    .args(["-c", "import flask_limiter"])
                    .output()
                    .is_ok_and(|o| o.status.success());
                if !ok {
                    return None;
                }
                let mut c = std::process::Command::new("python3");
                c.arg(apps().join("flask_limited.py")).args([
                    port.to_string(),
                    log,
                    format!("{n} per second"),
                    strategy.flag().to_string(),
                ]);
                c
            }
            Limit::Express(n) => {
                if !apps().join("node_modules/express-rate-limit").exists() {
                    return None;
                }
                let mut c = std::process::Command::new(binary("node", "/usr/bin/node")?);
                c.arg(apps().join("express_limited.js")).args([
                    port.to_string(),
                    log,
                    n.to_string(),
                    "1000".to_string(),
                ]);
                c
            }
            Limit::Qos(n) => apache(n, dir.path(), port)?,
        };
        let child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let limiter = Limiter { port, dir, child };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                eprintln!("{} did not start: {}", limit.name(), limiter.error_log());
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(limiter)
    }

    /// The limiter's error log so far (nginx, Apache).
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// The access log read so far (each limiter writes a line once its
    /// answer has gone out, so read it after the last answer arrived).
    pub fn served(&self) -> Served {
        let log = std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default();
        let mut s = Served::default();
        for line in log.lines() {
            // `... "GET /path HTTP/1.1" 200 7 "-" "agent"`
            let mut quoted = line.split('"');
            let request = quoted.nth(1).unwrap_or("");
            let status = quoted
                .next()
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|st| st.parse().ok())
                .unwrap_or(0);
            let path = request.split(' ').nth(1).unwrap_or("").to_string();
            if path.ends_with("/robots.txt") {
                s.robots += 1;
            } else if status == 200 {
                s.pages += 1;
            }
            if status == 429 {
                s.throttled += 1;
            }
            s.statuses.push((path, status));
        }
        s
    }
}

/// nginx with `limit_req` in the foreground, its config in `dir`.
fn nginx(
    limit: Limit,
    dir: &std::path::Path,
    port: u16,
    server_names: &str,
) -> Option<std::process::Command> {
    let nginx = binary("nginx", "/usr/sbin/nginx")?;
    let d = dir.display().to_string();
    std::fs::create_dir_all(dir.join("www/page")).ok()?;
    std::fs::write(dir.join("www/robots.txt"), "User-agent: *\nAllow: /\n").ok()?;
    std::fs::write(dir.join("www/page.txt"), "a page\n").ok()?;
    let directive = match limit {
        Limit::NginxBurst5 => "limit_req zone=crawl burst=5 nodelay;",
        _ => "limit_req zone=crawl;",
    };
    // `return` runs before limit_req (rewrite phase), so pages are
    // files: `try_files` comes after the limit, as a site's pages do.
    let conf = format!(
        "daemon off; master_process off; worker_processes 1;
pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  limit_req_zone $binary_remote_addr zone=crawl:1m rate={rate}r/s;
  limit_req_status 429;
  server {{
    listen 127.0.0.1:{port};
    {server_name}
    root {d}/www;
    location / {{
      {directive}
      error_page 429 @throttled;
      try_files $uri /page.txt;
    }}
    location @throttled {{
      add_header Retry-After 1 always;
      return 429 \"slow down\\n\";
    }}
  }}
}}
",
        rate = limit.rate(),
        server_name = match server_names {
            "" => String::new(),
            names => format!("server_name {names};"),
        },
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf).ok()?;
    let mut c = std::process::Command::new(nginx);
    c.arg("-c").arg(&conf_path).arg("-p").arg(dir);
    Some(c)
}

/// Debian's Apache with mod_qos in the foreground, its config in `dir`:
/// every request (robots.txt too) is a `QS_Limit` event of the client,
/// refused with 429 (`QS_ErrorResponseCode`; mod_qos sends no
/// Retry-After).
fn apache(rate: u32, dir: &std::path::Path, port: u16) -> Option<std::process::Command> {
    let apache = binary("apache2", "/usr/sbin/apache2")?;
    let modules = std::path::Path::new("/usr/lib/apache2/modules");
    if !modules.join("mod_qos.so").exists() {
        return None;
    }
    let d = dir.display().to_string();
    std::fs::create_dir_all(dir.join("www")).ok()?;
    std::fs::write(dir.join("www/robots.txt"), "User-agent: *\nAllow: /\n").ok()?;
    std::fs::write(dir.join("www/page.txt"), "a page\n").ok()?;
    // Debian's mod_qos 11.63 was built against PCRE 1, which Debian's
    // apache2 2.4.7x no longer loads itself: without the LoadFile the
    // module fails with `undefined symbol: pcre_free`.
    let conf = format!(
        "ServerRoot {d}
PidFile {d}/httpd.pid
ErrorLog {d}/error.log
Listen 127.0.0.1:{port}
ServerName 127.0.0.1
LoadModule mpm_event_module {m}/mod_mpm_event.so
LoadModule authz_core_module {m}/mod_authz_core.so
LoadModule rewrite_module {m}/mod_rewrite.so
LoadFile /usr/lib/x86_64-linux-gnu/libpcre.so.3
LoadModule qos_module {m}/mod_qos.so
DocumentRoot {d}/www
LogFormat \"%h \\\"%r\\\" %>s\" short
CustomLog {d}/access.log short
QS_ClientEntries 1000
QS_SetEnv QS_Limit yes
QS_ClientEventLimitCount {count} 1
QS_ErrorResponseCode 429
RewriteEngine on
RewriteCond %{{REQUEST_URI}} !^/robots\\.txt$
RewriteRule ^/.+$ /page.txt [L]
",
        m = modules.display(),
        count = 2 * rate + 1,
    );
    let conf_path = dir.join("httpd.conf");
    std::fs::write(&conf_path, conf).ok()?;
    let mut c = std::process::Command::new(apache);
    c.arg("-f").arg(&conf_path).arg("-DFOREGROUND");
    Some(c)
}

impl Drop for Limiter {
    fn drop(&mut self) {
        // SIGTERM first: Apache's parent stops its children only when it
        // is asked to, not when it is killed.
        let stopped = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !stopped {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A crawl's result on the client's side.
#[derive(Debug)]
pub struct Crawl {
    /// Pages answered 200.
    pub delivered: usize,
    /// Pages answered anything else.
    pub refused: usize,
    /// From the first send to the last page received.
    pub seconds: f64,
}

impl Crawl {
    pub fn pages_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.delivered as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// `pages` GETs of `base`/page/N fired at 5/s, whatever happened to the
/// ones before; a 429 is a page not delivered.
pub async fn impatient(client: &reqwest::Client, base: &str, pages: usize) -> Crawl {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..pages {
        let (c, url) = (client.clone(), format!("{base}/page/{i}"));
        tasks.push(tokio::spawn(async move {
            let r = c.get(url).send().await.ok()?;
            let ok = r.status() == 200;
            r.bytes().await.ok()?;
            Some((ok, Instant::now()))
        }));
        tokio::time::sleep(SEND_EVERY).await;
    }
    collect(start, tasks).await
}

/// A crawl's result from its GETs' tasks (each `Some((answered 200, when))`,
/// or `None` when it got no answer), started at `start`.
pub async fn collect(
    start: Instant,
    tasks: Vec<tokio::task::JoinHandle<Option<(bool, Instant)>>>,
) -> Crawl {
    let (mut delivered, mut refused, mut last) = (0, 0, start);
    for t in tasks {
        match t.await.ok().flatten() {
            Some((true, at)) => {
                delivered += 1;
                last = last.max(at);
            }
            _ => refused += 1,
        }
    }
    Crawl {
        delivered,
        refused,
        seconds: last.duration_since(start).as_secs_f64(),
    }
}

/// One page at a time straight to the origin; a 429 is waited out for its
/// Retry-After (1 s without one) and sent again.
pub async fn naive_loop(base: &str, pages: usize) -> Crawl {
    let c = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a client");
    let start = Instant::now();
    let (mut delivered, mut refused) = (0, 0);
    for i in 0..pages {
        let url = format!("{base}/page/{i}");
        let mut tries = 0;
        loop {
            let Ok(r) = c.get(&url).send().await else {
                refused += 1;
                break;
            };
            let status = r.status().as_u16();
            let wait = r
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            let _ = r.bytes().await;
            if status == 200 {
                delivered += 1;
                break;
            }
            tries += 1;
            if status != 429 || tries > 10 {
                refused += 1;
                break;
            }
            tokio::time::sleep(Duration::from_secs(wait)).await;
        }
    }
    Crawl {
        delivered,
        refused,
        seconds: start.elapsed().as_secs_f64(),
    }
}
