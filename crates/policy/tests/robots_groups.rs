//! Differential test of the group structure (RFC 9309 sec. 2.2) against a
//! small model written here, independently of the parser: files mix
//! user-agent lines with Crawl-delay, Sitemap, Content-Signal, Content-Usage
//! and unknown records, blank lines and comments.
//!
//! The model reads a file in two passes: first it keeps only the lines that
//! shape groups (user-agent and allow/disallow) and cuts them into groups, a
//! group being a run of user-agent lines and the run of rules after it; then
//! it hands every other record to the group whose lines surround it. Rules use
//! literal paths, so "longest match, allow wins a tie" is a prefix comparison.

use mannerly_policy::robots::Robots;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Line {
    Agent(&'static str),
    Rule(bool, &'static str),
    Delay(u8),
    Signal,
    Usage,
    Sitemap,
    Unknown,
    Blank,
    Comment,
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        3 => prop::sample::select(vec!["*", "FooBot", "foobot", "BarBot", "Baz/1.0", "Not Token"]).prop_map(Line::Agent),
        4 => (any::<bool>(), prop::sample::select(vec!["", "/", "/a", "/a/b", "/b", "/a/b/c"])).prop_map(|(a, p)| Line::Rule(a, p)),
        1 => (1u8..9).prop_map(Line::Delay),
        1 => Just(Line::Signal),
        1 => Just(Line::Usage),
        1 => Just(Line::Sitemap),
        1 => Just(Line::Unknown),
        1 => Just(Line::Blank),
        1 => Just(Line::Comment),
    ]
}

fn render(lines: &[Line]) -> String {
    let mut s = String::new();
    for (i, line) in lines.iter().enumerate() {
        let text = match line {
            Line::Agent(a) => format!("User-agent: {a}"),
            Line::Rule(true, p) => format!("Allow: {p}"),
            Line::Rule(false, p) => format!("Disallow: {p}"),
            Line::Delay(d) => format!("Crawl-delay: {d}"),
            Line::Signal => format!("Content-Signal: ai-train=no, n={i}"),
            Line::Usage => "Content-Usage: train-ai=n".to_string(),
            Line::Sitemap => "Sitemap: https://example.com/s.xml".to_string(),
            Line::Unknown => "Noindex: /a".to_string(),
            Line::Blank => String::new(),
            Line::Comment => "# User-agent: FooBot".to_string(),
        };
        s.push_str(&text);
        s.push('\n');
    }
    s
}

#[derive(Default, Debug)]
struct Group {
    agents: Vec<String>,
    /// (line, allow, path); empty paths are no rule.
    rules: Vec<(usize, bool, &'static str)>,
    delays: Vec<u8>,
    /// Line numbers of Content-Signal / Content-Usage records.
    signals: Vec<usize>,
    usages: Vec<usize>,
}

struct Model {
    groups: Vec<Group>,
    global_signals: Vec<usize>,
    global_usages: Vec<usize>,
}

fn model(lines: &[Line]) -> Model {
    // Pass 1: where each group starts, from the structural lines alone.
    let structural: Vec<(usize, &Line)> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| matches!(l, Line::Agent(_) | Line::Rule(..)))
        .collect();
    let mut starts = Vec::new();
    for (k, (i, l)) in structural.iter().enumerate() {
        let prev_is_agent = k > 0 && matches!(structural[k - 1].1, Line::Agent(_));
        if matches!(l, Line::Agent(_)) && !prev_is_agent {
            starts.push(*i);
        }
    }
    // Pass 2: every line belongs to the last group started at or before it.
    let mut groups: Vec<Group> = starts.iter().map(|_| Group::default()).collect();
    let mut m = Model {
        groups: Vec::new(),
        global_signals: Vec::new(),
        global_usages: Vec::new(),
    };
    for (i, l) in lines.iter().enumerate() {
        let number = i + 1;
        let owner = starts.iter().rposition(|&s| s <= i);
        match (owner, l) {
            (Some(g), Line::Agent(a)) => {
                let name = a.split('/').next().unwrap_or(a);
                if name == "*" || name.chars().all(|c| c.is_ascii_alphabetic()) {
                    groups[g].agents.push(name.to_ascii_lowercase());
                }
            }
            (Some(g), Line::Rule(allow, p)) => groups[g].rules.push((number, *allow, p)),
            (Some(g), Line::Delay(d)) => groups[g].delays.push(*d),
            (Some(g), Line::Signal) => groups[g].signals.push(number),
            (Some(g), Line::Usage) => groups[g].usages.push(number),
            (None, Line::Signal) => m.global_signals.push(number),
            (None, Line::Usage) => m.global_usages.push(number),
            _ => {}
        }
    }
    m.groups = groups;
    m
}

struct Expected {
    allowed: bool,
    line: Option<usize>,
    delay: Option<u8>,
    signals: Vec<usize>,
    usages: Vec<usize>,
}

fn expect(m: &Model, agent: &str, path: &str) -> Expected {
    let named = |token: &str| -> Vec<&Group> {
        m.groups
            .iter()
            .filter(|g| g.agents.iter().any(|a| a == token))
            .collect()
    };
    let mut members = if agent.is_empty() {
        Vec::new()
    } else {
        named(&agent.to_ascii_lowercase())
    };
    if members.is_empty() {
        members = named("*");
    }
    // Longest pattern that prefixes the path; allow wins a tie.
    let mut best: Option<(usize, bool, usize)> = None;
    for g in &members {
        for &(line, allow, p) in &g.rules {
            if p.is_empty() || !path.starts_with(p) {
                continue;
            }
            let better = match best {
                None => true,
                Some((len, best_allow, _)) => {
                    p.len() > len || (p.len() == len && allow && !best_allow)
                }
            };
            if better {
                best = Some((p.len(), allow, line));
            }
        }
    }
    let mut signals = m.global_signals.clone();
    let mut usages = m.global_usages.clone();
    let mut delay = None;
    for g in &members {
        signals.extend(&g.signals);
        usages.extend(&g.usages);
        delay = g.delays.iter().copied().chain(delay).max();
    }
    signals.sort_unstable();
    usages.sort_unstable();
    Expected {
        allowed: best.is_none_or(|(_, allow, _)| allow),
        line: best.map(|(_, _, line)| line),
        delay,
        signals,
        usages,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn group_structure_agrees_with_the_model(
        lines in prop::collection::vec(line(), 0..40),
        agent in prop::sample::select(vec!["", "FooBot", "FOOBOT", "BarBot", "Baz", "Other"]),
        path in prop::sample::select(vec!["/", "/a", "/a/x", "/a/b", "/a/b/c/d", "/b/1", "/c"]),
    ) {
        let body = render(&lines);
        let robots = Robots::parse(body.as_bytes());
        let want = expect(&model(&lines), agent, path);
        let got = robots.check(agent, path);
        prop_assert_eq!(got.allowed, want.allowed, "{}", body);
        prop_assert_eq!(got.rule.map(|r| r.line), want.line, "{}", body);
        prop_assert_eq!(robots.crawl_delay(agent), want.delay.map(f64::from), "{}", body);
        let signals: Vec<usize> = robots.content_signals(agent).map(|s| s.line).collect();
        prop_assert_eq!(signals, want.signals, "{}", body);
        let usages: Vec<usize> = robots.content_usages(agent).map(|s| s.line).collect();
        prop_assert_eq!(usages, want.usages, "{}", body);
    }
}
