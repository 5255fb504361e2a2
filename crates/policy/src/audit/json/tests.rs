use crate::budget::{Announced, AnnouncedBy};
use crate::robots::Robots;
use crate::{AuditRecord, Outcome};

/// What `serde_json` writes for the record (the `Serialize` the struct
/// derives): the bytes every log before the hand-written writer holds.
fn by_serde(r: &AuditRecord) -> Vec<u8> {
    serde_json::to_vec(r).unwrap()
}

fn by_hand(r: &AuditRecord) -> Vec<u8> {
    let mut out = b"an earlier line\n".to_vec();
    r.write_json(&mut out);
    out.split_off(16)
}

fn text(i: usize) -> String {
    let odd = [
        "plain",
        "quote \" and \\ back",
        "line\nbreak\ttab\u{1}\u{1f}",
        "caf\u{e9} \u{1f600} \u{7f} /",
    ];
    odd[i % odd.len()].to_string()
}

/// Every field set, with text that needs escaping and text that does not.
fn full(i: usize) -> AuditRecord {
    let robots = Robots::parse(b"User-agent: *\nContent-Usage: train-ai=n\n");
    let floats = [0.5, 1.0, 1e-7, f64::NAN, 1e21, -0.0, 123.456];
    let some = |k: usize| Some(text(i + k));
    AuditRecord {
        ts: text(i),
        sent: some(1),
        id: text(i + 2),
        attempt: Some(3),
        retry_of: some(3),
        retried_by: some(4),
        client: some(5),
        user: some(6),
        method: "GET".into(),
        url: text(i + 7),
        host: text(i + 8),
        group: some(9),
        agent: some(10),
        outcome: Some(Outcome::Fetched),
        would: Some(Outcome::SignalRefused),
        status: Some(200),
        target_status: Some(429),
        rule: some(11),
        reason: some(12),
        source: Some("upstream"),
        waited_ms: Some(u64::MAX),
        robots_ms: Some(0),
        upstream_ms: Some(17),
        rate: Some(floats[i % floats.len()]),
        ceiling: Some(floats[(i + 1) % floats.len()]),
        retry_after: some(13),
        pause_s: Some(floats[(i + 2) % floats.len()]),
        bytes: Some(1024),
        received: Some(5),
        saved_bytes: Some(1024),
        cache: Some("revalidated"),
        prefs: Some(robots.preferences("x", "/").record()),
        signed: i.is_multiple_of(2),
        state: Some("shared"),
        announced: Some(Announced {
            by: AnnouncedBy::Ratelimit,
            limit: Some(10),
            window_s: None,
            remaining: Some(0),
            reset_s: Some(30),
        }),
        price: some(14),
        pay_scheme: Some("x402"),
        offered: some(15),
        charged: some(16),
        pay_tx: some(17),
        pay_limit: Some("per_day"),
        pay_error: some(18),
        saved_charge: some(19),
        keyid: some(20),
        signature_asked: some(21),
        signature_not_resent: some(22),
        user_agent: some(23),
        host_seq: Some(42),
        distress: Some("503"),
        baseline_ms: Some(7),
        collapsed_into: some(24),
        wait_s: Some(30),
        wait_by: Some("client"),
    }
}

#[test]
fn the_hand_written_line_is_serde_jsons_byte_for_byte() {
    let empty = AuditRecord::default();
    assert_eq!(by_hand(&empty), by_serde(&empty));
    for i in 0..8 {
        let mut r = full(i);
        assert_eq!(
            String::from_utf8(by_hand(&r)).unwrap(),
            String::from_utf8(by_serde(&r)).unwrap(),
            "record {i}"
        );
        // Fields left out and fields written as null, among set ones.
        (r.sent, r.attempt, r.group, r.rate, r.prefs) = (None, None, None, None, None);
        (r.announced, r.host_seq, r.wait_by, r.keyid) = (None, None, None, None);
        assert_eq!(by_hand(&r), by_serde(&r), "record {i}, some fields unset");
    }
}
