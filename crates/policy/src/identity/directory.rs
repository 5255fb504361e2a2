//! The key directory (draft-ietf-webbotauth-httpsig-protocol-01, "Key
//! Distribution and Discovery"): a JWKS served at the `Signature-Agent` URL,
//! `/.well-known/http-message-signatures-directory` by default, where
//! verifiers look up the key a `keyid` names; and the directory's own
//! signature (Appendix B, "Possession Proof on the Directory Response").

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::wire::{jwk_x, KeyId};

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

/// The directory JSON for `keys`, in the order given (signing key first),
/// indented for a person to read. `kid` is the thumbprint, as the draft
/// requires when it is present.
pub fn directory_json(keys: &[DirectoryKey]) -> String {
    // A struct of strings and integers always serialises.
    serde_json::to_string_pretty(&jwks(keys)).unwrap_or_else(|_| String::from(r#"{"keys":[]}"#))
}

fn jwks(keys: &[DirectoryKey]) -> Jwks {
    Jwks {
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
    }
}

/// The `tag` of a directory's own signature.
pub const DIRECTORY_TAG: &str = "http-message-signatures-directory";
/// The label of that signature (the draft's example uses it).
pub const DIRECTORY_LABEL: &str = "binding";
/// How long a directory's signature stays valid. Long on purpose: the draft
/// (Deployment Guidance) says a short `expires` buys no revocation, since a
/// list that redistributes the keys republishes on its own schedule, and
/// costs availability when it lapses; removing a key from the directory is
/// what retires it.
pub const DIRECTORY_SIGNATURE_VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);

/// A directory response with its possession proof: the body exactly as
/// signed (compact JSON), and the three fields that go with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedDirectory {
    /// The JWKS, byte for byte what `Content-Digest` covers.
    pub body: String,
    /// `Content-Digest` (RFC 9530, SHA-256).
    pub content_digest: String,
    /// `Signature-Input`.
    pub signature_input: String,
    /// `Signature`.
    pub signature: String,
}

/// The directory of `keys`, signed by each of `signers` for a request to
/// `authority` (the `Host` the verifier fetched it from) at `now`, as
/// Appendix B of -01 has it: one signature per key, each over
/// `("@authority";req "content-digest")` with `created`, `expires`, `keyid`
/// and `tag="http-message-signatures-directory"`.
///
/// The first signer's label is `binding` (the draft's example), the next
/// ones `binding2`, `binding3`, …; a signer whose key the directory does not
/// list is left out (a verifier must check each proof with a key the
/// directory provides), and so is a key given twice.
pub fn signed_directory(
    keys: &[DirectoryKey],
    signers: &[&SigningKey],
    authority: &str,
    now: SystemTime,
) -> SignedDirectory {
    let created = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let expires = created + DIRECTORY_SIGNATURE_VALIDITY.as_secs();
    sign_directory_at(keys, signers, authority, created, expires)
}

/// The label of the `i`-th signature (from 0) of a directory response.
fn label(i: usize) -> String {
    match i {
        0 => DIRECTORY_LABEL.to_string(),
        _ => format!("{DIRECTORY_LABEL}{}", i + 1),
    }
}

pub(crate) fn sign_directory_at(
    keys: &[DirectoryKey],
    signers: &[&SigningKey],
    authority: &str,
    created: u64,
    expires: u64,
) -> SignedDirectory {
    // Compact, so the bytes signed are the bytes a verifier digests.
    let body =
        serde_json::to_string(&jwks(keys)).unwrap_or_else(|_| String::from(r#"{"keys":[]}"#));
    let content_digest = format!(
        "sha-256=:{}:",
        STANDARD.encode(Sha256::digest(body.as_bytes()))
    );
    let mut signing: Vec<&SigningKey> = Vec::new();
    for s in signers {
        let public = s.verifying_key();
        let listed = keys.iter().any(|k| k.key == public);
        if listed && signing.iter().all(|t| t.verifying_key() != public) {
            signing.push(s);
        }
    }
    let authority = authority.to_ascii_lowercase();
    let (mut inputs, mut signatures) = (Vec::new(), Vec::new());
    for (i, signer) in signing.into_iter().enumerate() {
        let keyid = KeyId::of(&signer.verifying_key());
        let params = format!(
            r#"("@authority";req "content-digest");created={created};expires={expires};keyid="{keyid}";tag="{DIRECTORY_TAG}""#
        );
        let base = format!(
            "\"@authority\";req: {authority}\n\"content-digest\": {content_digest}\n\"@signature-params\": {params}"
        );
        let signature = signer.sign(base.as_bytes());
        let label = label(i);
        inputs.push(format!("{label}={params}"));
        signatures.push(format!(
            "{label}=:{}:",
            STANDARD.encode(signature.to_bytes())
        ));
    }
    SignedDirectory {
        body,
        content_digest,
        signature_input: inputs.join(", "),
        signature: signatures.join(", "),
    }
}
