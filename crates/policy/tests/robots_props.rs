//! Invariants of the robots.txt matcher over generated files and URLs.

use mannerly_policy::robots::{product_token, Purpose, Robots};
use proptest::prelude::*;

/// Path segments from a small alphabet so that rules and URLs collide often,
/// with the characters that need care: `%`-escapes, non-ASCII, `*`, `$`, `?`.
fn segment() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "a",
        "b",
        "ab",
        "x.html",
        "%41",
        "%2f",
        "%7e",
        "ツ",
        "~",
        "q?s=1",
        "p$",
        "*",
        "",
        "robots.txt",
    ])
    .prop_map(str::to_string)
}

fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(segment(), 0..5).prop_map(|segs| format!("/{}", segs.join("/")))
}

fn pattern() -> impl Strategy<Value = String> {
    (path(), any::<bool>()).prop_map(|(p, anchored)| if anchored { format!("{p}$") } else { p })
}

fn agent() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["", "FooBot", "foobot", "BarBot", "Other"]).prop_map(str::to_string)
}

#[derive(Debug, Clone)]
enum Line {
    Agent(String),
    Rule(bool, String),
    Other(String),
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        1 => prop::sample::select(vec!["*", "FooBot", "barbot"]).prop_map(|a| Line::Agent(a.to_string())),
        4 => (any::<bool>(), pattern()).prop_map(|(allow, p)| Line::Rule(allow, p)),
        1 => prop::sample::select(vec!["", "# comment", "Sitemap: /s.xml", "Crawl-delay: 3", "Unknown: x", "Content-Signal: ai-train=no"])
            .prop_map(|s| Line::Other(s.to_string())),
    ]
}

fn render(lines: &[Line]) -> String {
    let mut s = String::new();
    for line in lines {
        match line {
            Line::Agent(a) => s.push_str(&format!("User-agent: {a}\n")),
            Line::Rule(true, p) => s.push_str(&format!("Allow: {p}\n")),
            Line::Rule(false, p) => s.push_str(&format!("Disallow: {p}\n")),
            Line::Other(o) => s.push_str(&format!("{o}\n")),
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parser_and_matcher_never_panic_on_arbitrary_bytes(
        body in prop::collection::vec(any::<u8>(), 0..2048),
        url in ".{0,64}",
        ua in ".{0,32}",
    ) {
        let robots = Robots::parse(&body);
        let token = product_token(&ua);
        let verdict = robots.check(token, &url);
        // Whatever the bytes, a disallow is always explained by a rule.
        prop_assert!(verdict.allowed || verdict.rule.is_some());
        let _ = robots.crawl_delay(token);
        let _ = robots.signal_check(token, &url, &[Purpose::Search, Purpose::AiInput, Purpose::AiTrain]);
        prop_assert!(robots.content_signals(token).all(|s| s.line >= 1));
    }

    #[test]
    fn adding_an_allow_never_disallows(
        lines in prop::collection::vec(line(), 0..24),
        at in any::<prop::sample::Index>(),
        allow in pattern(),
        agent in agent(),
        url in path(),
    ) {
        let before = Robots::parse(render(&lines).as_bytes());
        let mut more = lines.clone();
        // Inserted at the top or right after a rule, where it joins rules
        // already there. Anywhere else it may end a User-agent list (RFC
        // 9309 §2.2: an Allow line closes the list) and split a group, and
        // then the agents before it lose the group's rules, Allows as well
        // as Disallows: `User-agent: barbot` / `Allow: /a` / `User-agent: *`
        // / `Disallow: /a` / `Allow: /` leaves barbot without `Allow: /`.
        let spots: Vec<usize> = std::iter::once(0)
            .chain((0..more.len()).filter(|&i| matches!(more[i], Line::Rule(..))).map(|i| i + 1))
            .collect();
        let pos = spots[at.index(spots.len())];
        more.insert(pos, Line::Rule(true, allow));
        let after = Robots::parse(render(&more).as_bytes());
        if before.is_allowed(&agent, &url) {
            prop_assert!(after.is_allowed(&agent, &url), "{}", render(&more));
        }
    }

    #[test]
    fn robots_txt_is_always_allowed(lines in prop::collection::vec(line(), 0..24), agent in agent(), query in "[a-z=&]{0,8}") {
        let robots = Robots::parse(format!("User-agent: *\nDisallow: /\n{}", render(&lines)).as_bytes());
        prop_assert!(robots.is_allowed(&agent, "/robots.txt"));
        let full = format!("https://example.com/robots.txt?{query}");
        prop_assert!(robots.is_allowed(&agent, &full));
    }

    #[test]
    fn disallowing_the_exact_path_disallows_it(
        url in path(),
        others in prop::collection::vec(pattern(), 0..8),
        agent in agent(),
    ) {
        prop_assume!(url != "/robots.txt");
        let mut body = String::from("User-agent: *\n");
        for p in &others {
            body.push_str(&format!("Disallow: {p}\n"));
        }
        // `*` and `$` in the URL are literal: escape them so the rule means the path itself.
        let rule = url.replace('*', "%2A").replace('$', "%24");
        body.push_str(&format!("Disallow: {rule}$\n"));
        let robots = Robots::parse(body.as_bytes());
        let verdict = robots.check(&agent, &url);
        prop_assert!(!verdict.allowed, "{body}");
        prop_assert!(verdict.rule.is_some_and(|r| !r.allow));
    }

    #[test]
    fn the_answer_does_not_depend_on_line_endings(lines in prop::collection::vec(line(), 0..24), agent in agent(), url in path()) {
        let lf = render(&lines);
        let crlf = lf.replace('\n', "\r\n");
        let cr = lf.replace('\n', "\r");
        let a = Robots::parse(lf.as_bytes());
        let expected = a.check(&agent, &url);
        for body in [crlf, cr] {
            let b = Robots::parse(body.as_bytes());
            let got = b.check(&agent, &url);
            prop_assert_eq!(got.allowed, expected.allowed);
            prop_assert_eq!(got.rule.map(|r| r.line), expected.rule.map(|r| r.line));
        }
    }

    #[test]
    fn index_agrees_with_a_naive_scan(lines in prop::collection::vec(line(), 0..24), url in path()) {
        // Reference without the index: which rules match on their own, and
        // which of two wins head to head.
        let body = format!("User-agent: *\n{}", render(&lines.iter().filter(|l| !matches!(l, Line::Agent(_))).cloned().collect::<Vec<_>>()));
        let robots = Robots::parse(body.as_bytes());
        let verdict = robots.check("Nobody", &url);
        let single: Vec<_> = robots.rules().iter().filter(|r| {
            let one = Robots::parse(format!("User-agent: *\n{r}\n").as_bytes());
            one.check("Nobody", &url).rule.is_some()
        }).collect();
        if url.split('?').next() == Some("/robots.txt") {
            prop_assert!(verdict.allowed);
        } else if single.is_empty() {
            prop_assert!(verdict.rule.is_none());
        } else {
            let Some(chosen) = verdict.rule else {
                return Err(TestCaseError::fail("a rule matches but none decided"));
            };
            prop_assert!(single.iter().any(|r| (r.line, r.allow) == (chosen.line, chosen.allow)));
            prop_assert_eq!(verdict.allowed, chosen.allow);
            // The winner beats every other matching rule head to head (in file order).
            for other in &single {
                let (first, second) = if other.line < chosen.line { (*other, chosen) } else { (chosen, *other) };
                let pair = Robots::parse(format!("User-agent: *\n{first}\n{second}\n").as_bytes());
                prop_assert_eq!(pair.is_allowed("Nobody", &url), chosen.allow, "{} vs {}", chosen, other);
            }
        }
    }
}
