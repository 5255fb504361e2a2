//! Signed checkpoint lines: an Ed25519 signature over the chain value so far,
//! so that re-chaining a log after an edit fails at the next checkpoint, and
//! lines cut from the end show as an unsealed tail.

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::trees::Heads;
pub use crate::hex::hex;

/// The `outcome` of a checkpoint line.
pub const CHECKPOINT: &str = "checkpoint";

/// Why a checkpoint was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SealReason {
    /// `audit.checkpoint_lines` lines or `audit.checkpoint_secs` seconds passed.
    Interval,
    /// The file is closed for rotation; the next file continues the chain.
    Rotation,
    /// Clean shutdown: nothing after it in this file.
    Shutdown,
    /// The first line of a file that continues the log of an earlier one:
    /// `sealed` is that file's last chain value, so this file can be
    /// checked from its first line even when the earlier file is gone.
    Continuation,
}

/// The checkpoint format this version writes (see [`Checkpoint::format`]).
pub(crate) const FORMAT: u32 = 5;

/// What a format-3 checkpoint commits to beyond the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commits {
    /// The chain value this file's first line continues (`GENESIS` for
    /// the first file of a log).
    pub continues: String,
    /// The Merkle heads over the file's lines so far.
    pub heads: Heads,
}

fn format_one() -> u32 {
    1
}

/// One checkpoint line, as written (before its `chain` field).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// RFC 3339 time the checkpoint was made.
    pub ts: String,
    /// Always `checkpoint`.
    pub outcome: String,
    /// Why it was written.
    pub why: SealReason,
    /// Lines of this file before this checkpoint (checkpoints included).
    pub lines: u64,
    /// The chain value of the line just before this checkpoint.
    pub sealed: String,
    /// The interval in force, so a verifier can tell a crash (at most one
    /// interval unsealed) from a cut.
    pub every_lines: u64,
    /// The interval in force, seconds.
    pub every_secs: u64,
    /// How the writer sealed: since 2 a clean stop always ends with a
    /// `shutdown` checkpoint, so a log ending on any other kind was not
    /// stopped cleanly, or was cut; 1 (checkpoints without the field)
    /// skipped that checkpoint when nothing followed an interval one; 3
    /// also signs the fields below, so that single lines can be proven to
    /// be in the file; 4 links the host tree's leaves by key, so a host's
    /// absence from a file can be proven too; 5 (now) makes the line
    /// tree's leaves of the lines' chain values instead of their text (the
    /// chain covers the text: one hash per line where there were two).
    #[serde(default = "format_one")]
    pub format: u32,
    /// Format 3: the chain value the file's first line continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<String>,
    /// Format 3: the RFC 9162 Merkle tree head over the file's `lines`
    /// lines before this checkpoint (formats 3 and 4: each line as
    /// written, without its newline; from format 5: each line's chain
    /// value, 32 bytes), hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<String>,
    /// Format 3: hosts with lines in the file so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<u64>,
    /// Format 3: the head of the tree with one leaf per host (its line
    /// count and last line; from format 4 also its key and the next), hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts_tree: Option<String>,
    /// The public key that signed, hex.
    pub key: String,
    /// Ed25519 signature over [`Checkpoint::message`], hex.
    pub sig: String,
}

impl Checkpoint {
    /// A signed checkpoint.
    #[allow(clippy::too_many_arguments)]
    pub fn sign(
        key: &SigningKey,
        ts: String,
        why: SealReason,
        lines: u64,
        sealed: &str,
        every_lines: u64,
        every_secs: u64,
        commits: &Commits,
    ) -> Checkpoint {
        let mut c = Checkpoint {
            ts,
            outcome: CHECKPOINT.to_string(),
            why,
            lines,
            sealed: sealed.to_string(),
            every_lines,
            every_secs,
            format: FORMAT,
            continues: Some(commits.continues.clone()),
            tree: Some(hex(&commits.heads.tree)),
            hosts: Some(commits.heads.hosts),
            hosts_tree: Some(hex(&commits.heads.hosts_tree)),
            key: hex(key.verifying_key().as_bytes()),
            sig: String::new(),
        };
        c.sig = hex(&key.sign(c.message().as_bytes()).to_bytes());
        c
    }

    /// The bytes that are signed: every field but the key and signature.
    pub fn message(&self) -> String {
        let why = match self.why {
            SealReason::Interval => "interval",
            SealReason::Rotation => "rotation",
            SealReason::Shutdown => "shutdown",
            SealReason::Continuation => "continuation",
        };
        // The format is in the first line, so it is signed too: a cut log
        // cannot pass for an older one.
        let mut m = format!(
            "mannerly-audit-checkpoint v{}\nts={}\nwhy={why}\nlines={}\nsealed={}\nevery_lines={}\nevery_secs={}\n",
            self.format, self.ts, self.lines, self.sealed, self.every_lines, self.every_secs
        );
        if self.format >= 3 {
            let opt = |s: &Option<String>| s.clone().unwrap_or_default();
            m.push_str(&format!(
                "continues={}\ntree={}\nhosts={}\nhosts_tree={}\n",
                opt(&self.continues),
                opt(&self.tree),
                self.hosts.unwrap_or(0),
                opt(&self.hosts_tree)
            ));
        }
        m
    }

    /// The line tree head, for format 3.
    pub fn tree_head(&self) -> Option<[u8; 32]> {
        unhex::<32>(self.tree.as_deref()?)
    }

    /// The host tree head, for format 3.
    pub fn hosts_head(&self) -> Option<[u8; 32]> {
        unhex::<32>(self.hosts_tree.as_deref()?)
    }

    /// Whether `key` signed this checkpoint.
    pub fn verify(&self, key: &VerifyingKey) -> bool {
        let Some(bytes) = unhex::<64>(&self.sig) else {
            return false;
        };
        key.verify(self.message().as_bytes(), &Signature::from_bytes(&bytes))
            .is_ok()
    }

    /// The checkpoint as one JSON object without the chain field.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

/// A public key from its hex form (as `mannerly audit pubkey` prints it).
pub fn parse_public_key(text: &str) -> Option<VerifyingKey> {
    let bytes = unhex::<32>(text.trim())?;
    VerifyingKey::from_bytes(&bytes).ok()
}

pub(crate) fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.as_bytes();
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in s.chunks(2).enumerate() {
        let d = |c: u8| (c as char).to_digit(16);
        out[i] = (d(pair[0])? * 16 + d(pair[1])?) as u8;
    }
    Some(out)
}
