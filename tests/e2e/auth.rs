//! Proxy authentication and the client allow-list: 407 with a challenge,
//! `denied` lines without the password, the user name in the audit line,
//! Proxy-Authorization never forwarded, no open proxy by accident.

use std::io::Write;
use std::process::{Command, Stdio};

use mannerly_proxy::ProxyAuth;

use super::support::*;

fn add_user(users: &std::path::Path, name: &str, password: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mannerly"))
        .args(["users", "add", name])
        .env("MANNERLY_PROXY__USERS_FILE", users)
        .env("MANNERLY_DATA_DIR", users.parent().unwrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[tokio::test]
async fn basic_auth_challenges_denies_and_names_the_user() {
    let origin = Origin::http(ok_origin()).await;
    let keys = tempfile::tempdir().unwrap();
    let users = keys.path().join("users");
    add_user(&users, "alice", "correct horse");
    let mode = std::fs::metadata(&users).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    let users_s = users.display().to_string();
    let mut proxy = TestProxy::start(move |c| {
        c.proxy.auth = ProxyAuth::Basic;
        c.proxy.users_file = users_s;
    })
    .await;
    let url = format!("http://127.0.0.1:{}/page", origin.port());

    let r = proxy.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 407);
    assert_eq!(decision(&r), "denied");
    let challenge = r.headers()["proxy-authenticate"].to_str().unwrap();
    assert!(
        challenge.starts_with("Basic realm=\"mannerly\""),
        "{challenge}"
    );

    let wrong = reqwest::Client::builder()
        .proxy(
            reqwest::Proxy::all(proxy.url())
                .unwrap()
                .basic_auth("alice", "wrong pw"),
        )
        .build()
        .unwrap();
    let r = wrong.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 407);
    let nobody = reqwest::Client::builder()
        .proxy(
            reqwest::Proxy::all(proxy.url())
                .unwrap()
                .basic_auth("mallory", "x"),
        )
        .build()
        .unwrap();
    assert_eq!(nobody.get(&url).send().await.unwrap().status(), 407);

    let good = reqwest::Client::builder()
        .proxy(
            reqwest::Proxy::all(proxy.url())
                .unwrap()
                .basic_auth("alice", "correct horse"),
        )
        .build()
        .unwrap();
    for _ in 0..2 {
        let r = good.get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "page");
    }
    assert!(
        origin
            .seen
            .all()
            .iter()
            .all(|s| !s.headers.contains_key("proxy-authorization")),
        "Proxy-Authorization is never forwarded"
    );
    let path = proxy.audit_path.clone();
    let lines = proxy.stop().await;
    let denied = with_outcome(&lines, "denied");
    assert_eq!(denied.len(), 3, "{lines:#?}");
    assert!(denied
        .iter()
        .all(|l| l["status"] == 407 && l["user"].is_null()));
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 2);
    assert!(fetched.iter().all(|l| l["user"] == "alice"), "{fetched:#?}");
    let raw = std::fs::read_to_string(path).unwrap();
    assert!(!raw.contains("wrong pw") && !raw.contains("correct horse"));
}

#[tokio::test]
async fn the_allow_list_refuses_other_addresses() {
    let origin = Origin::http(ok_origin()).await;
    let url = format!("http://127.0.0.1:{}/page", origin.port());
    let mut proxy = TestProxy::start(|c| c.proxy.allow = vec!["10.0.0.0/8".into()]).await;
    let r = proxy.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(decision(&r), "denied");
    assert!(r.text().await.unwrap().contains("not in proxy.allow"));
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "denied").len(), 1);
    assert_eq!(origin.seen.total(), 0);

    let mut proxy = TestProxy::start(|c| c.proxy.allow = vec!["127.0.0.0/8".into()]).await;
    let r = proxy.client().get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    proxy.stop().await;
}

#[test]
fn a_non_loopback_listen_without_auth_or_allow_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out) = mannerly(
        &["run"],
        &[
            ("MANNERLY_DATA_DIR", dir.path().to_str().unwrap()),
            ("MANNERLY_PROXY__LISTEN", "0.0.0.0:0"),
            ("MANNERLY_ADMIN__LISTEN", "127.0.0.1:0"),
        ],
    );
    assert_eq!(code, 2, "{out}");
    for key in [
        "proxy.listen",
        "proxy.auth",
        "proxy.allow",
        "proxy.open = true",
    ] {
        assert!(out.contains(key), "{key}: {out}");
    }
}
