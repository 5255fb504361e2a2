//! Any bytes as a robots.txt, then every query the proxy makes of it: none may
//! panic, and a disallow must always name its rule.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mannerly_policy::robots::{product_token, Purpose, Robots};

fuzz_target!(|data: &[u8]| {
    // The first line of the input doubles as URL and User-Agent, so the
    // matcher sees hostile paths too, not just hostile rules.
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let probe = String::from_utf8_lossy(&data[..split]);
    let robots = Robots::parse(data);
    let agent = product_token(&probe);
    for url in [probe.as_ref(), "/", "/robots.txt", "https://example.com/a%2Fb?c=%e3%83%84"] {
        let verdict = robots.check(agent, url);
        assert!(verdict.allowed || verdict.rule.is_some());
        let _ = verdict.to_string();
        let _ = robots.signal_check(agent, url, &[Purpose::Search, Purpose::AiInput, Purpose::AiTrain]);
    }
    assert!(robots.check(agent, "/robots.txt").allowed);
    let _ = robots.crawl_delay(agent);
    // Several identities, as `crawler.agents` gives them.
    let tokens = [agent, "ExampleBot-AI", "__ns_ai"];
    if let Some((token, verdict)) = robots.check_each(tokens, probe.as_ref()) {
        assert!(tokens.contains(&token));
        assert!(verdict.allowed || verdict.rule.is_some());
    }
    let _ = robots.crawl_delay_of(tokens);
    let _ = robots.visit_times(tokens);
    let _ = robots.request_interval(tokens);
    let _ = robots.ignored();
    let _ = robots.sitemaps();
    for signal in robots.content_signals(agent) {
        let _ = signal.to_string();
    }
});
