//! robots.txt consistency of one host: was every request checked against
//! a copy no older than a day, was any disallowed path fetched, and which
//! rules refused what.

use serde::Serialize;

use super::line::LineRef;

/// The oldest a robots.txt copy may be when a request is checked (RFC 9309
/// §2.4: no longer than 24 hours).
pub const MAX_AGE_S: f64 = 86_400.0;
/// Rules listed per host, lines cited per figure.
const RULES: usize = 20;
const CITED: usize = 20;

/// Lines behind one figure: the first few, and how many there were.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Cited {
    pub count: u64,
    pub lines: Vec<LineRef>,
}

impl Cited {
    pub fn add(&mut self, line: &LineRef) {
        self.count += 1;
        if self.lines.len() < CITED {
            self.lines.push(line.clone());
        }
    }
}

/// Refusals by one rule.
#[derive(Clone, Debug, Serialize)]
pub struct ByRule {
    pub rule: String,
    pub outcome: String,
    #[serde(flatten)]
    pub refused: Cited,
}

/// Pages marked with one page-level directive.
#[derive(Clone, Debug, Serialize)]
pub struct ByDirective {
    pub directive: String,
    #[serde(flatten)]
    pub pages: Cited,
}

#[derive(Debug, Default, Serialize)]
pub struct RobotsSignal {
    /// Requests the robots.txt rules were checked for.
    pub checked: u64,
    /// Of those, checked against a copy fetched at most a day before.
    pub fresh: u64,
    /// Checked against a copy older than a day.
    pub stale: Cited,
    /// Checked against a copy fetched before the log begins (or by another
    /// proxy of the cluster): its age is not in this log.
    pub age_unknown: Cited,
    /// Requests sent although robots.txt disallowed them (observe mode:
    /// the line's `would`).
    pub disallowed_fetched: Cited,
    /// Requests refused because robots.txt could not be fetched.
    pub unavailable: Cited,
    /// robots.txt fetches, and those that gave no usable copy.
    pub fetches: Cited,
    pub failed_fetches: u64,
    pub by_rule: Vec<ByRule>,
    /// Pages whose page-level directives (X-Robots-Tag, `<meta
    /// name="robots">`) said `noindex`, `nofollow`, `noai`, `noimageai`.
    pub directives: Vec<ByDirective>,
    /// Lines with a page-level directive that could not be read (ignored).
    pub directives_ignored: Cited,
    /// Usable copies: origin and when its fetch was sent.
    #[serde(skip)]
    copies: Vec<(String, f64)>,
}

/// `scheme://authority/` of a URL: the scope of one robots.txt.
fn origin(url: &str) -> &str {
    let start = url.find("://").map_or(0, |i| i + 3);
    match url[start..].find('/') {
        Some(i) => &url[..start + i + 1],
        None => url,
    }
}

impl RobotsSignal {
    /// A robots.txt fetch sent at `t`; `usable` when it gave a copy (a
    /// 2xx, a 4xx other than 429, a 304 to the validators of the copy held:
    /// `robots_cache::fetch_failed` says), else the last good one stays in use.
    pub fn fetched(&mut self, t: f64, url: &str, usable: bool, line: &LineRef) {
        self.fetches.add(line);
        if !usable {
            self.failed_fetches += 1;
            return;
        }
        let o = origin(url);
        match self.copies.iter().position(|(c, _)| c == o) {
            Some(i) => self.copies[i].1 = t,
            None if self.copies.len() < 64 => self.copies.push((o.to_string(), t)),
            None => {}
        }
    }

    /// The page-level directives a line records.
    pub fn page(
        &mut self,
        directives: &[std::borrow::Cow<'_, str>],
        ignored: bool,
        line: &LineRef,
    ) {
        for d in directives {
            let known = self.directives.iter().position(|b| b.directive == *d);
            match known {
                Some(i) => self.directives[i].pages.add(line),
                None if self.directives.len() < RULES => {
                    let mut pages = Cited::default();
                    pages.add(line);
                    self.directives.push(ByDirective {
                        directive: d.to_string(),
                        pages,
                    });
                }
                None => {}
            }
        }
        if ignored {
            self.directives_ignored.add(line);
        }
    }

    /// A request whose line carries the rule it was checked against.
    pub fn checked(&mut self, t: f64, url: &str, line: &LineRef) {
        self.checked += 1;
        let o = origin(url);
        match self.copies.iter().find(|(c, _)| c == o) {
            Some(&(_, at)) if t - at <= MAX_AGE_S => self.fresh += 1,
            Some(_) => self.stale.add(line),
            None => self.age_unknown.add(line),
        }
    }

    /// A refusal by robots.txt or the site's usage preferences.
    pub fn refused(&mut self, outcome: &str, rule: Option<&str>, line: &LineRef) {
        let rule = rule.unwrap_or("(no rule named)");
        let i = match self.by_rule.iter().position(|r| r.rule == rule) {
            Some(i) => i,
            None if self.by_rule.len() < RULES => {
                self.by_rule.push(ByRule {
                    rule: rule.to_string(),
                    outcome: outcome.to_string(),
                    refused: Cited::default(),
                });
                self.by_rule.len() - 1
            }
            None => {
                let other = "(other rules)";
                match self.by_rule.iter().position(|r| r.rule == other) {
                    Some(i) => i,
                    None => {
                        self.by_rule.push(ByRule {
                            rule: other.to_string(),
                            outcome: outcome.to_string(),
                            refused: Cited::default(),
                        });
                        self.by_rule.len() - 1
                    }
                }
            }
        };
        self.by_rule[i].refused.add(line);
    }

    /// Refusals by robots.txt rules, all rules together.
    pub fn refusals(&self) -> u64 {
        self.by_rule.iter().map(|r| r.refused.count).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_per_origin_and_ages_out_after_a_day() {
        let l = |n| LineRef {
            file: 0,
            line: n,
            id: format!("x-{n}"),
        };
        let mut r = RobotsSignal::default();
        r.fetched(0.0, "http://a.example/robots.txt", true, &l(1));
        r.checked(10.0, "http://a.example/p", &l(2));
        r.checked(10.0, "https://a.example/p", &l(3));
        r.checked(MAX_AGE_S + 1.0, "http://a.example/q", &l(4));
        r.fetched(MAX_AGE_S, "http://a.example/robots.txt", false, &l(5));
        r.checked(MAX_AGE_S + 2.0, "http://a.example/q", &l(6));
        assert_eq!((r.checked, r.fresh), (4, 1));
        assert_eq!(r.age_unknown.count, 1);
        assert_eq!(r.stale.count, 2);
        assert_eq!(r.failed_fetches, 1);
        assert_eq!(
            origin("http://a.example:8080/x/y"),
            "http://a.example:8080/"
        );
    }
}
