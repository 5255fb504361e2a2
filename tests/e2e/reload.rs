//! SIGHUP reads the configuration again: `[policy]`, `[crawler]` and
//! `[budget]` apply to the running proxy; a configuration that does not load
//! leaves the running one in force.

use std::time::Duration;

use crate::e2e::support::*;

/// Asks for `url` until the decision starts with `want` (the reload runs
/// on the proxy's own time), at most 10 s.
async fn until(client: &reqwest::Client, url: &str, want: &str) -> String {
    let mut last = String::new();
    for _ in 0..100 {
        let r = client.get(url).send().await.unwrap();
        last = decision(&r);
        if last.starts_with(want) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("still {last:?}, expected {want}");
}

#[tokio::test]
async fn sighup_applies_policy_and_keeps_the_running_config_when_the_new_one_is_bad() {
    let origin = Origin::http(handler(|req| async move {
        match req.uri().path() {
            "/robots.txt" => text(200, "User-agent: *\nDisallow: /private/\n"),
            _ => text(200, "page"),
        }
    }))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("my.toml");
    std::fs::write(&file, "[policy]\nenforce = true\n").unwrap();
    let file_env = file.display().to_string();
    let bin = RunningBinary::start(dir.path(), &[("MANNERLY_CONFIG", file_env.as_str())]);
    let client = bin.client();
    let url = format!("http://127.0.0.1:{}/private/x", origin.port());

    let r = client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(decision(&r).starts_with("disallowed"));

    // Observe mode from now on; the head limit only at the next start.
    std::fs::write(
        &file,
        "[policy]\nenforce = false\n[proxy]\nmax_headers = 99\n",
    )
    .unwrap();
    bin.signal("HUP");
    until(&client, &url, "fetched").await;
    assert_eq!(origin.seen.count("/private/x"), 1);

    // A file that does not load changes nothing: still observe mode.
    std::fs::write(&file, "[policy]\nenforce = maybe\n").unwrap();
    bin.signal("HUP");
    assert!(
        bin.logged("configuration not reloaded, the running one stays")
            .await
    );
    let r = client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(decision(&r).starts_with("fetched"));

    // Back to enforcing.
    std::fs::write(&file, "[policy]\nenforce = true\n").unwrap();
    bin.signal("HUP");
    until(&client, &url, "disallowed").await;

    let lines = audit_lines(&dir.path().join("audit.jsonl"));
    let observed: Vec<_> = lines
        .iter()
        .filter(|l| l["outcome"] == "fetched" && l["would"] == "disallowed")
        .collect();
    assert!(
        observed.len() >= 2,
        "observe-mode lines say what would have been decided"
    );
}
