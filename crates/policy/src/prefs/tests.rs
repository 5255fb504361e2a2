use super::*;
use crate::robots::Robots;

#[test]
fn combination_any_no_wins_then_any_yes_else_unknown() {
    use Stance::*;
    let all = [Allowed, Disallowed, Unknown];
    for a in all {
        for b in all {
            let expected = if a == Disallowed || b == Disallowed {
                Disallowed
            } else if a == Allowed || b == Allowed {
                Allowed
            } else {
                Unknown
            };
            assert_eq!(a.combine(b), expected, "{a} + {b}");
            assert_eq!(b.combine(a), expected, "{b} + {a}");
        }
    }
}

#[test]
fn the_vocabulary_mapping_is_one_table_read_both_ways() {
    assert_eq!(
        Purpose::ALL.map(|p| (p.as_str(), p.aipref_key())),
        [
            ("search", Some("search")),
            ("ai-input", None),
            ("ai-train", Some("train-ai"))
        ]
    );
    for purpose in Purpose::ALL {
        assert_eq!(Purpose::from_signal_key(purpose.as_str()), Some(purpose));
        if let Some(key) = purpose.aipref_key() {
            assert_eq!(Purpose::from_aipref_key(key), Some(purpose));
        }
    }
    // `ai-use` left the vocabulary; its refusal is still heard.
    assert_eq!(Purpose::from_aipref_key("ai-use"), None);
    assert_eq!(Purpose::from_signal_key("AI-Train"), Some(Purpose::AiTrain));
    assert_eq!(Purpose::from_aipref_key("ai-train"), None);
    assert_eq!(Purpose::from_signal_key("train-ai"), None);
    // Both vocabularies reach the same purpose in a robots.txt.
    let r = Robots::parse(b"User-agent: *\nContent-Usage: ai-use=n\n");
    assert_eq!(
        r.preferences("x", "/").stance(Purpose::AiInput),
        Stance::Disallowed
    );
}

#[test]
fn declared_use_reads_reference_full_or_nothing() {
    assert_eq!(DeclaredUse::parse(""), Some(DeclaredUse::Undeclared));
    assert_eq!(
        DeclaredUse::parse("reference"),
        Some(DeclaredUse::Reference)
    );
    assert_eq!(DeclaredUse::parse("full"), Some(DeclaredUse::Full));
    assert_eq!(DeclaredUse::parse("Full"), None);
    let bad: Result<DeclaredUse, _> = serde_json::from_str("\"all\"");
    assert!(bad
        .err()
        .is_some_and(|e| e.to_string().contains("\"reference\", \"full\"")));
}

fn stances(r: &Robots, url: &str) -> [Stance; 3] {
    let p = r.preferences("x", url);
    Purpose::ALL.map(|purpose| p.stance(purpose))
}

#[test]
fn content_usage_path_longest_match_wins_within_the_vocabulary() {
    let r = Robots::parse(
        b"User-agent: *\nContent-Usage: train-ai=y\nContent-Usage: /articles/ train-ai=n\nContent-Usage: /articles/free/ train-ai=y\nContent-Usage: /tie/ train-ai=y\nContent-Usage: /tie/ train-ai=n\nContent-Usage: /*.pdf$ search=n\n",
    );
    use Stance::*;
    assert_eq!(stances(&r, "/"), [Unknown, Unknown, Allowed]);
    assert_eq!(stances(&r, "/articles/x"), [Unknown, Unknown, Disallowed]);
    assert_eq!(stances(&r, "/articles/free/x"), [Unknown, Unknown, Allowed]);
    assert_eq!(stances(&r, "/tie/x"), [Unknown, Unknown, Disallowed]);
    assert_eq!(stances(&r, "/a/b.pdf"), [Disallowed, Unknown, Allowed]);
    let refusal = r.preferences("x", "/articles/x").refusal(
        &[Purpose::Search, Purpose::AiTrain],
        DeclaredUse::Undeclared,
    );
    assert_eq!(
        refusal.map(|r| r.to_string()),
        Some(
            "ai-train refused by Content-Usage (robots.txt line 3: Content-Usage: /articles/ train-ai=n)"
                .to_string()
        )
    );
    // A longer line that does not state the purpose does not hide a shorter one that does.
    let r =
        Robots::parse(b"User-agent: *\nContent-Usage: train-ai=n\nContent-Usage: /a/ search=y\n");
    assert_eq!(stances(&r, "/a/x"), [Allowed, Unknown, Disallowed]);
}

#[test]
fn the_two_vocabularies_combine_so_that_any_no_wins() {
    use Stance::*;
    // Cloudflare's managed default site-wide, an AI Preferences yes deeper down:
    // the no still stands.
    let r = Robots::parse(
        b"User-agent: *\nContent-Signal: search=yes, ai-train=no, use=reference\nContent-Usage: /open/ train-ai=y, ai-use=y\nContent-Usage: search=n\n",
    );
    assert_eq!(stances(&r, "/open/x"), [Disallowed, Allowed, Disallowed]);
    let p = r.preferences("x", "/open/x");
    // The refusal names the vocabulary that said no and its line.
    let refusal = p.refused_purpose(&[Purpose::AiInput, Purpose::AiTrain]);
    assert_eq!(
        refusal.map(|r| (r.purpose, r.line, r.vocabulary)),
        Some((Purpose::AiTrain, 2, Vocabulary::ContentSignal))
    );
    let refusal = p.refused_purpose(&[Purpose::Search]);
    assert_eq!(
        refusal.map(|r| (r.line, r.vocabulary)),
        Some((4, Vocabulary::ContentUsage))
    );
    let record = p.record();
    assert_eq!(
        record.to_string(),
        "search=disallowed ai-input=allowed ai-train=disallowed use=reference"
    );
    assert_eq!(
        record.sources,
        [
            "robots.txt line 2: Content-Signal: search=yes, ai-train=no, use=reference",
            "robots.txt line 4: Content-Usage: search=n",
            "robots.txt line 3: Content-Usage: /open/ train-ai=y, ai-use=y",
        ]
    );
    let json = serde_json::to_value(&record).ok();
    assert_eq!(
        json.as_ref()
            .and_then(|j| j.get("ai-train"))
            .and_then(|v| v.as_str()),
        Some("disallowed")
    );
}

#[test]
fn use_reference_refuses_a_crawl_that_declares_full_use() {
    let r = Robots::parse(
        b"User-agent: *\nContent-Signal: search=yes, ai-train=no, use=reference\nContent-Signal: /full/ use=full\n",
    );
    let p = r.preferences("x", "/page");
    assert_eq!(
        p.refusal(&[Purpose::Search], DeclaredUse::Full)
            .map(|r| r.to_string()),
        Some("use=full refused by Content-Signal (robots.txt line 2: Content-Signal: search=yes, ai-train=no, use=reference)".to_string())
    );
    assert_eq!(p.refusal(&[Purpose::Search], DeclaredUse::Reference), None);
    assert_eq!(p.refusal(&[Purpose::Search], DeclaredUse::Undeclared), None);
    // A purpose refusal is named first.
    assert!(matches!(
        p.refusal(&[Purpose::AiTrain], DeclaredUse::Full),
        Some(PrefsRefusal::Purpose {
            purpose: Purpose::AiTrain,
            ..
        })
    ));
    // A longer path saying `use=full` wins for its part of the site.
    assert_eq!(
        r.preferences("x", "/full/page")
            .refusal(&[], DeclaredUse::Full),
        None
    );
    // Nothing said about use: nothing refused.
    let r = Robots::parse(b"User-agent: *\nContent-Signal: search=yes\n");
    assert_eq!(
        r.preferences("x", "/").refusal(&[], DeclaredUse::Full),
        None
    );
}

#[test]
fn response_headers_are_judged_by_the_same_rule() {
    let judged = judge_response(
        &["ai-use=n"],
        &[],
        &[Purpose::Search, Purpose::AiInput],
        DeclaredUse::Undeclared,
    );
    assert_eq!(judged.record.get(Purpose::AiInput), Stance::Disallowed);
    assert_eq!(
        judged.refusal.map(|r| r.to_string()),
        Some("ai-input refused by Content-Usage (header Content-Usage: ai-use=n)".to_string())
    );
    assert_eq!(judged.record.sources, ["header Content-Usage: ai-use=n"]);

    // Not a declared purpose: recorded, not refused.
    let judged = judge_response(
        &["ai-use=n"],
        &[],
        &[Purpose::Search],
        DeclaredUse::Undeclared,
    );
    assert_eq!(judged.refusal, None);
    assert_eq!(judged.record.get(Purpose::AiInput), Stance::Disallowed);

    // Several lines and both fields: any no wins.
    let judged = judge_response(
        &["train-ai=y", "train-ai=n"],
        &["ai-train=yes, use=reference"],
        &[Purpose::AiTrain],
        DeclaredUse::Full,
    );
    assert_eq!(judged.record.get(Purpose::AiTrain), Stance::Disallowed);
    assert_eq!(judged.record.usage.as_deref(), Some("reference"));
    assert!(matches!(
        judged.refusal,
        Some(PrefsRefusal::Purpose {
            said: Said {
                text: "train-ai=n",
                ..
            },
            ..
        })
    ));
    let judged = judge_response(
        &[],
        &["use=reference"],
        &[Purpose::Search],
        DeclaredUse::Full,
    );
    assert_eq!(
        judged.refusal.map(|r| r.to_string()),
        Some(
            "use=full refused by Content-Signal (header Content-Signal: use=reference)".to_string()
        )
    );

    // Nothing stated: an empty record, nothing refused.
    let judged = judge_response(&["bogus"], &[], &Purpose::ALL, DeclaredUse::Full);
    assert!(judged.record.is_empty());
    assert_eq!(judged.refusal, None);
}

#[test]
fn records_merge_robots_then_headers() {
    let r = Robots::parse(b"User-agent: *\nContent-Signal: search=yes, use=full\n");
    let mut record = r.preferences("x", "/").record();
    let judged = judge_response(
        &["search=n"],
        &["use=reference"],
        &[],
        DeclaredUse::Undeclared,
    );
    record.merge(&judged.record);
    assert_eq!(record.search, Stance::Disallowed);
    assert_eq!(record.usage.as_deref(), Some("reference"));
    assert_eq!(record.sources.len(), 3);
}

#[test]
fn a_refusal_in_an_earlier_drafts_label_refuses_and_the_line_says_which_draft() {
    let judged = judge_response(
        &["train-genai=n, search=y"],
        &[],
        &[Purpose::Search, Purpose::AiTrain],
        DeclaredUse::Undeclared,
    );
    assert_eq!(
        judged.refusal.map(|r| r.to_string()).as_deref(),
        Some("ai-train refused by Content-Usage (header Content-Usage: train-genai=n, search=y)")
    );
    assert_eq!(
        judged.record.legacy,
        ["train-genai=n read as ai-train=n (label of draft-ietf-aipref-vocab-04)"]
    );
    let r = Robots::parse(b"User-agent: *\nContent-Usage: /a/ ai-output=n\n");
    let p = r.preferences("x", "/a/page");
    assert_eq!(p.stance(Purpose::AiInput), Stance::Disallowed);
    let record = p.record();
    assert_eq!(
        record.legacy,
        ["ai-output=n read as ai-input=n (label of draft-ietf-aipref-vocab-04)"]
    );
    let line = serde_json::to_value(&record).unwrap();
    assert_eq!(line["legacy"][0], record.legacy[0]);
    // Current labels only: no `legacy` key on the line.
    let current = Robots::parse(b"User-agent: *\nContent-Usage: train-ai=n\n");
    let line = serde_json::to_value(current.preferences("x", "/").record()).unwrap();
    assert!(line.get("legacy").is_none(), "{line}");
}

#[test]
fn use_immediate_refuses_reference_and_full_and_forbids_storing() {
    let r = Robots::parse(
        b"User-agent: *\nContent-Signal: use=reference\nContent-Signal: /live/ use=immediate\n",
    );
    let at = |url| r.preferences("x", url);
    for declared in [DeclaredUse::Reference, DeclaredUse::Full] {
        assert_eq!(
            at("/live/x").refusal(&[], declared).map(|r| r.to_string()),
            Some(format!(
                "use={} refused by Content-Signal (robots.txt line 3: Content-Signal: /live/ use=immediate)",
                declared.as_str()
            ))
        );
    }
    assert_eq!(at("/live/x").refusal(&[], DeclaredUse::Immediate), None);
    assert_eq!(at("/live/x").refusal(&[], DeclaredUse::Undeclared), None);
    assert!(at("/live/x").record().forbids_storing());
    // Elsewhere `reference` speaks: reference is allowed, full is not, and
    // the page may be stored.
    assert_eq!(at("/other").refusal(&[], DeclaredUse::Reference), None);
    assert!(at("/other").refusal(&[], DeclaredUse::Full).is_some());
    assert!(!at("/other").record().forbids_storing());

    // Headers: the most restrictive `use` of all lines stands, and merging
    // it with robots.txt's `reference` keeps `immediate`.
    let judged = judge_response(
        &[],
        &["use=full", "use=immediate", "use=reference"],
        &[],
        DeclaredUse::Reference,
    );
    assert_eq!(judged.record.usage.as_deref(), Some("immediate"));
    assert_eq!(judged.refusal.map(|r| r.what()), Some("use=reference"));
    let mut merged = at("/other").record();
    merged.merge(&judged.record);
    assert!(merged.forbids_storing());
    let mut other_way = judged.record.clone();
    other_way.merge(&at("/other").record());
    assert!(other_way.forbids_storing());
}
