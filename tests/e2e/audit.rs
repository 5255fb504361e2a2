//! The audit log: one line per decision, a chain that verifies, breaks
//! where the log was edited, and survives SIGTERM under load.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::support::*;

fn verify(path: &std::path::Path) -> (i32, String) {
    mannerly(&["audit", "verify", path.to_str().unwrap()], &[])
}

#[tokio::test]
async fn n_requests_give_n_lines_and_edits_break_the_chain_at_that_line() {
    let origin = Origin::http(ok_origin()).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    for i in 0..20 {
        get_ok(&c, &format!("http://127.0.0.1:{}/p{i}", origin.port())).await;
    }
    let path = proxy.audit_path.clone();
    let dir = tempfile::tempdir().unwrap();
    proxy.stop().await;
    let lines = audit_lines_all(&path);
    assert_eq!(with_outcome(&lines, "fetched").len(), 20);
    assert_eq!(with_outcome(&lines, "robots_fetched").len(), 1);
    // The last line is the signed checkpoint of the clean shutdown.
    assert_eq!(with_outcome(&lines, "checkpoint").len(), 1);
    assert_eq!(lines[21]["why"], "shutdown");
    assert_eq!(lines.len(), 22);
    for l in &lines {
        let ts = l["ts"].as_str().unwrap();
        assert_eq!(ts.len(), "2026-11-29T19:30:59.799Z".len(), "{ts}");
        assert!(ts.ends_with('Z'));
    }

    let (code, out) = verify(&path);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("22 lines, chain intact"), "{out}");

    let text = std::fs::read_to_string(&path).unwrap();
    let mut rows: Vec<&str> = text.lines().collect();

    let edited_path = dir.path().join("edited.jsonl");
    let edited = rows[7].replace("\"status\":200", "\"status\":404");
    assert_ne!(edited, rows[7]);
    let mut e = rows.clone();
    e[7] = &edited;
    std::fs::write(&edited_path, e.join("\n") + "\n").unwrap();
    let (code, out) = verify(&edited_path);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("line 8:"), "{out}");

    let deleted_path = dir.path().join("deleted.jsonl");
    rows.remove(12);
    std::fs::write(&deleted_path, rows.join("\n") + "\n").unwrap();
    let (code, out) = verify(&deleted_path);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("line 13:"), "{out}");
}

#[tokio::test]
async fn a_restarted_proxy_continues_the_chain() {
    let origin = Origin::http(ok_origin()).await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    for _ in 0..2 {
        let audit = audit.clone();
        let mut proxy = TestProxy::start(move |c| c.audit.path = audit.display().to_string()).await;
        let r = proxy
            .client()
            .get(format!("http://127.0.0.1:{}/again", origin.port()))
            .send()
            .await
            .unwrap();
        r.bytes().await.unwrap();
        proxy.stop().await;
    }
    let (code, out) = verify(&audit);
    assert_eq!(code, 0, "{out}");
    // Two lines per run, each run sealed by its shutdown checkpoint.
    assert!(out.contains("6 lines"), "{out}");
}

#[tokio::test]
async fn sigterm_during_load_answers_every_accepted_request_and_logs_it() {
    let origin = Origin::http(ok_origin()).await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mannerly"))
        .arg("run")
        .env("MANNERLY_DATA_DIR", dir.path())
        .env("MANNERLY_PROXY__LISTEN", "127.0.0.1:0")
        .env("MANNERLY_ADMIN__LISTEN", "")
        .env("MANNERLY_UPSTREAM__ALLOW_PRIVATE", "true")
        .env("MANNERLY_AUDIT__PATH", &audit)
        .env("MANNERLY_BUDGET__START_RATE", "1000")
        .env("MANNERLY_BUDGET__MAX_RATE", "1000")
        .env("MANNERLY_BUDGET__BURST", "1000")
        .env("MANNERLY_BUDGET__CONCURRENCY", "1000")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The banner is on stdout.
    let stdout = child.stdout.take().unwrap();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(a) = line.strip_prefix("mannerly listening on http://") {
                let _ = addr_tx.send(a.to_string());
            }
        }
    });
    let addr = addr_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("proxy started");
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{addr}")).unwrap())
        .build()
        .unwrap();
    // Warm robots.txt so every request below is in flight at the origin.
    client
        .get(format!("http://127.0.0.1:{}/warm", origin.port()))
        .send()
        .await
        .unwrap();
    const N: usize = 24;
    let mut tasks = Vec::new();
    for i in 0..N {
        let c = client.clone();
        let url = format!("http://127.0.0.1:{}/slow{i}?800", origin.port());
        tasks.push(tokio::spawn(async move {
            let r = c.get(url).send().await?;
            let status = r.status();
            r.bytes().await?;
            Ok::<_, reqwest::Error>(status)
        }));
    }
    // Wait until the origin holds all of them, then ask the proxy to stop.
    for _ in 0..200 {
        if origin.seen.total() >= N + 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        origin.seen.total(),
        N + 2,
        "all requests reached the origin"
    );
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    for t in tasks {
        let status = t.await.unwrap().expect("request answered despite SIGTERM");
        assert_eq!(status, 200);
    }
    let exit = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    let lines = audit_lines(&audit);
    let slow: Vec<_> = with_outcome(&lines, "fetched")
        .into_iter()
        .filter(|l| l["url"].as_str().unwrap().contains("/slow"))
        .collect();
    assert_eq!(slow.len(), N, "every accepted request has its line");
    assert!(
        slow.iter()
            .all(|l| l["bytes"] == 4 && l["reason"].is_null()),
        "{slow:#?}"
    );
    let (code, out) = verify(&audit);
    assert_eq!(code, 0, "{out}");
}

/// Audit lines to standard output, read by something that stops reading:
/// once the pipe is full, answers wait for their lines (nothing is answered
/// without one), but the proxy itself goes on: its admin listener answers.
/// When the reader catches up, every request is answered and logged.
#[tokio::test]
async fn a_stalled_stdout_reader_holds_answers_but_not_the_proxy() {
    const N: usize = 600;
    let origin = Origin::http(ok_origin()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mannerly"))
        .arg("run")
        .env("MANNERLY_DATA_DIR", dir.path())
        .env("MANNERLY_PROXY__LISTEN", "127.0.0.1:0")
        .env("MANNERLY_ADMIN__LISTEN", "127.0.0.1:0")
        .env("MANNERLY_UPSTREAM__ALLOW_PRIVATE", "true")
        .env("MANNERLY_AUDIT__PATH", "-")
        .env("MANNERLY_POLICY__ENFORCE", "false")
        // One runtime thread, as in a one-CPU container: a write blocked on
        // the pipe there would stop everything.
        .env("TOKIO_WORKER_THREADS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let (mut proxy, mut admin) = (String::new(), String::new());
    let mut line = String::new();
    while proxy.is_empty() || admin.is_empty() {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "banner ended early"
        );
        if let Some(a) = line.trim().strip_prefix("mannerly listening on http://") {
            proxy = a.to_string();
        }
        if let Some(a) = line.trim().strip_prefix("admin: http://") {
            admin = a
                .split(' ')
                .next()
                .unwrap()
                .trim_end_matches('/')
                .to_string();
        }
    }
    // From here on nobody reads stdout until the check below.
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(format!("http://{proxy}")).unwrap())
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..N {
        let (client, done) = (client.clone(), done.clone());
        let url = format!("http://127.0.0.1:{}/p{i}", origin.port());
        tasks.push(tokio::spawn(async move {
            let r = client.get(url).send().await.unwrap();
            let status = r.status();
            let _ = r.bytes().await;
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            status
        }));
    }
    // 600 lines of ~500 bytes are several times what a pipe holds (64 KiB):
    // once the origin has answered every request, the answers still held
    // are those whose lines wait for the pipe.
    for _ in 0..1000 {
        if origin.seen.total() >= N {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(origin.seen.total() >= N, "the origin saw every request");
    let answered = done.load(std::sync::atomic::Ordering::SeqCst);
    assert!(answered < N, "the pipe never filled: {answered} answered");
    let health = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(format!("http://{admin}/healthz"))
        .send()
        .await
        .expect("the admin listener answers while the audit pipe is full");
    assert_eq!(health.status(), 200);
    // The reader catches up.
    let reader = std::thread::spawn(move || {
        stdout
            .lines()
            .map_while(Result::ok)
            .filter(|l| l.starts_with('{'))
            .collect::<Vec<String>>()
    });
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert!(child.wait().unwrap().success());
    let lines = reader.join().unwrap();
    let fetched = lines
        .iter()
        .filter(|l| l.contains("\"outcome\":\"fetched\""))
        .count();
    assert_eq!(fetched, N);
    let log = dir.path().join("stdout.jsonl");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let (code, out) = verify(&log);
    assert_eq!(code, 0, "{out}");
}
