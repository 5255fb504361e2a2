//! Evidence for one site, through the binary: `mannerly audit evidence`
//! writes a site's lines with their proofs, `mannerly audit
//! verify-evidence` accepts it, and names the line when one was dropped,
//! edited, or taken from another host, or when the key is another.

use super::support::*;

fn pubkey(dir: &std::path::Path) -> String {
    let (code, out) = mannerly(
        &["audit", "pubkey"],
        &[("MANNERLY_DATA_DIR", dir.to_str().unwrap())],
    );
    assert_eq!(code, 0, "{out}");
    out.trim().to_string()
}

fn evidence(host: &str, out: &std::path::Path, log: &std::path::Path) -> serde_json::Value {
    let (code, text) = mannerly(
        &[
            "audit",
            "evidence",
            "--host",
            host,
            "--out",
            out.to_str().unwrap(),
            log.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{text}");
    serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
}

fn check(key: &str, ev: &serde_json::Value, at: &std::path::Path) -> (i32, String) {
    std::fs::write(at, serde_json::to_string_pretty(ev).unwrap()).unwrap();
    mannerly(
        &[
            "audit",
            "verify-evidence",
            "--pubkey",
            key,
            at.to_str().unwrap(),
        ],
        &[],
    )
}

#[tokio::test]
async fn evidence_for_one_site_verifies_and_every_tampering_is_named() {
    let origin = Origin::http(ok_origin()).await;
    let port = origin.port();
    let mut proxy = TestProxy::start(|c| {
        c.audit.checkpoint_lines = 4;
        resolve_to_loopback(c, &format!("a.test:{port}"), port);
        resolve_to_loopback(c, &format!("b.test:{port}"), port);
    })
    .await;
    let c = proxy.client();
    for i in 0..6 {
        get_ok(&c, &format!("http://a.test:{port}/page{i}")).await;
        get_ok(&c, &format!("http://b.test:{port}/b-private-{i}")).await;
    }
    let log = proxy.audit_path.clone();
    proxy.stop().await;
    let key = pubkey(proxy.dir.path());
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("a.test.evidence.json");
    let ev = evidence("a.test", &out, &log);

    // robots.txt and six pages, each proven; nothing of b.test in the file.
    let lines = ev["files"][0]["lines"].as_array().unwrap().clone();
    assert_eq!(lines.len(), 7, "{ev:#}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("b.test") && !text.contains("b-private"));
    let (code, said) = mannerly(
        &[
            "audit",
            "verify-evidence",
            "--pubkey",
            &key,
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("verified: 7 lines of a.test"), "{said}");
    let at = tmp.path().join("tampered.json");
    let line_no = |i: usize| lines[i]["index"].as_u64().unwrap() + 1;

    // A line dropped: the next one's number shows the gap.
    let mut dropped = ev.clone();
    dropped["files"][0]["lines"]
        .as_array_mut()
        .unwrap()
        .remove(3);
    let (code, said) = check(&key, &dropped, &at);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains(&format!("line {}:", line_no(4))) && said.contains("left out"),
        "{said}"
    );
    // The last line dropped: the signed count shows it.
    let mut last = ev.clone();
    last["files"][0]["lines"].as_array_mut().unwrap().pop();
    let (code, said) = check(&key, &last, &at);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains("counts 7 lines") && said.contains("left out"),
        "{said}"
    );

    // A line edited: its proof no longer leads to the signed head.
    let mut edited = ev.clone();
    let l = edited["files"][0]["lines"][2]["line"].as_str().unwrap();
    edited["files"][0]["lines"][2]["line"] = l.replace("\"status\":200", "\"status\":404").into();
    let (code, said) = check(&key, &edited, &at);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains(&format!("line {}", line_no(2))) && said.contains("not in the sealed log"),
        "{said}"
    );

    // A genuine line of b.test, with its genuine proof, slipped in.
    let other = evidence("b.test", &tmp.path().join("b.json"), &log);
    let theirs = other["files"][0]["lines"][1].clone();
    let mut added = ev.clone();
    let list = added["files"][0]["lines"].as_array_mut().unwrap();
    let at_index = list
        .iter()
        .position(|l| l["index"].as_u64() > theirs["index"].as_u64())
        .unwrap();
    list.insert(at_index, theirs.clone());
    let (code, said) = check(&key, &added, &at);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains(&format!("line {}:", theirs["index"].as_u64().unwrap() + 1))
            && said.contains("another host"),
        "{said}"
    );

    // Another key: nothing verifies.
    let other_dir = tempfile::tempdir().unwrap();
    let (code, said) = check(&pubkey(other_dir.path()), &ev, &at);
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("signature does not verify"), "{said}");
}

fn verify_evidence(
    key: &str,
    file: &std::path::Path,
    witness: Option<&std::path::Path>,
) -> (i32, String) {
    let mut args = vec!["audit", "verify-evidence", "--pubkey", key];
    if let Some(w) = witness {
        args.extend(["--witness", w.to_str().unwrap()]);
    }
    args.push(file.to_str().unwrap());
    mannerly(&args, &[])
}

/// A file without a line of the site is proven so, and one whose lines
/// were emptied (its leaf dropped) fails; evidence stopped at an earlier
/// checkpoint of the last file, saying nothing is unsealed, does not
/// pass for the log's end, and fails against the witness's heads.
#[tokio::test]
async fn a_site_left_out_of_a_file_or_cut_short_fails() {
    let origin = Origin::http(ok_origin()).await;
    let port = origin.port();
    let mut proxy = TestProxy::start(|c| {
        // Every batch of lines ends its file: files of one host each.
        c.audit.rotate_bytes = 1;
        resolve_to_loopback(c, &format!("a.test:{port}"), port);
        resolve_to_loopback(c, &format!("b.test:{port}"), port);
    })
    .await;
    let c = proxy.client();
    get_ok(&c, &format!("http://a.test:{port}/first")).await;
    for i in 0..3 {
        get_ok(&c, &format!("http://b.test:{port}/b-private-{i}")).await;
    }
    get_ok(&c, &format!("http://a.test:{port}/last")).await;
    let dir = proxy.audit_path.parent().unwrap().to_path_buf();
    proxy.stop().await;
    let key = pubkey(proxy.dir.path());
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("a.json");
    let ev = evidence("a.test", &out, &dir);
    let (code, said) = verify_evidence(&key, &out, None);
    assert_eq!(code, 0, "{said}");
    assert!(said.contains("verified: 3 lines of a.test"), "{said}");
    assert!(said.contains("proven by each file's host tree"), "{said}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("b.test") && !text.contains("b-private"));

    // The lines of a file that holds some emptied, the leaf dropped.
    let files = ev["files"].as_array().unwrap();
    let with = files
        .iter()
        .position(|f| !f["lines"].as_array().unwrap().is_empty())
        .unwrap();
    let mut cut = ev.clone();
    cut["files"][with]["lines"] = serde_json::json!([]);
    cut["files"][with]["host_leaf"] = serde_json::Value::Null;
    let at = tmp.path().join("cut.json");
    let (code, said) = check(&key, &cut, &at);
    assert_eq!(code, 1, "{said}");
    let name = files[with]["name"].as_str().unwrap();
    assert!(
        said.contains(&format!(
            "FAILED: {name}: the evidence holds no line of a.test"
        )),
        "{said}"
    );

    // The evidence made from the log cut at the continuation checkpoint
    // that starts the last file with lines of a.test, before those lines.
    let last_with = files
        .iter()
        .rposition(|f| !f["lines"].as_array().unwrap().is_empty())
        .unwrap();
    let short_dir = tempfile::tempdir().unwrap();
    for f in &files[..last_with] {
        let n = f["name"].as_str().unwrap();
        std::fs::copy(dir.join(n), short_dir.path().join(n)).unwrap();
    }
    let cut_file =
        std::fs::read_to_string(dir.join(files[last_with]["name"].as_str().unwrap())).unwrap();
    let first = format!("{}\n", cut_file.lines().next().unwrap());
    assert!(first.contains("\"why\":\"continuation\""), "{first}");
    std::fs::write(short_dir.path().join("audit.jsonl"), &first).unwrap();
    let short = tmp.path().join("short.json");
    let ev_short = evidence("a.test", &short, short_dir.path());
    assert_eq!(
        ev_short["files"].as_array().unwrap().last().unwrap()["unsealed"],
        0
    );
    let (code, said) = verify_evidence(&key, &short, None);
    assert_eq!(code, 3, "{said}");
    assert!(said.contains("not where a log ends"), "{said}");
    let current = proxy.audit_path.clone();
    // What a witness holds: every checkpoint line, as written.
    let heads: String = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().starts_with("audit.jsonl."))
        .map(|f| f.path())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .chain([current])
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .filter(|l| l.contains("\"outcome\":\"checkpoint\""))
                .map(|l| format!("{l}\n"))
                .collect::<Vec<_>>()
        })
        .collect();
    let witness = tmp.path().join("heads.jsonl");
    std::fs::write(&witness, heads).unwrap();
    let (code, said) = verify_evidence(&key, &short, Some(&witness));
    assert_eq!(code, 1, "{said}");
    assert!(said.contains("the log goes on past the evidence"), "{said}");
    let (code, said) = verify_evidence(&key, &out, Some(&witness));
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("to the witness's newest checkpoint"),
        "{said}"
    );
}
