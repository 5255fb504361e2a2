//! Web Bot Auth through the proxy: what origins receive is verified by the
//! Python `http-message-signatures` package (RFC 9421), not by our code;
//! the key directory's thumbprints are recomputed in Python too.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use mannerly_policy::identity::{Form, Forms, Identity, KeyId};
use mannerly_proxy::KeyStore;
use serde_json::{json, Value};

use super::browser::Browser;
use super::support::*;

const AGENT: &str = "https://crawler.example";
/// What -01 verifiers fetch: the origin configured, expanded to the well-known URL.
const AGENT_JWKS: &str = "https://crawler.example/.well-known/http-message-signatures-directory";
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/e2e/verify_web_bot_auth.py"
);

/// Whether python3 can import `module`: SKIP with a message where it
/// cannot, FAIL in CI (`.ci/run` installs it with `pip install {pip}`).
fn python_module(module: &str, pip: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install python3 and {pip} (see .ci/run)"
        );
        eprintln!("SKIP: python3 with {module} is not installed (pip install '{pip}')");
    }
    ok
}

/// Whether the verifier can run.
fn python_verifier() -> bool {
    python_module("http_message_signatures", "http-message-signatures>=3,<4")
}

/// One request as the origin received it, ready for the verifier.
fn captured(scheme_authority: &str, r: &SeenRequest) -> Value {
    let headers: Vec<Value> = r
        .headers
        .iter()
        .map(|(k, v)| json!([k.as_str(), v.to_str().unwrap_or("")]))
        .collect();
    json!({"method": "GET", "url": format!("{scheme_authority}{}", r.path), "headers": headers})
}

/// What the http origin at `plain_base` and the https one received.
fn captured_both(plain_base: &str, plain: &[SeenRequest], secure: &[SeenRequest]) -> Vec<Value> {
    let plain = plain.iter().map(|r| captured(plain_base, r));
    let secure = secure.iter().map(|r| captured("https://secure.test", r));
    plain.chain(secure).collect()
}

/// Runs a Python checker `script` with `input` on stdin; its JSON answer.
fn run_python(script: &str, input: &Value) -> Value {
    run_checker(
        std::process::Command::new("python3").arg(script),
        script,
        input,
    )
}

/// Runs a checker with `input` on stdin; its JSON answer.
fn run_checker(cmd: &mut std::process::Command, script: &str, input: &Value) -> Value {
    use std::io::Write;
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs the Python verifier over `requests` with `directory` as the only
/// source of keys.
fn verify(directory: &str, requests: &[Value]) -> Vec<Value> {
    let directory: Value = serde_json::from_str(directory).unwrap();
    let input = json!({"directory": directory, "agent": AGENT_JWKS, "requests": requests});
    serde_json::from_value(run_python(SCRIPT, &input)).unwrap()
}

/// An origin with a robots.txt that allows everything, `/throttle-once`
/// that answers 429 (Retry-After: 1) the first time, and pages otherwise.
fn origin_handler() -> Handler {
    let throttled = Arc::new(AtomicUsize::new(0));
    handler(move |req| {
        let throttled = throttled.clone();
        async move {
            match req.uri().path() {
                "/robots.txt" => text(200, "User-agent: *\nAllow: /\n"),
                "/throttle-once" if throttled.fetch_add(1, Ordering::SeqCst) == 0 => {
                    let mut r = text(429, "slow down");
                    r.headers_mut().insert("retry-after", "1".parse().unwrap());
                    r
                }
                _ => text(200, "page"),
            }
        }
    })
}

/// Signing, in the default form unless the caller set one.
fn enable_identity(c: &mut mannerly_proxy::Config) -> KeyStore {
    c.identity.enabled = true;
    c.identity.signature_agent = AGENT.into();
    let store = KeyStore::of(c);
    store.init(false).unwrap();
    store
}

/// A proxy signing in `form`, configured further by `edit`, and its keys.
async fn signing_proxy(
    form: Form,
    edit: impl FnOnce(&mut mannerly_proxy::Config),
) -> (TestProxy, KeyStore) {
    let mut store = None;
    let proxy = TestProxy::start(|c| {
        c.identity.form = form;
        store = Some(enable_identity(c));
        edit(c);
    })
    .await;
    (proxy, store.unwrap())
}

/// A proxy signing in `form` and its keys, an http origin and an https
/// one (`secure.test`), both with `origin_handler`, and the CA's dir.
type Signing = (TestProxy, KeyStore, Origin, Origin, tempfile::TempDir);

async fn signing(form: Form) -> Signing {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let plain = Origin::http(origin_handler()).await;
    let secure = Origin::https(origin_handler(), &ca, &["secure.test"]).await;
    let (roots, port) = (ca.pem_path.clone(), secure.port());
    let (proxy, store) = signing_proxy(form, move |c| {
        c.upstream.extra_roots = vec![roots];
        resolve_to_loopback(c, "secure.test:443", port);
    })
    .await;
    (proxy, store, plain, secure, dir)
}

#[tokio::test]
async fn in_the_01_form_every_request_is_signed_and_verifies_in_python_http_https_robots_and_retries(
) {
    if !python_verifier() {
        return;
    }
    let (mut proxy, store, plain, secure, _dir) = signing(Form::Draft01).await;
    let keyid = Some(KeyId::of(&store.load().unwrap().verifying_key()).to_string());
    let c = proxy.client();
    let plain_base = format!("http://127.0.0.1:{}", plain.port());

    // The client's own signature headers are replaced, not doubled.
    let r = c
        .get(format!("{plain_base}/page"))
        .header("signature", "sig1=:AAAA:")
        .header("signature-input", "sig1=(\"@method\");created=1")
        .header("signature-agent", "sig1=\"https://spoof.example\"")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A throttled read is sent again after its pause: both sends signed.
    let r = c
        .get(format!("{plain_base}/throttle-once"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", decision(&r));
    let r = c.get("https://secure.test/page").send().await.unwrap();
    assert_eq!(r.status(), 200);

    let plain_seen = plain.seen.all();
    let secure_seen = secure.seen.all();
    let paths = |s: &[SeenRequest]| s.iter().map(|r| r.path.clone()).collect::<Vec<_>>();
    assert_eq!(
        paths(&plain_seen),
        ["/robots.txt", "/page", "/throttle-once", "/throttle-once"]
    );
    assert_eq!(paths(&secure_seen), ["/robots.txt", "/page"]);
    for r in plain_seen.iter().chain(&secure_seen) {
        for name in ["signature", "signature-input", "signature-agent"] {
            assert_eq!(r.headers.get_all(name).iter().count(), 1, "{name} {r:?}");
        }
        assert_eq!(
            r.headers["signature-agent"],
            format!("sig1=\"{AGENT_JWKS}\"").as_str()
        );
    }

    let requests = captured_both(&plain_base, &plain_seen, &secure_seen);
    let directory = store.directory(SystemTime::now()).unwrap();
    let results = verify(&directory, &requests);
    assert_eq!(results.len(), 6);
    for (res, req) in results.iter().zip(&requests) {
        assert_eq!(res["ok"], true, "{res} for {}", req["url"]);
        assert_eq!(res["keyid"].as_str(), keyid.as_deref());
        assert_eq!(res["params"]["tag"], "web-bot-auth");
        assert_eq!(res["params"]["alg"], "ed25519");
        let created = res["params"]["created"].as_u64().unwrap();
        assert_eq!(res["params"]["expires"].as_u64().unwrap(), created + 300);
    }

    let lines = proxy.stop().await;
    let mut signed = with_outcome(&lines, "fetched");
    signed.extend(with_outcome(&lines, "robots_fetched"));
    signed.extend(with_outcome(&lines, "throttled"));
    assert_eq!(signed.len(), 6, "{lines:#?}");
    for l in signed {
        assert_eq!(l["signed"], true, "{l}");
        assert_eq!(l["keyid"].as_str(), keyid.as_deref(), "{l}");
    }
}

#[tokio::test]
async fn expired_tampered_and_wrong_key_signatures_fail_verification() {
    if !python_verifier() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = KeyStore::at(dir.path().join("key.pem"));
    store.init(false).unwrap();
    let other = KeyStore::at(dir.path().join("other.pem"));
    other.init(false).unwrap();
    let id = Identity::new(
        store.load().unwrap(),
        AGENT,
        Duration::from_secs(300),
        &[],
        Forms::only(Form::Draft01),
    )
    .unwrap();
    let now = SystemTime::now();
    let request = |at: SystemTime, authority: &str| {
        let mut parts = hyper::Request::get("/").body(()).unwrap().into_parts().0;
        id.sign(&mut parts, "origin.test:8080", at).unwrap();
        let seen = SeenRequest {
            path: "/page".into(),
            version: hyper::Version::HTTP_11,
            headers: parts.headers,
        };
        captured(&format!("http://{authority}"), &seen)
    };
    let good = request(now, "origin.test:8080");
    let expired = request(now - Duration::from_secs(3600), "origin.test:8080");
    let moved = request(now, "origin.test:8081");
    let mut flipped = good.clone();
    for h in flipped["headers"].as_array_mut().unwrap() {
        if h[0] == "signature" {
            let v = h[1].as_str().unwrap().replacen(":", ":A", 1);
            h[1] = json!(v);
        }
    }
    let ours = store.directory(now).unwrap();
    let results = verify(&ours, &[good.clone(), expired, moved, flipped]);
    assert_eq!(results[0]["ok"], true, "{}", results[0]);
    let errors: Vec<&str> = results[1..]
        .iter()
        .map(|r| {
            assert_eq!(r["ok"], false, "{r}");
            r["error"].as_str().unwrap()
        })
        .collect();
    assert!(errors[0].contains("expires"), "{}", errors[0]);
    assert!(errors[1].contains("InvalidSignature"), "{}", errors[1]);
    assert!(errors[2].contains("InvalidSignature"), "{}", errors[2]);
    let wrong = verify(&other.directory(now).unwrap(), &[good]);
    assert_eq!(wrong[0]["ok"], false, "{}", wrong[0]);
    assert!(
        wrong[0]["error"].as_str().unwrap().contains("resolve"),
        "{}",
        wrong[0]
    );
}

#[tokio::test]
async fn rotation_switches_the_running_proxy_and_old_signatures_verify_during_the_overlap() {
    if !python_verifier() {
        return;
    }
    let origin = Origin::http(origin_handler()).await;
    let (mut proxy, store) = signing_proxy(Form::Draft01, |_| {}).await;
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());
    let keyid_of = |r: &SeenRequest| -> String {
        let input = r.headers["signature-input"].to_str().unwrap();
        let start = input.find("keyid=\"").unwrap() + 7;
        input[start..].split('"').next().unwrap().to_string()
    };

    let r = c.get(format!("{base}/before")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let now = SystemTime::now();
    let rotation = store.rotate(Duration::from_secs(3600), now).unwrap();
    // The proxy looks at the key file every few seconds; ask until a
    // request carries the new key (bounded, no timing asserted).
    let mut switched = false;
    for i in 0..100 {
        let r = c.get(format!("{base}/after-{i}")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let last = origin.seen.all().pop().unwrap();
        if keyid_of(&last) == rotation.new.as_str() {
            switched = true;
            break;
        }
        assert_eq!(keyid_of(&last), rotation.old.as_str());
        // A poll interval: a request signed with the new key is what is
        // waited on.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(switched, "the proxy never signed with the rotated key");

    let seen = origin.seen.all();
    let before = seen.iter().find(|r| r.path == "/before").unwrap();
    let after = seen.last().unwrap();
    let requests = [captured(&base, before), captured(&base, after)];
    // During the overlap the directory lists both keys: both verify.
    let during = verify(&store.directory(now).unwrap(), &requests);
    assert_eq!(during[0]["keyid"], rotation.old.as_str(), "{during:?}");
    assert_eq!(during[1]["keyid"], rotation.new.as_str(), "{during:?}");
    assert!(during.iter().all(|r| r["ok"] == true), "{during:?}");
    // After it, the old key is gone from the directory and so are its signatures.
    let later = now + Duration::from_secs(3601);
    let after_overlap = verify(&store.directory(later).unwrap(), &requests);
    assert_eq!(after_overlap[0]["ok"], false, "{after_overlap:?}");
    assert_eq!(after_overlap[1]["ok"], true, "{after_overlap:?}");
    proxy.stop().await;
}

/// The public key each tool an operator might use derives from a key file
/// mannerly wrote, as raw bytes (hex); `None` where the tool is absent.
fn public_key_per_tool(key: &std::path::Path) -> Vec<(&'static str, Option<String>)> {
    let run = |program: &str, args: &[&str]| -> String {
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{program} refused {}: {}",
            key.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let key = key.to_str().unwrap();
    let openssl = have_tool("openssl", "openssl").then(|| {
        // The SubjectPublicKeyInfo of an Ed25519 key ends with the 32 raw bytes.
        let der = std::process::Command::new("openssl")
            .args(["pkey", "-in", key, "-pubout", "-outform", "DER"])
            .output()
            .unwrap();
        assert!(
            der.status.success(),
            "openssl pkey refused {key}: {}",
            String::from_utf8_lossy(&der.stderr)
        );
        mannerly_policy::hex(&der.stdout[der.stdout.len() - 32..])
    });
    let python = python_module("cryptography", "cryptography").then(|| {
        run(
            "python3",
            &[
                "-c",
                "import sys; from cryptography.hazmat.primitives import serialization as s; \
                 k = s.load_pem_private_key(open(sys.argv[1], 'rb').read(), None); \
                 print(k.public_key().public_bytes(s.Encoding.Raw, s.PublicFormat.Raw).hex())",
                key,
            ],
        )
    });
    let node = have_tool("node", "nodejs").then(|| {
        run(
            "node",
            &[
                "-e",
                "const c = require('crypto'); \
                 const k = c.createPrivateKey(require('fs').readFileSync(process.argv[1])); \
                 const x = c.createPublicKey(k).export({format: 'jwk'}).x; \
                 process.stdout.write(Buffer.from(x, 'base64url').toString('hex'))",
                key,
            ],
        )
    });
    vec![("openssl", openssl), ("python", python), ("node", node)]
}

#[test]
fn key_files_written_by_the_cli_load_in_openssl_python_and_node() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("MANNERLY_DATA_DIR", dir.path().to_str().unwrap())];
    let (code, out) = mannerly(&["identity", "init"], &env);
    assert_eq!(code, 0, "{out}");
    let identity_key = std::path::PathBuf::from(out.lines().next().unwrap());
    // The key mannerly signs with, read back as the proxy reads it.
    let signing = KeyStore::at(identity_key.clone()).load().unwrap();
    let published = mannerly_policy::hex(signing.verifying_key().as_bytes());
    let (code, out) = mannerly(&["audit", "pubkey"], &env);
    assert_eq!(code, 0, "{out}");
    let audit_pub = out.trim().to_string();
    let audit_key = mannerly_proxy::audit_key_path(dir.path());
    // A rotation keeps the old key's private half for its overlap: a key
    // file mannerly writes too.
    let (code, out) = mannerly(&["identity", "rotate"], &env);
    assert_eq!(code, 0, "{out}");
    let old_keyid = KeyId::of(&signing.verifying_key());
    let retired = identity_key.with_file_name(format!("identity-key.retired-{old_keyid}.pem"));
    let rotated = KeyStore::at(identity_key.clone()).load().unwrap();
    let rotated_pub = mannerly_policy::hex(rotated.verifying_key().as_bytes());

    for (file, expected) in [
        (&identity_key, &rotated_pub),
        (&retired, &published),
        (&audit_key, &audit_pub),
    ] {
        let pem = std::fs::read_to_string(file).unwrap();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{pem}");
        for (tool, derived) in public_key_per_tool(file) {
            if let Some(derived) = derived {
                assert_eq!(&derived, expected, "{tool} on {}", file.display());
            }
        }
    }
}

const DIRECTORY_SCRIPT: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/verify_directory.py");

/// A served directory response, as the Python -01 checker reads it.
async fn fetch_directory(admin: &str, host: &str) -> Value {
    let r = reqwest::Client::new()
        .get(format!(
            "{admin}/.well-known/http-message-signatures-directory"
        ))
        .header("host", host)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers: Vec<Value> = r
        .headers()
        .iter()
        .map(|(k, v)| json!([k.as_str(), v.to_str().unwrap_or("")]))
        .collect();
    let body = r.text().await.unwrap();
    json!({
        "url": format!("https://{host}/.well-known/http-message-signatures-directory"),
        "status": status, "headers": headers, "body": body,
    })
}

fn check_directory(response: &Value) -> Value {
    run_python(DIRECTORY_SCRIPT, response)
}

#[tokio::test]
async fn the_admin_listener_serves_a_signed_directory_and_card_without_its_token() {
    if !python_verifier() {
        return;
    }
    let (mut proxy, store) = signing_proxy(Form::Directory03, |c| {
        c.admin.listen = "127.0.0.1:0".into();
        c.admin.token = "not-for-verifiers".into();
        c.crawler.agent = "MyBot".into();
        c.budget.start_rate = 1.0;
        c.budget.max_rate = 3.0;
        c.budget.burst = 1;
        c.budget.concurrency = 2;
    })
    .await;
    let admin = format!("http://{}", proxy.admin.expect("admin listener"));
    let first = KeyId::of(&store.load().unwrap().verifying_key()).to_string();

    let served = fetch_directory(&admin, "crawler.test").await;
    let checked = check_directory(&served);
    assert_eq!(checked["ok"], true, "{checked}");
    assert_eq!(checked["keyids"], json!([first]), "{checked}");
    assert_eq!(checked["kids"], json!([first]), "{checked}");
    assert_eq!(
        checked["params"]["tag"],
        "http-message-signatures-directory"
    );

    // Re-served under another authority, or with other keys under the same
    // signature: the proof fails.
    let mut moved = served.clone();
    moved["url"] = json!("https://elsewhere.test/.well-known/http-message-signatures-directory");
    let r = check_directory(&moved);
    assert_eq!(r["ok"], false, "{r}");
    let mut swapped = served.clone();
    swapped["body"] = json!(served["body"]
        .as_str()
        .unwrap()
        .replace("\"sig\"", "\"enc\""));
    let r = check_directory(&swapped);
    assert!(
        r["error"].as_str().unwrap().contains("Content-Digest"),
        "{r}"
    );

    // After a rotation: the old key listed with exp for the overlap, and
    // the directory signed by each key it lists (before the running proxy
    // has picked the new key up, and after).
    let overlap = Duration::from_secs(15);
    let rotation = store.rotate(overlap, SystemTime::now()).unwrap();
    let both = json!([rotation.new.as_str(), first]);
    let sorted = |v: &Value| {
        let mut ids: Vec<String> = v
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids
    };
    let during = check_directory(&fetch_directory(&admin, "crawler.test").await);
    assert_eq!(during["ok"], true, "{during}");
    assert_eq!(during["kids"], both, "{during}");
    assert_eq!(sorted(&during["keyids"]), sorted(&both), "{during}");
    assert_eq!(during["exp"], json!([null, rotation.until]), "{during}");
    // Once the overlap is over the old key is gone, and signs nothing.
    let mut after = Value::Null;
    for _ in 0..200 {
        after = check_directory(&fetch_directory(&admin, "crawler.test").await);
        if after["kids"] == json!([rotation.new.as_str()]) {
            break;
        }
        // A poll interval: the directory without the old key is what is
        // waited on.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(after["ok"], true, "{after}");
    assert_eq!(after["kids"], json!([rotation.new.as_str()]), "{after}");
    assert_eq!(after["keyids"], json!([rotation.new.as_str()]), "{after}");
    let retired_pem = store
        .key_path()
        .with_file_name(format!("identity-key.retired-{first}.pem"));
    assert!(
        !retired_pem.exists(),
        "{} kept past its overlap",
        retired_pem.display()
    );

    // The card: jwks_uri is the Signature-Agent value, rates the budget's.
    let card = reqwest::get(format!("{admin}/.well-known/signature-agent-card"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let card: Value = serde_json::from_str(&card).unwrap();
    assert_eq!(card["jwks_uri"], AGENT_JWKS);
    assert_eq!(
        card["web_bot_auth"]["rate-expectation"],
        "max=3rps;start=1rps;burst=1;concurrency=2;per=host"
    );
    assert_eq!(card["web_bot_auth"]["rfc9309-product-token"], "MyBot");
    // The rest of the listener still wants the token.
    let metrics = reqwest::get(format!("{admin}/metrics")).await.unwrap();
    assert_eq!(metrics.status(), 401);
    proxy.stop().await;
}

#[tokio::test]
async fn a_403_with_accept_signature_is_answered_by_one_resend_signed_as_asked() {
    if !python_verifier() {
        return;
    }
    let h = handler(|req| async move {
        let input = signature_input(req.headers());
        let ask = |value: &'static str| {
            let mut r = text(403, "sign again");
            r.headers_mut()
                .insert("accept-signature", value.parse().unwrap());
            r
        };
        match req.uri().path() {
            "/robots.txt" => text(200, "User-agent: *\nAllow: /\n"),
            // RFC 9421 §5's request, with a nonce as -01 allows.
            "/asks" if !input.contains("nonce=\"n-42\"") => {
                ask(r#"sig1=("@method" "@path" "@authority");nonce="n-42";tag="web-bot-auth""#)
            }
            // Something we cannot give: another tag.
            "/other-tag" => ask(r#"sig1=("@method");tag="not-web-bot-auth""#),
            _ => text(200, "page"),
        }
    });
    let origin = Origin::http(h).await;
    let (mut proxy, _) = signing_proxy(Form::Draft01, |_| {}).await;
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());

    let r = c.get(format!("{base}/asks")).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", decision(&r));
    let r = c.get(format!("{base}/other-tag")).send().await.unwrap();
    assert_eq!(r.status(), 403, "passed on: we cannot sign as asked");
    assert_eq!(origin.seen.count("/asks"), 2);
    assert_eq!(origin.seen.count("/other-tag"), 1);

    let seen = origin.seen.all();
    let resent = seen.iter().filter(|r| r.path == "/asks").nth(1).unwrap();
    let input = resent.headers["signature-input"].to_str().unwrap();
    assert!(
        input.starts_with(r#"sig1=("@authority" "signature-agent";key="sig1" "@method" "@path")"#),
        "{input}"
    );
    let lines = proxy.stop().await;
    let directory = KeyStore::at(proxy.dir.path().join("identity-key.pem"))
        .directory(SystemTime::now())
        .unwrap();
    let results = verify(&directory, &[captured(&base, resent)]);
    assert_eq!(results[0]["ok"], true, "{}", results[0]);
    assert_eq!(results[0]["params"]["nonce"], "n-42");
    assert_eq!(results[0]["params"]["tag"], "web-bot-auth");
    let fetched = with_outcome(&lines, "fetched");
    let asks = fetched
        .iter()
        .find(|l| l["url"].as_str().is_some_and(|u| u.ends_with("/asks")))
        .unwrap();
    assert_eq!(asks["signature_asked"], "@method @path nonce", "{asks}");
    assert_eq!(asks["signed"], true);
}

const CLOUDFLARE_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/e2e/verify_cloudflare.cjs"
);
/// Cloudflare's verifier as published on npm, and the signature library it
/// reads headers with (the version it depends on).
const CLOUDFLARE_PACKAGES: [&str; 2] = ["web-bot-auth@0.1.3", "http-message-sig@0.2.0"];

/// The `node_modules` holding Cloudflare's `web-bot-auth`, installed once
/// into cargo's test temp dir (`.ci/run` installs it there first); `None`
/// (skipped) without node or npm, or when the install fails outside CI.
fn cloudflare_verifier() -> Option<std::path::PathBuf> {
    if !have_tool("node", "nodejs") || !have_tool("npm", "npm") {
        return None;
    }
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-bot-auth");
    let modules = dir.join("node_modules");
    if modules.join("web-bot-auth/package.json").exists() {
        return Some(modules);
    }
    npm_install(&dir, &CLOUDFLARE_PACKAGES).then_some(modules)
}

/// Runs Cloudflare's npm verifier over `requests`, with `directory` as the
/// only source of keys and `agent` the Signature-Agent origin expected.
fn verify_cloudflare(
    modules: &std::path::Path,
    directory: &str,
    agent: &str,
    requests: &[Value],
) -> Vec<Value> {
    let directory: Value = serde_json::from_str(directory).unwrap();
    let input = json!({"directory": directory, "agent": agent, "requests": requests});
    let mut node = std::process::Command::new("node");
    node.arg(CLOUDFLARE_SCRIPT).env("NODE_PATH", modules);
    serde_json::from_value(run_checker(&mut node, CLOUDFLARE_SCRIPT, &input)).unwrap()
}

#[tokio::test]
async fn by_default_every_request_verifies_with_cloudflares_npm_verifier() {
    let Some(modules) = cloudflare_verifier() else {
        return;
    };
    let (mut proxy, store, plain, secure, _dir) = signing(Form::Directory03).await;
    let keyid = KeyId::of(&store.load().unwrap().verifying_key()).to_string();
    let c = proxy.client();
    let plain_base = format!("http://127.0.0.1:{}", plain.port());
    for url in [
        format!("{plain_base}/page"),
        format!("{plain_base}/throttle-once"),
        "https://secure.test/page".to_string(),
    ] {
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{url}: {}", decision(&r));
    }
    let requests = captured_both(&plain_base, &plain.seen.all(), &secure.seen.all());
    let urls: Vec<&str> = requests
        .iter()
        .map(|r| r["url"].as_str().unwrap())
        .collect();
    assert_eq!(
        urls.len(),
        6,
        "robots.txt twice, the page, the throttled read twice, the https page: {urls:?}"
    );
    let directory = store.directory(SystemTime::now()).unwrap();
    let results = verify_cloudflare(&modules, &directory, AGENT, &requests);
    assert_eq!(results.len(), 6);
    for (res, url) in results.iter().zip(&urls) {
        assert_eq!(res["ok"], true, "{res} for {url}");
        assert_eq!(res["keyid"], keyid.as_str());
        assert_eq!(res["params"]["tag"], "web-bot-auth");
        assert_eq!(res["covers"], r#""@authority" "signature-agent""#);
    }
    // The package refuses what was not signed so: another authority, or
    // another agent in the signed field.
    let mut moved = requests[1].clone();
    moved["url"] = json!(format!("http://127.0.0.2:{}/page", plain.port()));
    let mut spoofed = requests[1].clone();
    for h in spoofed["headers"].as_array_mut().unwrap() {
        if h[0] == "signature-agent" {
            h[1] = json!("\"https://spoof.example\"");
        }
    }
    let refused = verify_cloudflare(&modules, &directory, AGENT, &[moved, spoofed]);
    assert!(refused.iter().all(|r| r["ok"] == false), "{refused:?}");
    proxy.stop().await;
}

/// The signature fields go to an h2 origin as literals never indexed
/// (they repeat within a second at most): nginx's HPACK decoder, not ours,
/// reads them whole on request after request of one connection, and what it
/// read verifies with Cloudflare's npm verifier.
#[tokio::test]
async fn signatures_over_h2_reach_nginx_whole_and_verify_with_cloudflares_verifier() {
    let Some(modules) = cloudflare_verifier() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    // nginx says what it decoded, one field a line.
    let site = "location = /robots.txt { return 404; }
    location / { default_type text/plain; return 200 \"$server_protocol $connection\\n$http_signature_agent\\n$http_signature_input\\n$http_signature\\n\"; }";
    let Some(nginx) = Nginx::start_tls(&ca, "origin.test", site) else {
        return;
    };
    let (roots, port) = (ca.pem_path.clone(), nginx.port);
    let (mut proxy, store) = signing_proxy(Form::Directory03, move |c| {
        super::realweb::to_origin_test(c, roots, port);
    })
    .await;
    let c = proxy.client();
    let mut requests = Vec::new();
    let mut connections = std::collections::BTreeSet::new();
    for i in 0..3 {
        let url = format!("https://origin.test:{port}/p{i}");
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "{url}: {}", decision(&r));
        let body = r.text().await.unwrap();
        let lines: Vec<&str> = body.lines().collect();
        let [first, agent, input, signature] = lines[..] else {
            panic!("{body}");
        };
        let (protocol, connection) = first.split_once(' ').unwrap();
        assert_eq!(protocol, "HTTP/2.0", "{body}");
        connections.insert(connection.to_string());
        assert!(!input.is_empty() && !signature.is_empty(), "{body}");
        requests.push(json!({"method": "GET", "url": url, "headers": [
            ["signature-agent", agent],
            ["signature-input", input],
            ["signature", signature],
        ]}));
    }
    assert_eq!(
        connections.len(),
        1,
        "one kept h2 connection: {connections:?}"
    );
    let directory = store.directory(SystemTime::now()).unwrap();
    let results = verify_cloudflare(&modules, &directory, AGENT, &requests);
    assert_eq!(results.len(), 3);
    for res in &results {
        assert_eq!(res["ok"], true, "{res}");
    }
    proxy.stop().await;
}

/// The `Signature-Input` an origin received, or "".
fn signature_input(h: &hyper::HeaderMap) -> String {
    h.get("signature-input")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// An origin that challenges with `Accept-Signature`: `/{401,403,429}`
/// until the signature carries the nonce it asked for, `/again-{status}`
/// every time, `/malformed` with a field that is no Dictionary.
fn challenging_origin() -> Handler {
    handler(|req| async move {
        let input = signature_input(req.headers());
        let path = req.uri().path().to_string();
        let challenge = |status: u16, field: &str| {
            let mut r = text(status, "sign again");
            r.headers_mut()
                .insert("accept-signature", field.parse().unwrap());
            if status == 429 {
                r.headers_mut().insert("retry-after", "1".parse().unwrap());
            }
            r
        };
        let status = |p: &str| {
            p.rsplit(['/', '-'])
                .next()
                .and_then(|s| s.parse::<u16>().ok())
        };
        let nonce = |s: u16| format!("n-{s}");
        match (path.as_str(), status(&path)) {
            ("/robots.txt", _) => text(200, "User-agent: *\nAllow: /\n"),
            ("/malformed", _) => challenge(403, "((("),
            (p, Some(s)) if p.starts_with("/again-") => challenge(
                s,
                &format!(
                    r#"sig1=("@method" "@path");nonce="{}";tag="web-bot-auth""#,
                    nonce(s)
                ),
            ),
            (_, Some(s)) if !input.contains(&format!("nonce=\"{}\"", nonce(s))) => challenge(
                s,
                &format!(
                    r#"sig1=("@method" "@path" "@authority");nonce="{}";tag="web-bot-auth""#,
                    nonce(s)
                ),
            ),
            _ => text(200, "page"),
        }
    })
}

#[tokio::test]
async fn a_401_403_or_429_asking_for_a_signature_gets_exactly_one_signed_resend() {
    let cloudflare = cloudflare_verifier();
    let origin = Origin::http(challenging_origin()).await;
    let (mut proxy, store) = signing_proxy(Form::Directory03, |_| {}).await;
    let c = proxy.client();
    let base = format!("http://127.0.0.1:{}", origin.port());

    for (path, status, sends) in [
        ("/401", 200, 2),
        ("/403", 200, 2),
        ("/again-401", 401, 2),
        ("/again-403", 403, 2),
        ("/malformed", 403, 1),
    ] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), status, "{path}: {}", decision(&r));
        assert_eq!(origin.seen.count(path), sends, "{path}");
    }
    // An unsafe method whose body was kept: sent again too.
    let r = c
        .post(format!("{base}/post/403"))
        .body("q=1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", decision(&r));
    assert_eq!(origin.seen.count("/post/403"), 2);
    // Last, as the host is paused after each: a 429 is a throttle too.
    for (path, status) in [("/429", 200), ("/again-429", 429)] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), status, "{path}: {}", decision(&r));
        assert_eq!(origin.seen.count(path), 2, "{path}");
    }

    let seen = origin.seen.all();
    let resends: Vec<&SeenRequest> = ["/401", "/403", "/429"]
        .iter()
        .map(|p| seen.iter().filter(|r| r.path == *p).nth(1).unwrap())
        .collect();
    for (r, s) in resends.iter().zip([401, 403, 429]) {
        let input = r.headers["signature-input"].to_str().unwrap();
        assert!(
            input.starts_with(r#"sig1=("@authority" "signature-agent" "@method" "@path")"#),
            "{input}"
        );
        assert!(input.contains(&format!("nonce=\"n-{s}\"")), "{input}");
    }
    if let Some(modules) = cloudflare {
        let directory = store.directory(SystemTime::now()).unwrap();
        let requests: Vec<Value> = resends.iter().map(|r| captured(&base, r)).collect();
        let results = verify_cloudflare(&modules, &directory, AGENT, &requests);
        for (res, s) in results.iter().zip([401, 403, 429]) {
            assert_eq!(res["ok"], true, "{s}: {res}");
            assert_eq!(res["params"]["nonce"], format!("n-{s}"));
        }
    }

    let lines = proxy.stop().await;
    let line = |path: &str, outcome: &str| -> Value {
        lines
            .iter()
            .rev()
            .find(|l| {
                l["outcome"] == outcome && l["url"].as_str().is_some_and(|u| u.ends_with(path))
            })
            .unwrap_or_else(|| panic!("no {outcome} line for {path}: {lines:#?}"))
            .clone()
    };
    for path in ["/401", "/403", "/429", "/post/403"] {
        let l = line(path, "fetched");
        assert_eq!(l["status"], 200, "{l}");
        assert_eq!(l["signature_asked"], "@method @path nonce", "{l}");
        assert_eq!(l["signed"], true, "{l}");
    }
    for (path, outcome) in [
        ("/again-401", "fetched"),
        ("/again-403", "fetched"),
        ("/again-429", "throttled"),
    ] {
        let l = line(path, outcome);
        assert!(
            l["signature_not_resent"]
                .as_str()
                .is_some_and(|w| w.contains("asked again after its one signed resend")),
            "{l}"
        );
    }
    let l = line("/malformed", "fetched");
    assert!(
        l["signature_not_resent"]
            .as_str()
            .is_some_and(|w| w.starts_with("malformed Accept-Signature ignored")),
        "{l}"
    );
    assert!(l.get("signature_asked").is_none(), "{l}");
}

const BOT: &str = "ExampleBot/1.0 (+https://crawler.example/bot)";

/// A GET through `c` sending `ua` as its User-Agent.
async fn get_as(c: &reqwest::Client, url: String, ua: &str) -> reqwest::Response {
    c.get(url).header("user-agent", ua).send().await.unwrap()
}

/// An origin that answers each page with the User-Agent it received.
fn echo_agent() -> Handler {
    handler(|req| async move {
        let ua = req
            .headers()
            .get("user-agent")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).to_string())
            .unwrap_or_default();
        match req.uri().path() {
            "/robots.txt" => text(200, "User-agent: ExampleBot\nDisallow: /private\n"),
            _ => text(200, ua),
        }
    })
}

#[tokio::test]
async fn the_crawlers_user_agent_is_appended_a_browser_claim_rewritten_and_both_refused_when_asked()
{
    let origin = Origin::http(echo_agent()).await;
    let base = format!("http://127.0.0.1:{}", origin.port());
    let chrome = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36";
    let mut proxy = TestProxy::start(|c| c.crawler.user_agent = BOT.into()).await;
    let c = proxy.client();
    // curl as it comes: its own User-Agent, the crawler's product after it.
    if have_tool("curl", "curl") {
        let args = [
            "-s".to_string(),
            "-x".into(),
            proxy.url(),
            format!("{base}/curl"),
        ];
        // Off the runtime: the proxy serving curl runs on it.
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("curl").args(args).output()
        })
        .await
        .unwrap()
        .unwrap();
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(
            body.starts_with("curl/") && body.ends_with(&format!(" {BOT}")),
            "{body}"
        );
    }
    let r = c.get(format!("{base}/none")).send().await.unwrap();
    assert_eq!(
        r.text().await.unwrap(),
        BOT,
        "no User-Agent: the product alone"
    );
    let r = get_as(&c, format!("{base}/chrome"), chrome).await;
    assert_eq!(r.text().await.unwrap(), BOT, "a browser claim is rewritten");
    let own = "ExampleBot/1.1 (+https://crawler.example/bot)";
    let r = get_as(&c, format!("{base}/own"), own).await;
    assert_eq!(
        r.text().await.unwrap(),
        own,
        "the product already there: kept"
    );
    // robots.txt is read, and fetched, as the crawler: its group applies.
    let r = get_as(&c, format!("{base}/private"), chrome).await;
    assert_eq!(r.status(), 403, "{}", decision(&r));
    let robots = origin
        .seen
        .all()
        .into_iter()
        .find(|r| r.path == "/robots.txt")
        .unwrap();
    assert!(robots.headers["user-agent"].to_str().unwrap().contains(BOT));
    let lines = proxy.stop().await;
    let line = |path: &str| {
        lines
            .iter()
            .find(|l| l["url"].as_str().is_some_and(|u| u.ends_with(path)))
            .unwrap_or_else(|| panic!("{path}: {lines:#?}"))
    };
    assert_eq!(line("/none")["user_agent"], "appended");
    assert_eq!(line("/none")["agent"], "ExampleBot");
    assert_eq!(
        line("/chrome")["user_agent"],
        format!("rewritten: the client's User-Agent claimed a browser ({chrome})")
    );
    assert!(line("/own").get("user_agent").is_none());

    // Require the product, refuse browsers: nothing reaches the origin.
    let mut proxy = TestProxy::start(|c| {
        c.crawler.user_agent = BOT.into();
        c.crawler.user_agent_mode = mannerly_policy::identity::UaMode::Require;
        c.crawler.browser_user_agent = mannerly_policy::identity::BrowserUa::Refuse;
    })
    .await;
    let c = proxy.client();
    let before = origin.seen.all().len();
    for (path, ua, says) in [
        (
            "/plain",
            "python-requests/2.32",
            "lacks the product token ExampleBot",
        ),
        ("/browser", chrome, "claims a browser"),
    ] {
        let r = get_as(&c, format!("{base}{path}"), ua).await;
        assert_eq!(r.status(), 403);
        let said = decision(&r);
        assert!(
            said.starts_with("blocked; reason=") && said.contains(says),
            "{said}"
        );
        let body = r.text().await.unwrap();
        assert!(body.contains(says), "{body}");
    }
    assert_eq!(
        origin.seen.all().len(),
        before,
        "refused before robots.txt or the page"
    );
    let r = get_as(&c, format!("{base}/ok"), BOT).await;
    assert_eq!(r.status(), 200);
    let lines = proxy.stop().await;
    let blocked = with_outcome(&lines, "blocked");
    assert_eq!(blocked.len(), 2, "{lines:#?}");
}

#[test]
fn the_page_about_the_crawler_and_its_jafar_ranges_read_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_s = data.to_str().unwrap().to_string();
    let (code, out) = mannerly(&["identity", "init"], &[("MANNERLY_DATA_DIR", &data_s)]);
    assert_eq!(code, 0, "{out}");
    let config = dir.path().join("mannerly.toml");
    std::fs::write(
        &config,
        format!(
            "[crawler]\nuser_agent = \"{BOT}\"\nabout = \"Indexes <b>recipes</b> for a search engine.\"\n\
             purposes = [\"search\"]\negress_ranges = [\"198.51.100.0/24\", \"2001:db8:42::/48\"]\n\
             [identity]\nenabled = true\nsignature_agent = \"{AGENT}\"\n"
        ),
    )
    .unwrap();
    let proxy = RunningBinary::start(&data, &[("MANNERLY_CONFIG", config.to_str().unwrap())]);
    let admin = proxy.admin.trim_end_matches('/').to_string();
    let page = format!("http://{admin}/bot");
    // The Link field, for machines that read headers only.
    let out = std::process::Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", &page])
        .output();
    if let Some(out) = out.ok().filter(|o| o.status.success()) {
        let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
        assert!(
            head.contains("link: </bot/ranges.json>; rel=\"client-ranges\""),
            "{head}"
        );
    }
    let Some(mut browser) = Browser::start() else {
        return;
    };
    browser.open(&page);
    browser.wait_for("document.readyState === 'complete' && document.querySelector('h1') !== null");
    let read = |b: &mut Browser, sel: &str| {
        b.eval(&format!("document.querySelector('{sel}').textContent"))
    };
    assert_eq!(read(&mut browser, "h1"), "ExampleBot");
    assert_eq!(read(&mut browser, "#user-agent"), BOT);
    assert_eq!(
        read(&mut browser, "#purpose"),
        "Indexes <b>recipes</b> for a search engine. Declared purposes: search."
    );
    assert_eq!(
        read(&mut browser, "#robots"),
        "User-agent: ExampleBot\nDisallow: /"
    );
    assert_eq!(
        browser.eval("document.querySelector('#contact').href"),
        "https://crawler.example/bot"
    );
    assert_eq!(
        browser.eval("document.querySelector('#directory').href"),
        AGENT_JWKS
    );
    assert_eq!(
        browser.eval("[...document.querySelectorAll('#range-list code')].map(c => c.textContent)"),
        json!(["198.51.100.0/24", "2001:db8:42::/48"])
    );
    // The ranges, where the page's rel="client-ranges" link leads.
    let ranges = browser.eval("document.querySelector('link[rel=\"client-ranges\"]').href");
    let ranges = ranges.as_str().unwrap().to_string();
    assert_eq!(ranges, format!("http://{admin}/bot/ranges.json"));
    if let Some(shots) = std::env::var_os("MANNERLY_SCREENSHOTS") {
        browser.screenshot(&std::path::Path::new(&shots).join("bot-page.png"));
    }
    browser.open(&ranges);
    browser.wait_for("document.readyState === 'complete' && document.body.innerText.length > 0");
    let doc = browser.eval("JSON.parse(document.body.innerText)");
    assert_eq!(doc["formatVersion"], "1.0");
    assert!(
        doc["synctoken"].as_str().is_some_and(|s| !s.is_empty()),
        "{doc}"
    );
    assert!(
        doc["creationTime"]
            .as_str()
            .is_some_and(|s| s.ends_with('Z')),
        "{doc}"
    );
    assert_eq!(
        doc["prefixes"],
        json!([
            {"ipv4Prefix": "198.51.100.0/24", "service": "ExampleBot"},
            {"ipv6Prefix": "2001:db8:42::/48", "service": "ExampleBot"},
        ])
    );
}

#[test]
fn a_user_agent_or_range_that_would_not_parse_is_refused_at_start() {
    for (var, value, says) in [
        (
            "MANNERLY_CRAWLER__USER_AGENT",
            "Example Bot",
            "crawler.user_agent",
        ),
        (
            "MANNERLY_CRAWLER__USER_AGENT",
            "ExampleBot/1.0 (write to us)",
            "no http(s) contact URL",
        ),
        (
            "MANNERLY_CRAWLER__USER_AGENT",
            "ExampleBot/1.0 (+https://)",
            "contact URL does not parse",
        ),
        (
            "MANNERLY_CRAWLER__ABOUT",
            "a crawler",
            "needed by crawler.about",
        ),
    ] {
        let (code, out) = mannerly(&["config", "check"], &[(var, value)]);
        assert_eq!(code, 2, "{value}: {out}");
        assert!(out.contains(says), "{value}: {out}");
    }
}

/// A Python origin on `port` that answers `page` in br when asked for br,
/// else as is (the `brotli` module encodes).
const BR_ORIGIN: &str = r#"
import brotli, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
page = open(sys.argv[2], 'rb').read()
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == '/robots.txt':
            body, coding = b'User-agent: *\nAllow: /\n', None
        elif 'br' in self.headers.get('Accept-Encoding', ''):
            body, coding = brotli.compress(page), 'br'
        else:
            body, coding = page, None
        self.send_response(200)
        self.send_header('Content-Type', 'text/plain')
        self.send_header('Vary', 'Accept-Encoding')
        if coding:
            self.send_header('Content-Encoding', coding)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        sys.stderr.write(self.headers.get('Accept-Encoding', '-') + '\n')
HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
"#;

/// Kills the Python origin when the test ends, however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_client_without_accept_encoding_gets_the_plain_bytes_of_gzip_and_br_origins() {
    if !have_tool("curl", "curl") || !python_module("brotli", "brotli") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let site = dir.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    let page = "A page of plain text, the same line again and again.\n".repeat(400);
    std::fs::write(site.join("page.txt"), &page).unwrap();
    std::fs::write(site.join("robots.txt"), "User-agent: *\nAllow: /\n").unwrap();
    let locations = format!(
        "gzip on; gzip_proxied any; gzip_types text/plain; gzip_min_length 1; gzip_vary on;\n\
         location / {{ root {}; }}",
        site.display()
    );
    let Some(nginx) = Nginx::start_tls(&ca, "origin.test", &locations) else {
        return;
    };
    let br_port = free_port();
    let page_path = site.join("page.txt");
    let _br = Child(
        std::process::Command::new("python3")
            .args([
                "-c",
                BR_ORIGIN,
                &br_port.to_string(),
                page_path.to_str().unwrap(),
            ])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    while tokio::net::TcpStream::connect(("127.0.0.1", br_port))
        .await
        .is_err()
    {
        tokio::task::yield_now().await;
    }
    let (port, roots) = (nginx.port, ca.pem_path.clone());
    let mut proxy = TestProxy::start(|c| {
        c.upstream.extra_roots = vec![roots];
        resolve_to_loopback(c, &format!("origin.test:{port}"), port);
        c.admin.listen = "127.0.0.1:0".into();
    })
    .await;
    let proxy_ca = dir.path().join("proxy-ca.pem");
    std::fs::write(&proxy_ca, &proxy.ca_pem).unwrap();
    let curl = |url: String| {
        let mut cmd = std::process::Command::new("curl");
        cmd.args(["-sS", "--noproxy", "", "-x", &proxy.url(), "--cacert"])
            .arg(&proxy_ca)
            .arg(url);
        cmd
    };
    let gz_url = format!("https://origin.test:{port}/page.txt");
    let br_url = format!("http://127.0.0.1:{br_port}/page.txt");
    // Twice each: the second from what the store kept (the coded body).
    for url in [&gz_url, &gz_url, &br_url, &br_url] {
        let got = tool_stdout(curl(url.clone())).await;
        assert!(
            got == page,
            "{url}: {} bytes, not the page's {}",
            got.len(),
            page.len()
        );
    }
    // nginx sent gzip: fewer body bytes than the page, for each page sent.
    let log = nginx.access_log_with("/page.txt", 1);
    let sizes: Vec<usize> = log
        .lines()
        .filter(|l| l.contains("GET /page.txt"))
        .filter_map(|l| l.split("\" ").nth(1)?.split(' ').nth(1)?.parse().ok())
        .collect();
    assert!(
        !sizes.is_empty() && sizes.iter().all(|s| *s < page.len() / 4),
        "{log}"
    );
    let admin = proxy.admin.unwrap();
    let metrics = reqwest::get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let saved: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mannerly_compression_saved_bytes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    // Four answers decoded, each several times smaller on the wire.
    assert!(saved > 3 * page.len() as u64, "{saved}: {metrics}");
    // A client asking for gzip itself gets gzip, as it asked.
    let mut own = curl(gz_url.clone());
    own.args([
        "-H",
        "Accept-Encoding: gzip",
        "-o",
        "/dev/null",
        "-w",
        "%{size_download}",
    ]);
    let size: usize = tool_stdout(own).await.trim().parse().unwrap();
    assert!(size < page.len() / 4, "{size}");
    proxy.stop().await;
}
