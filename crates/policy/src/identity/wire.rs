//! What the drafts put on the wire under fixed names: the signature's label
//! and tag, and a key's JWK `x` member and thumbprint. A leaf the signing,
//! the directory and the reading of `Accept-Signature` all use.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ed25519_dalek::VerifyingKey;
use sha2::{Digest, Sha256};

/// The signature's label, and the key of our `Signature-Agent` member: the
/// draft binds the member to the signature by giving both the same name.
pub const LABEL: &str = "sig1";
/// The `tag` every Web Bot Auth signature carries.
pub const TAG: &str = "web-bot-auth";

/// A key's identifier: its JWK SHA-256 thumbprint (RFC 7638, RFC 8037 A.3),
/// base64url without padding.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyId(String);

impl KeyId {
    /// The thumbprint of an Ed25519 public key.
    pub fn of(key: &VerifyingKey) -> KeyId {
        // RFC 7638: the required members in lexicographic order, no spaces.
        let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#, jwk_x(key));
        KeyId(URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes())))
    }

    /// The thumbprint as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The JWK `x` member of an Ed25519 public key.
pub fn jwk_x(key: &VerifyingKey) -> String {
    URL_SAFE_NO_PAD.encode(key.as_bytes())
}
