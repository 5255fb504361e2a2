//! The origins behind real limiters (nginx `limit_req`) and the crawls
//! against them that `examples/limiters.rs` and the e2e tests compare.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The pages each run asks for.
pub const PAGES: usize = 60;
const SEND_EVERY: Duration = Duration::from_millis(200);

/// The `limit_req` of a run.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    /// `rate=2r/s`, no burst: any two requests closer than 500 ms draw a 429.
    NoBurst,
    /// `rate=2r/s burst=5 nodelay`: five requests ahead of the rate, then 2/s.
    Burst5,
}

impl Limit {
    pub fn name(self) -> &'static str {
        match self {
            Limit::NoBurst => "nginx limit_req 2r/s, no burst",
            Limit::Burst5 => "nginx limit_req 2r/s burst=5 nodelay",
        }
    }

    fn directive(self) -> &'static str {
        match self {
            Limit::NoBurst => "limit_req zone=crawl;",
            Limit::Burst5 => "limit_req zone=crawl burst=5 nodelay;",
        }
    }
}

/// nginx behind `limit_req`, stopped on drop.
pub struct Limiter {
    pub port: u16,
    dir: tempfile::TempDir,
    child: std::process::Child,
}

/// What nginx's access log says.
#[derive(Debug, Default, PartialEq)]
pub struct Served {
    /// Requests for /robots.txt, whatever the answer.
    pub robots: usize,
    /// Pages answered 200.
    pub pages: usize,
    /// Requests answered 429.
    pub throttled: usize,
    /// The status of each request, in the order nginx logged them.
    pub statuses: Vec<(String, u16)>,
}

fn nginx_binary() -> Option<PathBuf> {
    let on_path = std::process::Command::new("sh")
        .args(["-c", "command -v nginx"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    on_path.or_else(|| Some(PathBuf::from("/usr/sbin/nginx")).filter(|p| p.exists()))
}

impl Limiter {
    /// Starts nginx with `limit`; `None` where nginx is not installed.
    pub fn start(limit: Limit) -> Option<Limiter> {
        Limiter::start_for(limit, "")
    }

    /// The same, its one server block named `server_names` (`.site.test`:
    /// the domain and every name under it, one zone for them all).
    pub fn start_for(limit: Limit, server_names: &str) -> Option<Limiter> {
        let nginx = nginx_binary()?;
        let dir = tempfile::tempdir().ok()?;
        let d = dir.path().display().to_string();
        std::fs::create_dir_all(dir.path().join("www/page")).ok()?;
        std::fs::write(
            dir.path().join("www/robots.txt"),
            "User-agent: *\nAllow: /\n",
        )
        .ok()?;
        std::fs::write(dir.path().join("www/page.txt"), "a page\n").ok()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .ok()?
            .port();
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
  limit_req_zone $binary_remote_addr zone=crawl:1m rate=2r/s;
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
            directive = limit.directive(),
            server_name = match server_names {
                "" => String::new(),
                names => format!("server_name {names};"),
            },
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).ok()?;
        let child = std::process::Command::new(nginx)
            .arg("-c")
            .arg(&conf_path)
            .arg("-p")
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let limiter = Limiter { port, dir, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                eprintln!("nginx did not start: {}", limiter.error_log());
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(limiter)
    }

    /// nginx's error log so far.
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// The access log read so far (nginx writes a line once its answer has
    /// gone out, so read it after the last answer arrived).
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

impl Drop for Limiter {
    fn drop(&mut self) {
        let _ = self.child.kill();
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
