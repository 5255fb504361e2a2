//! A start that fails touches nothing: not the data dir of a proxy that
//! runs on it, and not a data dir at rest. Two real processes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::support::*;

const AGENT: &str = "https://bot.example/.well-known/http-message-signatures-directory";

/// Every file under `dir`, by path, with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// A way a start fails: its name, the variables that make it fail, and
/// what the error must say.
type Way<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);

fn changed(
    before: &BTreeMap<PathBuf, Vec<u8>>,
    after: &BTreeMap<PathBuf, Vec<u8>>,
    except: &[&str],
) -> Vec<String> {
    let keys: std::collections::BTreeSet<_> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|p| !except.iter().any(|e| p.ends_with(e)))
        .filter(|p| before.get(*p) != after.get(*p))
        .map(|p| p.display().to_string())
        .collect()
}

/// A second `mannerly run` on `dir` with `env` on top: exit code and output.
fn second_start(dir: &Path, env: &[(&str, &str)]) -> (i32, String) {
    let audit = dir.join("audit.jsonl").display().to_string();
    let dir = dir.display().to_string();
    let mut all = vec![
        ("MANNERLY_DATA_DIR", dir.as_str()),
        ("MANNERLY_AUDIT__PATH", audit.as_str()),
        ("MANNERLY_PROXY__LISTEN", "127.0.0.1:0"),
        ("MANNERLY_ADMIN__LISTEN", "127.0.0.1:0"),
        ("MANNERLY_UPSTREAM__ALLOW_PRIVATE", "true"),
    ];
    all.extend_from_slice(env);
    mannerly(&["run"], &all)
}

async fn fetch(proxy: &RunningBinary, url: &str) {
    let r = proxy.client().get(url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
}

/// The audit log has `n` lines: the line of an answer can reach the file
/// a moment after the client has the answer.
async fn wait_lines(path: &Path, n: usize) {
    for _ in 0..500 {
        if audit_lines(path).len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never had {n} lines", path.display());
}

fn stop(mut proxy: RunningBinary) {
    proxy.signal("TERM");
    let status = proxy.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// Logs that cannot be written (stderr on a full disk: `/dev/full`) are
/// lost, not fatal: the proxy starts, answers, audits and stops cleanly.
/// The log library's fallback `eprintln!` panicked on a failed write, on
/// whichever thread logged; on the store's thread a second panic while
/// unwinding aborted the whole process (seen with the disk full under a
/// benchmark).
#[tokio::test(flavor = "multi_thread")]
async fn a_log_that_cannot_be_written_stops_nothing() {
    let origin = Origin::http(ok_origin()).await;
    let tmp = tempfile::tempdir().unwrap();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let proxy = RunningBinary::start_with(tmp.path(), &[], |c| {
        c.stderr(full);
    });
    for i in 0..20 {
        fetch(
            &proxy,
            &format!("http://127.0.0.1:{}/page{i}", origin.port()),
        )
        .await;
    }
    wait_lines(&tmp.path().join("audit.jsonl"), 20).await;
    stop(proxy);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_start_on_a_running_proxys_data_dir_leaves_its_record_whole() {
    let origin = Origin::http(ok_origin()).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // No seal by time while the failed starts run: A's own writes would
    // hide B's in the byte comparison.
    let a = RunningBinary::start(dir, &[("MANNERLY_AUDIT__CHECKPOINT_SECS", "3600")]);
    let audit = dir.join("audit.jsonl");
    fetch(&a, &format!("http://127.0.0.1:{}/one", origin.port())).await;
    wait_lines(&audit, 2).await;
    let before = snapshot(dir);
    let holder = format!(
        "another mannerly (PID {}) runs on this data dir",
        a.child.id()
    );

    let admin = a.admin.trim_end_matches('/');
    let bad_key = dir.join("not-a-key.pem");
    let bad_key_path = bad_key.display().to_string();
    let ways: [(&str, Vec<(&str, &str)>); 5] = [
        ("data dir in use", vec![]),
        (
            "proxy port taken",
            vec![("MANNERLY_PROXY__LISTEN", a.addr.as_str())],
        ),
        ("admin port taken", vec![("MANNERLY_ADMIN__LISTEN", admin)]),
        ("bad config", vec![("MANNERLY_BUDGET__START_RATE", "fast")]),
        (
            "unreadable key",
            vec![
                ("MANNERLY_IDENTITY__ENABLED", "true"),
                ("MANNERLY_IDENTITY__SIGNATURE_AGENT", AGENT),
                ("MANNERLY_IDENTITY__KEY_FILE", bad_key_path.as_str()),
            ],
        ),
    ];
    for (way, env) in &ways {
        let (code, out) = second_start(dir, env);
        assert_eq!(code, 2, "{way}: {out}");
        if *way == "bad config" {
            assert!(out.contains("budget.start_rate"), "{way}: {out}");
        } else {
            // The first error is the real one: no port was tried.
            assert!(out.contains(&holder), "{way}: {out}");
            assert!(!out.contains("listen on"), "{way}: {out}");
        }
        let after = snapshot(dir);
        assert_eq!(changed(&before, &after, &[]), Vec::<String>::new(), "{way}");
    }

    fetch(&a, &format!("http://127.0.0.1:{}/two", origin.port())).await;
    stop(a);
    let (code, out) = mannerly(&["audit", "verify", audit.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("chain intact"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_that_fails_on_a_data_dir_at_rest_writes_nothing_into_it() {
    let origin = Origin::http(ok_origin()).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let a = RunningBinary::start(dir, &[]);
    fetch(&a, &format!("http://127.0.0.1:{}/one", origin.port())).await;
    stop(a);
    let audit = dir.join("audit.jsonl");
    let before = snapshot(dir);

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "not a key\n").unwrap();
    let garbage_path = garbage.display().to_string();
    let before = {
        let mut b = before;
        b.insert(garbage.clone(), std::fs::read(&garbage).unwrap());
        b
    };
    let ways: [Way; 3] = [
        (
            "proxy port taken",
            vec![("MANNERLY_PROXY__LISTEN", taken.as_str())],
            "listen on",
        ),
        (
            "admin port taken",
            vec![("MANNERLY_ADMIN__LISTEN", taken.as_str())],
            "admin.listen",
        ),
        (
            "unreadable key",
            vec![
                ("MANNERLY_IDENTITY__ENABLED", "true"),
                ("MANNERLY_IDENTITY__SIGNATURE_AGENT", AGENT),
                ("MANNERLY_IDENTITY__KEY_FILE", garbage_path.as_str()),
            ],
            "identity",
        ),
    ];
    for (way, env, says) in &ways {
        let (code, out) = second_start(dir, env);
        assert_eq!(code, 2, "{way}: {out}");
        assert!(out.contains(says), "{way}: {out}");
        let after = snapshot(dir);
        // The lock file names the last process that took the lock.
        assert_eq!(
            changed(&before, &after, &["mannerly.lock"]),
            Vec::<String>::new(),
            "{way}"
        );
    }
    let (code, out) = mannerly(&["audit", "verify", audit.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("chain intact"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_on_a_log_still_being_written_says_so_and_after_the_stop_it_is_sealed() {
    let origin = Origin::http(ok_origin()).await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let a = RunningBinary::start(dir, &[("MANNERLY_AUDIT__CHECKPOINT_SECS", "3600")]);
    let audit = dir.join("audit.jsonl");
    fetch(&a, &format!("http://127.0.0.1:{}/one", origin.port())).await;
    wait_lines(&audit, 2).await;
    let data = dir.display().to_string();
    let (code, key) = mannerly(
        &["audit", "pubkey"],
        &[("MANNERLY_DATA_DIR", data.as_str())],
    );
    assert_eq!(code, 0, "{key}");
    let key = key.trim().to_string();
    let path = audit.to_str().unwrap();
    let (code, out) = mannerly(&["audit", "verify", "--pubkey", &key, path], &[]);
    assert_eq!(code, 3, "{out}");
    let running = format!(
        "still being written: mannerly (PID {}) runs on",
        a.child.id()
    );
    assert!(out.contains(&running), "{out}");
    assert!(!out.contains("did not stop cleanly"), "{out}");
    stop(a);
    let (code, out) = mannerly(&["audit", "verify", "--pubkey", &key, path], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("clean shutdown"), "{out}");
}
