//! A log written by the version before checkpoint format 5 (format-4
//! checkpoints, whose line tree hashed each line's text), kept as it was
//! written: it verifies, its evidence verifies, and a file of it continued
//! by this version (format-5 seals over all its lines) verifies too.
//!
//! The fixture: `mannerly run` of that version (commit 883619d) with
//! `audit.checkpoint_lines = 4`, six requests to an nginx origin on
//! loopback under two host names, stopped cleanly; `audit evidence --host
//! localhost` of it; the data dir's `audit-key.pem` (a key made for this).

use mannerly_policy::identity::key_from_pem;
use mannerly_policy::{
    chain_line, parse_public_key, split_line, AuditRecord, Checkpoint, Commits, Evidence,
    EvidenceBuilder, FileTrees, Outcome, SealReason, Verifier, GENESIS,
};

const LOG: &str = include_str!("fixtures/audit-format4.jsonl");
const EVIDENCE: &str = include_str!("fixtures/audit-format4.evidence.json");
const KEY_PEM: &str = include_str!("fixtures/audit-format4-key.pem");
const PUBKEY: &str = "91673c5eafbac98cab2555c0bb373428e8d1ffe0a34774767f4bbba7cfd9fa18";

fn verify(lines: &[String]) -> mannerly_policy::Report {
    let mut v = Verifier::new(parse_public_key(PUBKEY));
    v.start_file("audit.jsonl");
    for l in lines {
        v.line(l);
    }
    v.finish(|_| None)
}

fn evidence(lines: &[String], host: &str) -> Evidence {
    let mut b = EvidenceBuilder::new(host);
    b.start_file("audit.jsonl").unwrap();
    for l in lines {
        b.line(l).unwrap();
    }
    b.finish().unwrap()
}

fn old_lines() -> Vec<String> {
    LOG.lines().map(str::to_string).collect()
}

#[test]
fn the_old_log_and_its_evidence_still_verify() {
    let lines = old_lines();
    let report = verify(&lines);
    assert_eq!(report.problems, vec![]);
    assert!(report.ends_sealed());
    assert_eq!(report.files[0].last_format, 4);
    let key = parse_public_key(PUBKEY).unwrap();
    // The evidence file the old version wrote.
    let old: Evidence = serde_json::from_str(EVIDENCE).unwrap();
    assert_eq!(old.verify(&key).unwrap().lines, 4);
    // Evidence made now from the old log: text leaves, no states.
    let now = evidence(&lines, "localhost");
    assert_eq!(now.verify(&key).unwrap().lines, 4);
    assert!(now.files[0].lines.iter().all(|l| l.state.is_none()));
}

/// The writer at start-up rebuilds the file's trees from its lines
/// (`audit/files.rs`), appends, and seals in format 5.
#[test]
fn the_old_file_continued_gets_format_5_seals_over_all_its_lines() {
    let mut lines = old_lines();
    let mut trees = FileTrees::default();
    let mut prev = GENESIS.to_string();
    for l in &lines {
        let (content, chain) = split_line(l).unwrap();
        trees.line(l, &content, chain);
        prev = chain.to_string();
    }
    let rec = AuditRecord {
        ts: "2026-12-06T08:00:00.000Z".into(),
        id: "later-1".into(),
        method: "GET".into(),
        url: "http://localhost:19581/later".into(),
        host: "localhost".into(),
        outcome: Some(Outcome::Fetched),
        host_seq: Some(trees.next_seq("localhost")),
        ..Default::default()
    };
    let (line, chain) = chain_line(&prev, &rec.to_json());
    trees.record("localhost", &line, &chain);
    lines.push(line);
    let key = key_from_pem(KEY_PEM).unwrap();
    let commits = Commits {
        continues: GENESIS.to_string(),
        heads: trees.heads(),
    };
    let ts = "2026-12-06T08:00:01.000Z".to_string();
    let n = trees.lines();
    let cp = Checkpoint::sign(&key, ts, SealReason::Shutdown, n, &chain, 4, 60, &commits);
    assert_eq!(cp.format, 5);
    let (line, chain) = chain_line(&chain, &cp.to_json());
    trees.checkpoint(&line, &chain);
    lines.push(line);

    let report = verify(&lines);
    assert_eq!(report.problems, vec![]);
    assert_eq!(report.files[0].last_format, 5);
    let ev = evidence(&lines, "localhost");
    assert!(ev.files[0].lines.iter().all(|l| l.state.is_some()));
    let summary = ev.verify(&parse_public_key(PUBKEY).unwrap()).unwrap();
    assert_eq!(summary.lines, 5);
    // 127.0.0.1's evidence shows none of localhost's lines.
    let other = serde_json::to_string(&evidence(&lines, "127.0.0.1")).unwrap();
    assert!(!other.contains("/later"));
}
