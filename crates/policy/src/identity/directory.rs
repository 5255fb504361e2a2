//! The key directory (draft-ietf-webbotauth-httpsig-protocol-00 §5.5.1): a
//! JWKS served at `/.well-known/http-message-signatures-directory` on the
//! `Signature-Agent` origin, where verifiers look up the key a `keyid`
//! names.

use ed25519_dalek::VerifyingKey;
use serde::Serialize;

use super::{jwk_x, KeyId};

/// Where the directory is served, on the `Signature-Agent` origin.
pub const DIRECTORY_PATH: &str = "/.well-known/http-message-signatures-directory";
/// The media type the directory must be served with.
pub const DIRECTORY_MEDIA_TYPE: &str = "application/http-message-signatures-directory+json";

/// One key in the directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectoryKey {
    /// The public key.
    pub key: VerifyingKey,
    /// Not used for signing before this time (Unix seconds), if known.
    pub nbf: Option<u64>,
    /// Leaves the directory at this time (Unix seconds): set on a key that
    /// was rotated out and stays only for the overlap.
    pub exp: Option<u64>,
}

#[derive(Serialize)]
struct Jwk {
    kty: &'static str,
    crv: &'static str,
    kid: String,
    x: String,
    #[serde(rename = "use")]
    use_: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    nbf: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exp: Option<u64>,
}

#[derive(Serialize)]
struct Jwks {
    keys: Vec<Jwk>,
}

/// The directory JSON for `keys`, in the order given (signing key first).
/// `kid` is the thumbprint, as the draft requires when it is present.
pub fn directory_json(keys: &[DirectoryKey]) -> String {
    let jwks = Jwks {
        keys: keys
            .iter()
            .map(|k| Jwk {
                kty: "OKP",
                crv: "Ed25519",
                kid: KeyId::of(&k.key).to_string(),
                x: jwk_x(&k.key),
                use_: "sig",
                nbf: k.nbf,
                exp: k.exp,
            })
            .collect(),
    };
    // A struct of strings and integers always serialises.
    serde_json::to_string_pretty(&jwks).unwrap_or_else(|_| String::from(r#"{"keys":[]}"#))
}
