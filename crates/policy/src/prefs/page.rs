//! Page-level directives (draft-illyes-repext-03): the `X-Robots-Tag`
//! response field, its successor `Robots-Tag`, and `<meta name="robots">`
//! in the head of an HTML page, read from a bounded prefix of the body.
//!
//! Of their rules, `noai` refuses the AI purposes (`ai-train`,
//! `ai-input`), `noimageai` refuses them for an image, and `noindex`,
//! `nofollow` (`none` is both) are recorded for `search`: the client
//! indexes and follows, so it is told, not refused. A rule may name an
//! agent (`X-Robots-Tag: examplebot: noindex`, `<meta name="examplebot">`):
//! it binds that product token's identity only.
//!
//! What cannot be read is ignored with a reason on the audit line, never
//! taken for a refusal the site did not write: a malformed rule, an
//! unknown one, an agent that is no product token, a `<meta>` past the
//! prefix.

use super::{Place, PrefsRecord, PrefsRefusal, Purpose, ResponsePrefs, Said, Stance, Vocabulary};
use crate::token::{is_namespaced, is_token};

/// The response fields read, the draft's successor field first.
pub const ROBOTS_FIELDS: [&str; 2] = ["robots-tag", "x-robots-tag"];

/// The purposes `noai` refuses.
const AI_PURPOSES: [Purpose; 2] = [Purpose::AiTrain, Purpose::AiInput];

/// Rules that carry a value after a colon (`max-snippet: 20`): a colon
/// after them does not name an agent.
const VALUED: [&str; 4] = [
    "max-snippet",
    "max-image-preview",
    "max-video-preview",
    "unavailable_after",
];

/// Rules known to search engines that say nothing this crawl acts on.
const QUIET: [&str; 9] = [
    "all",
    "index",
    "follow",
    "noarchive",
    "nocache",
    "nosnippet",
    "notranslate",
    "noimageindex",
    "indexifembedded",
];

/// Where a directive was read, for its `Said`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A response field line: its name as read (`x-robots-tag`).
    Field(&'static str),
    /// A `<meta>` tag at this byte offset of the body.
    Meta(usize),
}

/// One field line or `<meta>` tag, as the site wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement<'a> {
    /// Where it stood.
    pub origin: Origin,
    /// For a `<meta>`, its `name`: `robots` or an agent's token; `None` for
    /// a field (whose value may name an agent itself).
    pub name: Option<&'a str>,
    /// The field's value or the tag's `content`.
    pub text: &'a str,
}

/// The rules one statement gives one identity.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Rules {
    noindex: bool,
    nofollow: bool,
    noai: bool,
    noimageai: bool,
}

/// Judges a response's page-level directives for the identities a request
/// speaks for (token, purposes). `image`: the response is an image
/// (`noimageai` then refuses the AI purposes). The record carries
/// `directives` (what binds, for the decision header) and `ignored`.
pub fn judge_page<'a>(
    statements: &[Statement<'a>],
    identities: &[(&str, &[Purpose])],
    image: bool,
) -> ResponsePrefs<'a> {
    let mut record = PrefsRecord::default();
    let mut refusal = None;
    for statement in statements {
        let said = Said {
            vocabulary: Vocabulary::RobotsTag,
            place: match statement.origin {
                Origin::Field(name) => Place::Field(name),
                Origin::Meta(at) => Place::Meta(at),
            },
            text: statement.text,
        };
        let mut spoke = false;
        for &(token, purposes) in identities {
            let rules = read(statement, token, &mut record.ignored);
            spoke |= rules != Rules::default();
            for (on, word) in [(rules.noindex, "noindex"), (rules.nofollow, "nofollow")] {
                if on {
                    push_once(&mut record.directives, word);
                }
            }
            let ai = rules.noai || (rules.noimageai && image);
            for (on, word) in [(rules.noai, "noai"), (rules.noimageai, "noimageai")] {
                if on {
                    push_once(&mut record.directives, word);
                }
            }
            if !ai {
                continue;
            }
            for purpose in AI_PURPOSES {
                record.add(purpose, Stance::Disallowed);
            }
            if refusal.is_none() {
                refusal = purposes
                    .iter()
                    .find(|p| AI_PURPOSES.contains(p))
                    .map(|&purpose| PrefsRefusal::Purpose { purpose, said });
            }
        }
        if spoke {
            record.add_source(&said);
        }
    }
    ResponsePrefs { record, refusal }
}

/// The rules `statement` gives `token` (case-insensitive), noting what it
/// could not read.
fn read(statement: &Statement<'_>, token: &str, ignored: &mut Vec<String>) -> Rules {
    let mut rules = Rules::default();
    let mut scope: Option<&str> = match statement.name {
        Some(name) if name.eq_ignore_ascii_case("robots") => None,
        // Another agent's `<meta>` (or `description`, `viewport`…): not
        // ours to read.
        Some(name) if !name.eq_ignore_ascii_case(token) => return rules,
        Some(name) => Some(name),
        None => None,
    };
    for piece in statement.text.split(',') {
        let mut word = piece.trim_matches([' ', '\t']);
        if word.is_empty() {
            continue;
        }
        if statement.name.is_none() {
            // In a field, `agent: rules` scopes what follows to the agent.
            if let Some((head, rest)) = word.split_once(':') {
                let head = head.trim_matches([' ', '\t']);
                if VALUED.iter().any(|v| v.eq_ignore_ascii_case(head)) {
                    continue;
                }
                if !is_token(head) {
                    let why = format!("{}: {head:?} is no agent token", where_(statement));
                    push_once(ignored, &why);
                    scope = Some("");
                    continue;
                }
                scope = Some(head);
                word = rest.trim_matches([' ', '\t']);
                if word.is_empty() {
                    continue;
                }
            }
        }
        let applies = match scope {
            None => true,
            Some(s) => !s.is_empty() && !is_namespaced(s) && s.eq_ignore_ascii_case(token),
        };
        let lower = word.to_ascii_lowercase();
        let known = match lower.as_str() {
            "noindex" => set(applies, &mut rules.noindex),
            "nofollow" => set(applies, &mut rules.nofollow),
            "none" => set(applies, &mut rules.noindex) && set(applies, &mut rules.nofollow),
            "noai" => set(applies, &mut rules.noai),
            "noimageai" => set(applies, &mut rules.noimageai),
            w => QUIET.contains(&w),
        };
        if applies && !known {
            let why = format!("{}: unknown rule {word:?}", where_(statement));
            push_once(ignored, &why);
        }
    }
    rules
}

fn set(applies: bool, flag: &mut bool) -> bool {
    if applies {
        *flag = true;
    }
    true
}

fn where_(statement: &Statement<'_>) -> String {
    match statement.origin {
        Origin::Field(name) => format!("header {name}"),
        Origin::Meta(at) => format!("<meta> at byte {at}"),
    }
}

fn push_once(list: &mut Vec<String>, item: &str) {
    if !list.iter().any(|i| i == item) {
        list.push(item.to_string());
    }
}

/// A `<meta>` tag's `name` and `content`, owned (the body prefix they were
/// read from is not kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaTag {
    /// Byte offset of its `<` in the body.
    pub at: usize,
    /// Its `name`, lower-cased.
    pub name: String,
    /// Its `content`, as written.
    pub content: String,
}

impl MetaTag {
    /// As a statement for [`judge_page`].
    pub fn statement(&self) -> Statement<'_> {
        Statement {
            origin: Origin::Meta(self.at),
            name: Some(&self.name),
            text: &self.content,
        }
    }
}

/// What the head of an HTML page says: its robots `<meta>` tags (named
/// `robots` or a product token), and why anything was left unread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaScan {
    /// The tags, in body order.
    pub tags: Vec<MetaTag>,
    /// Reasons, for the audit line's `prefs.ignored`.
    pub ignored: Vec<String>,
}

/// Reads the `<meta name=… content=…>` tags of `prefix`, the first bytes of
/// an HTML body, up to the end of its head (`</head>` or `<body`).
/// `whole`: the prefix is the whole body; else a head that runs past it is
/// said to be unread beyond it. Comments are skipped; a tag cut by the end
/// of the prefix is not read.
pub fn scan_meta(prefix: &[u8], whole: bool) -> MetaScan {
    let mut scan = MetaScan::default();
    let mut i = 0;
    while let Some(lt) = find(prefix, i, b"<") {
        let rest = &prefix[lt..];
        if starts_with_ci(rest, b"<!--") {
            match find(prefix, lt + 4, b"-->") {
                Some(end) => i = end + 3,
                None => break,
            }
            continue;
        }
        if HEAD_END.iter().any(|end| starts_with_ci(rest, end)) {
            return scan;
        }
        let Some(gt) = find(prefix, lt, b">") else {
            break;
        };
        if starts_with_ci(rest, b"<meta") && rest.get(5).is_some_and(|b| b.is_ascii_whitespace()) {
            if let Some(tag) = meta_tag(lt, &prefix[lt + 5..gt]) {
                scan.tags.push(tag);
            }
        }
        i = gt + 1;
    }
    if !whole {
        scan.ignored.push(format!(
            "the page's head runs past the first {} bytes read: a <meta> after them is not read",
            prefix.len()
        ));
    }
    scan
}

/// A robots `<meta>` from its attributes; `None` for any other name.
fn meta_tag(at: usize, attrs: &[u8]) -> Option<MetaTag> {
    let text = String::from_utf8_lossy(attrs);
    let (mut name, mut content) = (None, None);
    for (key, value) in attributes(&text) {
        if key.eq_ignore_ascii_case("name") {
            name.get_or_insert(value.to_ascii_lowercase());
        } else if key.eq_ignore_ascii_case("content") {
            content.get_or_insert(value.to_string());
        }
    }
    let name = name?;
    let robots = name == "robots" || (is_token(&name) && !is_namespaced(&name));
    (robots && !name.is_empty()).then_some(MetaTag {
        at,
        name,
        content: content.unwrap_or_default(),
    })
}

/// `key=value` pairs of a tag, values quoted (`"`, `'`) or bare.
fn attributes(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| c == '=' || c.is_ascii_whitespace() || c == '/')
            .unwrap_or(rest.len());
        let key = &rest[..end];
        rest = rest[end..].trim_start();
        if let Some(after) = rest.strip_prefix('=') {
            let after = after.trim_start();
            let (value, next) = match after.chars().next() {
                Some(q @ ('"' | '\'')) => match after[1..].find(q) {
                    Some(close) => (&after[1..1 + close], &after[close + 2..]),
                    None => (&after[1..], ""),
                },
                _ => {
                    let end = after
                        .find(|c: char| c.is_ascii_whitespace())
                        .unwrap_or(after.len());
                    (&after[..end], &after[end..])
                }
            };
            out.push((key, value));
            rest = next.trim_start();
        } else if key.is_empty() {
            // A lone `/` (self-closing) or other stray character.
            rest = rest.get(1..).unwrap_or("").trim_start();
        }
    }
    out
}

/// Whether the page's head has ended within `seen`, looking only at what
/// could not have been judged when `seen` was `judged` bytes long: the
/// reader asks after every frame, and a head can run to the prefix's end,
/// so each byte is looked at once, not once per frame.
pub fn head_closed(seen: &[u8], judged: usize) -> bool {
    // A tag cut by the previous frame's end starts at most five bytes back.
    let from = judged.saturating_sub(HEAD_END[0].len() - 1).min(seen.len());
    memchr::memchr_iter(b'<', &seen[from..]).any(|at| {
        HEAD_END
            .iter()
            .any(|end| starts_with_ci(&seen[from + at..], end))
    })
}

/// What ends a head: its closing tag, or a body opened without one.
const HEAD_END: [&[u8]; 2] = [b"</head", b"<body"];

fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay.get(from..)?, needle).map(|p| p + from)
}

fn starts_with_ci(hay: &[u8], prefix: &[u8]) -> bool {
    hay.get(..prefix.len())
        .is_some_and(|h| h.eq_ignore_ascii_case(prefix))
}

#[cfg(test)]
mod tests;
