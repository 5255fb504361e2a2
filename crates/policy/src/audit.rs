//! Audit records and the hash chain that makes a log verifiable.
//!
//! A line is the record's JSON with one more field, `chain`, appended last:
//! `chain = hex(SHA-256(previous chain ‖ the line without its chain field))`.
//! Hashing the exact bytes written (not a re-serialisation) means a verifier
//! needs no knowledge of field order or number formatting.

use serde::Serialize;
use sha2::{Digest, Sha256};

use std::time::Duration;

use crate::budget::{Announced, Reaction};
use crate::conditional::CacheOutcome;
use crate::prefs::PrefsRecord;
use crate::Outcome;

mod checkpoint;
mod evidence;
mod json;
mod merkle;
mod midstate;
mod trees;
mod verify;

pub use checkpoint::{hex, parse_public_key, Checkpoint, Commits, SealReason, CHECKPOINT};
pub use evidence::{
    AbsentProof, Evidence, EvidenceBuilder, EvidenceFile, EvidenceProblem, EvidenceSummary,
    HostProof, IndexedLine, ProvenLine,
};
pub use trees::{FileTrees, Heads, HostEntry};
pub use verify::{FileReport, Problem, Report, Verifier};

/// The chain value before the first line of a log.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

const CHAIN_FIELD: &str = ",\"chain\":\"";

/// One decision, as written to the audit log. Fields that do not apply to a
/// decision are written as `null`, so every line has the same shape.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct AuditRecord {
    /// RFC 3339 time with milliseconds, UTC: when the client's request
    /// arrived (for a robots.txt fetch, when its answer was in).
    pub ts: String,
    /// When this line's request was sent to the origin (RFC 3339, ms,
    /// UTC): each attempt has its own, while `ts` stays the client
    /// request's arrival. Absent when nothing was sent, so older lines and
    /// refusals keep their bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent: Option<String>,
    /// Unique id of the decision, also sent to the client as `Mannerly-Id`.
    pub id: String,
    /// Which send of the client's request this line is (1 for the first),
    /// on the lines of a request sent more than once; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The `id` of the line of the attempt before this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    /// The `id` of the line of the attempt that followed this throttled one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retried_by: Option<String>,
    /// The client's socket address.
    pub client: Option<String>,
    /// The proxy user the client authenticated as (`proxy.auth`).
    pub user: Option<String>,
    /// Request method.
    pub method: String,
    /// Absolute URL of the request.
    pub url: String,
    /// Host name of the target (no port).
    pub host: String,
    /// The budget the request belongs to (`budget.group_by`,
    /// `budget.groups`): a site, the host, an address or `group:NAME`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Product token the decision was made for.
    pub agent: Option<String>,
    /// What was decided.
    pub outcome: Option<Outcome>,
    /// In observe mode (`policy.enforce = false`): what would have been decided.
    pub would: Option<Outcome>,
    /// Status sent to the client.
    pub status: Option<u16>,
    /// The target's own status when a parent proxy carried it in a header
    /// (`upstream.status_header`) and it is what the budget learned from;
    /// absent otherwise, so lines without a parent keep their bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_status: Option<u16>,
    /// The rule behind the decision (`Disallow: /private/ (line 3, group *)`).
    pub rule: Option<String>,
    /// Plain words on why, for refusals and errors.
    pub reason: Option<String>,
    /// Who caused an error: `client`, `upstream`, `parent` (the parent
    /// proxy of `upstream.proxy`), `policy`, `internal` or `proxy`.
    pub source: Option<&'static str>,
    /// How long the request was held by the budget.
    pub waited_ms: Option<u64>,
    /// How long it waited, before that, for its origin's robots.txt (and
    /// tdmrep.json) to be known: its own fetch of them, or another
    /// request's it joined. Absent when they were known already.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub robots_ms: Option<u64>,
    /// Time from sending the request upstream to the response head.
    pub upstream_ms: Option<u64>,
    /// The host's rate (requests/s) when the decision was made.
    pub rate: Option<f64>,
    /// The host's ceiling (requests/s).
    pub ceiling: Option<f64>,
    /// The raw Retry-After value the origin sent.
    pub retry_after: Option<String>,
    /// The pause the host was put under, in seconds.
    pub pause_s: Option<f64>,
    /// Body bytes sent to the client.
    pub bytes: Option<u64>,
    /// Body bytes read from the client, on the line of a request the client
    /// abandoned; absent otherwise, so other lines keep their bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub received: Option<u64>,
    /// Body bytes the client got without the origin sending them.
    pub saved_bytes: Option<u64>,
    /// What the response store did: `miss`, `stored`, `revalidated`, `hit`, `bypass`, `error`.
    pub cache: Option<&'static str>,
    /// The site's usage preferences that applied (robots.txt `Content-Signal`
    /// / `Content-Usage`, and response headers): per purpose `allowed`,
    /// `disallowed` or `unknown`, the site's `use`, and the statements behind
    /// them. Lines written before the field existed have none and still
    /// verify: the chain covers the bytes as written.
    pub prefs: Option<PrefsRecord>,
    /// Whether the request carried Web Bot Auth signature headers.
    pub signed: bool,
    /// Where the host's budget was decided, with a shared state backend:
    /// `"shared"` on the cluster's copy; `"degraded"` when the backend was
    /// out of reach and this proxy decided alone at its conservative rate;
    /// `"contended"` when other proxies kept changing the host's copy, so
    /// this request alone was decided that way. Absent with no shared
    /// backend (so those lines keep their shape).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<&'static str>,
    /// The limit the origin announced in this response's headers
    /// (`RateLimit-Policy` / `RateLimit` or `X-RateLimit-*`), as read;
    /// absent when it announced none, so older lines keep their bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub announced: Option<Announced>,
    /// What a 402 asked for (`USD 0.01`, an x402 requirement), unpaid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<String>,
    /// The payment scheme of `price`: `pay-per-crawl`, `x402`, `unknown`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pay_scheme: Option<&'static str>,
    /// What the price offered was (`crawler-max-price`, `crawler-exact-price`
    /// or the x402 amount as money) when the request was sent to be paid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered: Option<String>,
    /// What the site charged for this request (`crawler-charged`, or the
    /// x402 amount paid), as it wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub charged: Option<String>,
    /// The x402 settlement's transaction (`PAYMENT-RESPONSE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pay_tx: Option<String>,
    /// The limit a price was refused by (`per_request`, `per_host_per_day`,
    /// `per_day`, `host`, `currency`, `not_payable`, `ledger`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pay_limit: Option<&'static str>,
    /// The site's `crawler-error` code, or why a payment could not be made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pay_error: Option<String>,
    /// What a revalidated page was charged when it was bought: a 304 that
    /// saved paying for it again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saved_charge: Option<String>,
    /// The `keyid` (JWK thumbprint) of the Web Bot Auth signature mannerly
    /// added, when it signed the request.
    pub keyid: Option<String>,
    /// What the origin asked the signature to cover in `Accept-Signature`
    /// (with a 401, 403 or 429), when the request was signed again as asked: the extra
    /// components, and `nonce` when one was asked. Absent otherwise, so
    /// older lines keep their bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature_asked: Option<String>,
    /// Why an origin's `Accept-Signature` (with a 401, 403 or 429) got no
    /// signed resend: malformed, asking what we cannot sign, asked again
    /// after the one resend, a body that cannot be sent again. Absent
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature_not_resent: Option<String>,
    /// What the crawler's User-Agent policy did to the client's
    /// (`appended`, `rewritten: …`); absent when it was sent as it came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// This line's number among the lines of its host in its file (1 for
    /// the first), set by the writer; with the count a checkpoint commits
    /// to, it shows a site that none of its lines was left out. Absent on
    /// lines written before the field existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_seq: Option<u64>,
    /// What the site showed that the budget heard as distress
    /// (`first_byte_timeout`, `503`, `500_run`, `slow`, ...): on the line
    /// of the request that showed it, and on the answers refused while the
    /// host is paused for it. Absent otherwise, so older lines keep their
    /// bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distress: Option<&'static str>,
    /// The host's baseline time to first byte when this answer came (ms),
    /// beside `upstream_ms`, once the budget has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_ms: Option<u32>,
    /// The id of the request whose answer this one shared: an identical
    /// request was at the origin already (`collapsed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collapsed_into: Option<String>,
    /// The longest this request could be held, seconds, when a `wait`
    /// preference made it shorter than the budget's hold; with `wait_by`,
    /// who chose it: `client` (its `Prefer: wait=N`, RFC 7240) or
    /// `config` (its default in `proxy.prefer_wait`). Absent otherwise,
    /// so older lines keep their bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_s: Option<u64>,
    /// See `wait_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_by: Option<&'static str>,
}

// === impl AuditRecord ===

impl AuditRecord {
    /// How long the request has been held by the budget so far.
    pub fn waited(&mut self, held: Duration) {
        self.waited_ms = Some(u64::try_from(held.as_millis()).unwrap_or(u64::MAX));
    }

    /// What the budget learned from the origin's answer: the host's rate and
    /// ceiling, and for a throttle the Retry-After as sent and the pause.
    pub fn budget(&mut self, reaction: &Reaction) {
        self.rate = Some(reaction.rate());
        self.ceiling = Some(reaction.ceiling());
        match reaction {
            Reaction::Throttled(t) => {
                self.retry_after = t.retry_after_raw.clone();
                self.pause_s = Some(t.pause.as_millis() as f64 / 1000.0);
            }
            Reaction::Distressed(s) => {
                self.distress = Some(s.event.as_str());
                self.pause_s = s.pause.map(|d| d.as_millis() as f64 / 1000.0);
            }
            Reaction::Ok { .. } | Reaction::SlowedDown { .. } => {}
        }
    }

    /// What the response store did for this request.
    pub fn cache(&mut self, outcome: CacheOutcome) {
        self.cache = Some(outcome.as_str());
    }

    /// The decision and the status the client gets.
    pub fn decided(&mut self, outcome: Outcome, status: u16) {
        self.outcome = Some(outcome);
        self.status = Some(status);
    }

    /// An answer the proxy made itself: decision, status, why, who caused
    /// it, and the size of the plain-text body.
    pub fn refused(
        &mut self,
        outcome: Outcome,
        status: u16,
        why: &str,
        source: &'static str,
        bytes: u64,
    ) {
        self.decided(outcome, status);
        self.reason = Some(why.to_owned());
        self.source = Some(source);
        self.bytes = Some(bytes);
    }

    /// The record as one JSON object without the chain field.
    pub fn to_json(&self) -> String {
        // Serialising a struct of strings, numbers and options cannot fail;
        // an empty object keeps the chain intact should that ever change.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

/// Appends the chain field to `content` (a JSON object) and returns the full
/// line, without a newline, together with the new chain value.
pub fn chain_line(prev_chain: &str, content: &str) -> (String, String) {
    let chain = digest(prev_chain, content);
    let body = content.strip_suffix('}').unwrap_or(content);
    let sep = if body.ends_with('{') { "" } else { "," };
    let mut line = String::with_capacity(body.len() + 80);
    line.push_str(body);
    line.push_str(sep);
    line.push_str(&CHAIN_FIELD[1..]);
    line.push_str(&chain);
    line.push_str("\"}");
    (line, chain)
}

/// [`chain_line`] in place: `buf[start..]` holds a JSON object, the
/// content; the chain field is appended to it there, so that `buf[start..]`
/// is the line. Returns the new chain value. Lets a writer serialise a
/// record straight into its output buffer.
pub fn chain_onto(prev_chain: &str, buf: &mut Vec<u8>, start: usize) -> String {
    let chain = digest(prev_chain, &buf[start..]);
    if buf[start..].last() == Some(&b'}') {
        buf.pop();
    }
    if buf[start..].last() != Some(&b'{') {
        buf.push(b',');
    }
    buf.extend_from_slice(&CHAIN_FIELD.as_bytes()[1..]);
    buf.extend_from_slice(chain.as_bytes());
    buf.extend_from_slice(b"\"}");
    chain
}

fn digest(prev_chain: &str, content: impl AsRef<[u8]>) -> String {
    let mut h = Sha256::new();
    h.update(prev_chain.as_bytes());
    h.update(content.as_ref());
    checkpoint::hex(&h.finalize())
}

/// Why a log failed verification, with the 1-based line number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// The line has no well-formed `chain` field at its end.
    #[error("line {line}: no chain field")]
    Malformed {
        /// 1-based line number.
        line: usize,
    },
    /// The chain value does not follow from the previous line and this one:
    /// this line was edited, or a line before it was removed or reordered.
    #[error("line {line}: chain does not match (line edited, or a line before it removed)")]
    Broken {
        /// 1-based line number.
        line: usize,
    },
}

/// Splits a line into its content (as it was hashed) and its chain value;
/// `None` for a line without a well-formed `chain` as its last field.
pub fn split_line(line: &str) -> Option<(String, &str)> {
    let rest = line.strip_suffix("\"}")?;
    let at = rest.rfind("\"chain\":\"")?;
    let chain = &rest[at + 9..];
    if chain.len() != 64 || !chain.bytes().all(|b| crate::hex::DIGITS.contains(&b)) {
        return None;
    }
    let mut content = rest[..at].to_string();
    if content.ends_with(',') {
        content.pop();
    }
    content.push('}');
    Some((content, chain))
}

/// Checks every line of a log in order. Returns the number of lines and the
/// last chain value, or the first line that breaks the chain.
pub fn verify_chain<'a>(
    lines: impl IntoIterator<Item = &'a str>,
) -> Result<(usize, String), ChainError> {
    let mut prev = GENESIS.to_string();
    let mut n = 0;
    for (i, line) in lines.into_iter().enumerate() {
        let line_no = i + 1;
        let (content, chain) = split_line(line).ok_or(ChainError::Malformed { line: line_no })?;
        if digest(&prev, &content) != chain {
            return Err(ChainError::Broken { line: line_no });
        }
        prev = chain.to_string();
        n = line_no;
    }
    Ok((n, prev))
}

/// The chain value at the end of a log, for a writer that appends to it.
/// `None` when the last line carries no chain field.
pub fn last_chain(last_line: &str) -> Option<String> {
    split_line(last_line).map(|(_, c)| c.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer chains lines in its buffer: the bytes and the chain value
    /// must be those a verifier rebuilds with `chain_line`.
    #[test]
    fn chaining_in_place_gives_the_line_chain_line_gives() {
        let rec = AuditRecord {
            id: "r1".into(),
            url: "http://a.test/\u{e9}\"q".into(),
            host: "a.test".into(),
            outcome: Some(Outcome::Fetched),
            ..AuditRecord::default()
        };
        for content in [
            rec.to_json(),
            "{}".into(),
            "{\"a\":1}".into(),
            String::new(),
            "x".into(),
        ] {
            let (line, chain) = chain_line("ab12", &content);
            let mut buf = b"earlier line\n".to_vec();
            let start = buf.len();
            buf.extend_from_slice(content.as_bytes());
            assert_eq!(chain_onto("ab12", &mut buf, start), chain, "{content:?}");
            assert_eq!(&buf[start..], line.as_bytes(), "{content:?}");
            assert!(buf.starts_with(b"earlier line\n"));
        }
        let mut buf = Vec::new();
        rec.write_json(&mut buf);
        assert_eq!(buf, rec.to_json().as_bytes());
    }

    fn log(n: usize) -> Vec<String> {
        let mut prev = GENESIS.to_string();
        (0..n)
            .map(|i| {
                let rec = AuditRecord {
                    id: format!("r{i}"),
                    method: "GET".into(),
                    url: format!("http://a.test/{i}"),
                    outcome: Some(Outcome::Fetched),
                    ..Default::default()
                };
                let (line, chain) = chain_line(&prev, &rec.to_json());
                prev = chain;
                line
            })
            .collect()
    }

    #[test]
    fn a_written_log_verifies_and_lines_are_json() {
        let lines = log(5);
        let (n, last) = verify_chain(lines.iter().map(|s| s.as_str())).unwrap();
        assert_eq!(n, 5);
        assert_eq!(last_chain(&lines[4]).unwrap(), last);
        for l in &lines {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["chain"].as_str().unwrap().len(), 64);
            assert_eq!(v["outcome"], "fetched");
        }
    }

    #[test]
    fn lines_from_before_prefs_and_lines_with_prefs_verify_in_one_log() {
        // A line as written before `prefs` existed (no such field at all).
        let old = r#"{"ts":"2026-01-01T00:00:00.000Z","id":"a-0","client":null,"method":"GET","url":"http://a.test/","host":"a.test","agent":null,"outcome":"fetched","would":null,"status":200,"rule":null,"reason":null,"source":null,"waited_ms":0,"rate":null,"ceiling":null,"retry_after":null,"pause_s":null,"bytes":5,"saved_bytes":null,"cache":null,"signed":false}"#;
        let (first, prev) = chain_line(GENESIS, old);
        let robots = crate::robots::Robots::parse(b"User-agent: *\nContent-Usage: train-ai=n\n");
        let rec = AuditRecord {
            id: "a-1".into(),
            outcome: Some(Outcome::SignalRefused),
            prefs: Some(robots.preferences("x", "/").record()),
            ..Default::default()
        };
        let (second, _) = chain_line(&prev, &rec.to_json());
        let lines = [first, second];
        assert_eq!(
            verify_chain(lines.iter().map(|s| s.as_str())).map(|(n, _)| n),
            Ok(2)
        );
        let v: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(v["prefs"]["ai-train"], "disallowed");
        assert_eq!(v["prefs"]["search"], "unknown");
        assert_eq!(
            v["prefs"]["sources"][0],
            "robots.txt line 2: Content-Usage: train-ai=n"
        );
        let v: serde_json::Value = serde_json::from_str(&log(1)[0]).unwrap();
        assert!(v["prefs"].is_null());
    }

    #[test]
    fn an_edited_line_breaks_at_that_line() {
        let mut lines = log(5);
        lines[2] = lines[2].replace("http://a.test/2", "http://a.test/x");
        let err = verify_chain(lines.iter().map(|s| s.as_str())).unwrap_err();
        assert_eq!(err, ChainError::Broken { line: 3 });
    }

    #[test]
    fn a_deleted_line_breaks_where_it_stood() {
        let mut lines = log(5);
        lines.remove(1);
        let err = verify_chain(lines.iter().map(|s| s.as_str())).unwrap_err();
        assert_eq!(err, ChainError::Broken { line: 2 });
    }

    #[test]
    fn a_line_without_chain_is_malformed() {
        let mut lines = log(3);
        lines[0] = "{\"ts\":\"x\"}".into();
        let err = verify_chain(lines.iter().map(|s| s.as_str())).unwrap_err();
        assert_eq!(err, ChainError::Malformed { line: 1 });
    }
}
