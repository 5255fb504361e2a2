//! The audit line's JSON written by hand: the bytes `serde_json` writes
//! for [`AuditRecord`] (its `Serialize`, field by field in order, `None`
//! as `null` or left out as the field says), without serde's per-field
//! dispatch and without escaping the field names, which need none. Every
//! request writes one, and serialising was the writer's largest cost
//! after hashing. `tests` checks the bytes against `serde_json`'s.

use serde::Serialize;

use super::AuditRecord;

/// `{` and `}` as bytes (not as char literals: a brace counter of the
/// layering checks reads those).
const OPEN: u8 = 0x7b;
const CLOSE: u8 = 0x7d;

impl AuditRecord {
    /// [`AuditRecord::to_json`], appended to `out`: the same bytes.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let mut w = Json {
            out,
            first: true,
            failed: false,
        };
        first_fields(&mut w, self);
        last_fields(&mut w, self);
        w.out.push(CLOSE);
        if w.failed {
            // As `serde_json` would have failed: an empty object keeps the
            // chain intact (see `to_json`).
            out.truncate(start);
            out.extend_from_slice(b"{}");
        }
    }
}

fn first_fields(w: &mut Json<'_>, r: &AuditRecord) {
    w.string("ts", &r.ts);
    w.skip_text("sent", r.sent.as_deref());
    w.string("id", &r.id);
    w.skip_number("attempt", r.attempt.map(u64::from));
    w.skip_text("retry_of", r.retry_of.as_deref());
    w.skip_text("retried_by", r.retried_by.as_deref());
    w.text("client", r.client.as_deref());
    w.text("user", r.user.as_deref());
    w.string("method", &r.method);
    w.string("url", &r.url);
    w.string("host", &r.host);
    w.skip_text("group", r.group.as_deref());
    w.text("agent", r.agent.as_deref());
    w.value("outcome", r.outcome.as_ref());
    w.value("would", r.would.as_ref());
    w.number("status", r.status.map(u64::from));
    w.skip_number("target_status", r.target_status.map(u64::from));
    w.text("rule", r.rule.as_deref());
    w.text("reason", r.reason.as_deref());
    w.text("source", r.source);
    w.number("waited_ms", r.waited_ms);
    w.skip_number("robots_ms", r.robots_ms);
    w.number("upstream_ms", r.upstream_ms);
    w.value("rate", r.rate.as_ref());
    w.value("ceiling", r.ceiling.as_ref());
    w.text("retry_after", r.retry_after.as_deref());
}

fn last_fields(w: &mut Json<'_>, r: &AuditRecord) {
    w.value("pause_s", r.pause_s.as_ref());
    w.number("bytes", r.bytes);
    w.skip_number("received", r.received);
    w.number("saved_bytes", r.saved_bytes);
    w.text("cache", r.cache);
    w.value("prefs", r.prefs.as_ref());
    w.boolean("signed", r.signed);
    w.skip_text("state", r.state);
    w.skip_value("announced", r.announced.as_ref());
    w.skip_text("price", r.price.as_deref());
    w.skip_text("pay_scheme", r.pay_scheme);
    w.skip_text("offered", r.offered.as_deref());
    w.skip_text("charged", r.charged.as_deref());
    w.skip_text("pay_tx", r.pay_tx.as_deref());
    w.skip_text("pay_limit", r.pay_limit);
    w.skip_text("pay_error", r.pay_error.as_deref());
    w.skip_text("saved_charge", r.saved_charge.as_deref());
    w.text("keyid", r.keyid.as_deref());
    w.skip_text("signature_asked", r.signature_asked.as_deref());
    w.skip_text("signature_not_resent", r.signature_not_resent.as_deref());
    w.skip_text("user_agent", r.user_agent.as_deref());
    w.skip_number("host_seq", r.host_seq);
    w.skip_text("distress", r.distress);
    w.skip_number("baseline_ms", r.baseline_ms.map(u64::from));
    w.skip_text("collapsed_into", r.collapsed_into.as_deref());
    w.skip_number("wait_s", r.wait_s);
    w.skip_text("wait_by", r.wait_by);
}

/// An object being written.
struct Json<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
    failed: bool,
}

impl Json<'_> {
    fn key(&mut self, name: &str) {
        self.out.push(if self.first { OPEN } else { b',' });
        self.first = false;
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    /// A string as `serde_json` escapes it: `"`, `\\` and control
    /// characters; a string with none of them is copied as it is.
    fn quoted(&mut self, s: &str) {
        // Every byte looked at, without stopping at the first to escape:
        // a loop that cannot stop early is compiled to compare sixteen or
        // thirty-two bytes at a time, where `any` went byte by byte (a
        // line's strings are some 300 bytes, and escapes are rare).
        let escapes = s
            .bytes()
            .fold(false, |e, b| e | (b < 0x20) | (b == b'"') | (b == b'\\'));
        if escapes {
            self.serde(s);
        } else {
            self.out.push(b'"');
            self.out.extend_from_slice(s.as_bytes());
            self.out.push(b'"');
        }
    }

    fn serde<T: Serialize + ?Sized>(&mut self, v: &T) {
        if serde_json::to_writer(&mut *self.out, v).is_err() {
            self.failed = true;
        }
    }

    fn string(&mut self, name: &str, s: &str) {
        self.key(name);
        self.quoted(s);
    }

    fn text(&mut self, name: &str, s: Option<&str>) {
        self.key(name);
        match s {
            Some(s) => self.quoted(s),
            None => self.out.extend_from_slice(b"null"),
        }
    }

    fn skip_text(&mut self, name: &str, s: Option<&str>) {
        if s.is_some() {
            self.text(name, s);
        }
    }

    fn number(&mut self, name: &str, n: Option<u64>) {
        self.key(name);
        match n {
            Some(n) => self
                .out
                .extend_from_slice(itoa::Buffer::new().format(n).as_bytes()),
            None => self.out.extend_from_slice(b"null"),
        }
    }

    fn skip_number(&mut self, name: &str, n: Option<u64>) {
        if n.is_some() {
            self.number(name, n);
        }
    }

    fn boolean(&mut self, name: &str, b: bool) {
        self.key(name);
        self.out
            .extend_from_slice(if b { b"true" as &[u8] } else { b"false" });
    }

    /// Anything else (floats, enums, nested records) as `serde_json`
    /// writes it.
    fn value<T: Serialize>(&mut self, name: &str, v: Option<&T>) {
        self.key(name);
        match v {
            Some(v) => self.serde(v),
            None => self.out.extend_from_slice(b"null"),
        }
    }

    fn skip_value<T: Serialize>(&mut self, name: &str, v: Option<&T>) {
        if v.is_some() {
            self.value(name, v);
        }
    }
}

#[cfg(test)]
#[path = "json/tests.rs"]
mod tests;
