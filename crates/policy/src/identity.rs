//! Web Bot Auth: the signature a crawler's requests carry so that a site can
//! tell who sent them (draft-ietf-webbotauth-httpsig-protocol-01, on HTTP
//! Message Signatures, RFC 9421, with Ed25519).
//!
//! Pure computation: the signing key comes in as PEM text, the time as an
//! argument. Reading key files and picking the clock is the proxy's job.
//!
//! What a signed request carries, in the directory-03 form (what
//! Cloudflare verifies) and in the -01 form (§5.2 of the draft); [`Form`]
//! says how they differ:
//!
//! ```text
//! Signature-Agent: "https://crawler.example"
//! Signature-Input: sig1=("@authority" "signature-agent");created=…;keyid="…";alg="ed25519";expires=…;tag="web-bot-auth"
//!
//! Signature-Agent: sig1="https://crawler.example/.well-known/http-message-signatures-directory"
//! Signature-Input: sig1=("@authority" "signature-agent";key="sig1");created=…;keyid="…";alg="ed25519";expires=…;tag="web-bot-auth"
//! Signature: sig1=:…:
//! ```
//!
//! The draft asks for no nonce (§5.2.3 leaves replay protection to RFC 9421),
//! so none is sent: a nonce only helps a verifier that keeps nonce state,
//! and it would make every signature unique for no one's benefit.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey, KeypairBytes};
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use http::header::{HeaderName, HeaderValue};

mod about;
mod accept;
mod card;
mod directory;
mod form;
mod user_agent;
mod wire;

pub use about::{
    about_html, html_escape, jafar_json, AboutCrawler, Prefix, ABOUT_PATH, RANGES_PATH, RANGES_REL,
};
pub use accept::{challenge, AskedSignature, Challenge, Unmet, CHALLENGE_STATUSES};
pub use card::{card_json, CARD_PATH};
pub use directory::{
    directory_json, signed_directory, DirectoryKey, SignedDirectory, DIRECTORY_LABEL,
    DIRECTORY_MEDIA_TYPE, DIRECTORY_PATH, DIRECTORY_SIGNATURE_VALIDITY, DIRECTORY_TAG,
};
pub use form::{Form, Forms};
pub use user_agent::{claims_browser, BrowserUa, UaError, UaMode, UaPolicy, UaVerdict};
pub use wire::{jwk_x, KeyId, LABEL, TAG};

/// `Signature-Agent`.
pub const SIGNATURE_AGENT: HeaderName = HeaderName::from_static("signature-agent");
/// `Signature-Input`.
pub const SIGNATURE_INPUT: HeaderName = HeaderName::from_static("signature-input");
/// `Signature`.
pub const SIGNATURE: HeaderName = HeaderName::from_static("signature");

/// The longest validity accepted: the draft recommends no more than 24 h.
pub const MAX_VALIDITY: Duration = Duration::from_secs(24 * 3600);

/// Why an identity cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    /// The key is not an Ed25519 private key in PKCS#8 PEM.
    #[error("not an Ed25519 private key in PKCS#8 PEM ({0})")]
    Key(String),
    /// The Signature-Agent value is not one the draft allows.
    #[error("signature_agent {value:?}: {why}")]
    Agent {
        /// What was given.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The validity is zero or longer than 24 h.
    #[error("validity must be between 1 s and 24 h, got {0:?}")]
    Validity(Duration),
}

/// Reads an Ed25519 private key from PKCS#8 PEM.
pub fn key_from_pem(pem: &str) -> Result<SigningKey, IdentityError> {
    SigningKey::from_pkcs8_pem(pem).map_err(|e| IdentityError::Key(e.to_string()))
}

/// An Ed25519 private key from 32 random bytes, as PKCS#8 v1 PEM (RFC 8410
/// §7: version 0, no public key attribute). The bytes come from the caller:
/// the policy crate has no source of randomness.
///
/// v1, not the v2 `OneAsymmetricKey` ed25519-dalek writes by default: the
/// v2 form with the public key is refused by OpenSSL 3.0 (`wrong tag`),
/// Python `cryptography` and Node's `crypto`, so an operator could not back
/// up, convert or use the key with their own tools. [`key_from_pem`] reads
/// both forms, so files written before still load.
pub fn key_to_pem(seed: &[u8; 32]) -> Result<String, IdentityError> {
    let bytes = KeypairBytes {
        secret_key: *seed,
        public_key: None,
    };
    bytes
        .to_pkcs8_pem(Default::default())
        .map(|pem| pem.to_string())
        .map_err(|e| IdentityError::Key(e.to_string()))
}

/// The `Signature-Agent` member value for a configured `signature_agent`:
/// the direct URL of the crawler's JWK Set, as
/// draft-ietf-webbotauth-httpsig-protocol-01 requires of every member value
/// (an -01 verifier fetches the value itself and adds no path).
///
/// An origin alone (`https://host[:port]`, with or without `/`) is what -00
/// took (its verifiers added the well-known path); it is expanded to
/// `https://host[:port]/.well-known/http-message-signatures-directory`, the
/// URL -00 verifiers fetched, and the one form that binds the keys to the
/// domain (the path is reserved, so the domain operator stands behind it).
/// Any other https path is taken as given. Refused: not https, user info,
/// a query (verifiers drop it from the identifier, so it would only mint
/// spellings of one identity), a fragment, and bytes that cannot stand in a
/// Structured Field string unescaped.
pub fn jwks_url(url: &str) -> Result<String, IdentityError> {
    let bad = |why| IdentityError::Agent {
        value: url.to_string(),
        why,
    };
    if !url
        .bytes()
        .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\')
    {
        return Err(bad(
            "only printable ASCII without spaces, quotes or backslashes",
        ));
    }
    let uri: http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
    if uri.scheme_str() != Some("https") {
        return Err(bad("the draft requires an https URL"));
    }
    let authority = match uri.authority() {
        Some(a) if !a.host().is_empty() && !a.as_str().contains('@') => a,
        _ => return Err(bad("needs a host (and no user info)")),
    };
    if uri.query().is_some() || url.contains('#') {
        return Err(bad(
            "no query or fragment: the URL of the key directory (JWK Set) itself",
        ));
    }
    Ok(match uri.path() {
        "" | "/" => format!("https://{authority}{DIRECTORY_PATH}"),
        _ => url.to_string(),
    })
}

/// The `Signature-Agent` value of the directory-03 form for a key
/// directory URL ([`jwks_url`]): its origin, which directory-03 verifiers
/// add the well-known path to. A directory anywhere else cannot be named
/// in that form.
pub fn directory_origin(jwks: &str) -> Result<String, IdentityError> {
    let bad = |why| IdentityError::Agent {
        value: jwks.to_string(),
        why,
    };
    let uri: http::Uri = jwks.parse().map_err(|_| bad("not a URL"))?;
    let authority = uri.authority().ok_or(bad("needs a host"))?;
    if uri.path() != DIRECTORY_PATH {
        return Err(bad(
            "directory-03 verifiers (Cloudflare) fetch /.well-known/http-message-signatures-directory \
             of the origin named; a key directory elsewhere can only be sent in form \"01\"",
        ));
    }
    Ok(format!("https://{authority}"))
}

/// The three header values of one signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureHeaders {
    /// `Signature-Agent`.
    pub agent: String,
    /// `Signature-Input`.
    pub input: String,
    /// `Signature`.
    pub signature: String,
}

/// Who the crawler is: its key, where its key directory lives, how long a
/// signature stays valid and which hosts are never signed for.
pub struct Identity {
    key: SigningKey,
    keyid: KeyId,
    agent_url: String,
    /// The directory-03 `Signature-Agent` (an origin), when a host is
    /// signed in that form.
    agent_origin: Option<String>,
    forms: Forms,
    validity: Duration,
    skip_hosts: Vec<String>,
}

impl fmt::Debug for Identity {
    // The private key stays out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("keyid", &self.keyid)
            .field("agent_url", &self.agent_url)
            .field("forms", &self.forms)
            .field("validity", &self.validity)
            .field("skip_hosts", &self.skip_hosts)
            .finish()
    }
}

impl Identity {
    /// An identity from a key, the `Signature-Agent` URL ([`jwks_url`]
    /// says how an origin alone is expanded), the validity of
    /// each signature, the hosts never signed for (`example.org` is that
    /// host only, `*.example.org` its subdomains) and the form each host
    /// gets. The directory-03 form needs the key directory at the
    /// well-known path ([`directory_origin`]).
    pub fn new(
        key: SigningKey,
        agent_url: &str,
        validity: Duration,
        skip_hosts: &[String],
        forms: Forms,
    ) -> Result<Identity, IdentityError> {
        let agent_url = jwks_url(agent_url)?;
        let agent_origin = match forms.uses(Form::Directory03) {
            true => Some(directory_origin(&agent_url)?),
            false => None,
        };
        if validity < Duration::from_secs(1) || validity > MAX_VALIDITY {
            return Err(IdentityError::Validity(validity));
        }
        let keyid = KeyId::of(&key.verifying_key());
        Ok(Identity {
            key,
            keyid,
            agent_url,
            agent_origin,
            forms,
            validity,
            skip_hosts: skip_hosts
                .iter()
                .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
        })
    }

    /// The identifier signatures carry in `keyid`.
    pub fn keyid(&self) -> &KeyId {
        &self.keyid
    }

    /// The public half of the key.
    pub fn public_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The key directory of `keys` with its possession proofs, for a
    /// verifier that fetched it from `authority` ([`signed_directory`]):
    /// signed by this identity's key first, then by each of `retired` (keys
    /// rotated out, listed for their overlap) the directory lists.
    pub fn signed_directory(
        &self,
        keys: &[DirectoryKey],
        retired: &[SigningKey],
        authority: &str,
        now: SystemTime,
    ) -> SignedDirectory {
        let signers: Vec<&SigningKey> = std::iter::once(&self.key).chain(retired).collect();
        directory::signed_directory(keys, &signers, authority, now)
    }

    /// The `Signature-Agent` member value: the key directory's URL.
    pub fn agent_url(&self) -> &str {
        &self.agent_url
    }

    /// Whether requests to `host` go out unsigned (`skip_hosts`).
    pub fn skips(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.skip_hosts
            .iter()
            .any(|pattern| form::host_matches(pattern, &host))
    }

    /// The form requests to `host` (no port) are signed in.
    pub fn form_for(&self, host: &str) -> Form {
        self.forms.for_host(host)
    }

    /// Signs a request about to be sent to `authority` (`host[:port]` as in
    /// the Host header, port only when not the scheme's default) at `now`.
    ///
    /// Signature headers the client sent are removed first, so the origin
    /// sees exactly one signature, ours. Hosts in `skip_hosts` are left
    /// alone (the client's own headers included) and give `None`.
    pub fn sign(
        &self,
        parts: &mut http::request::Parts,
        authority: &str,
        now: SystemTime,
    ) -> Option<KeyId> {
        self.sign_headers(&mut parts.headers, authority, now)
    }

    /// [`Identity::sign`] on a request's header map.
    pub fn sign_headers(
        &self,
        headers: &mut http::HeaderMap,
        authority: &str,
        now: SystemTime,
    ) -> Option<KeyId> {
        if self.skips(&crate::budget::host_key(authority)) {
            return None;
        }
        let signed = self.signature_headers(authority, now);
        self.put_headers(headers, signed)
    }

    /// Replaces any signature headers with `signed`.
    fn put_headers(
        &self,
        headers: &mut http::HeaderMap,
        signed: SignatureHeaders,
    ) -> Option<KeyId> {
        for name in [SIGNATURE_AGENT, SIGNATURE_INPUT, SIGNATURE] {
            headers.remove(&name);
        }
        // All three values are printable ASCII by construction (checked URL,
        // integers, base64, a checked nonce); a value that is not would be a
        // bug, and the request then goes out unsigned rather than half-signed.
        let values = [
            HeaderValue::from_str(&signed.agent),
            HeaderValue::from_str(&signed.input),
            HeaderValue::from_str(&signed.signature),
        ];
        let [Ok(agent), Ok(mut input), Ok(mut signature)] = values else {
            return None;
        };
        // The same only within one second (`created` and `expires` are
        // whole seconds, and Ed25519 signs deterministically), and new with
        // every nonce: at the paces a host's budget allows (1 a second to
        // start, 8 at most by default) each value goes once or a few times
        // on a connection. So over HTTP/2 they go as literals never
        // indexed, as `Mannerly-Id` does to the client; indexed, each pair
        // (some 200 bytes) evicted entries of the HPACK table that repeat.
        // The agent's value repeats and is indexed.
        input.set_sensitive(true);
        signature.set_sensitive(true);
        headers.insert(SIGNATURE_AGENT, agent);
        headers.insert(SIGNATURE_INPUT, input);
        headers.insert(SIGNATURE, signature);
        Some(self.keyid.clone())
    }

    /// The three header values for a request to `authority` at `now`.
    pub fn signature_headers(&self, authority: &str, now: SystemTime) -> SignatureHeaders {
        self.headers_with(authority, now, &[], None)
    }

    /// Signs a request again as its origin asked in `Accept-Signature`: our
    /// two components, the ones `asked` names (with their values in this
    /// request) and its `nonce`. `None` when the host is skipped, or when
    /// the request lacks a field asked for (a signature that does not cover
    /// it would be refused again).
    pub fn sign_as_asked(
        &self,
        headers: &mut http::HeaderMap,
        method: &str,
        uri: &http::Uri,
        authority: &str,
        asked: &AskedSignature,
        now: SystemTime,
    ) -> Option<KeyId> {
        if self.skips(&crate::budget::host_key(authority)) {
            return None;
        }
        let extra = asked
            .components
            .iter()
            .map(|name| {
                Some((
                    name.as_str(),
                    accept::component_value(name, method, uri, headers)?,
                ))
            })
            .collect::<Option<Vec<_>>>()?;
        let signed = self.headers_with(authority, now, &extra, asked.nonce.as_deref());
        self.put_headers(headers, signed)
    }

    fn headers_with(
        &self,
        authority: &str,
        now: SystemTime,
        extra: &[(&str, String)],
        nonce: Option<&str>,
    ) -> SignatureHeaders {
        let created = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let params = Params {
            created,
            expires: created + self.validity.as_secs(),
            keyid: self.keyid.as_str(),
            nonce,
        };
        let form = self.form_for(&crate::budget::host_key(authority));
        // (field, dictionary key, what is covered)
        let (agent, key, covered) = match (form, &self.agent_origin) {
            (Form::Directory03, Some(origin)) => (sf_string(origin), None, sf_string(origin)),
            // Built without an origin only when no host uses directory-03.
            _ => {
                let member = sf_string(&self.agent_url);
                (format!("{LABEL}={member}"), Some(LABEL), member)
            }
        };
        let (base, input) = signature_base(authority, key, &covered, extra, &params);
        let signature = self.key.sign(base.as_bytes());
        SignatureHeaders {
            agent,
            input: format!("{LABEL}={input}"),
            signature: format!("{LABEL}=:{}:", STANDARD.encode(signature.to_bytes())),
        }
    }
}

/// The signature parameters, in the order the draft's test vectors use.
pub(crate) struct Params<'a> {
    pub created: u64,
    pub expires: u64,
    pub keyid: &'a str,
    /// Only when an origin asks for one (`Accept-Signature`), and for
    /// reproducing the draft's test vectors.
    pub nonce: Option<&'a str>,
}

/// The RFC 9421 §2.5 signature base for our two covered components and
/// any `extra` ones (identifier without quotes, value), and the
/// `@signature-params` value (which is also the `Signature-Input` member's
/// value). `agent_value` is what is covered of `Signature-Agent`: with an
/// `agent_key` (the -01 form) that dictionary member's value, without one
/// (directory-03) the whole field; a Structured Field string either way,
/// quotes included.
pub(crate) fn signature_base(
    authority: &str,
    agent_key: Option<&str>,
    agent_value: &str,
    extra: &[(&str, String)],
    p: &Params<'_>,
) -> (String, String) {
    let agent_id = match agent_key {
        Some(key) => format!(r#""signature-agent";key="{key}""#),
        None => r#""signature-agent""#.to_string(),
    };
    let mut ids = format!(r#""@authority" {agent_id}"#);
    let mut base = format!(
        "\"@authority\": {}\n{agent_id}: {agent_value}\n",
        authority.to_ascii_lowercase()
    );
    for (name, value) in extra {
        ids.push_str(&format!(r#" "{name}""#));
        base.push_str(&format!("\"{name}\": {value}\n"));
    }
    let mut input = format!(
        r#"({ids});created={};keyid="{}";alg="ed25519";expires={}"#,
        p.created, p.keyid, p.expires
    );
    if let Some(nonce) = p.nonce {
        input.push_str(&format!(r#";nonce="{nonce}""#));
    }
    input.push_str(&format!(r#";tag="{TAG}""#));
    base.push_str(&format!("\"@signature-params\": {input}"));
    (base, input)
}

/// A Structured Field string (RFC 8941 §3.3.3) of a checked URL: quotes
/// and backslashes were refused by [`jwks_url`], so nothing needs
/// escaping.
fn sf_string(s: &str) -> String {
    format!("\"{s}\"")
}

#[cfg(test)]
mod tests;
