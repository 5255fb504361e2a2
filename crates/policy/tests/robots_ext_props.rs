//! Invariants of what robots.txt says beyond its groups (issue 53), the
//! proptest versions of the `page_directives` and `visit_times` fuzz
//! targets: page-level directives, several tokens, namespaced selectors,
//! visit windows and quiet hours.

use std::time::{Duration, UNIX_EPOCH};

use mannerly_policy::prefs::page::{judge_page, scan_meta, MetaTag, Origin, Statement};
use mannerly_policy::robots::{Purpose, Robots};
use mannerly_policy::visit::{judge, Stated, Visit, Window};
use proptest::prelude::*;

const IDS: &[(&str, &[Purpose])] = &[
    ("ExampleBot", &[Purpose::Search]),
    ("ExampleBot-AI", &[Purpose::AiTrain]),
];

fn words() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "noindex",
            "nofollow",
            "none",
            "noai",
            "noimageai",
            "all",
            "max-snippet: 3",
            "examplebot:",
            "examplebot-ai:",
            "otherbot:",
            "__ns_x:",
            "bad bot:",
            "NOAI",
            ",",
            " ",
        ]),
        0..8,
    )
    .prop_map(|w| w.join(", "))
}

fn window() -> impl Strategy<Value = Window> {
    (0u16..1440, 0u16..1440).prop_map(|(start, end)| Window { start, end })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn page_directives_never_panic_and_refuse_only_with_noai(
        body in prop::collection::vec(any::<u8>(), 0..1024),
        field in words(),
        whole in any::<bool>(),
    ) {
        let scan = scan_meta(&body, whole);
        let mut statements: Vec<Statement<'_>> = scan.tags.iter().map(MetaTag::statement).collect();
        statements.push(Statement { origin: Origin::Field("x-robots-tag"), name: None, text: &field });
        let judged = judge_page(&statements, IDS, false);
        if let Some(refusal) = judged.refusal {
            let said = refusal.said().text.to_ascii_lowercase();
            prop_assert!(said.contains("noai"), "{said}");
            prop_assert_eq!(refusal.what(), "ai-train");
        }
        // The search identity alone is never refused.
        prop_assert!(judge_page(&statements, &IDS[..1], false).refusal.is_none());
    }

    #[test]
    fn meta_tags_in_html_are_found_wherever_the_head_puts_them(
        before in "[a-z >=\"/]{0,40}",
        content in words(),
    ) {
        let page = format!("<html><head>{before}<meta name=\"robots\" content=\"{content}\"></head>");
        let scan = scan_meta(page.as_bytes(), true);
        prop_assert_eq!(scan.tags.len(), 1);
        prop_assert_eq!(&scan.tags[0].content, &content);
    }

    #[test]
    fn a_namespaced_selector_changes_no_crawlers_verdict(
        rules in prop::collection::vec((any::<bool>(), "/[ab]{0,3}"), 1..6),
        url in "/[ab]{0,4}",
    ) {
        let body = |name: &str| {
            let mut s = format!("User-agent: {name}\n");
            for (allow, p) in &rules {
                s.push_str(&format!("{}: {p}\n", if *allow { "Allow" } else { "Disallow" }));
            }
            s.push_str("User-agent: *\nDisallow: /b\n");
            s
        };
        let plain = Robots::parse(body("OtherBot").as_bytes());
        let spaced = Robots::parse(body("__ns_other").as_bytes());
        for agent in ["FooBot", "", "__ns_other"] {
            prop_assert_eq!(plain.is_allowed(agent, &url), spaced.is_allowed(agent, &url));
        }
        // One token through check_each is check.
        let (_, v) = spaced.check_each(["FooBot"], &url).unwrap();
        prop_assert_eq!(v.allowed, spaced.is_allowed("FooBot", &url));
    }

    #[test]
    fn a_closed_host_is_open_when_it_says(
        visit in prop::collection::vec(prop::collection::vec(window(), 0..3), 0..3),
        quiet in prop::collection::vec(window(), 0..2),
        secs in 0u64..(1 << 34),
    ) {
        let stated = |w: &Window| Stated { window: *w, source: "s".into() };
        let visit: Vec<Vec<Stated>> = visit.iter().map(|set| set.iter().map(stated).collect()).collect();
        let quiet: Vec<Stated> = quiet.iter().map(stated).collect();
        let now = UNIX_EPOCH + Duration::from_secs(secs);
        if let Visit::Closed { opens_in, why } = judge(&visit, &quiet, now) {
            prop_assert!(opens_in > Duration::ZERO && opens_in <= Duration::from_secs(86_400));
            if !why.ends_with("no minute of the day is open") {
                prop_assert_eq!(judge(&visit, &quiet, now + opens_in), Visit::Open);
                // And not a minute before.
                let earlier = opens_in.saturating_sub(Duration::from_secs(60));
                if earlier > Duration::ZERO {
                    let before = judge(&visit, &quiet, now + earlier);
                    let closed = matches!(before, Visit::Closed { .. });
                    prop_assert!(closed, "open a minute early");
                }
            }
        }
    }
}
