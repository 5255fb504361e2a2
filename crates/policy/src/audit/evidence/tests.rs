use ed25519_dalek::SigningKey;

use super::*;
use crate::audit::checkpoint::Commits;
use crate::audit::{chain_line, AuditRecord};
use crate::Outcome;

/// Writes a log as the proxy's writer does: `host_seq` on every record,
/// format-3 checkpoints over the file's trees.
struct Log {
    key: SigningKey,
    prev: String,
    start: String,
    trees: FileTrees,
    files: Vec<Vec<String>>,
}

impl Log {
    fn new() -> Log {
        Log {
            key: SigningKey::from_bytes(&[9; 32]),
            prev: GENESIS.into(),
            start: GENESIS.into(),
            trees: FileTrees::default(),
            files: vec![Vec::new()],
        }
    }

    fn file(&mut self) -> &mut Vec<String> {
        self.files.last_mut().unwrap()
    }

    fn record(&mut self, host: &str, path: &str) {
        let rec = AuditRecord {
            ts: "2026-01-01T00:00:00.000Z".into(),
            id: format!("{host}{path}"),
            method: "GET".into(),
            url: format!("http://{host}{path}"),
            host: host.into(),
            outcome: Some(Outcome::Fetched),
            host_seq: Some(self.trees.next_seq(host)),
            ..Default::default()
        };
        let (line, chain) = chain_line(&self.prev, &rec.to_json());
        self.trees.record(host, &line, &chain);
        self.prev = chain;
        self.file().push(line);
    }

    fn seal(&mut self, why: SealReason) {
        let commits = Commits {
            continues: self.start.clone(),
            heads: self.trees.heads(),
        };
        let lines = self.trees.lines();
        let ts = "2026-01-01T00:00:01.000Z".to_string();
        let cp = Checkpoint::sign(&self.key, ts, why, lines, &self.prev, 4, 10, &commits);
        let (line, chain) = chain_line(&self.prev, &cp.to_json());
        self.trees.checkpoint(&line, &chain);
        self.prev = chain;
        self.file().push(line);
    }

    fn rotate(&mut self) {
        self.seal(SealReason::Rotation);
        self.files.push(Vec::new());
        self.trees = FileTrees::default();
        self.start = self.prev.clone();
        self.seal(SealReason::Continuation);
    }

    fn evidence(&self, host: &str, files: &[usize]) -> Evidence {
        let mut b = EvidenceBuilder::new(host);
        for &i in files {
            b.start_file(&format!("audit{i}.jsonl")).unwrap();
            for l in &self.files[i] {
                b.line(l).unwrap();
            }
        }
        b.finish().unwrap()
    }
}

/// a.test and b.test interleaved over two files, the last ending on a
/// shutdown seal after an interval one.
fn crawl() -> Log {
    let mut log = Log::new();
    for i in 0..5 {
        log.record("a.test", &format!("/a{i}"));
        log.record("b.test", &format!("/secret-b{i}"));
    }
    log.seal(SealReason::Interval);
    log.record("a.test", "/a5");
    log.rotate();
    for i in 6..9 {
        log.record("b.test", &format!("/secret-b{i}"));
        log.record("a.test", &format!("/a{i}"));
    }
    log.seal(SealReason::Interval);
    log.record("a.test", "/a9");
    log.seal(SealReason::Shutdown);
    log
}

fn key(log: &Log) -> VerifyingKey {
    log.key.verifying_key()
}

#[test]
fn evidence_for_one_host_verifies_and_shows_no_other_host() {
    let log = crawl();
    let ev = log.evidence("a.test", &[0, 1]);
    let summary = ev.verify(&key(&log)).unwrap();
    assert_eq!(summary.lines, 10);
    assert!(summary.starts_log);
    assert_eq!(summary.files.len(), 2);
    assert_eq!(summary.files[1].3, SealReason::Shutdown);
    let text = serde_json::to_string(&ev).unwrap();
    assert!(
        !text.contains("b.test") && !text.contains("secret-b"),
        "{text}"
    );
    // Through its text form too, as the site owner gets it.
    let back: Evidence = serde_json::from_str(&text).unwrap();
    assert_eq!(back.verify(&key(&log)), Ok(summary));
}

/// Format 5 proves a line through the state after the chain value before
/// it, not that value: the chain values of b.test's lines (whose host
/// entry holds its last one) appear nowhere but where a checkpoint seals
/// one, as they did before format 5.
#[test]
fn the_lines_states_show_no_chain_value_of_another_host() {
    let log = crawl();
    let ev = log.evidence("a.test", &[0, 1]);
    assert!(ev
        .files
        .iter()
        .flat_map(|f| &f.lines)
        .all(|l| l.state.is_some()));
    let sealed: Vec<String> = ev
        .files
        .iter()
        .filter_map(|f| split_line(&f.checkpoint.line))
        .filter_map(|(c, _)| serde_json::from_str::<Checkpoint>(&c).ok())
        .map(|cp| cp.sealed)
        .collect();
    let text = serde_json::to_string(&ev).unwrap();
    let others = log
        .files
        .iter()
        .flatten()
        .filter(|l| l.contains("\"host\":\"b.test\""));
    for line in others {
        let (_, chain) = split_line(line).unwrap();
        assert!(
            sealed.iter().any(|s| s == chain) || !text.contains(chain),
            "{chain}"
        );
    }
    // A state that is not the one before the line does not prove it.
    let mut forged = ev.clone();
    forged.files[0].lines[1].state = forged.files[0].lines[0].state.clone();
    assert!(matches!(
        forged.verify(&key(&log)),
        Err(EvidenceProblem::NotInLog { .. })
    ));
}

#[test]
fn a_dropped_line_is_named() {
    let log = crawl();
    let mut ev = log.evidence("a.test", &[0, 1]);
    let dropped = ev.files[0].lines.remove(2);
    let next = ev.files[0].lines[2].index + 1;
    assert!(dropped.index + 1 < next);
    assert_eq!(
        ev.verify(&key(&log)),
        Err(EvidenceProblem::LeftOut {
            file: "audit0.jsonl".into(),
            line: next,
            expected: 3,
            found: 4
        })
    );
}

#[test]
fn a_dropped_last_line_is_caught_by_the_count() {
    let log = crawl();
    let mut ev = log.evidence("a.test", &[0, 1]);
    ev.files[1].lines.pop();
    let err = ev.verify(&key(&log)).unwrap_err();
    assert!(
        matches!(
            err,
            EvidenceProblem::Count {
                committed: 4,
                given: 3,
                ..
            }
        ),
        "{err}"
    );
    // Nor can the host's leaf be made to say 3: it is signed.
    ev.files[1].host_leaf.as_mut().unwrap().seq = 3;
    let err = ev.verify(&key(&log)).unwrap_err();
    assert!(matches!(err, EvidenceProblem::HostLeaf { .. }), "{err}");
}

#[test]
fn an_edited_line_is_named() {
    let log = crawl();
    let mut ev = log.evidence("a.test", &[0, 1]);
    let l = &mut ev.files[0].lines[1];
    l.line = l.line.replace("\"status\":null", "\"status\":200");
    let line = l.index + 1;
    let err = ev.verify(&key(&log)).unwrap_err();
    assert_eq!(
        err,
        EvidenceProblem::NotInLog {
            file: "audit0.jsonl".into(),
            line,
            id: "a.test/a1".into()
        }
    );
    assert!(err
        .to_string()
        .contains(&format!("line {line} (id a.test/a1)")));
}

#[test]
fn a_genuine_line_of_another_host_is_refused() {
    let log = crawl();
    let mut ev = log.evidence("a.test", &[0, 1]);
    // b.test's own evidence gives its lines with valid proofs.
    let other = log.evidence("b.test", &[0, 1]).files[0].lines[0].clone();
    ev.files[0].lines.insert(0, other.clone());
    assert_eq!(
        ev.verify(&key(&log)),
        Err(EvidenceProblem::OtherHost {
            file: "audit0.jsonl".into(),
            line: other.index + 1,
            host: "a.test".into()
        })
    );
}

#[test]
fn another_key_is_refused() {
    let log = crawl();
    let ev = log.evidence("a.test", &[0, 1]);
    let err = ev
        .verify(&SigningKey::from_bytes(&[1; 32]).verifying_key())
        .unwrap_err();
    assert!(
        matches!(err, EvidenceProblem::BadSignature { line: 13, .. }),
        "{err}"
    );
}

#[test]
fn a_missing_file_is_found() {
    let mut log = crawl();
    log.rotate();
    log.record("a.test", "/a10");
    log.seal(SealReason::Shutdown);
    let ev = log.evidence("a.test", &[0, 2]);
    assert_eq!(
        ev.verify(&key(&log)),
        Err(EvidenceProblem::NotContinued {
            file: "audit2.jsonl".into()
        })
    );
    let summary = log.evidence("a.test", &[1, 2]).verify(&key(&log)).unwrap();
    assert!(!summary.starts_log);
}

#[test]
fn lines_after_the_last_checkpoint_are_counted_not_proven() {
    let mut log = Log::new();
    log.record("a.test", "/1");
    log.seal(SealReason::Interval);
    log.record("a.test", "/2");
    let ev = log.evidence("a.test", &[0]);
    assert_eq!(ev.files[0].lines.len(), 1);
    assert_eq!(ev.files[0].unsealed, 1);
    assert_eq!(ev.verify(&key(&log)).unwrap().unsealed, 1);
}

/// a.test in the first and last files, absent from the middle one.
fn with_a_file_without_a() -> Log {
    let mut log = crawl();
    log.rotate();
    for i in 0..3 {
        log.record("b.test", &format!("/secret-b-mid{i}"));
        log.record("c.test", &format!("/c{i}"));
    }
    log.rotate();
    log.record("a.test", "/a10");
    log.seal(SealReason::Shutdown);
    log
}

#[test]
fn a_file_without_the_site_is_proven_so_and_its_lines_cannot_be_dropped() {
    let log = with_a_file_without_a();
    let ev = log.evidence("a.test", &[0, 1, 2, 3]);
    let summary = ev.verify(&key(&log)).unwrap();
    assert_eq!(summary.lines, 11);
    assert_eq!(summary.absent_files, vec!["audit2.jsonl".to_string()]);
    assert!(summary.empty_files.is_empty());
    let text = serde_json::to_string(&ev).unwrap();
    assert!(
        !text.contains("b.test") && !text.contains("c.test"),
        "{text}"
    );

    // The site's lines of the second file emptied and its leaf dropped:
    // no proof of absence can be made for a host the file holds.
    let mut cut = ev.clone();
    cut.files[1].lines.clear();
    cut.files[1].host_leaf = None;
    let err = cut.verify(&key(&log)).unwrap_err();
    assert_eq!(
        err,
        EvidenceProblem::NotShownAbsent {
            file: "audit1.jsonl".into(),
            line: cut.files[1].checkpoint.index + 1,
            host: "a.test".into()
        }
    );
    // Nor does another file's absence proof (genuine there) fit here.
    cut.files[1].absent = ev.files[2].absent.clone();
    assert!(matches!(
        cut.verify(&key(&log)),
        Err(EvidenceProblem::NotShownAbsent { .. })
    ));
    // An absence proof for another host's key does not enclose this one.
    let mut other = ev.clone();
    other.files[2].absent = log.evidence("d.test", &[2]).files[0].absent.clone();
    let d_encloses_a = {
        let a = other.files[2].absent.as_ref().unwrap();
        let k = |h: &str| unhex::<32>(h).unwrap();
        encloses(&k(&a.key), &k(&a.next), &host_key("a.test"))
    };
    if !d_encloses_a {
        assert!(matches!(
            other.verify(&key(&log)),
            Err(EvidenceProblem::NotShownAbsent { .. })
        ));
    }
}

#[test]
fn an_earlier_checkpoint_of_the_last_file_is_not_taken_for_the_end() {
    let log = crawl();
    // The evidence maker stops at the last file's interval checkpoint,
    // leaving out a.test's line after it, and says nothing is unsealed.
    let last = log.files[1].clone();
    let at = last
        .iter()
        .position(|l| l.contains("\"why\":\"interval\""))
        .unwrap();
    let mut b = EvidenceBuilder::new("a.test");
    b.start_file("audit0.jsonl").unwrap();
    for l in &log.files[0] {
        b.line(l).unwrap();
    }
    b.start_file("audit1.jsonl").unwrap();
    for l in &last[..=at] {
        b.line(l).unwrap();
    }
    let ev = b.finish().unwrap();
    assert_eq!(ev.files[1].unsealed, 0);
    let summary = ev.verify(&key(&log)).unwrap();
    // Without a witness it does not pass for the end of the log.
    assert_eq!(summary.end, Some(SealReason::Interval));
    // The witness's newest head is the shutdown seal after it.
    let head_line = last.last().unwrap();
    let (content, chain) = split_line(head_line).unwrap();
    let head: Checkpoint = serde_json::from_str(&content).unwrap();
    let err = ev.witnessed(chain, &head).unwrap_err();
    assert!(
        matches!(&err, EvidenceProblem::EndsEarly { file, .. } if file == "audit1.jsonl"),
        "{err}"
    );
    // The honest evidence reaches it.
    let honest = log.evidence("a.test", &[0, 1]);
    assert_eq!(
        honest.verify(&key(&log)).unwrap().end,
        Some(SealReason::Shutdown)
    );
    assert_eq!(honest.witnessed(chain, &head), Ok(()));
    // A witness whose newest head is of a later file than the evidence holds.
    let later = with_a_file_without_a();
    let (content, chain) = split_line(later.files[3].last().unwrap()).unwrap();
    let newer: Checkpoint = serde_json::from_str(&content).unwrap();
    let short = later.evidence("a.test", &[0, 1, 2]);
    assert!(matches!(
        short.witnessed(chain, &newer),
        Err(EvidenceProblem::WitnessBeyond { .. })
    ));
}
