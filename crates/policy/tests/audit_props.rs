//! The audit-line parser of `verify` and the Retry-After parser never
//! panic on hostile input; a log written by the chain verifies, and any
//! one changed byte is caught. (The cargo-fuzz targets in fuzz/ run the
//! same code without bounds.)

use std::time::{Duration, SystemTime};

use mannerly_policy::budget::parse_retry_after;
use mannerly_policy::{
    chain_line, AuditRecord, Checkpoint, Commits, FileTrees, SealReason, SigningKey, Verifier,
    GENESIS,
};
use proptest::prelude::*;

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7u8; 32])
}

proptest! {
    #[test]
    fn verify_never_panics_on_any_lines(lines in proptest::collection::vec(".{0,200}", 0..20)) {
        let mut v = Verifier::new(Some(key().verifying_key()));
        v.start_file("a");
        for l in &lines {
            v.line(l);
        }
        let _ = v.finish(|_| Some(0.0));
    }

    #[test]
    fn a_written_log_verifies_and_any_changed_byte_is_caught(
        urls in proptest::collection::vec("[ -~]{0,40}", 1..12),
        pick in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let k = key();
        let mut prev = GENESIS.to_string();
        let mut lines = Vec::new();
        let mut trees = FileTrees::default();
        for (i, u) in urls.iter().enumerate() {
            let rec = AuditRecord { id: format!("r{i}"), url: u.clone(), ..Default::default() };
            let (line, chain) = chain_line(&prev, &rec.to_json());
            trees.record("", &line, &chain);
            prev = chain;
            lines.push(line);
        }
        let commits = Commits { continues: GENESIS.to_string(), heads: trees.heads() };
        let cp = Checkpoint::sign(&k, "2026-01-01T00:00:00.000Z".into(), SealReason::Shutdown,
            lines.len() as u64, &prev, 1000, 10, &commits);
        let (line, _) = chain_line(&prev, &cp.to_json());
        lines.push(line);
        let run = |lines: &[String]| {
            let mut v = Verifier::new(Some(k.verifying_key()));
            v.start_file("log");
            for l in lines { v.line(l); }
            v.finish(|_| Some(0.0))
        };
        let report = run(&lines);
        prop_assert!(report.problems.is_empty(), "{:?}", report.problems);
        prop_assert_eq!(report.unsealed_tail(), 0);

        let all: String = lines.join("\n");
        let at = pick.index(all.len());
        let mut bytes = all.into_bytes();
        prop_assume!(bytes[at] != byte && bytes[at] != b'\n' && byte != b'\n');
        bytes[at] = byte;
        let text = String::from_utf8_lossy(&bytes).to_string();
        let changed: Vec<String> = text.split('\n').map(str::to_string).collect();
        prop_assume!(changed != lines);
        let report = run(&changed);
        prop_assert!(!report.problems.is_empty(), "a changed byte at {} went unnoticed", at);
    }

    #[test]
    fn retry_after_is_never_above_the_cap(raw in ".{0,60}", secs in 0u64..100_000) {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let max = Duration::from_secs(secs);
        if let Some(d) = parse_retry_after(&raw, wall, max) {
            prop_assert!(d <= max);
        }
    }
}
