use super::*;

/// The report's first example: an opt-out for every file of the server.
const EVERYTHING: &str = r#"[
  {
  "location": "/",
  "tdm-reservation": 1
  }
]"#;

/// The report's second example: three groups of files (word for word).
const THREE_GROUPS: &str = include_str!("../../../../tests/corpus/tdmrep/three-groups.json");

const TRAIN: &[Purpose] = &[Purpose::AiTrain];

/// The deciding rule's index and reservation for `url`.
fn decides(file: &TdmFile, url: &str) -> Option<(usize, Option<bool>)> {
    file.rule_for(url).map(|r| (r.index, r.reservation))
}

#[test]
fn the_reports_first_example_reserves_every_path() {
    let file = TdmFile::parse(EVERYTHING.as_bytes());
    assert_eq!(file.problem(), None);
    for url in ["/", "/a", "/a/b.pdf?x=1", "https://provider.com/any/thing"] {
        assert_eq!(decides(&file, url), Some((1, Some(true))), "{url}");
    }
    let judged = file.judge("/paper.pdf", TRAIN);
    assert_eq!(
        judged.refusal.map(|r| r.to_string()).as_deref(),
        Some("ai-train refused by tdm-reservation (tdmrep.json rule 1: location /, tdm-reservation 1)")
    );
    assert_eq!(
        judged.record.tdm_policy, None,
        "the provider offers no policy"
    );
}

#[test]
fn the_reports_second_example_decides_each_group_and_leaves_the_rest_unset() {
    let file = TdmFile::parse(THREE_GROUPS.as_bytes());
    let cases = [
        // PDF documents: reserved, no policy.
        ("/directory-a/report.pdf", Some((1, Some(true)))),
        ("/directory-a/", Some((1, Some(true)))),
        // HTML pages: reserved, with a policy.
        ("/directory-b/html/index.html", Some((2, Some(true)))),
        // JPEG images: not reserved.
        ("/directory-b/images/photo.jpg", Some((3, Some(false)))),
        ("/directory-b/images/sub/photo.jpg", Some((3, Some(false)))),
        // `*.jpg` is not anchored: the pattern's end is reached first.
        ("/directory-b/images/photo.jpg.txt", Some((3, Some(false)))),
        // Other images, other directories: no rule, unset.
        ("/directory-b/images/photo.png", None),
        ("/directory-b/", None),
        ("/directory-a", None),
        ("/directory-c/x", None),
        // Matching is case-sensitive.
        ("/Directory-A/report.pdf", None),
    ];
    for (url, want) in cases {
        assert_eq!(decides(&file, url), want, "{url}");
    }
    let html = file.judge(
        "/directory-b/html/index.html",
        &[Purpose::Search, Purpose::AiInput],
    );
    assert_eq!(html.refusal.map(|r| r.what()), Some("ai-input"));
    assert_eq!(
        html.record.tdm_policy.as_deref(),
        Some("https://provider.com/policies/policy.json")
    );
    assert_eq!(
        html.record.sources,
        vec!["tdmrep.json rule 2: location /directory-b/html/, tdm-reservation 1".to_string()]
    );
    let jpg = file.judge("/directory-b/images/photo.jpg", TRAIN);
    assert_eq!(jpg.refusal, None);
    assert_eq!(jpg.record.ai_train, Stance::Allowed);
    let png = file.judge("/directory-b/images/photo.png", TRAIN);
    assert_eq!(png.refusal, None);
    assert!(png.record.is_empty(), "no rule: nothing said");
    // A search crawl is not refused by a reservation.
    assert_eq!(
        file.judge("/directory-a/x.pdf", &[Purpose::Search]).refusal,
        None
    );
}

#[test]
fn the_first_matching_rule_decides_even_when_a_later_one_is_longer() {
    let file = TdmFile::parse(
        br#"[{"location": "/", "tdm-reservation": 0},
             {"location": "/private/", "tdm-reservation": 1}]"#,
    );
    assert_eq!(decides(&file, "/private/x"), Some((1, Some(false))));
    let file = TdmFile::parse(
        br#"[{"location": "/private/", "tdm-reservation": 1},
             {"location": "/", "tdm-reservation": 0}]"#,
    );
    assert_eq!(decides(&file, "/private/x"), Some((1, Some(true))));
    assert_eq!(decides(&file, "/public"), Some((2, Some(false))));
}

#[test]
fn patterns_use_the_robots_txt_syntax() {
    let file = TdmFile::parse(
        br#"[{"location": "/this/path/exactly$", "tdm-reservation": 1},
             {"location": "/this/*/then", "tdm-reservation": 1},
             {"location": "/path/foo-%24", "tdm-reservation": 1},
             {"location": "/caf%C3%A9/", "tdm-reservation": 1},
             {"location": "*.pdf$", "tdm-reservation": 1}]"#,
    );
    let cases = [
        ("/this/path/exactly", Some(1)),
        ("/this/path/exactly/not", None),
        ("/this/a/b/then/more", Some(2)),
        ("/this/then", None),
        // The report's escaping example: a literal `$` is `%24`.
        ("https://provider.com/path/foo-$", Some(3)),
        // Percent-encoding is normalised on both sides.
        ("/café/menu", Some(4)),
        ("/caf%c3%a9/menu", Some(4)),
        ("/docs/a.pdf", Some(5)),
        ("/docs/a.pdf?download=1", None),
    ];
    for (url, want) in cases {
        assert_eq!(file.rule_for(url).map(|r| r.index), want, "{url}");
    }
}

#[test]
fn values_other_than_one_and_zero_leave_the_reservation_unset() {
    let file = TdmFile::parse(
        br#"[{"location": "/a/", "tdm-reservation": 2},
             {"location": "/b/", "tdm-reservation": true},
             {"location": "/c/", "tdm-reservation": "1",
              "tdm-policy": "https://x.example/p.json"},
             {"location": "/d/", "tdm-reservation": "0",
              "tdm-policy": "https://x.example/p.json"},
             {"location": "/e/"},
             {"location": "/", "tdm-reservation": 1}]"#,
    );
    // A matching rule with a protocol error decides "unset": later rules
    // are not consulted.
    for url in ["/a/x", "/b/x", "/e/x"] {
        let judged = file.judge(url, TRAIN);
        assert_eq!(judged.refusal, None, "{url}");
        assert!(judged.record.is_empty(), "{url}");
    }
    let c = file.judge("/c/x", TRAIN);
    assert!(c.refusal.is_some());
    assert_eq!(
        c.record.tdm_policy.as_deref(),
        Some("https://x.example/p.json")
    );
    let d = file.judge("/d/x", TRAIN);
    assert_eq!(d.refusal, None);
    assert_eq!(d.record.tdm_policy, None, "no policy beside a 0");
    assert!(file.judge("/z", TRAIN).refusal.is_some());
}

#[test]
fn what_is_not_a_rule_array_reserves_nothing_and_says_why() {
    for body in [
        &b"<html>Not found</html>"[..],
        b"",
        br#"{"location": "/", "tdm-reservation": 1}"#,
        b"[1, 2]",
    ] {
        let file = TdmFile::parse(body);
        assert!(file.rules().is_empty(), "{body:?}");
        assert_eq!(file.judge("/x", TRAIN).refusal, None, "{body:?}");
        assert!(file.problem().is_some(), "{body:?}");
    }
    assert!(TdmFile::parse(b"{}")
        .problem()
        .unwrap()
        .contains("not a JSON array"));
    assert!(TdmFile::parse(b"[1, 2]")
        .problem()
        .unwrap()
        .contains("2 rule(s)"));
    // A rule without a location (or an empty one) is dropped; the others stand.
    let file = TdmFile::parse(
        br#"[{"tdm-reservation": 1}, {"location": "", "tdm-reservation": 1},
             {"location": 7, "tdm-reservation": 1},
             {"location": "/kept/", "tdm-reservation": 1}]"#,
    );
    assert_eq!(file.rules().len(), 1);
    assert_eq!(decides(&file, "/kept/x"), Some((4, Some(true))));
    assert_eq!(decides(&file, "/other"), None);
    assert_eq!(TdmFile::parse(b"[]").problem(), None);
}
