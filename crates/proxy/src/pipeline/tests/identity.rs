//! Step 4, identity: with a key configured, the origin's request carries
//! a Web Bot Auth signature an origin can verify, and the record names
//! the key; skipped hosts and a proxy without a key send none.

use base64::Engine as _;
use ed25519_dalek::{Signature, Verifier};
use mannerly_policy::identity::{Form, KeyId};

use super::{Fixture, WALL};
use crate::config::{Config, IdentityConfig};
use crate::pipeline::Exchange;

const AGENT: &str = "https://crawler.example";

fn signing(skip_hosts: &[&str]) -> Config {
    Config {
        identity: IdentityConfig {
            enabled: true,
            signature_agent: AGENT.into(),
            skip_hosts: skip_hosts.iter().map(|h| h.to_string()).collect(),
            host_forms: [("example.org".to_string(), Form::Draft01)].into(),
            ..IdentityConfig::default()
        },
        ..Config::default()
    }
}

/// The headers of `url`'s origin request after the identity step, with
/// the walk that made it.
async fn signed(f: &Fixture, url: &str, client: &[(&str, &str)]) -> (Exchange, http::HeaderMap) {
    let (mut x, mut out) = f.prepared(url, client).await;
    x.identity(&mut out);
    (x, out.headers().clone())
}

#[tokio::test(start_paused = true)]
async fn a_configured_key_signs_the_request_and_the_record_names_it() {
    let f = Fixture::new(signing(&[])).await;
    let key = f.signing_key();
    let keyid = KeyId::of(&key.verifying_key()).to_string();
    let forged = [("signature", "sig1=:Zm9yZ2Vk:")];
    let (x, h) = signed(&f, "http://example.org:8080/page", &forged).await;
    assert!(x.rec.signed);
    assert_eq!(x.rec.keyid.as_deref(), Some(keyid.as_str()));

    // -01 (this host's form): the member is the key directory's URL, an origin expanded to it.
    let directory = format!("{AGENT}/.well-known/http-message-signatures-directory");
    assert_eq!(h["signature-agent"], format!("sig1=\"{directory}\""));
    let params = format!(
        "(\"@authority\" \"signature-agent\";key=\"sig1\");created={WALL};keyid=\"{keyid}\";alg=\"ed25519\";expires={};tag=\"web-bot-auth\"",
        WALL + 300
    );
    assert_eq!(h["signature-input"], format!("sig1={params}"));
    assert_eq!(h.get_all("signature").iter().count(), 1, "ours alone");
    let sig = signature_of(&h);
    let base = format!(
        "\"@authority\": example.org:8080\n\"signature-agent\";key=\"sig1\": \"{directory}\"\n\"@signature-params\": {params}"
    );
    key.verifying_key()
        .verify(base.as_bytes(), &sig)
        .expect("the origin can verify it with the published key");

    // Any other host: directory-03, the origin as the field, all of it signed.
    let (_, h) = signed(&f, "https://example.com/page", &[]).await;
    assert_eq!(h["signature-agent"], format!("\"{AGENT}\""));
    let params = format!(
        "(\"@authority\" \"signature-agent\");created={WALL};keyid=\"{keyid}\";alg=\"ed25519\";expires={};tag=\"web-bot-auth\"",
        WALL + 300
    );
    assert_eq!(h["signature-input"], format!("sig1={params}"));
    let base = format!(
        "\"@authority\": example.com\n\"signature-agent\": \"{AGENT}\"\n\"@signature-params\": {params}"
    );
    key.verifying_key()
        .verify(base.as_bytes(), &signature_of(&h))
        .expect("directory-03 verifies over the whole field");
}

/// The one `sig1` signature of a request's headers.
fn signature_of(h: &http::HeaderMap) -> Signature {
    let sig = h["signature"].to_str().expect("text");
    let sig = sig
        .strip_prefix("sig1=:")
        .and_then(|s| s.strip_suffix(':'))
        .expect("sig1=:…:");
    let sig = base64::engine::general_purpose::STANDARD
        .decode(sig)
        .expect("base64");
    Signature::from_slice(&sig).expect("64 bytes")
}

#[tokio::test(start_paused = true)]
async fn a_skipped_host_and_a_proxy_without_a_key_send_no_signature() {
    let f = Fixture::new(signing(&["*.example.net"])).await;
    let (x, h) = signed(&f, "http://www.example.net/page", &[]).await;
    assert!(!x.rec.signed);
    assert_eq!(x.rec.keyid, None);
    assert!(!h.contains_key("signature-input"));

    let f = Fixture::new(Config::default()).await;
    let (x, h) = signed(&f, "http://example.org/page", &[]).await;
    assert!(!x.rec.signed);
    assert_eq!(x.rec.keyid, None);
    assert!(!h.contains_key("signature"));
}
