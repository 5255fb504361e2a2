use super::*;

fn robots(body: &str) -> Robots {
    Robots::parse(body.as_bytes())
}

/// (allowed, "Rule: text", line, group) for compact assertions.
fn decide(
    r: &Robots,
    agent: &str,
    url: &str,
) -> (bool, Option<String>, Option<usize>, Option<String>) {
    let v = r.check(agent, url);
    (
        v.allowed,
        v.rule.map(|r| r.to_string()),
        v.rule.map(|r| r.line),
        v.group.map(str::to_string),
    )
}

#[test]
fn verdict_names_rule_line_and_group() {
    let r = robots("# site\nUser-agent: *\nDisallow: /private/\nAllow: /private/open\n");
    assert_eq!(
        decide(&r, "MyBot", "https://example.com/private/x?y"),
        (
            false,
            Some("Disallow: /private/".into()),
            Some(3),
            Some("*".into())
        )
    );
    assert_eq!(
        decide(&r, "MyBot", "/private/open/page"),
        (
            true,
            Some("Allow: /private/open".into()),
            Some(4),
            Some("*".into())
        )
    );
    assert_eq!(
        decide(&r, "MyBot", "/public"),
        (true, None, None, Some("*".into()))
    );
    assert_eq!(
        r.check("MyBot", "/private/x").to_string(),
        "disallowed by Disallow: /private/ (line 3, group *)"
    );
}

#[test]
fn a_verdict_without_a_rule_says_so() {
    for body in ["", "User-agent: OtherBot\nDisallow: /\n"] {
        assert_eq!(
            robots(body).check("MyBot", "/x").to_string(),
            "allowed: no rule applies",
            "{body:?}"
        );
    }
    assert_eq!(
        Robots::allow_all().check("MyBot", "/x").to_string(),
        "allowed: no rule applies"
    );
}

#[test]
fn no_group_for_agent_and_no_star_allows_everything() {
    let r = robots("User-agent: OtherBot\nDisallow: /\n");
    assert_eq!(decide(&r, "MyBot", "/x"), (true, None, None, None));
    assert!(!r.is_allowed("otherbot", "/x"));
}

#[test]
fn groups_with_the_same_token_are_merged_wherever_they_stand() {
    let r = robots(
        "User-agent: FooBot\nDisallow: /a\n\nUser-agent: *\nDisallow: /\n\nUser-agent: foobot\nDisallow: /b\n",
    );
    assert_eq!(
        decide(&r, "FOOBOT", "/a/1"),
        (
            false,
            Some("Disallow: /a".into()),
            Some(2),
            Some("FooBot".into())
        )
    );
    assert_eq!(
        decide(&r, "FooBot", "/b/1"),
        (
            false,
            Some("Disallow: /b".into()),
            Some(8),
            Some("FooBot".into())
        )
    );
    // FooBot's own groups apply, not `*`.
    assert!(r.is_allowed("FooBot", "/c"));
    assert!(!r.is_allowed("BarBot", "/c"));
}

#[test]
fn several_user_agent_lines_share_one_group_and_unknown_lines_do_not_split_it() {
    let r = robots("User-agent: a\nX-Unknown: 1\nSitemap: /s.xml\nUser-agent: b\nDisallow: /x\nUser-agent: c\nDisallow: /y\n");
    assert!(!r.is_allowed("a", "/x"));
    assert!(!r.is_allowed("b", "/x"));
    assert!(r.is_allowed("b", "/y"));
    assert!(!r.is_allowed("c", "/y"));
    assert!(r.is_allowed("c", "/x"));
}

#[test]
fn agent_token_is_exact_not_substring() {
    let r = robots("User-agent: Foo\nDisallow: /\n");
    assert!(!r.is_allowed("foo", "/x"));
    assert!(r.is_allowed("FooBot", "/x"));
    assert!(r.is_allowed("Fo", "/x"));
    // `Foo/1.2` names the product `Foo`; `Foo Bar` is no token at all.
    assert!(!robots("User-agent: Foo/1.2\nDisallow: /\n").is_allowed("Foo", "/x"));
    assert!(robots("User-agent: Foo Bar\nDisallow: /\n").is_allowed("Foo", "/x"));
}

#[test]
fn empty_agent_only_reads_star() {
    let r = robots("User-agent: FooBot\nDisallow: /\nUser-agent: *\nDisallow: /star\n");
    assert!(r.is_allowed("", "/x"));
    assert!(!r.is_allowed("", "/star"));
}

#[test]
fn rules_before_any_user_agent_are_ignored() {
    let r = robots("Disallow: /\nUser-agent: *\nDisallow: /x\n");
    assert!(r.is_allowed("a", "/y"));
    assert!(!r.is_allowed("a", "/x"));
}

#[test]
fn longest_match_wins_and_allow_wins_a_tie() {
    let r = robots("User-agent: *\nDisallow: /a\nAllow: /a/b\nDisallow: /a/b/c\nAllow: /same\nDisallow: /same\n");
    assert!(!r.is_allowed("x", "/a/z"));
    assert!(r.is_allowed("x", "/a/b/z"));
    assert!(!r.is_allowed("x", "/a/b/c/d"));
    assert_eq!(decide(&r, "x", "/same").1, Some("Allow: /same".into()));
    // Length of the pattern, not of the matched text: `/x/page.` (8) beats `/*.html` (7).
    let r = robots("User-agent: *\nDisallow: /*.html\nAllow: /x/page.\n");
    assert!(r.is_allowed("x", "/x/page.html"));
}

#[test]
fn wildcard_and_end_anchor() {
    let r =
        robots("User-agent: *\nDisallow: /*.pdf$\nDisallow: /*/print\nAllow: /$\nDisallow: /\n");
    assert!(r.is_allowed("x", "/"));
    assert!(!r.is_allowed("x", "/index.html"));
    let r = robots("User-agent: *\nDisallow: /*.pdf$\nDisallow: /*/print\n");
    assert!(!r.is_allowed("x", "/docs/a.pdf"));
    assert!(r.is_allowed("x", "/docs/a.pdf?download=1"));
    assert!(!r.is_allowed("x", "/a/b/print/page"));
    assert!(r.is_allowed("x", "/print"));
}

#[test]
fn percent_encoding_is_normalised_on_both_sides() {
    let r = robots("User-agent: *\nDisallow: /%7Ejoe/\nDisallow: /caf%c3%a9\nDisallow: /ツ\nDisallow: /a%2fb\n");
    assert!(!r.is_allowed("x", "/~joe/x"));
    assert!(!r.is_allowed("x", "/%7ejoe/x"));
    assert!(!r.is_allowed("x", "/café"));
    assert!(!r.is_allowed("x", "/caf%C3%A9"));
    assert!(!r.is_allowed("x", "/%E3%83%84"));
    assert!(!r.is_allowed("x", "/ツ"));
    // An encoded slash is not a slash.
    assert!(!r.is_allowed("x", "/a%2Fb"));
    assert!(r.is_allowed("x", "/a/b"));
}

#[test]
fn robots_txt_is_always_allowed() {
    let r = robots("User-agent: *\nDisallow: /\n");
    let v = r.check("x", "http://example.com/robots.txt");
    assert!(v.allowed);
    assert!(v.rule.is_none());
    assert!(r.is_allowed("x", "/robots.txt?x=1"));
    assert!(!r.is_allowed("x", "/robots.txt.bak"));
}

#[test]
fn empty_disallow_is_no_rule() {
    let r = robots("User-agent: *\nDisallow:\n");
    assert_eq!(
        decide(&r, "x", "/anything"),
        (true, None, None, Some("*".into()))
    );
    assert!(r.rules().is_empty());
}

#[test]
fn line_numbers_count_lf_crlf_and_cr_alike() {
    for body in [
        "User-agent: *\nAllow: /a\n\nDisallow: /b\n",
        "User-agent: *\r\nAllow: /a\r\n\r\nDisallow: /b\r\n",
        "User-agent: *\rAllow: /a\r\rDisallow: /b",
        "User-agent: *\r\nAllow: /a\n\rDisallow: /b",
    ] {
        let r = robots(body);
        assert_eq!(decide(&r, "x", "/b").2, Some(4), "{body:?}");
        assert_eq!(decide(&r, "x", "/a").2, Some(2), "{body:?}");
    }
}

#[test]
fn bom_is_skipped_and_lines_still_count_from_one() {
    let mut body = b"\xEF\xBB\xBFUser-agent: *\nDisallow: /x\n".to_vec();
    let r = Robots::parse(&body);
    assert_eq!(decide(&r, "a", "/x").2, Some(2));
    // A BOM cut short is skipped too.
    body.remove(2);
    assert!(!Robots::parse(&body).is_allowed("a", "/x"));
}

#[test]
fn only_the_first_500_kib_are_parsed() {
    let mut body = String::from("User-agent: *\n");
    while body.len() < MAX_ROBOTS_BYTES - 60 {
        body.push_str("# padding padding\n");
    }
    body.push_str("Disallow: /in\n");
    // This line straddles the limit: a rule cut in half would be a different
    // rule, so the partial line is dropped rather than read as `/straddl`.
    while body.len() < MAX_ROBOTS_BYTES - 8 {
        body.push(' ');
    }
    body.push_str("Disallow: /straddling\n");
    body.push_str("Disallow: /after\n");
    let r = robots(&body);
    assert!(!r.is_allowed("x", "/in"));
    assert!(r.is_allowed("x", "/straddling"));
    assert!(r.is_allowed("x", "/after"));
    assert_eq!(r.rules().len(), 1);
}

#[test]
fn invalid_utf8_is_decoded_lossily() {
    let r = Robots::parse(b"User-agent: *\nDisallow: /\xFF\xFEbad\nDisallow: /ok\n");
    assert!(!r.is_allowed("x", "/ok"));
    assert_eq!(decide(&r, "x", "/ok").2, Some(3));
}

#[test]
fn line_without_colon_and_comments_are_ignored() {
    let r = robots("User-agent: *\nDisallow /\nDisallow: /x # not /y\n# Disallow: /z\n");
    assert!(r.is_allowed("a", "/y"));
    assert!(r.is_allowed("a", "/z"));
    assert!(!r.is_allowed("a", "/x"));
    assert_eq!(r.rules()[0].pattern, "/x");
}

#[test]
fn crawl_delay_of_the_matched_group() {
    let r = robots(
        "User-agent: *\nDisallow: /a\nCrawl-delay: 2.5\n\nUser-agent: slow\nDisallow: /b\nCrawl-delay: 10\nCrawl-delay: 20\n\nUser-agent: none\nDisallow: /x\n",
    );
    assert_eq!(r.crawl_delay("anyone"), Some(2.5));
    assert_eq!(r.crawl_delay("SLOW"), Some(20.0));
    // A group without Crawl-delay does not inherit the `*` one.
    assert_eq!(r.crawl_delay("none"), None);
    for bad in ["-1", "NaN", "inf", "soon", "", "1,5"] {
        let r = robots(&format!("User-agent: *\nCrawl-delay: {bad}\n"));
        assert_eq!(r.crawl_delay("x"), None, "{bad:?}");
    }
    assert_eq!(
        robots("User-agent: *\nCrawl-delay: 0.25 # fast\n").crawl_delay("x"),
        Some(0.25)
    );
}

#[test]
fn sitemaps_are_global_in_any_position() {
    let r = robots("Sitemap: https://e.com/a.xml\nUser-agent: x\nSitemap: https://e.com/b.xml\nDisallow: /\nsitemap:https://e.com/c.xml\n");
    assert_eq!(
        r.sitemaps(),
        [
            "https://e.com/a.xml",
            "https://e.com/b.xml",
            "https://e.com/c.xml"
        ]
    );
    // A Sitemap line does not end the user-agent list either.
    assert!(!r.is_allowed("x", "/"));
}

const CLOUDFLARE: &str = "# As a condition of accessing this website, you agree to abide by\n\
# the following content signals:\n\
User-Agent: *\n\
Content-Signal: search=yes, ai-train=no\n\
Allow: /\n\
\n\
User-agent: Bot\n\
Content-Signal: search=yes, ai-input=no, use=reference, future-thing=maybe\n";

#[test]
fn content_signal_is_parsed_with_unknown_keys_kept() {
    let r = robots(CLOUDFLARE);
    let s: Vec<_> = r.content_signals("Bot").collect();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].line, 8);
    assert_eq!(s[0].search, Some(true));
    assert_eq!(s[0].ai_input, Some(false));
    assert_eq!(s[0].ai_train, None);
    assert_eq!(s[0].usage, Some(SignalUse::Reference));
    assert_eq!(
        s[0].other,
        [("future-thing".to_string(), "maybe".to_string())]
    );
    let star: Vec<_> = r.content_signals("Other").collect();
    assert_eq!(star.len(), 1);
    assert_eq!(star[0].text, "Content-Signal: search=yes, ai-train=no");
    // A Content-Signal line is a record of its group: the Allow after it stays in `*`.
    assert!(r.is_allowed("Other", "/"));
}

#[test]
fn content_signal_refusal_names_purpose_line_and_text() {
    let r = robots(CLOUDFLARE);
    let refusal = r.signal_check("Other", "/page", &[Purpose::Search, Purpose::AiTrain]);
    assert_eq!(
        refusal,
        Some(SignalRefusal {
            purpose: Purpose::AiTrain,
            line: 4,
            text: "Content-Signal: search=yes, ai-train=no",
            vocabulary: crate::prefs::Vocabulary::ContentSignal,
        })
    );
    assert_eq!(
        r.signal_check("Other", "/page", &[Purpose::Search, Purpose::AiInput]),
        None
    );
    // Bot's own group: ai-input refused, ai-train not stated.
    assert_eq!(
        r.signal_check("bot", "/", &[Purpose::AiTrain, Purpose::AiInput])
            .map(|s| s.purpose),
        Some(Purpose::AiInput)
    );
    // The first refused purpose, in the order declared.
    let r = robots("User-agent: *\nContent-Signal: search=no, ai-train=no\n");
    assert_eq!(
        r.signal_check("x", "/", &[Purpose::AiTrain, Purpose::Search])
            .map(|s| s.purpose),
        Some(Purpose::AiTrain)
    );
    assert_eq!(r.signal_check("x", "/robots.txt", &[Purpose::Search]), None);
}

#[test]
fn content_signal_path_prefix_longest_wins_and_no_wins_ties() {
    let r = robots(
        "User-agent: *\nContent-Signal: ai-train=no\nContent-Signal: /open/ ai-train=yes\nContent-Signal: /open/secret/ ai-train=no\nContent-Signal: /tie/ ai-train=yes\nContent-Signal: /tie/ ai-train=n\n",
    );
    let refused = |url: &str| {
        r.signal_check("x", url, &[Purpose::AiTrain])
            .map(|s| s.line)
    };
    assert_eq!(refused("/page"), Some(2));
    assert_eq!(refused("/open/page"), None);
    assert_eq!(refused("/open/secret/page"), Some(4));
    assert_eq!(refused("/tie/page"), Some(6));
    let s: Vec<_> = r.content_signals("x").collect();
    assert_eq!(s[1].path.as_deref(), Some("/open/"));
}

#[test]
fn content_signal_before_any_group_applies_to_everyone() {
    let r = robots("Content-Signal: ai-train=no\nUser-agent: Bot\nDisallow: /x\n");
    assert_eq!(
        r.signal_check("Bot", "/", &[Purpose::AiTrain])
            .map(|s| s.line),
        Some(1)
    );
    assert_eq!(
        r.signal_check("Else", "/", &[Purpose::AiTrain])
            .map(|s| s.line),
        Some(1)
    );
    // And it does not open a group: `Disallow: /x` is Bot's.
    assert!(r.is_allowed("Else", "/x"));
}

#[test]
fn content_signal_accepts_space_separated_pairs() {
    let r = robots("User-agent: *\nContent-Signal: search = yes , ai-input=yes ai-train=no\n");
    let s = r.content_signals("x").next().cloned();
    let s = s.as_ref();
    assert_eq!(s.and_then(|s| s.search), Some(true));
    assert_eq!(s.and_then(|s| s.ai_input), Some(true));
    assert_eq!(s.and_then(|s| s.ai_train), Some(false));
}

#[test]
fn purpose_serialises_as_its_signal_key() {
    assert_eq!(
        serde_json::to_string(&Purpose::AiTrain).ok().as_deref(),
        Some("\"ai-train\"")
    );
    let parsed: Result<Vec<Purpose>, _> = serde_json::from_str("[\"search\",\"ai-input\"]");
    assert_eq!(parsed.ok(), Some(vec![Purpose::Search, Purpose::AiInput]));
}

#[test]
fn product_token_of_user_agent_headers() {
    assert_eq!(
        product_token("Mozilla/5.0 (compatible; Googlebot/2.1)"),
        "Mozilla"
    );
    assert_eq!(product_token("MyBot/1.2"), "MyBot");
    assert_eq!(product_token("  python-requests/2.31"), "python-requests");
    assert_eq!(product_token("my_bot"), "my_bot");
    assert_eq!(product_token("Bot2/1"), "Bot");
    assert_eq!(product_token("(bad)"), "");
    assert_eq!(product_token(""), "");
    assert_eq!(product_token("ツbot"), "");
}

#[test]
fn allow_all_allows_everything() {
    let r = Robots::allow_all();
    assert_eq!(decide(&r, "x", "/anything"), (true, None, None, None));
    assert_eq!(r.crawl_delay("x"), None);
    assert!(r.sitemaps().is_empty());
}

// --- Group structure (RFC 9309 sec. 2.2): only rules end a user-agent list ---

#[test]
fn crawl_delay_between_user_agent_lines_does_not_split_the_group() {
    // As real sites write it: the three agents are one group.
    let r = robots(
        "User-agent: Slurp\nCrawl-delay: 2\nUser-agent: bingbot\nCrawl-delay: 2\nUser-agent: *\nDisallow: /wp-login.php\n",
    );
    for agent in ["Slurp", "bingbot", "OtherBot", ""] {
        assert_eq!(
            decide(&r, agent, "/wp-login.php"),
            (
                false,
                Some("Disallow: /wp-login.php".into()),
                Some(6),
                Some(if agent == "Slurp" || agent == "bingbot" {
                    agent.to_string()
                } else {
                    "*".to_string()
                })
            ),
            "{agent:?}"
        );
        // The records belong to the group they stand in: every agent of it.
        assert_eq!(r.crawl_delay(agent), Some(2.0), "{agent:?}");
    }
}

#[test]
fn content_signal_and_content_usage_do_not_end_the_user_agent_list() {
    let r = robots(
        "User-agent: a\nContent-Signal: ai-train=no\nUser-agent: b\nContent-Usage: search=n\nUser-agent: c\nDisallow: /x\n\nUser-agent: d\nDisallow: /y\n",
    );
    for agent in ["a", "b", "c"] {
        assert!(!r.is_allowed(agent, "/x"), "{agent}");
        assert!(r.is_allowed(agent, "/y"), "{agent}");
        assert_eq!(
            r.content_signals(agent).map(|s| s.line).collect::<Vec<_>>(),
            [2]
        );
        assert_eq!(
            r.content_usages(agent).map(|s| s.line).collect::<Vec<_>>(),
            [4]
        );
    }
    assert!(r.content_signals("d").next().is_none());
    assert!(!r.is_allowed("d", "/y"));
}

#[test]
fn a_user_agent_after_rules_still_starts_a_new_group() {
    let r = robots("User-agent: a\nDisallow: /x\nCrawl-delay: 5\nUser-agent: b\nDisallow: /y\n");
    assert!(r.is_allowed("a", "/y"));
    assert!(r.is_allowed("b", "/x"));
    assert_eq!(r.crawl_delay("a"), Some(5.0));
    assert_eq!(r.crawl_delay("b"), None);
}

// --- Whitespace is space and tab only ---

#[test]
fn unicode_spaces_are_part_of_the_value() {
    // An Allow ending in NBSP is a longer, different path: it no longer
    // allows what the Disallow refuses.
    let r = robots("User-agent: *\nDisallow: /private/\nAllow: /private/\u{a0}\n");
    assert_eq!(
        decide(&r, "x", "/private/data"),
        (
            false,
            Some("Disallow: /private/".into()),
            Some(2),
            Some("*".into())
        )
    );
    assert_eq!(r.rules()[1].pattern, "/private/\u{a0}");
    // It matches the path that really has the NBSP.
    assert!(r.is_allowed("x", "/private/%C2%A0x"));
    for space in ['\u{2002}', '\u{3000}', '\u{b}', '\u{c}', '\u{85}'] {
        let r = robots(&format!(
            "User-agent: *\nDisallow: /p/\nAllow: /p/{space}\n"
        ));
        assert!(!r.is_allowed("x", "/p/data"), "{:?}", space);
        // Leading ones too: `Disallow:` + U+3000 + `/q` is no rule for `/q`.
        let r = robots(&format!("User-agent: *\nDisallow:{space}/q\n"));
        assert!(r.is_allowed("x", "/q"), "{:?}", space);
    }
}

#[test]
fn space_and_tab_are_trimmed_around_keys_and_values() {
    let r = robots("\t User-agent \t:\t FooBot \t\n \tDisallow\t: \t/x\t \n");
    assert!(!r.is_allowed("FooBot", "/x/1"));
    assert_eq!(r.rules()[0].pattern, "/x");
    // A user-agent value with a Unicode space is no token: nobody matches it.
    let r = robots("User-agent: FooBot\u{a0}\nDisallow: /\n");
    assert!(r.is_allowed("FooBot", "/x"));
    // Nor does a Content-Signal pair split on a Unicode space.
    let r = robots("User-agent: *\nContent-Signal: search=yes\u{3000}ai-train=no\n");
    assert_eq!(r.signal_check("x", "/", &[Purpose::AiTrain]), None);
}

// --- URLs of any scheme ---

#[test]
fn urls_of_any_scheme_are_matched_by_their_path() {
    let r = robots("User-agent: *\nDisallow: /foo\n");
    assert!(!r.is_allowed("x", "ftp://example.net/foo.html"));
    assert!(r.is_allowed("x", "ftp://example.net/bar.html"));
    assert!(!r.is_allowed("x", "coap://[::1]:5683/foo"));
    assert!(r.is_allowed("x", "wss://example.net?foo"));
}
