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
