//! robots beyond groups (issue 53): robots.txt revalidated with its
//! validators, page-level directives, several product tokens, visit times.

use std::time::Duration;

use super::realweb::to_origin_test;
use super::support::*;

/// nginx serving `files` (name, body) as static files (ETag and
/// Last-Modified on every 200, a 304 to a matching validator), with
/// `directives` in the location.
fn static_files(
    ca: &TestCa,
    dir: &std::path::Path,
    files: &[(&str, &str)],
    directives: &str,
) -> Option<Nginx> {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    for (name, body) in files {
        std::fs::write(www.join(name), body).unwrap();
    }
    let site = format!("location / {{ root {}; {directives} }}", www.display());
    Nginx::start_tls(ca, "origin.test", &site)
}

/// The `robots_fetched` lines written so far.
fn robots_fetches(proxy: &TestProxy) -> Vec<serde_json::Value> {
    audit_lines(&proxy.audit_path)
        .into_iter()
        .filter(|l| l["outcome"] == "robots_fetched")
        .collect()
}

/// robots.txt kept for half a second: the fetch after its age ran out
/// carries its ETag and Last-Modified, nginx answers 304 (counted in its
/// access log), and the rules it kept still refuse what they refused.
#[tokio::test]
async fn an_expired_robots_txt_is_revalidated_and_nginx_answers_304() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let robots = "User-agent: *\nDisallow: /private/\n";
    let files = [("robots.txt", robots), ("page.html", "a page\n")];
    let Some(nginx) = static_files(&ca, dir.path(), &files, "") else {
        return;
    };
    let port = nginx.port;
    let ca_path = ca.pem_path.clone();
    let mut proxy = TestProxy::start(|c| {
        to_origin_test(c, ca_path, port);
        c.robots.max_age_secs = 0.5;
    })
    .await;
    let client = proxy.client();
    let base = format!("https://origin.test:{port}");
    // Pages until the copy's age has run out and a second fetch was made.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while robots_fetches(&proxy).len() < 2 {
        assert!(std::time::Instant::now() < deadline, "no second fetch");
        let r = client
            .get(format!("{base}/page.html"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", nginx.error_log());
    }
    let r = client
        .get(format!("{base}/private/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(decision(&r).starts_with("disallowed"), "{}", decision(&r));

    let log = nginx.access_log_with("\"GET /robots.txt HTTP/2.0\" 304", 1);
    assert_eq!(
        log.matches("\"GET /robots.txt HTTP/2.0\" 200").count(),
        1,
        "{log}"
    );
    let revalidated = log.matches("\"GET /robots.txt HTTP/2.0\" 304").count();
    assert!(revalidated >= 1, "{log}");
    let lines = proxy.stop().await;
    let fetches = with_outcome(&lines, "robots_fetched");
    assert_eq!(fetches.len(), revalidated + 1, "{fetches:?}");
    assert_eq!(fetches[0]["status"], 200);
    assert_eq!(fetches[0]["cache"], serde_json::Value::Null);
    for f in &fetches[1..] {
        assert_eq!(f["status"], 304, "{f}");
        assert_eq!(f["cache"], "revalidated", "{f}");
        assert_eq!(f["reason"], serde_json::Value::Null, "{f}");
    }
}
