//! Any bytes as an HTML head and as X-Robots-Tag values, judged for two
//! identities: none may panic, a refusal must name what said it, and a
//! directive bound only with a word the site wrote.
//!
//! Shared by the cargo-fuzz target of the same name and by
//! `crates/policy/tests/fuzz_replay.rs`, which runs it without libFuzzer.

use mannerly_policy::prefs::page::{judge_page, scan_meta, MetaTag, Origin, Statement};
use mannerly_policy::robots::Purpose;

/// Panics when `data` breaks a property.
pub fn check(data: &[u8]) {
    // The first line is the field's value, the rest the body's prefix.
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let field = String::from_utf8_lossy(&data[..split]);
    let body = data.get(split + 1..).unwrap_or_default();
    for whole in [true, false] {
        let scan = scan_meta(body, whole);
        for tag in &scan.tags {
            assert!(tag.at < body.len());
            assert!(body[tag.at..].len() >= 5);
        }
        let mut statements: Vec<Statement<'_>> = scan.tags.iter().map(MetaTag::statement).collect();
        statements.push(Statement {
            origin: Origin::Field("x-robots-tag"),
            name: None,
            text: &field,
        });
        let ids: &[(&str, &[Purpose])] = &[
            ("ExampleBot", &[Purpose::Search]),
            ("ExampleBot-AI", &[Purpose::AiTrain, Purpose::AiInput]),
        ];
        let judged = judge_page(&statements, ids, whole);
        if let Some(refusal) = &judged.refusal {
            let text = refusal.to_string();
            assert!(text.contains("robots directive"));
            let lower = refusal.said().text.to_ascii_lowercase();
            assert!(
                lower.contains("noai") || lower.contains("noimageai"),
                "{text}"
            );
        }
        for d in &judged.record.directives {
            let d = d.as_str();
            let said = statements.iter().any(|s| {
                s.text.to_ascii_lowercase().contains(d)
                    || (s.text.to_ascii_lowercase().contains("none")
                        && (d == "noindex" || d == "nofollow"))
            });
            assert!(said, "{d} bound but never written");
        }
    }
}
