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

/// A field's name as the line writes it: quoted, with its colon, made at
/// compile time so that each field costs one copy. Only `k!` makes one, so
/// a bare name cannot reach the line unquoted.
#[derive(Clone, Copy)]
struct Key(&'static str);

macro_rules! k {
    ($name:literal) => {
        Key(concat!("\"", $name, "\":"))
    };
}

fn first_fields(w: &mut Json<'_>, r: &AuditRecord) {
    w.string(k!("ts"), &r.ts);
    w.skip_text(k!("sent"), r.sent.as_deref());
    w.string(k!("id"), &r.id);
    w.skip_number(k!("attempt"), r.attempt.map(u64::from));
    w.skip_text(k!("retry_of"), r.retry_of.as_deref());
    w.skip_text(k!("retried_by"), r.retried_by.as_deref());
    w.text(k!("client"), r.client.as_deref());
    w.text(k!("user"), r.user.as_deref());
    w.string(k!("method"), &r.method);
    w.string(k!("url"), &r.url);
    w.string(k!("host"), &r.host);
    w.skip_text(k!("group"), r.group.as_deref());
    w.text(k!("agent"), r.agent.as_deref());
    w.value(k!("outcome"), r.outcome.as_ref());
    w.value(k!("would"), r.would.as_ref());
    w.number(k!("status"), r.status.map(u64::from));
    w.skip_number(k!("target_status"), r.target_status.map(u64::from));
    w.text(k!("rule"), r.rule.as_deref());
    w.text(k!("reason"), r.reason.as_deref());
    w.text(k!("source"), r.source);
    w.number(k!("waited_ms"), r.waited_ms);
    w.skip_number(k!("robots_ms"), r.robots_ms);
    w.number(k!("upstream_ms"), r.upstream_ms);
    w.value(k!("rate"), r.rate.as_ref());
    w.value(k!("ceiling"), r.ceiling.as_ref());
    w.text(k!("retry_after"), r.retry_after.as_deref());
}

fn last_fields(w: &mut Json<'_>, r: &AuditRecord) {
    w.value(k!("pause_s"), r.pause_s.as_ref());
    w.number(k!("bytes"), r.bytes);
    w.skip_number(k!("received"), r.received);
    w.number(k!("saved_bytes"), r.saved_bytes);
    w.text(k!("cache"), r.cache);
    w.value(k!("prefs"), r.prefs.as_ref());
    w.boolean(k!("signed"), r.signed);
    w.skip_text(k!("state"), r.state);
    w.skip_value(k!("announced"), r.announced.as_ref());
    w.skip_text(k!("price"), r.price.as_deref());
    w.skip_text(k!("pay_scheme"), r.pay_scheme);
    w.skip_text(k!("offered"), r.offered.as_deref());
    w.skip_text(k!("charged"), r.charged.as_deref());
    w.skip_text(k!("pay_tx"), r.pay_tx.as_deref());
    w.skip_text(k!("pay_limit"), r.pay_limit);
    w.skip_text(k!("pay_error"), r.pay_error.as_deref());
    w.skip_text(k!("saved_charge"), r.saved_charge.as_deref());
    w.text(k!("keyid"), r.keyid.as_deref());
    w.skip_text(k!("signature_asked"), r.signature_asked.as_deref());
    w.skip_text(
        k!("signature_not_resent"),
        r.signature_not_resent.as_deref(),
    );
    w.skip_text(k!("user_agent"), r.user_agent.as_deref());
    w.skip_number(k!("host_seq"), r.host_seq);
    w.skip_text(k!("distress"), r.distress);
    w.skip_number(k!("baseline_ms"), r.baseline_ms.map(u64::from));
    w.skip_text(k!("collapsed_into"), r.collapsed_into.as_deref());
    w.skip_number(k!("wait_s"), r.wait_s);
    w.skip_text(k!("wait_by"), r.wait_by);
}

/// An object being written.
struct Json<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
    failed: bool,
}

impl Json<'_> {
    fn key(&mut self, key: Key) {
        self.out.push(if self.first { OPEN } else { b',' });
        self.first = false;
        self.out.extend_from_slice(key.0.as_bytes());
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

    fn string(&mut self, key: Key, s: &str) {
        self.key(key);
        self.quoted(s);
    }

    fn text(&mut self, key: Key, s: Option<&str>) {
        self.key(key);
        match s {
            Some(s) => self.quoted(s),
            None => self.out.extend_from_slice(b"null"),
        }
    }

    fn skip_text(&mut self, key: Key, s: Option<&str>) {
        if s.is_some() {
            self.text(key, s);
        }
    }

    fn number(&mut self, key: Key, n: Option<u64>) {
        self.key(key);
        match n {
            Some(n) => self
                .out
                .extend_from_slice(itoa::Buffer::new().format(n).as_bytes()),
            None => self.out.extend_from_slice(b"null"),
        }
    }

    fn skip_number(&mut self, key: Key, n: Option<u64>) {
        if n.is_some() {
            self.number(key, n);
        }
    }

    fn boolean(&mut self, key: Key, b: bool) {
        self.key(key);
        self.out
            .extend_from_slice(if b { b"true" as &[u8] } else { b"false" });
    }

    /// Anything else (floats, enums, nested records) as `serde_json`
    /// writes it.
    fn value<T: Serialize>(&mut self, key: Key, v: Option<&T>) {
        self.key(key);
        match v {
            Some(v) => self.serde(v),
            None => self.out.extend_from_slice(b"null"),
        }
    }

    fn skip_value<T: Serialize>(&mut self, key: Key, v: Option<&T>) {
        if v.is_some() {
            self.value(key, v);
        }
    }
}

#[cfg(test)]
#[path = "json/tests.rs"]
mod tests;
