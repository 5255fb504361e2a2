//! Reading a robots.txt: bytes to numbered lines, lines to `key: value`
//! records, records to the groups as the file writes them, and those merged
//! into one [`Group`] per product token.

use super::index::RuleIndex;
use super::{ContentSignal, ContentUsage, Group, Robots, Rule, Statement, MAX_ROBOTS_BYTES};
use crate::pattern::Pattern;
use crate::token::{is_namespaced, is_token_char};
use crate::visit::{parse_request_rate, Stated, Window};
use crate::whitespace::trim_ws;

/// A group as it stands in the file, before groups of one token are merged.
#[derive(Default)]
struct RawGroup {
    /// `None` for a user-agent value that is no valid token: kept so the line
    /// still opens the group, never matched.
    agents: Vec<Option<String>>,
    rules: Vec<u32>,
    crawl_delay: Option<f64>,
    statements: Vec<u32>,
    visit: Vec<Stated>,
    request_rate: Option<(f64, String)>,
}

// === impl Robots ===

impl Robots {
    /// Parses a robots.txt body (any bytes; only the first [`MAX_ROBOTS_BYTES`]).
    pub fn parse(body: &[u8]) -> Robots {
        let mut reader = Reader::default();
        for (number, line) in lines(skip_bom(whole_lines_within_limit(body))) {
            let line = String::from_utf8_lossy(line);
            if let Some(record) = Record::read(&line) {
                reader.record(number, &record);
            }
        }
        reader.finish()
    }

    /// Builds one [`Group`] per distinct token, merging groups wherever they stand.
    fn merge(&mut self, raw: Vec<RawGroup>) {
        let mut tokens: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, group) in raw.iter().enumerate() {
            for token in group.agents.iter().flatten() {
                match tokens
                    .iter_mut()
                    .find(|(t, _)| t.eq_ignore_ascii_case(token))
                {
                    Some((_, members)) => {
                        if !members.contains(&i) {
                            members.push(i);
                        }
                    }
                    None => tokens.push((token.clone(), vec![i])),
                }
            }
        }
        for (token, members) in tokens {
            let mut rules: Vec<u32> = members
                .iter()
                .flat_map(|&i| raw[i].rules.iter().copied())
                .collect();
            rules.sort_unstable();
            let mut statements = self.global_statements.clone();
            statements.extend(
                members
                    .iter()
                    .flat_map(|&i| raw[i].statements.iter().copied()),
            );
            statements.sort_unstable();
            let crawl_delay = members
                .iter()
                .filter_map(|&i| raw[i].crawl_delay)
                .fold(None, |acc: Option<f64>, d| {
                    Some(acc.map_or(d, |a| a.max(d)))
                });
            let visit = members
                .iter()
                .flat_map(|&i| raw[i].visit.iter().cloned())
                .collect();
            // Of several rates, the slowest (as of several Crawl-delays).
            let request_rate = members
                .iter()
                .filter_map(|&i| raw[i].request_rate.clone())
                .fold(None, |acc: Option<(f64, String)>, r| match acc {
                    Some(a) if a.0 >= r.0 => Some(a),
                    _ => Some(r),
                });
            let group = Group {
                index: RuleIndex::build(&self.rules, &rules),
                token,
                crawl_delay,
                statements,
                visit,
                request_rate,
            };
            if group.token == "*" {
                self.star = Some(group);
            } else {
                self.groups.push(group);
            }
        }
    }
}

/// The first [`MAX_ROBOTS_BYTES`] of `body`, ending after its last whole line.
fn whole_lines_within_limit(body: &[u8]) -> &[u8] {
    match body.get(..MAX_ROBOTS_BYTES) {
        // A line cut at the limit would be a different rule (a shorter
        // Allow allows more): keep whole lines only.
        Some(head) if body.len() > MAX_ROBOTS_BYTES => {
            let end = head
                .iter()
                .rposition(|&b| b == b'\n' || b == b'\r')
                .map_or(0, |i| i + 1);
            &head[..end]
        }
        _ => body,
    }
}

/// One `key: value` line, its comment and surrounding whitespace removed.
struct Record<'a> {
    /// The whole line so trimmed, as a usage-preference line quotes it.
    text: &'a str,
    key: &'a str,
    value: &'a str,
}

impl<'a> Record<'a> {
    /// `None` for a line without a colon: only `key: value` lines count.
    fn read(line: &'a str) -> Option<Record<'a>> {
        let text = match line.find('#') {
            Some(at) => &line[..at],
            None => line,
        };
        let text = trim_ws(text);
        let (key, value) = text.split_once(':')?;
        Some(Record {
            text,
            key: trim_ws(key),
            value: trim_ws(value),
        })
    }

    fn is(&self, name: &str) -> bool {
        self.key.eq_ignore_ascii_case(name)
    }
}

/// The file as read so far, record by record.
#[derive(Default)]
struct Reader {
    robots: Robots,
    raw: Vec<RawGroup>,
    /// The UA list of the last group is still open until its first record.
    open: bool,
}

// === impl Reader ===

impl Reader {
    fn record(&mut self, number: usize, record: &Record<'_>) {
        let value = record.value;
        if record.is("user-agent") {
            self.user_agent(value);
        } else if record.is("sitemap") {
            if !value.is_empty() {
                self.robots.sitemaps.push(value.to_string());
            }
        } else if record.is("allow") || record.is("disallow") {
            self.rule(number, record.is("allow"), value);
        } else if record.is("crawl-delay") {
            self.crawl_delay(value);
        } else if record.is("visit-time") || record.is("request-rate") {
            self.visit_record(number, record);
        } else if record.is("content-signal") {
            let signal = ContentSignal::parse(number, record.text, value);
            self.statement(Statement::Signal(signal));
        } else if record.is("content-usage") {
            let usage = ContentUsage::parse(number, record.text, value);
            self.statement(Statement::Usage(usage));
        }
    }

    fn user_agent(&mut self, value: &str) {
        if !self.open || self.raw.is_empty() {
            self.raw.push(RawGroup::default());
            self.open = true;
        }
        if let Some(group) = self.raw.last_mut() {
            group.agents.push(agent_token(value).map(str::to_string));
        }
    }

    fn rule(&mut self, number: usize, allow: bool, value: &str) {
        let Some(group) = self.raw.last_mut() else {
            return;
        };
        // The rules have begun: a User-agent line from here on starts
        // the next group.
        self.open = false;
        if value.is_empty() {
            return;
        }
        let id = self.robots.rules.len() as u32;
        self.robots.rules.push(Rule {
            allow,
            pattern: value.to_string(),
            line: number,
            compiled: Pattern::new(value),
        });
        group.rules.push(id);
    }

    fn crawl_delay(&mut self, value: &str) {
        let Some(group) = self.raw.last_mut() else {
            return;
        };
        if let Some(delay) = parse_delay(value) {
            group.crawl_delay = Some(group.crawl_delay.map_or(delay, |d| d.max(delay)));
        }
    }

    /// `Visit-time` / `Request-rate` (non-standard, still written): of the
    /// group they stand in; one that cannot be read is ignored, with why.
    fn visit_record(&mut self, number: usize, record: &Record<'_>) {
        let Some(group) = self.raw.last_mut() else {
            let why = format!("line {number}: {} before any User-agent line", record.text);
            self.robots.ignored.push(why);
            return;
        };
        let source = format!("robots.txt line {number}: {}", record.text);
        if record.is("visit-time") {
            match Window::parse(record.value) {
                Some(window) => group.visit.push(Stated { window, source }),
                None => self
                    .robots
                    .ignored
                    .push(format!("{source}: no HHMM-HHMM window")),
            }
            return;
        }
        match parse_request_rate(record.value) {
            Some(interval) => {
                let slower = group
                    .request_rate
                    .as_ref()
                    .is_none_or(|(i, _)| interval > *i);
                if slower {
                    group.request_rate = Some((interval, source));
                }
            }
            None => self
                .robots
                .ignored
                .push(format!("{source}: no n/time rate")),
        }
    }

    /// A usage-preference line belongs to the group it stands in, or to
    /// everyone before the first group.
    fn statement(&mut self, statement: Statement) {
        let id = self.robots.statements.len() as u32;
        self.robots.statements.push(statement);
        match self.raw.last_mut() {
            Some(group) => group.statements.push(id),
            None => self.robots.global_statements.push(id),
        }
    }

    fn finish(self) -> Robots {
        let Reader {
            mut robots, raw, ..
        } = self;
        robots.merge(raw);
        robots
    }
}

/// The token a `User-agent` line names: `*`, or an identifier with an
/// optional `/version` (which a product token may carry and which says nothing
/// about the crawler); a namespaced selector (`__ns_…`) names none.
fn agent_token(value: &str) -> Option<&str> {
    if value == "*" {
        return Some("*");
    }
    let name = value.split_once('/').map_or(value, |(name, _)| name);
    let token = !name.is_empty() && name.chars().all(is_token_char);
    (token && !is_namespaced(name)).then_some(name)
}

/// Seconds, fractional allowed; negative, NaN, infinite and non-numeric values
/// are ignored rather than guessed at.
fn parse_delay(value: &str) -> Option<f64> {
    let delay: f64 = value.parse().ok()?;
    (delay.is_finite() && delay >= 0.0).then_some(delay)
}

/// A UTF-8 byte order mark, or the start of one cut short, is skipped.
fn skip_bom(body: &[u8]) -> &[u8] {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    let n = body.iter().zip(BOM).take_while(|(a, b)| a == b).count();
    &body[n..]
}

/// Lines split on LF, CRLF or CR, numbered from 1.
fn lines(body: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut rest = body;
    let mut number = 0;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        number += 1;
        let end = rest
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
            .unwrap_or(rest.len());
        let line = &rest[..end];
        let skip = match rest.get(end..end + 2) {
            Some(b"\r\n") => 2,
            _ if end < rest.len() => 1,
            _ => 0,
        };
        rest = &rest[end + skip..];
        Some((number, line))
    })
}
