use super::*;

fn field(text: &str) -> Statement<'_> {
    Statement {
        origin: Origin::Field("x-robots-tag"),
        name: None,
        text,
    }
}

const SEARCH: &[Purpose] = &[Purpose::Search];
const TRAIN: &[Purpose] = &[Purpose::AiTrain];

#[test]
fn noai_refuses_a_training_crawl_and_names_the_field() {
    let judged = judge_page(&[field("noai")], &[("ExampleBot", TRAIN)], false);
    let refusal = judged.refusal.expect("noai refuses ai-train");
    assert_eq!(
        refusal.to_string(),
        "ai-train refused by robots directive (header x-robots-tag: noai)"
    );
    assert_eq!(judged.record.get(Purpose::AiTrain), Stance::Disallowed);
    assert_eq!(judged.record.get(Purpose::AiInput), Stance::Disallowed);
    assert_eq!(judged.record.get(Purpose::Search), Stance::Unknown);
    assert_eq!(judged.record.directives, ["noai"]);
    assert_eq!(judged.record.sources, ["header x-robots-tag: noai"]);
    // A search crawl is not refused by it, only told.
    let judged = judge_page(&[field("noai")], &[("ExampleBot", SEARCH)], false);
    assert!(judged.refusal.is_none());
}

#[test]
fn noindex_and_nofollow_are_recorded_not_refused() {
    let judged = judge_page(
        &[field("none, noarchive")],
        &[("ExampleBot", SEARCH)],
        false,
    );
    assert!(judged.refusal.is_none());
    assert_eq!(judged.record.directives, ["noindex", "nofollow"]);
    assert!(judged.record.ignored.is_empty());
    assert_eq!(judged.record.get(Purpose::Search), Stance::Unknown);
}

#[test]
fn a_rule_for_an_agent_binds_that_token_only() {
    let statements = [
        field("examplebot-ai: noai"),
        field("otherbot: noindex, nofollow"),
    ];
    let ids: &[(&str, &[Purpose])] = &[("ExampleBot", SEARCH), ("ExampleBot-AI", TRAIN)];
    let judged = judge_page(&statements, ids, false);
    let refusal = judged.refusal.expect("ExampleBot-AI's noai");
    assert_eq!(refusal.what(), "ai-train");
    assert_eq!(judged.record.directives, ["noai"]);
    // The search identity alone: nothing binds it.
    let judged = judge_page(&statements, &ids[..1], false);
    assert!(judged.refusal.is_none());
    assert!(judged.record.directives.is_empty());
    assert!(judged.record.sources.is_empty());
    // Agent names are case-insensitive; a rule after one stays in its scope.
    let judged = judge_page(&[field("EXAMPLEBOT: noindex, nofollow")], &ids[..1], false);
    assert_eq!(judged.record.directives, ["noindex", "nofollow"]);
}

#[test]
fn what_cannot_be_read_is_ignored_with_a_reason() {
    let statements = [
        field("max-snippet: 20, unavailable_after: 25 Jun 2010 15:00:00 PST"),
        field("bad agent: noai"),
        field("noindx"),
        field("__ns_ai: noai"),
        field(",, ,"),
    ];
    let judged = judge_page(&statements, &[("ExampleBot", TRAIN)], false);
    assert!(judged.refusal.is_none(), "{:?}", judged.refusal);
    assert_eq!(
        judged.record.ignored,
        [
            "header x-robots-tag: \"bad agent\" is no agent token",
            "header x-robots-tag: unknown rule \"noindx\"",
        ]
    );
    assert_eq!(judged.record.get(Purpose::AiTrain), Stance::Unknown);
}

#[test]
fn noimageai_refuses_an_image_only() {
    let judged = judge_page(&[field("noimageai")], &[("ExampleBot", TRAIN)], false);
    assert!(judged.refusal.is_none());
    assert_eq!(judged.record.directives, ["noimageai"]);
    let judged = judge_page(&[field("noimageai")], &[("ExampleBot", TRAIN)], true);
    assert_eq!(judged.refusal.map(|r| r.what()), Some("ai-train"));
}

#[test]
fn meta_tags_are_read_from_the_head() {
    let page = br#"<!doctype html><html><head>
<!-- <meta name="robots" content="nofollow"> -->
<meta charset="utf-8">
<META NAME=robots CONTENT='noai, noindex'>
<meta content="noindex" name="ExampleBot"/>
<meta name="description" content="noai">
</head><body><meta name="robots" content="nofollow"></body></html>"#;
    let scan = scan_meta(page, true);
    assert!(scan.ignored.is_empty(), "{:?}", scan.ignored);
    let got: Vec<(&str, &str)> = scan
        .tags
        .iter()
        .map(|t| (t.name.as_str(), t.content.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("robots", "noai, noindex"),
            ("examplebot", "noindex"),
            ("description", "noai")
        ]
    );
    let statements: Vec<_> = scan.tags.iter().map(MetaTag::statement).collect();
    let judged = judge_page(&statements, &[("ExampleBot", TRAIN)], false);
    assert!(
        judged.record.ignored.is_empty(),
        "{:?}",
        judged.record.ignored
    );
    let refusal = judged.refusal.expect("noai in the head");
    assert_eq!(
        refusal.said().to_string(),
        format!("<meta> at byte {}: noai, noindex", scan.tags[0].at)
    );
    assert_eq!(&page[scan.tags[0].at..scan.tags[0].at + 5], b"<META");
    assert_eq!(judged.record.directives, ["noindex", "noai"]);
    // OtherBot is bound by the robots tag only.
    let judged = judge_page(&statements, &[("OtherBot", SEARCH)], false);
    assert_eq!(judged.record.directives, ["noindex", "noai"]);
}

#[test]
fn a_meta_past_the_prefix_is_not_read_and_says_so() {
    let mut page = b"<html><head><title>x</title>".to_vec();
    page.extend(std::iter::repeat_n(b' ', 100));
    page.extend(br#"<meta name="robots" content="noai"></head>"#);
    let scan = scan_meta(&page[..64], false);
    assert!(scan.tags.is_empty());
    assert_eq!(
        scan.ignored,
        ["the page's head runs past the first 64 bytes read: a <meta> after them is not read"]
    );
    // A tag cut by the prefix's end is not read either.
    let cut = page.len() - 12;
    let scan = scan_meta(&page[..cut], false);
    assert!(scan.tags.is_empty());
    // The whole page: read.
    let scan = scan_meta(&page, true);
    assert_eq!(scan.tags.len(), 1);
    // A head closed inside the prefix leaves nothing unread.
    let scan = scan_meta(b"<head></head><body>", false);
    assert!(scan.ignored.is_empty());
}

#[test]
fn odd_bytes_never_panic() {
    for page in [
        &b"<meta"[..],
        b"<meta >",
        b"<meta name=>",
        b"<meta name=\"robots\" content=\"",
        b"<meta name='robots content=noai>",
        b"<!--",
        b"<\xff\xfe meta name=robots>",
        b"<meta\tname=robots\tcontent=noai\t/>",
    ] {
        let scan = scan_meta(page, true);
        let statements: Vec<_> = scan.tags.iter().map(MetaTag::statement).collect();
        let _ = judge_page(&statements, &[("x", TRAIN)], false);
    }
    let scan = scan_meta(b"<meta\tname=robots\tcontent=noai\t/>", true);
    assert_eq!(scan.tags[0].content, "noai");
}

#[test]
fn a_head_is_closed_by_its_end_tag_or_a_body_in_any_case() {
    assert!(head_closed(b"<html><head><title>t</title></HEAD>", 0));
    assert!(head_closed(b"<html><title>t</title><Body>", 0));
    assert!(!head_closed(
        b"<html><head><title>t</title><meta name=robots>",
        0
    ));
    assert!(!head_closed(b"", 0));
    assert!(!head_closed(b"<bod", 0));
}

#[test]
fn a_head_closed_across_frames_is_found_at_every_split() {
    let page = b"<html><head><meta name=robots content=noai></head><body>text</body>";
    for k in 0..=page.len() {
        let whole = head_closed(&page[..k], 0);
        for judged in 0..=k {
            // The reader asks again only while the head was still open.
            if head_closed(&page[..judged], 0) {
                continue;
            }
            assert_eq!(
                head_closed(&page[..k], judged),
                whole,
                "{k} bytes, {judged} judged before"
            );
        }
    }
}
