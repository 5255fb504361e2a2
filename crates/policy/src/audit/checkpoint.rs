//! Signed checkpoint lines: an Ed25519 signature over the chain value so far,
//! so that re-chaining a log after an edit fails at the next checkpoint, and
//! lines cut from the end show as an unsealed tail.

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

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
const FORMAT: u32 = 2;

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
    /// How the writer sealed: 2 (now) always ends a clean stop with a
    /// `shutdown` checkpoint, so a log ending on any other kind was not
    /// stopped cleanly, or was cut; 1 (checkpoints without the field)
    /// skipped that checkpoint when nothing followed an interval one.
    #[serde(default = "format_one")]
    pub format: u32,
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
        format!(
            "mannerly-audit-checkpoint v{}\nts={}\nwhy={why}\nlines={}\nsealed={}\nevery_lines={}\nevery_secs={}\n",
            self.format, self.ts, self.lines, self.sealed, self.every_lines, self.every_secs
        )
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

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[(b >> 4) as usize]));
        s.push(char::from(HEX[(b & 15) as usize]));
    }
    s
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
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
