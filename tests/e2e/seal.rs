//! What the audit log proves: no answered request without its line after a
//! `kill -9`, and signed checkpoints that catch truncation, edits, deletions
//! and re-chaining when the public key is given.

use std::time::Duration;

use super::kill9;
use super::support::*;

fn pubkey(dir: &std::path::Path) -> String {
    let (code, out) = mannerly(
        &["audit", "pubkey"],
        &[("MANNERLY_DATA_DIR", dir.to_str().unwrap())],
    );
    assert_eq!(code, 0, "{out}");
    let key = out.trim().to_string();
    assert_eq!(key.len(), 64, "{out}");
    key
}

fn verify(key: Option<&str>, files: &[&std::path::Path]) -> (i32, String) {
    let mut args = vec!["audit", "verify"];
    if let Some(k) = key {
        args.extend(["--pubkey", k]);
    }
    for f in files {
        args.push(f.to_str().unwrap());
    }
    mannerly(&args, &[])
}

/// Recomputes every chain value, as a forger without the key would after
/// editing. The thorough forger also rewrites what each checkpoint says it
/// seals, its Merkle heads included (but cannot sign it).
fn rechain(lines: &[String]) -> Vec<String> {
    let mut prev = mannerly_policy::GENESIS.to_string();
    let mut trees = mannerly_policy::FileTrees::default();
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let at = l.rfind(",\"chain\":\"").unwrap();
            let mut content = format!("{}}}", &l[..at]);
            let checkpoint = content.contains("\"outcome\":\"checkpoint\"");
            if checkpoint {
                let mut v: serde_json::Value = serde_json::from_str(&content).unwrap();
                v["sealed"] = prev.clone().into();
                v["lines"] = i.into();
                let heads = trees.heads();
                v["tree"] = mannerly_policy::hex(&heads.tree).into();
                v["hosts"] = heads.hosts.into();
                v["hosts_tree"] = mannerly_policy::hex(&heads.hosts_tree).into();
                content = serde_json::to_string(&v).unwrap();
            }
            let (line, chain) = mannerly_policy::chain_line(&prev, &content);
            trees.line(&line, &content, &chain);
            prev = chain;
            line
        })
        .collect()
}

/// Recomputes the chain values only; checkpoints are copied as they were.
fn rechain_naive(lines: &[String]) -> Vec<String> {
    let mut prev = mannerly_policy::GENESIS.to_string();
    lines
        .iter()
        .map(|l| {
            let at = l.rfind(",\"chain\":\"").unwrap();
            let (line, chain) = mannerly_policy::chain_line(&prev, &format!("{}}}", &l[..at]));
            prev = chain;
            line
        })
        .collect()
}

fn write(path: &std::path::Path, lines: &[String]) {
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// `n` pages through a proxy sealing every 10 lines, then a clean stop:
/// the log, the data dir, and what keeps them.
async fn pages_then_stop(n: usize) -> (std::path::PathBuf, std::path::PathBuf, TestProxy) {
    let origin = Origin::http(ok_origin()).await;
    let mut proxy = TestProxy::start(|c| c.audit.checkpoint_lines = 10).await;
    let c = proxy.client();
    for i in 0..n {
        get_ok(&c, &format!("http://127.0.0.1:{}/p{i}", origin.port())).await;
    }
    let path = proxy.audit_path.clone();
    let data = proxy.dir.path().to_path_buf();
    proxy.stop().await;
    (path, data, proxy)
}

#[tokio::test]
async fn checkpoints_catch_truncation_edits_deletions_and_rechaining() {
    let (path, data, _keep) = pages_then_stop(35).await;
    let lines = audit_lines_all(&path);
    // 36 records (robots.txt + 35 pages), a checkpoint after every 10, and
    // one at shutdown.
    assert_eq!(with_outcome(&lines, "checkpoint").len(), 4, "{lines:#?}");
    assert_eq!(lines.len(), 40);
    assert_eq!(lines[10]["why"], "interval");
    assert_eq!(lines[10]["lines"], 10);
    assert_eq!(lines[39]["why"], "shutdown");
    let key = pubkey(&data);
    let mode = std::fs::metadata(data.join("audit-key.pem")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );

    let (code, out) = verify(Some(&key), &[&path]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("40 lines, chain intact") && out.contains("sealed:"),
        "{out}"
    );
    let (code, out) = verify(None, &[&path]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("cannot be detected"), "{out}");

    let rows = log_rows(&path);
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("forged.jsonl");

    // Truncation: the last 5 lines (shutdown checkpoint included) cut.
    write(&f, &rows[..35]);
    let (code, out) = verify(Some(&key), &[&f]);
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("the last 2 lines") && out.contains("unsealed"),
        "{out}"
    );

    // Edit a fetched 200 into a disallowed 403, and re-chain.
    let mut edited = rows.clone();
    assert!(edited[4].contains("\"outcome\":\"fetched\""));
    edited[4] = edited[4]
        .replace("\"outcome\":\"fetched\"", "\"outcome\":\"disallowed\"")
        .replace("\"status\":200", "\"status\":403");
    let edited = rechain(&edited);
    write(&f, &edited);
    let (code, out) = verify(None, &[&f]);
    assert_eq!(code, 0, "without the key a re-chained edit passes: {out}");
    let (code, out) = verify(Some(&key), &[&f]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("line 11:") && out.contains("signature does not verify"),
        "{out}"
    );
    // Not re-chained: the chain breaks at the edited line.
    let mut plain = rows.clone();
    plain[4] = plain[4].replace("\"status\":200", "\"status\":403");
    write(&f, &plain);
    let (code, out) = verify(Some(&key), &[&f]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("line 5:"), "{out}");

    // A deletion, re-chained.
    let mut deleted = rows.clone();
    deleted.remove(14);
    write(&f, &rechain(&deleted));
    let (code, out) = verify(Some(&key), &[&f]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("line 21:") && out.contains("signature does not verify"),
        "{out}"
    );
    // A forger who leaves the checkpoints alone is caught even without the key.
    let mut naive = rows.clone();
    naive.remove(14);
    write(&f, &rechain_naive(&naive));
    let (code, out) = verify(None, &[&f]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("line 21:") && out.contains("re-chained"),
        "{out}"
    );

    // An appended line, chained on: the log no longer ends sealed.
    let mut appended = rows.clone();
    appended.push(rows[5].clone());
    write(&f, &rechain_naive(&appended));
    let (code, out) = verify(Some(&key), &[&f]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("the last 1 lines"), "{out}");

    // Checkpoints re-signed with another key: refused.
    let other = tempfile::tempdir().unwrap();
    let other_key = pubkey(other.path());
    let (code, out) = verify(Some(&other_key), &[&path]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("signature does not verify"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_under_load_loses_no_answered_line() {
    let origin = kill9::origin().await.unwrap();
    // The benchmark (examples/kill9.rs) runs 10 times with 200 clients;
    // here three shorter runs.
    for (run, kill_after) in [(1, 0u64), (2, 150), (3, 400)] {
        let dir = tempfile::tempdir().unwrap();
        let r = kill9::run_once(
            std::path::Path::new(env!("CARGO_BIN_EXE_mannerly")),
            dir.path(),
            origin,
            50,
            300,
            Duration::from_millis(kill_after),
        )
        .await
        .unwrap();
        assert!(r.answered >= 300, "run {run}: {r:?}");
        assert!(
            r.missing.is_empty(),
            "run {run}: {} of {} answered requests have no line: {:?}",
            r.missing.len(),
            r.answered,
            &r.missing[..r.missing.len().min(5)]
        );
        // The chain is intact; only the last interval may be unsealed.
        assert!(
            matches!(r.verify_code, 0 | 3),
            "run {run}: {}",
            r.verify_out
        );
        assert!(!r.verify_out.contains("FAILED"), "{}", r.verify_out);
    }
}

#[tokio::test]
async fn rotation_carries_the_chain_and_verify_checks_the_set() {
    let origin = Origin::http(ok_origin()).await;
    let mut proxy = TestProxy::start(|c| c.audit.rotate_bytes = 3000).await;
    let c = proxy.client();
    for i in 0..40 {
        let r = c
            .get(format!("http://127.0.0.1:{}/r{i}", origin.port()))
            .send()
            .await
            .unwrap();
        r.bytes().await.unwrap();
    }
    let data = proxy.dir.path().to_path_buf();
    let current = proxy.audit_path.clone();
    proxy.stop().await;
    let rotated = mannerly_proxy::rotated_files(&current);
    assert!(rotated.len() >= 3, "{rotated:?}");
    let mut ids = std::collections::HashSet::new();
    let mut fetched = 0;
    for f in rotated.iter().chain([&current]) {
        let lines = audit_lines_all(f);
        assert!(!lines.is_empty(), "{}", f.display());
        for l in &lines {
            if l["outcome"] == "fetched" {
                fetched += 1;
                assert!(ids.insert(l["id"].as_str().unwrap().to_string()), "{l}");
            }
        }
    }
    for f in &rotated {
        let last = audit_lines_all(f).pop().unwrap();
        assert_eq!(last["why"], "rotation", "{}", f.display());
    }
    assert_eq!(fetched, 40, "no line lost or duplicated at a rotation");
    let key = pubkey(&data);
    let (code, out) = verify(Some(&key), &[&data]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("sealed:"), "{out}");

    // A file missing between two: the next one does not follow.
    let gap = tempfile::tempdir().unwrap();
    for f in rotated.iter().chain([&current]) {
        if *f != rotated[1] {
            std::fs::copy(f, gap.path().join(f.file_name().unwrap())).unwrap();
        }
    }
    let (code, out) = verify(Some(&key), &[gap.path()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("a file is missing"), "{out}");
    // The current file missing: the last one given ends in a rotation.
    let (code, out) = verify(
        Some(&key),
        &rotated.iter().map(|p| p.as_path()).collect::<Vec<_>>(),
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("no later file was given"), "{out}");

    // The oldest file missing from the set (before: a note, exit 0).
    let pruned = tempfile::tempdir().unwrap();
    for f in rotated.iter().skip(1).chain([&current]) {
        std::fs::copy(f, pruned.path().join(f.file_name().unwrap())).unwrap();
    }
    let (code, out) = verify(Some(&key), &[pruned.path()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("oldest file of the set is missing"), "{out}");
    // Each rotated file, given alone, verifies alone (before: exit 1).
    for f in &rotated {
        let (code, out) = verify(Some(&key), &[f]);
        assert_eq!(code, 0, "{}: {out}", f.display());
        assert!(out.contains("last: rotation"), "{out}");
    }
}

/// A clean stop always ends on a shutdown checkpoint, even right after an
/// interval one; a log cut exactly at an interval checkpoint is "end
/// unsealed" (exit 3), never "sealed" (before: exit 0, "last: interval").
#[tokio::test]
async fn a_log_cut_at_a_checkpoint_is_not_sealed() {
    // robots.txt + 9 pages: the 10th line is an interval checkpoint, and
    // nothing follows it before the stop.
    let (path, data, _keep) = pages_then_stop(9).await;
    let lines = audit_lines_all(&path);
    assert_eq!(lines.len(), 12, "{lines:#?}");
    assert_eq!(lines[10]["why"], "interval");
    assert_eq!(lines[11]["why"], "shutdown");
    let key = pubkey(&data);
    let (code, out) = verify(Some(&key), &[&path]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("last: clean shutdown"), "{out}");
    let rows = log_rows(&path);
    let tmp = tempfile::tempdir().unwrap();
    let cut = tmp.path().join("cut.jsonl");
    write(&cut, &rows[..11]);
    let (code, out) = verify(Some(&key), &[&cut]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("end unsealed"), "{out}");
}

#[tokio::test]
async fn sighup_seals_the_file_and_reopens_the_path() {
    let origin = Origin::http(ok_origin()).await;
    let dir = tempfile::tempdir().unwrap();
    let bin = RunningBinary::start(dir.path(), &[]);
    let c = bin.client();
    let get = |i: usize| {
        let c = c.clone();
        let url = format!("http://127.0.0.1:{}/h{i}", origin.port());
        async move {
            let r = c.get(url).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap();
        }
    };
    for i in 0..3 {
        get(i).await;
    }
    let audit = dir.path().join("audit.jsonl");
    let moved = dir.path().join("audit.jsonl.1");
    std::fs::rename(&audit, &moved).unwrap();
    bin.signal("HUP");
    for _ in 0..500 {
        if audit.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(audit.exists(), "SIGHUP made a new audit file");
    for i in 3..6 {
        get(i).await;
    }
    bin.signal("TERM");
    let status = tokio::task::spawn_blocking(move || {
        let mut bin = bin;
        bin.child.wait()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(status.success());
    let old = audit_lines_all(&moved);
    assert_eq!(old.last().unwrap()["why"], "rotation");
    assert_eq!(with_outcome(&old, "fetched").len(), 3);
    let new = audit_lines_all(&audit);
    assert_eq!(with_outcome(&new, "fetched").len(), 3);
    let key = pubkey(dir.path());
    let (code, out) = verify(Some(&key), &[&moved, &audit]);
    assert_eq!(code, 0, "{out}");
}

/// The lines of an audit log file, as written.
fn log_rows(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A kill -9 between two pages of one `write` leaves the start of a line
/// with no newline (the kernel keeps the pages before the signal): `audit
/// verify` names it as a crash, not as tampering, and a proxy started on
/// the file drops it and chains on from the last whole line.
#[tokio::test]
async fn a_line_torn_by_a_crash_reads_as_a_crash_and_is_dropped_at_the_next_start() {
    let origin = Origin::http(ok_origin()).await;
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_path_buf();
    let log = dir.join("audit.jsonl").display().to_string();
    let (d, l) = (dir.clone(), log.clone());
    let mut proxy = TestProxy::start(move |c| {
        c.data_dir = d;
        c.audit.path = l;
        c.audit.checkpoint_lines = 10;
    })
    .await;
    let c = proxy.client();
    for i in 0..5 {
        get_ok(&c, &format!("http://127.0.0.1:{}/t{i}", origin.port())).await;
    }
    let path = proxy.audit_path.clone();
    proxy.stop().await;
    let key = pubkey(&dir);
    let whole = std::fs::read_to_string(&path).unwrap();
    let rows = log_rows(&path);
    // Half of a line like the others, as a write cut at a page leaves it.
    let torn = &rows[1][..rows[1].len() / 2];
    std::fs::write(&path, format!("{whole}{torn}")).unwrap();

    let (code, out) = verify(Some(&key), &[&path]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("torn:") && !out.contains("FAILED"), "{out}");
    assert!(out.contains(&format!("{} bytes", torn.len())), "{out}");

    // The same bytes in the middle of a file are tampering.
    let mid = data.path().join("mid.jsonl");
    std::fs::write(&mid, format!("{torn}\n{whole}")).unwrap();
    let (code, out) = verify(Some(&key), &[&mid]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAILED"), "{out}");
    std::fs::remove_file(&mid).unwrap();

    let mut proxy = TestProxy::start(move |c| {
        c.data_dir = dir;
        c.audit.path = log;
    })
    .await;
    get_ok(
        &proxy.client(),
        &format!("http://127.0.0.1:{}/after", origin.port()),
    )
    .await;
    proxy.stop().await;
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(&whole), "the whole lines before it stay");
    for line in text[whole.len()..].lines() {
        let parsed = serde_json::from_str::<serde_json::Value>(line);
        assert!(parsed.is_ok(), "the torn bytes are gone: {line}");
    }
    let (code, out) = verify(Some(&key), &[&path]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("last: clean shutdown"), "{out}");
}
