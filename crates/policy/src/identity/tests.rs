use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::Request;
use web_bot_auth::components::{
    CoveredComponent, DerivedComponent, HTTPField, HTTPFieldParameters,
};
use web_bot_auth::keyring::{Algorithm, KeyRing};
use web_bot_auth::message_signatures::SignedMessage;
use web_bot_auth::WebBotAuthVerifier;

use super::*;

/// The Ed25519 test key of RFC 9421 Appendix B.1.4, which the draft's test
/// vectors use.
const RFC9421_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF
-----END PRIVATE KEY-----
";
const RFC9421_KEYID: &str = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// An identity signing in the -01 form, unless `forms` says otherwise.
fn identity(skip: &[&str]) -> Identity {
    identity_in(skip, Forms::only(Form::Draft01))
}

fn identity_in(skip: &[&str], forms: Forms) -> Identity {
    let skip: Vec<String> = skip.iter().map(|s| s.to_string()).collect();
    Identity::new(
        key_from_pem(RFC9421_KEY).unwrap(),
        "https://crawler.example",
        Duration::from_secs(300),
        &skip,
        forms,
    )
    .unwrap()
}

fn parts() -> http::request::Parts {
    Request::get("http://example.com/page")
        .body(())
        .unwrap()
        .into_parts()
        .0
}

#[test]
fn keyid_is_the_rfc7638_thumbprint() {
    let key = key_from_pem(RFC9421_KEY).unwrap();
    assert_eq!(KeyId::of(&key.verifying_key()).as_str(), RFC9421_KEYID);
    assert_eq!(
        jwk_x(&key.verifying_key()),
        "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"
    );
}

#[test]
fn reproduces_the_drafts_ed25519_test_vector() {
    // draft-ietf-webbotauth-httpsig-protocol-00, Appendix E.2.1. Ed25519 is
    // deterministic, so the same base gives the same signature bytes.
    let p = Params {
        created: 1735689600,
        expires: 4889289600,
        keyid: RFC9421_KEYID,
        nonce: Some(
            "n9p433xm+NJ3ph3upfBIGmsuwHw387YV7Q/F+6BSpGCVjYCqQw6rznNA8PVVLySrAWsv0hQtFioQb6E1YsauiA==",
        ),
    };
    let (base, input) = signature_base(
        "example.com",
        Some("agent2"),
        "\"https://signature-agent.test\"",
        &[],
        &p,
    );
    assert_eq!(
        input,
        "(\"@authority\" \"signature-agent\";key=\"agent2\");created=1735689600;keyid=\"poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U\";alg=\"ed25519\";expires=4889289600;nonce=\"n9p433xm+NJ3ph3upfBIGmsuwHw387YV7Q/F+6BSpGCVjYCqQw6rznNA8PVVLySrAWsv0hQtFioQb6E1YsauiA==\";tag=\"web-bot-auth\""
    );
    let key = key_from_pem(RFC9421_KEY).unwrap();
    let sig = STANDARD.encode(key.sign(base.as_bytes()).to_bytes());
    assert_eq!(
        sig,
        "RdNFx5Bj6au3YgAMQL/RzmUlZE8QZLIaXGRpw985hWnwPfMxT228NMk6ehRS1PSl4e8PhbNZACSanGdhEwYCCg=="
    );
}

#[test]
fn sign_adds_exactly_one_signature_with_the_drafts_parameters() {
    let id = identity(&[]);
    let mut p = parts();
    p.headers.insert(SIGNATURE, "sig1=:AAAA:".parse().unwrap());
    p.headers.append(SIGNATURE, "other=:BBBB:".parse().unwrap());
    p.headers
        .insert(SIGNATURE_INPUT, "sig1=(\"@method\")".parse().unwrap());
    p.headers.insert(
        SIGNATURE_AGENT,
        "\"https://spoof.example\"".parse().unwrap(),
    );
    let keyid = id.sign(&mut p, "Example.com", at(1_700_000_000));
    assert_eq!(keyid.as_ref().map(KeyId::as_str), Some(RFC9421_KEYID));
    for name in [SIGNATURE, SIGNATURE_INPUT, SIGNATURE_AGENT] {
        assert_eq!(p.headers.get_all(&name).iter().count(), 1, "{name}");
    }
    assert_eq!(
        p.headers[SIGNATURE_AGENT],
        "sig1=\"https://crawler.example/.well-known/http-message-signatures-directory\""
    );
    assert_eq!(
        p.headers[SIGNATURE_INPUT],
        "sig1=(\"@authority\" \"signature-agent\";key=\"sig1\");created=1700000000;keyid=\"poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U\";alg=\"ed25519\";expires=1700000300;tag=\"web-bot-auth\""
    );
    let sig = p.headers[SIGNATURE].to_str().unwrap();
    assert!(sig.starts_with("sig1=:") && sig.ends_with(':'), "{sig}");
    // New each second or nonce: never indexed by HTTP/2's HPACK; the
    // agent repeats.
    assert!(p.headers[SIGNATURE].is_sensitive());
    assert!(p.headers[SIGNATURE_INPUT].is_sensitive());
    assert!(!p.headers[SIGNATURE_AGENT].is_sensitive());
}

#[test]
fn skipped_hosts_are_left_alone() {
    let id = identity(&["intranet.example", "*.internal.example"]);
    for authority in [
        "intranet.example",
        "INTRANET.example:8443",
        "a.internal.example",
        "b.a.internal.example:81",
    ] {
        let mut p = parts();
        p.headers.insert(SIGNATURE, "own=:AAAA:".parse().unwrap());
        assert_eq!(id.sign(&mut p, authority, at(1)), None, "{authority}");
        assert_eq!(p.headers[SIGNATURE], "own=:AAAA:", "{authority}");
        assert!(p.headers.get(SIGNATURE_AGENT).is_none());
    }
    for authority in [
        "internal.example",
        "xinternal.example",
        "www.intranet.example",
        "[::1]:8080",
    ] {
        let mut p = parts();
        assert!(id.sign(&mut p, authority, at(1)).is_some(), "{authority}");
    }
}

#[test]
fn signature_agent_is_the_jwks_url_and_an_origin_alone_gets_the_well_known_path() {
    for (given, sent) in [
        (
            "https://crawler.example",
            "https://crawler.example/.well-known/http-message-signatures-directory",
        ),
        (
            "https://crawler.example:8443/",
            "https://crawler.example:8443/.well-known/http-message-signatures-directory",
        ),
        (
            "https://crawler.example/keys/jwks.json",
            "https://crawler.example/keys/jwks.json",
        ),
        (
            "https://crawler.example/.well-known/http-message-signatures-directory",
            "https://crawler.example/.well-known/http-message-signatures-directory",
        ),
    ] {
        assert_eq!(jwks_url(given).as_deref(), Ok(sent), "{given}");
    }
    for bad in [
        "",
        "http://crawler.example",
        "https://crawler.example/?a=1",
        "https://crawler.example/jwks.json?v=2",
        "https://crawler.example/#keys",
        "https://cra\"wler.example",
        "https://user@crawler.example",
        "crawler.example",
    ] {
        assert!(jwks_url(bad).is_err(), "{bad}");
    }
    // The member the origin receives: the URL as a String Item, no parameters.
    let mut p = parts();
    identity(&[]).sign(&mut p, "example.com", at(1)).unwrap();
    assert_eq!(
        p.headers[SIGNATURE_AGENT],
        "sig1=\"https://crawler.example/.well-known/http-message-signatures-directory\""
    );
    let key = key_from_pem(RFC9421_KEY).unwrap();
    let long = Identity::new(
        key,
        "https://a.example",
        Duration::from_secs(90_000),
        &[],
        Forms::default(),
    );
    assert_eq!(
        long.err(),
        Some(IdentityError::Validity(Duration::from_secs(90_000)))
    );
}

#[test]
fn keys_round_trip_through_pem_and_garbage_is_an_error() {
    let pem = key_to_pem(&[7u8; 32]).unwrap();
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    let key = key_from_pem(&pem).unwrap();
    assert_eq!(key.to_bytes(), [7u8; 32]);
    assert!(matches!(
        key_from_pem("-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n"),
        Err(IdentityError::Key(_))
    ));
}

#[test]
fn keys_are_written_as_pkcs8_v1_byte_for_byte_as_rfc_9421_prints_its_key() {
    // RFC 9421 B.1.4 prints its Ed25519 key in the RFC 8410 §7 form (version
    // 0, no public key): writing that key's seed gives the same text.
    let seed = key_from_pem(RFC9421_KEY).unwrap().to_bytes();
    assert_eq!(key_to_pem(&seed).unwrap(), RFC9421_KEY);
}

#[test]
fn v2_key_files_written_by_earlier_versions_still_load() {
    // What `SigningKey::to_pkcs8_pem` wrote before: OneAsymmetricKey v2
    // with the public key attribute.
    let v2 = SigningKey::from_bytes(&[9u8; 32])
        .to_pkcs8_pem(Default::default())
        .unwrap();
    assert_ne!(v2.as_str(), key_to_pem(&[9u8; 32]).unwrap());
    assert_eq!(key_from_pem(&v2).unwrap().to_bytes(), [9u8; 32]);
}

#[test]
fn reproduces_the_drafts_signed_directory_response() {
    // -01, Test Vectors, "Signed Directory Response": the RFC 9421 B.1.4
    // key, fetched from signature-agent.test.
    let key = key_from_pem(RFC9421_KEY).unwrap();
    let listed = [DirectoryKey {
        key: key.verifying_key(),
        nbf: None,
        exp: None,
    }];
    let d = directory::sign_directory_at(
        &listed,
        &[&key],
        "signature-agent.test",
        1735689600,
        4889289600,
    );
    assert_eq!(
        d.body,
        r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs","use":"sig"}]}"#
    );
    assert_eq!(
        d.content_digest,
        "sha-256=:CADMT2aBdV/rqQr/NIru64ERQkCobVvllA4V0fLFDu0=:"
    );
    assert_eq!(
        d.signature_input,
        r#"binding=("@authority";req "content-digest");created=1735689600;expires=4889289600;keyid="poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";tag="http-message-signatures-directory""#
    );
    assert_eq!(
        d.signature,
        "binding=:l6P8R67tm3kujAxbHWio7ll01qrEZ0dKD/WWlGhNYEmTnFZM8Wt0VQ9zqGfvo7T/UMkBxsigzChM1Gpz7gOVBg==:"
    );
}

#[test]
fn directory_names_each_key_by_its_thumbprint() {
    let a = key_from_pem(RFC9421_KEY).unwrap().verifying_key();
    let b = SigningKey::from_bytes(&[9u8; 32]).verifying_key();
    let json = directory_json(&[
        DirectoryKey {
            key: a,
            nbf: None,
            exp: None,
        },
        DirectoryKey {
            key: b,
            nbf: None,
            exp: Some(1_800_000_000),
        },
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let keys = v["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0]["kid"], RFC9421_KEYID);
    assert_eq!(keys[0]["kty"], "OKP");
    assert_eq!(keys[0]["crv"], "Ed25519");
    assert_eq!(keys[0]["x"], "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs");
    assert!(keys[0].get("exp").is_none());
    assert_eq!(keys[1]["kid"], KeyId::of(&b).as_str());
    assert_eq!(keys[1]["exp"], 1_800_000_000u64);
}

/// A signed request as Cloudflare's `web-bot-auth` crate sees it: a second,
/// independent implementation of the verifier side.
struct Signed {
    authority: String,
    headers: http::HeaderMap,
}

impl SignedMessage for Signed {
    fn lookup_component(&self, name: &CoveredComponent) -> Vec<String> {
        match name {
            CoveredComponent::HTTP(HTTPField { name, parameters }) => {
                let values = self
                    .headers
                    .get_all(name.as_str())
                    .iter()
                    .filter_map(|v| v.to_str().ok().map(str::to_string));
                // The trait leaves `;key=` (a dictionary member) to the
                // message; ours has one member per field line.
                let key = parameters.0.iter().find_map(|p| match p {
                    HTTPFieldParameters::Key(k) => Some(format!("{k}=")),
                    _ => None,
                });
                match key {
                    Some(k) => values
                        .filter_map(|v| v.strip_prefix(&k).map(str::to_string))
                        .collect(),
                    None => values.collect(),
                }
            }
            CoveredComponent::Derived(DerivedComponent::Authority { .. }) => {
                vec![self.authority.clone()]
            }
            _ => vec![],
        }
    }
}

fn verify_with_web_bot_auth(msg: &Signed, public: &VerifyingKey) -> Result<String, String> {
    let mut ring = KeyRing::default();
    ring.import_raw(
        KeyId::of(public).to_string(),
        Algorithm::Ed25519,
        public.to_bytes().to_vec(),
    );
    let verifier = WebBotAuthVerifier::parse(msg).map_err(|e| e.to_string())?;
    let keyid = verifier
        .get_parsed_label()
        .base
        .parameters
        .details
        .keyid
        .clone();
    verifier.verify(&ring, None).map_err(|e| e.to_string())?;
    keyid.ok_or_else(|| "no keyid".to_string())
}

#[test]
fn cloudflares_verifier_accepts_our_signature_and_rejects_tampering() {
    let id = identity(&[]);
    let mut p = parts();
    id.sign(&mut p, "example.com:8080", at(1_700_000_000));
    let msg = Signed {
        authority: "example.com:8080".into(),
        headers: p.headers.clone(),
    };
    assert_eq!(
        verify_with_web_bot_auth(&msg, &id.public_key()),
        Ok(RFC9421_KEYID.to_string())
    );
    // Another authority (the signature replayed elsewhere).
    let moved = Signed {
        authority: "evil.example".into(),
        headers: p.headers.clone(),
    };
    assert!(verify_with_web_bot_auth(&moved, &id.public_key()).is_err());
    // Another Signature-Agent.
    let mut agent = Signed {
        authority: "example.com:8080".into(),
        headers: p.headers.clone(),
    };
    agent.headers.insert(
        SIGNATURE_AGENT,
        "sig1=\"https://other.example\"".parse().unwrap(),
    );
    assert!(verify_with_web_bot_auth(&agent, &id.public_key()).is_err());
    // Another key.
    let other = SigningKey::from_bytes(&[3u8; 32]).verifying_key();
    assert!(verify_with_web_bot_auth(&msg, &other).is_err());
}

#[test]
fn the_card_declares_the_budget_actually_enforced() {
    let budget = crate::budget::BudgetParams {
        max_rate: 3.0,
        concurrency: 4,
        ..Default::default()
    };
    let card = card_json(
        "https://crawler.example/",
        "MyBot",
        &[crate::robots::Purpose::Search],
        &budget,
    );
    let v: serde_json::Value = serde_json::from_str(&card).unwrap();
    assert_eq!(
        v["jwks_uri"],
        "https://crawler.example/.well-known/http-message-signatures-directory"
    );
    assert_eq!(v["client_uri"], "https://crawler.example");
    assert_eq!(
        v["client_id"],
        "https://crawler.example/.well-known/signature-agent-card"
    );
    // A JWKS elsewhere on the origin is the card's jwks_uri as given.
    let elsewhere = card_json("https://crawler.example:8443/k/jwks.json", "", &[], &budget);
    let e: serde_json::Value = serde_json::from_str(&elsewhere).unwrap();
    assert_eq!(e["jwks_uri"], "https://crawler.example:8443/k/jwks.json");
    assert_eq!(e["client_uri"], "https://crawler.example:8443");
    assert_eq!(v["web_bot_auth"]["rfc9309-product-token"], "MyBot");
    assert_eq!(v["web_bot_auth"]["purpose"], "search");
    assert_eq!(
        v["web_bot_auth"]["rate-expectation"],
        "max=3rps;start=1rps;burst=1;concurrency=4;per=host"
    );
}

#[test]
fn a_directory_is_signed_once_by_each_listed_key_and_never_by_an_unlisted_one() {
    let current = key_from_pem(RFC9421_KEY).unwrap();
    let retired = SigningKey::from_bytes(&[9u8; 32]);
    let stranger = SigningKey::from_bytes(&[7u8; 32]);
    let listed = [&current, &retired].map(|k| DirectoryKey {
        key: k.verifying_key(),
        nbf: None,
        exp: None,
    });
    let signers = [&current, &retired, &stranger, &retired];
    let d = directory::sign_directory_at(&listed, &signers, "Signature-Agent.test", 1, 2);
    let params = |keyid: &str| {
        format!(
            r#"("@authority";req "content-digest");created=1;expires=2;keyid="{keyid}";tag="http-message-signatures-directory""#
        )
    };
    let (a, b) = (
        KeyId::of(&current.verifying_key()),
        KeyId::of(&retired.verifying_key()),
    );
    assert_eq!(
        d.signature_input,
        format!(
            "binding={}, binding2={}",
            params(a.as_str()),
            params(b.as_str())
        )
    );
    // Each member verifies with its own key over the same base but its keyid.
    let members: Vec<&str> = d.signature.split(", ").collect();
    assert_eq!(members.len(), 2);
    for (member, (label, key, keyid)) in members
        .iter()
        .zip([("binding", &current, &a), ("binding2", &retired, &b)])
    {
        let value = member.strip_prefix(&format!("{label}=:")).unwrap();
        let bytes = STANDARD.decode(value.trim_end_matches(':')).unwrap();
        let sig = ed25519_dalek::Signature::from_slice(&bytes).unwrap();
        let base = format!(
            "\"@authority\";req: signature-agent.test\n\"content-digest\": {}\n\"@signature-params\": {}",
            d.content_digest,
            params(keyid.as_str())
        );
        key.verifying_key()
            .verify_strict(base.as_bytes(), &sig)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
    }
}

#[test]
fn reproduces_cloudflares_directory_03_ed25519_test_vector() {
    // cloudflare/web-bot-auth, web_bot_auth_architecture_v1.json, the
    // Ed25519 entry with `signature_agent`: what its verifier reads.
    let p = Params {
        created: 1735689600,
        expires: 1735693200,
        keyid: RFC9421_KEYID,
        nonce: Some(
            "e8N7S2MFd/qrd6T2R3tdfAuuANngKI7LFtKYI/vowzk4lAZYadIX6wW25MwG7DCT9RUKAJ0qVkU0mEeLElW1qg==",
        ),
    };
    let (base, input) = signature_base(
        "example.com",
        None,
        "\"https://signature-agent.test\"",
        &[],
        &p,
    );
    assert_eq!(
        input,
        "(\"@authority\" \"signature-agent\");created=1735689600;keyid=\"poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U\";alg=\"ed25519\";expires=1735693200;nonce=\"e8N7S2MFd/qrd6T2R3tdfAuuANngKI7LFtKYI/vowzk4lAZYadIX6wW25MwG7DCT9RUKAJ0qVkU0mEeLElW1qg==\";tag=\"web-bot-auth\""
    );
    let key = key_from_pem(RFC9421_KEY).unwrap();
    let sig = STANDARD.encode(key.sign(base.as_bytes()).to_bytes());
    assert_eq!(
        sig,
        "jdq0SqOwHdyHr9+r5jw3iYZH6aNGKijYp/EstF4RQTQdi5N5YYKrD+mCT1HA1nZDsi6nJKuHxUi/5Syp3rLWBA=="
    );
}

#[test]
fn directory_03_sends_the_origin_as_one_string_and_covers_the_whole_field() {
    let forms = Forms::new(
        Form::Directory03,
        [("*.legacy.example".to_string(), Form::Draft01)],
    );
    let id = identity_in(&[], forms);
    let mut p = parts();
    id.sign(&mut p, "example.com", at(1_700_000_000)).unwrap();
    assert_eq!(p.headers[SIGNATURE_AGENT], "\"https://crawler.example\"");
    assert_eq!(
        p.headers[SIGNATURE_INPUT],
        "sig1=(\"@authority\" \"signature-agent\");created=1700000000;keyid=\"poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U\";alg=\"ed25519\";expires=1700000300;tag=\"web-bot-auth\""
    );
    // The base Cloudflare's package builds: the field as sent.
    let base = "\"@authority\": example.com\n\"signature-agent\": \"https://crawler.example\"\n\"@signature-params\": (\"@authority\" \"signature-agent\");created=1700000000;keyid=\"poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U\";alg=\"ed25519\";expires=1700000300;tag=\"web-bot-auth\"";
    let sig = p.headers[SIGNATURE].to_str().unwrap();
    let bytes = STANDARD.decode(&sig[6..sig.len() - 1]).unwrap();
    let sig = ed25519_dalek::Signature::from_slice(&bytes).unwrap();
    assert!(id.public_key().verify_strict(base.as_bytes(), &sig).is_ok());
    // A host given the -01 form gets it.
    let mut p = parts();
    id.sign(&mut p, "www.legacy.example:8443", at(1)).unwrap();
    assert!(p.headers[SIGNATURE_AGENT]
        .to_str()
        .unwrap()
        .starts_with("sig1=\"https://crawler.example/.well-known/"));
    assert_eq!(id.form_for("www.legacy.example"), Form::Draft01);
}

#[test]
fn directory_03_needs_the_directory_at_the_well_known_path() {
    let key = || key_from_pem(RFC9421_KEY).unwrap();
    let new = |agent: &str, forms: Forms| {
        Identity::new(key(), agent, Duration::from_secs(300), &[], forms).map(|_| ())
    };
    let elsewhere = "https://crawler.example/keys/jwks.json";
    assert!(matches!(
        new(elsewhere, Forms::default()),
        Err(IdentityError::Agent { .. })
    ));
    let one_host = Forms::new(Form::Draft01, [("a.test".to_string(), Form::Directory03)]);
    assert!(new(elsewhere, one_host).is_err());
    assert_eq!(new(elsewhere, Forms::only(Form::Draft01)), Ok(()));
    assert_eq!(
        directory_origin(
            "https://crawler.example:8443/.well-known/http-message-signatures-directory"
        )
        .as_deref(),
        Ok("https://crawler.example:8443")
    );
}
