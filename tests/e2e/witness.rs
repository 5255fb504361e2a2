//! The witness of `audit.witness`, through the binary, with a real HTTP
//! witness on loopback (tests/e2e/witness.py): a log cut after a checkpoint
//! verifies as cut against it, the whole log passes, and a witness out of
//! reach holds up nothing and still gets the heads once it is back.

use std::io::BufRead;
use std::path::Path;

use super::support::*;

struct Witness {
    child: std::process::Child,
    url: String,
}

impl Witness {
    /// Starts the witness on `port` (0: any); `None` without python3.
    fn start(port: u16) -> Option<Witness> {
        if !have_tool("python3", "python3") {
            return None;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/witness.py");
        let mut child = std::process::Command::new("python3")
            .arg(script)
            .arg(port.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let port: u16 = first.trim().parse().expect("the witness printed its port");
        Some(Witness {
            child,
            url: format!("http://127.0.0.1:{port}/heads"),
        })
    }

    async fn heads(&self) -> Vec<serde_json::Value> {
        let text = reqwest::get(&self.url).await.unwrap().text().await.unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pubkey(dir: &Path) -> String {
    let (code, out) = mannerly(
        &["audit", "pubkey"],
        &[("MANNERLY_DATA_DIR", dir.to_str().unwrap())],
    );
    assert_eq!(code, 0, "{out}");
    out.trim().to_string()
}

fn verify(key: &str, witness: Option<&str>, log: &Path) -> (i32, String) {
    let mut args = vec!["audit", "verify", "--pubkey", key];
    if let Some(w) = witness {
        args.extend(["--witness", w]);
    }
    args.push(log.to_str().unwrap());
    mannerly(&args, &[])
}

/// Runs the binary with the witness at `url`, fetches `pages` pages and
/// stops it cleanly; `between` runs after the pages, before the stop.
async fn crawl_then_stop(dir: &Path, url: &str, pages: usize, between: impl FnOnce()) {
    let origin = Origin::http(ok_origin()).await;
    let proxy = RunningBinary::start(
        dir,
        &[
            ("MANNERLY_AUDIT__WITNESS", url),
            ("MANNERLY_AUDIT__CHECKPOINT_LINES", "5"),
        ],
    );
    let c = proxy.client();
    for i in 0..pages {
        // Answered whatever the witness does.
        get_ok(&c, &format!("http://127.0.0.1:{}/p{i}", origin.port())).await;
    }
    between();
    proxy.signal("TERM");
    let mut proxy = proxy;
    let status = tokio::task::spawn_blocking(move || proxy.child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn a_log_cut_after_a_checkpoint_is_found_by_the_witness() {
    let Some(witness) = Witness::start(0) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    crawl_then_stop(dir.path(), &witness.url, 12, || {}).await;
    let log = dir.path().join("audit.jsonl");
    let key = pubkey(dir.path());
    // robots.txt + 12 pages: interval seals after 5 and 10, then shutdown.
    let heads = witness.heads().await;
    let why: Vec<&str> = heads.iter().map(|h| h["why"].as_str().unwrap()).collect();
    assert_eq!(why, ["interval", "interval", "shutdown"], "{heads:#?}");

    let (code, out) = verify(&key, Some(&witness.url), &log);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("witness: the log holds the witness's newest head"),
        "{out}"
    );

    // Cut right after the second interval checkpoint: without the witness
    // only "end unsealed"; with it, cut.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let second = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("\"why\":\"interval\""))
        .nth(1)
        .unwrap()
        .0;
    let cut = dir.path().join("cut.jsonl");
    std::fs::write(&cut, lines[..=second].join("\n") + "\n").unwrap();
    let (code, out) = verify(&key, None, &cut);
    assert_eq!(code, 3, "{out}");
    let (code, out) = verify(&key, Some(&witness.url), &cut);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAILED: cut: the witness holds a shutdown checkpoint")
            && out.contains(&format!("cut.jsonl line {}", second + 1)),
        "{out}"
    );
    // The witness's heads handed over as a file say the same.
    let saved = dir.path().join("heads.jsonl");
    std::fs::write(
        &saved,
        reqwest::get(&witness.url)
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    )
    .unwrap();
    let (code, out) = verify(&key, Some(saved.to_str().unwrap()), &cut);
    assert_eq!(code, 1, "{out}");
    let (code, out) = verify(&key, Some(saved.to_str().unwrap()), &log);
    assert_eq!(code, 0, "{out}");
}

#[tokio::test]
async fn a_witness_out_of_reach_holds_up_nothing_and_gets_the_heads_later() {
    if !have_tool("python3", "python3") {
        return;
    }
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/heads");
    let dir = tempfile::tempdir().unwrap();
    let mut late = None;
    // Every page is answered while nothing listens at the witness's port;
    // then it comes up, and the queued heads reach it before the proxy exits.
    crawl_then_stop(dir.path(), &url, 12, || late = Witness::start(port)).await;
    let witness = late.unwrap();
    // None lost: the two kept while it was away, and the shutdown seal.
    let heads = witness.heads().await;
    let why: Vec<&str> = heads.iter().map(|h| h["why"].as_str().unwrap()).collect();
    assert_eq!(why, ["interval", "interval", "shutdown"], "{heads:#?}");
    let log = dir.path().join("audit.jsonl");
    let (code, out) = verify(&pubkey(dir.path()), Some(&witness.url), &log);
    assert_eq!(code, 0, "{out}");
}

/// A head is POSTed only once its line is written and synced: the witness,
/// the moment it has a head's POST and before it answers, reads the log
/// file and finds the head there; then it kills the proxy (-9), and the
/// log left holds that head, so the honest log is not taken for a cut one.
/// Checkpoints after every line and many lines at once make the writer
/// seal in the middle of long batches.
///
/// What this cannot pin: "synced" is not visible from user space (a read
/// sees the page cache, and a kill -9 loses nothing written), so only the
/// write is checked here; and a head POSTed before its write (the old
/// order) is found missing only when the POST outruns the write, which
/// the scheduler decides: the order is pinned by the writer's unit test
/// `a_head_is_offered_to_the_witness_only_after_its_line_is_written`, and
/// through the binary, every time, by
/// `a_head_whose_line_could_not_be_written_never_reaches_the_witness`.
#[tokio::test]
async fn a_head_reaches_the_witness_only_once_its_line_is_in_the_file() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/heads", listener.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let origin = Origin::http(ok_origin()).await;
    let proxy = RunningBinary::start(
        dir.path(),
        &[
            ("MANNERLY_AUDIT__WITNESS", url.as_str()),
            ("MANNERLY_AUDIT__CHECKPOINT_LINES", "1"),
        ],
    );
    let pid = proxy.child.id() as libc::pid_t;
    let log = dir.path().join("audit.jsonl");
    let on_disk = log.clone();
    // The witness: takes the first head, reads the log, kills the proxy
    // before answering.
    let witness = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = conn.read(&mut chunk).unwrap();
            assert!(n > 0, "the witness's connection closed early");
            got.extend_from_slice(&chunk[..n]);
            let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                let head = String::from_utf8_lossy(&got[end + 4..end + 4 + len]).to_string();
                let file = std::fs::read_to_string(&on_disk).unwrap_or_default();
                let written = file.lines().any(|l| l == head.trim());
                // SAFETY-free: kill(2) on the child's own pid.
                let killed = unsafe { libc::kill(pid, libc::SIGKILL) };
                assert_eq!(killed, 0);
                let _ = conn.write_all(b"HTTP/1.1 204 No Content\r\n\r\n");
                return (head, written);
            }
        }
    });
    let c = proxy.client();
    let pages: Vec<_> = (0..300)
        .map(|i| {
            let c = c.clone();
            let url = format!("http://127.0.0.1:{}/p{i}", origin.port());
            tokio::spawn(async move { c.get(url).send().await })
        })
        .collect();
    for p in pages {
        // Many are cut off by the kill; the lines written are what counts.
        let _ = p.await;
    }
    let (head, written) = tokio::task::spawn_blocking(move || witness.join().unwrap())
        .await
        .unwrap();
    assert!(
        written,
        "the witness got a head before the log file held it: {head}"
    );
    let mut proxy = proxy;
    let status = tokio::task::spawn_blocking(move || proxy.child.wait().unwrap())
        .await
        .unwrap();
    assert!(!status.success(), "{status}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines().any(|l| l == head.trim()),
        "the witness holds a head the log does not: {head}"
    );
    let heads = dir.path().join("heads.jsonl");
    std::fs::write(&heads, format!("{}\n", head.trim())).unwrap();
    let (code, out) = verify(&pubkey(dir.path()), Some(heads.to_str().unwrap()), &log);
    assert_ne!(code, 1, "{out}");
    assert!(
        out.contains("the log holds the witness's newest head"),
        "{out}"
    );
}

/// A head is sent only once its line is written: with the proxy's files
/// limited to 256 KiB (`RLIMIT_FSIZE`, SIGXFSZ ignored, so a write past it
/// fails with EFBIG as on a full disk), the lines sealed after the limit
/// are never in the log, and the witness must have none of their heads.
/// A head sent when it was sealed, before its write (the old order), is
/// caught here every time, not by a race.
#[tokio::test]
async fn a_head_whose_line_could_not_be_written_never_reaches_the_witness() {
    use std::os::unix::process::CommandExt;
    let Some(witness) = Witness::start(0) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let origin = Origin::http(ok_origin()).await;
    let env = [
        ("MANNERLY_AUDIT__WITNESS", witness.url.as_str()),
        ("MANNERLY_AUDIT__CHECKPOINT_LINES", "1"),
        // Pages are not stored: the store's file stays near its first size.
        ("MANNERLY_CACHE__ENABLED", "false"),
    ];
    const LIMIT: u64 = 256 * 1024;
    let proxy = RunningBinary::start_with(dir.path(), &env, |cmd| {
        let limit = libc::rlimit {
            rlim_cur: LIMIT,
            rlim_max: LIMIT,
        };
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let c = proxy.client();
    let log = dir.path().join("audit.jsonl");
    let full = || std::fs::metadata(&log).map_or(0, |m| m.len()) >= LIMIT;
    // Pages until the log is at its limit, then more, whose lines and
    // heads cannot be written. Answered 503 then: what counts is what the
    // witness got.
    let mut past = 0;
    for i in 0..20_000 {
        let _ = c
            .get(format!("http://127.0.0.1:{}/p{i}", origin.port()))
            .send()
            .await;
        past += usize::from(full());
        if past == 20 {
            break;
        }
    }
    assert_eq!(past, 20, "the log never reached its limit");
    assert!(
        proxy.logged("audit log write failed").await,
        "the log never hit its limit"
    );
    // A clean stop delivers what is queued for the witness.
    proxy.signal("TERM");
    let mut proxy = proxy;
    let _ = tokio::task::spawn_blocking(move || proxy.child.wait().unwrap()).await;
    let text = std::fs::read_to_string(&log).unwrap();
    let in_log: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let heads = witness.heads().await;
    assert!(!heads.is_empty(), "the heads written before the limit");
    for head in &heads {
        assert!(
            in_log.contains(head),
            "the witness holds a head the log never held: {head}"
        );
    }
}
