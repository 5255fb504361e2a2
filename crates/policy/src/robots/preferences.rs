//! Which usage-preference lines of a robots.txt speak for one URL, and what
//! they say together.
//!
//! Per purpose and per vocabulary: among the lines of the crawler's group
//! (plus the global lines) whose path covers the URL and which state that
//! purpose, the one with the longest path wins (no path is the shortest); on a
//! tie `no` wins. The two vocabularies' winners are then combined by the
//! draft's rule ([`crate::prefs`]): any no wins, then any yes, else unknown.
//! So a site-wide `Content-Signal: ai-train=no` is not undone by a
//! `Content-Usage: /open/ train-ai=y`: the site said no in one vocabulary,
//! and a crawler that reads two statements does not pick the kinder one.
//!
//! The Content-Signal `use` is chosen the same way among the lines that state
//! it; on a tie `reference` wins.

use super::{Robots, SignalRefusal, SignalUse, Statement};
use crate::pattern::normalise_path;
use crate::prefs::{
    DeclaredUse, Place, PrefsRecord, PrefsRefusal, Purpose, Said, Stance, Vocabulary,
};
use crate::url::is_robots_txt;

/// One winning line: its path length, its value, and the line.
type Winner<'a, V> = Option<(usize, V, Said<'a>)>;

/// What a robots.txt says about the use of one URL's content, for one crawler.
#[derive(Debug, Clone, Default)]
pub struct Preferences<'a> {
    /// Per purpose ([`Purpose::ALL`] order), per vocabulary (Content-Signal,
    /// Content-Usage): the line that speaks.
    said: [[Winner<'a, bool>; 2]; 3],
    usage: Winner<'a, &'a SignalUse>,
}

impl Robots {
    /// The site's usage preferences for `url`, as they apply to `agent`
    /// (scoped like [`Robots::check`]; `/robots.txt` itself has none).
    pub fn preferences(&self, agent: &str, url: &str) -> Preferences<'_> {
        let mut prefs = Preferences::default();
        let mut statements = self.statements(agent).peekable();
        // Most files state no preference: then the path, asked for on
        // every request, need not be normalised.
        if statements.peek().is_none() {
            return prefs;
        }
        let path = normalise_path(url);
        if is_robots_txt(&path) {
            return prefs;
        }
        for statement in statements {
            let (vocabulary, line, text, len) = match statement {
                Statement::Signal(s) => (
                    Vocabulary::ContentSignal,
                    s.line,
                    &s.text,
                    s.coverage(&path),
                ),
                Statement::Usage(u) => {
                    (Vocabulary::ContentUsage, u.line, &u.text, u.coverage(&path))
                }
            };
            let Some(len) = len else {
                continue;
            };
            let said = Said {
                vocabulary,
                place: Place::RobotsLine(line),
                text,
            };
            for purpose in Purpose::ALL {
                let value = match statement {
                    Statement::Signal(s) => s.get(purpose),
                    Statement::Usage(u) => u.get(purpose),
                };
                let Some(value) = value else {
                    continue;
                };
                let slot = &mut prefs.said[purpose.index()]
                    [usize::from(vocabulary == Vocabulary::ContentUsage)];
                let wins = match slot {
                    None => true,
                    Some((best_len, best, _)) => {
                        len > *best_len || (len == *best_len && *best && !value)
                    }
                };
                if wins {
                    *slot = Some((len, value, said));
                }
            }
            if let Statement::Signal(signal) = statement {
                if let Some(usage) = &signal.usage {
                    let wins = match &prefs.usage {
                        None => true,
                        Some((best_len, best, _)) => {
                            len > *best_len || (len == *best_len && usage.stricter_than(best))
                        }
                    };
                    if wins {
                        prefs.usage = Some((len, usage, said));
                    }
                }
            }
        }
        prefs
    }
}

// === impl Preferences ===

impl<'a> Preferences<'a> {
    /// The combined stance on `purpose`.
    pub fn stance(&self, purpose: Purpose) -> Stance {
        self.lines(purpose)
            .fold(Stance::Unknown, |acc, (value, _)| {
                acc.combine(Stance::from_value(Some(value)))
            })
    }

    /// The lines that speak for `purpose` (at most one per vocabulary), with
    /// what each says.
    pub fn lines(&self, purpose: Purpose) -> impl Iterator<Item = (bool, Said<'a>)> + '_ {
        self.said[purpose.index()]
            .iter()
            .flatten()
            .map(|(_, value, said)| (*value, *said))
    }

    /// The site's Content-Signal `use` for this URL, and the line.
    pub fn site_use(&self) -> Option<(&'a SignalUse, Said<'a>)> {
        self.usage.map(|(_, usage, said)| (usage, said))
    }

    /// The first of `purposes` (in the order given) that comes out
    /// disallowed, naming the line that said no (the earlier one if both
    /// vocabularies did).
    pub fn refused_purpose(&self, purposes: &[Purpose]) -> Option<SignalRefusal<'a>> {
        purposes.iter().find_map(|&purpose| {
            let said = self
                .lines(purpose)
                .filter(|(value, _)| !value)
                .map(|(_, said)| said)
                .min_by_key(|said| match said.place {
                    Place::RobotsLine(line) => line,
                    _ => usize::MAX,
                })?;
            let Place::RobotsLine(line) = said.place else {
                return None;
            };
            Some(SignalRefusal {
                purpose,
                line,
                text: said.text,
                vocabulary: said.vocabulary,
            })
        })
    }

    /// Whether the crawl may go ahead: the first declared purpose refused,
    /// else a site's `use` below the crawl's (`reference` against `full`,
    /// `immediate` against `reference` or `full`).
    pub fn refusal(&self, purposes: &[Purpose], declared: DeclaredUse) -> Option<PrefsRefusal<'a>> {
        if let Some(r) = self.refused_purpose(purposes) {
            return Some(PrefsRefusal::Purpose {
                purpose: r.purpose,
                said: Said {
                    vocabulary: r.vocabulary,
                    place: Place::RobotsLine(r.line),
                    text: r.text,
                },
            });
        }
        match self.site_use() {
            Some((usage, said)) if usage.refuses(declared) => {
                Some(PrefsRefusal::Use { declared, said })
            }
            _ => None,
        }
    }

    /// The combined verdicts and the lines behind them, for an audit line.
    pub fn record(&self) -> PrefsRecord {
        let mut record = PrefsRecord::default();
        for purpose in Purpose::ALL {
            for (value, said) in self.lines(purpose) {
                record.add(purpose, Stance::from_value(Some(value)));
                record.add_source(&said);
            }
        }
        if let Some((usage, said)) = self.site_use() {
            record.usage = Some(usage.as_str().to_string());
            record.add_source(&said);
        }
        record
    }
}
