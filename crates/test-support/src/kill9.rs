//! `kill -9` under load (`examples/kill9.rs`, the e2e test
//! `kill9_under_load_loses_no_answered_line`): an origin, a run of clients
//! against `mannerly run`, the kill, and what the log kept.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What one run found.
#[derive(Debug)]
pub struct RunResult {
    /// Requests whose answer was received completely.
    pub answered: usize,
    /// Audit lines for request URLs.
    pub lines: usize,
    /// Answered requests without a line.
    pub missing: Vec<String>,
    /// `audit verify --pubkey` exit code (0 sealed, 3 unsealed tail, 1 broken).
    pub verify_code: i32,
    /// Its output.
    pub verify_out: String,
}

/// An origin answering every path with 1 KiB (robots.txt: 404), HTTP/1.1
/// keep-alive, written by hand so it costs little CPU.
pub async fn origin() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(4096);
                let mut chunk = [0u8; 4096];
                loop {
                    let Some(end) = find(&buf, b"\r\n\r\n") else {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    buf.drain(..end + 4);
                    let resp: Vec<u8> = if head.starts_with("GET /robots.txt") {
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_vec()
                    } else {
                        let mut r = b"HTTP/1.1 200 OK\r\ncontent-length: 1024\r\n\r\n".to_vec();
                        r.extend(std::iter::repeat_n(b'x', 1024));
                        r
                    };
                    if s.write_all(&resp).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One client: keep-alive requests until the connection dies; records each
/// URL whose whole answer (head + Content-Length bytes) arrived.
async fn client(
    proxy: String,
    origin: SocketAddr,
    id: usize,
    answered: Arc<Mutex<Vec<String>>>,
    count: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) {
    let Ok(mut s) = TcpStream::connect(&proxy).await else {
        return;
    };
    let _ = s.set_nodelay(true);
    let mut buf = Vec::with_capacity(8192);
    let mut chunk = vec![0u8; 16384];
    for n in 0.. {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let url = format!("http://{origin}/c{id}-r{n}");
        let req =
            format!("GET {url} HTTP/1.1\r\nhost: {origin}\r\nuser-agent: kill9-load/1\r\n\r\n");
        if s.write_all(req.as_bytes()).await.is_err() {
            return;
        }
        // Read one full answer.
        let (head_end, len) = loop {
            if let Some(end) = find(&buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let Some(len) = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                else {
                    // Not a sized answer: the check below needs one.
                    return;
                };
                break (end + 4, len);
            }
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
            }
        };
        while buf.len() < head_end + len {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
            }
        }
        buf.drain(..head_end + len);
        if let Ok(mut a) = answered.lock() {
            a.push(url);
        }
        count.fetch_add(1, Ordering::Relaxed);
    }
}

/// `mannerly run` on `dir`, its log at `audit`, observe mode, and the
/// address it printed.
async fn start(mannerly: &Path, dir: &Path, audit: &Path) -> Result<(Child, String), String> {
    let mut child = Command::new(mannerly)
        .arg("run")
        .env("MANNERLY_DATA_DIR", dir)
        .env("MANNERLY_PROXY__LISTEN", "127.0.0.1:0")
        .env("MANNERLY_UPSTREAM__ALLOW_PRIVATE", "true")
        .env("MANNERLY_AUDIT__PATH", audit)
        .env("MANNERLY_POLICY__ENFORCE", "false")
        .env("MANNERLY_ADMIN__LISTEN", "127.0.0.1:0")
        .env("MANNERLY_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", mannerly.display()))?;
    // The banner ("mannerly listening on http://ADDR") is on stdout.
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(a) = line.strip_prefix("mannerly listening on http://") {
                let _ = tx.send(a.to_string());
            }
        }
    });
    let started = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(60)))
        .await
        .ok()
        .and_then(Result::ok);
    let Some(proxy) = started else {
        // Never leave the proxy running behind a failed run.
        let _ = child.kill();
        let _ = child.wait();
        return Err("proxy did not print its address within 60 s".into());
    };
    Ok((child, proxy))
}

/// One run: start `mannerly` on a fresh data dir, load it with `clients`
/// clients, SIGKILL it `kill_after` after `warm` answers arrived, check.
pub async fn run_once(
    mannerly: &Path,
    dir: &Path,
    origin: SocketAddr,
    clients: usize,
    warm: usize,
    kill_after: Duration,
) -> Result<RunResult, String> {
    let audit = dir.join("audit.jsonl");
    let (mut child, proxy) = start(mannerly, dir, &audit).await?;
    let answered = Arc::new(Mutex::new(Vec::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for id in 0..clients {
        tasks.push(tokio::spawn(client(
            proxy.clone(),
            origin,
            id,
            answered.clone(),
            count.clone(),
            stop.clone(),
        )));
    }
    while count.load(Ordering::Relaxed) < warm {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(kill_after).await;
    let pid = child.id().to_string();
    Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .map_err(|e| format!("kill: {e}"))?;
    let _ = child.wait();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let answered: Vec<String> = answered.lock().map(|a| a.clone()).unwrap_or_default();
    let text = std::fs::read_to_string(&audit).map_err(|e| format!("{}: {e}", audit.display()))?;
    let logged: HashSet<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["url"].as_str().map(str::to_string))
        .collect();
    let missing: Vec<String> = answered
        .iter()
        .filter(|u| !logged.contains(*u))
        .cloned()
        .collect();
    let key = Command::new(mannerly)
        .args(["audit", "pubkey"])
        .env("MANNERLY_DATA_DIR", dir)
        .output()
        .map_err(|e| e.to_string())?;
    let key = String::from_utf8_lossy(&key.stdout).trim().to_string();
    let v = Command::new(mannerly)
        .args(["audit", "verify", "--pubkey", &key])
        .arg(&audit)
        .output()
        .map_err(|e| e.to_string())?;
    Ok(RunResult {
        answered: answered.len(),
        lines: logged.len(),
        missing,
        verify_code: v.status.code().unwrap_or(-1),
        verify_out: String::from_utf8_lossy(&v.stdout).to_string(),
    })
}
