//! Behind a parent proxy (`upstream.proxy`): Debian's squid as a real
//! parent for plain HTTP (absolute form) and HTTPS (CONNECT) targets, with
//! robots.txt and budgets still keyed on the targets; an in-process stand-in
//! for a proxy provider that carries the target's status in a header; a
//! parent answering 407; the guard still judging the target.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::support::*;

/// Debian's squid on a free loopback port, configured in a temp dir:
/// no cache, names from its own hosts file, CONNECT allowed to `tls_ports`.
struct Squid {
    port: u16,
    dir: tempfile::TempDir,
    child: std::process::Child,
}

impl Squid {
    fn start(tls_ports: &[u16], names: &[&str]) -> Option<Squid> {
        let bin = if std::path::Path::new("/usr/sbin/squid").exists() {
            "/usr/sbin/squid"
        } else if have_tool("squid", "squid") {
            "squid"
        } else {
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        // Started as root, squid drops to its own user, which must be able
        // to write its logs here.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let d = dir.path().display().to_string();
        std::fs::write(
            dir.path().join("hosts"),
            format!("127.0.0.1 {}\n", names.join(" ")),
        )
        .unwrap();
        let port = free_port();
        let ports: Vec<String> = tls_ports.iter().map(u16::to_string).collect();
        let conf = format!(
            "http_port 127.0.0.1:{port}
acl SSL_ports port {ports}
acl CONNECT method CONNECT
http_access deny CONNECT !SSL_ports
http_access allow localhost
http_access deny all
cache deny all
hosts_file {d}/hosts
dns_nameservers 127.0.0.1
access_log stdio:{d}/access.log
cache_log {d}/cache.log
cache_store_log none
pid_filename {d}/squid.pid
coredump_dir {d}
shutdown_lifetime 0 seconds
",
            ports = if ports.is_empty() {
                "443".to_string()
            } else {
                ports.join(" ")
            }
        );
        let conf_path = dir.path().join("squid.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = std::process::Command::new(bin)
            .arg("-N")
            .arg("-f")
            .arg(&conf_path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut squid = Squid { port, dir, child };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = squid.child.try_wait() {
                panic!("squid exited ({status}): {}", squid.cache_log());
            }
            assert!(
                std::time::Instant::now() < deadline,
                "squid did not start: {}",
                squid.cache_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(squid)
    }

    fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }

    fn cache_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("cache.log")).unwrap_or_default()
    }

    /// The access log once it holds `needle` (squid writes each line as the
    /// request ends, which may be just after the client has its answer).
    async fn access_log_with(&self, needle: &str) -> String {
        for _ in 0..100 {
            let log = self.access_log();
            if log.contains(needle) {
                return log;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.access_log()
    }
}

impl Drop for Squid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A site: robots.txt disallows /private, /limit answers 429 (60 s).
fn site() -> Handler {
    handler(|req| async move {
        match req.uri().path() {
            "/robots.txt" => text(200, "User-agent: *\nDisallow: /private\n"),
            "/limit" => {
                let mut r = text(429, "slow down");
                r.headers_mut().insert("retry-after", "60".parse().unwrap());
                r
            }
            p => text(200, format!("page {p}")),
        }
    })
}

fn pin(c: &mut mannerly_proxy::Config, name: &str, port: u16) {
    resolve_to_loopback(c, &format!("{name}:{port}"), port);
}

#[tokio::test]
async fn http_and_https_targets_go_through_squid_with_robots_and_budgets_kept_per_target() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let a = Origin::http(site()).await;
    let b = Origin::http(site()).await;
    let secure = Origin::https(site(), &ca, &["secure.test"]).await;
    let (pa, pb, ps) = (a.port(), b.port(), secure.port());
    let Some(squid) = Squid::start(&[ps], &["a.test", "b.test", "secure.test"]) else {
        return;
    };
    let squid_port = squid.port;
    let roots = ca.pem_path.clone();
    let mut proxy = TestProxy::start(move |c| {
        c.upstream.proxy = format!("http://127.0.0.1:{squid_port}");
        c.upstream.extra_roots = vec![roots];
        c.proxy.connect_ports.push(ps);
        c.budget.max_hold_secs = 2.0;
        pin(c, "a.test", pa);
        pin(c, "b.test", pb);
        pin(c, "secure.test", ps);
    })
    .await;
    let c = proxy.client();

    // Plain HTTP, through squid in absolute form.
    let r = c
        .get(format!("http://a.test:{pa}/page"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(decision(&r), "fetched; waited_ms=0");
    assert_eq!(r.text().await.unwrap(), "page /page");
    // robots.txt was fetched through squid too, and is the target's.
    let r = c
        .get(format!("http://a.test:{pa}/private/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(decision(&r).starts_with("disallowed"), "{}", decision(&r));

    // HTTPS, through a CONNECT tunnel with TLS to the target inside.
    let r = c
        .get(format!("https://secure.test:{ps}/s"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "page /s");

    // The budget is the target's: a.test paused by its own 429, b.test
    // behind the same parent untouched.
    let r = c
        .get(format!("http://a.test:{pa}/limit"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert!(decision(&r).starts_with("throttled"), "{}", decision(&r));
    let r = c
        .get(format!("http://a.test:{pa}/again"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert!(decision(&r).starts_with("paused"), "{}", decision(&r));
    for i in 0..3 {
        let r = c
            .get(format!("http://b.test:{pb}/b{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(decision(&r), "fetched; waited_ms=0");
    }

    // Every request went through squid, and squid's requests reached the
    // origins (squid says so in Via).
    let log = squid
        .access_log_with(&format!("http://b.test:{pb}/b2"))
        .await;
    for needle in [
        format!("GET http://a.test:{pa}/robots.txt"),
        format!("GET http://a.test:{pa}/page"),
        format!("GET http://a.test:{pa}/limit"),
        format!("GET http://b.test:{pb}/robots.txt"),
        format!("GET http://b.test:{pb}/b0"),
    ] {
        assert!(log.contains(&needle), "{needle} not in squid's log:\n{log}");
    }
    assert!(!log.contains("/again"), "a paused host's request was sent");
    assert!(!log.contains("/private"), "a disallowed request was sent");
    let via = a
        .seen
        .all()
        .iter()
        .filter(|r| r.path == "/page")
        .map(|r| {
            r.headers
                .get("via")
                .map(|v| v.to_str().unwrap().to_string())
        })
        .collect::<Vec<_>>();
    assert!(
        via.len() == 1 && via[0].as_deref().is_some_and(|v| v.contains("squid")),
        "{via:?}"
    );
    assert!(
        secure.seen.count("/s") == 1,
        "the HTTPS origin saw the request"
    );

    let lines = proxy.stop().await;
    let hosts: std::collections::BTreeSet<_> = lines
        .iter()
        .filter_map(|l| l["host"].as_str())
        .filter(|h| !h.is_empty())
        .collect();
    assert_eq!(
        hosts,
        ["a.test", "b.test", "secure.test"].into_iter().collect(),
        "audit lines name the targets, never the parent"
    );
    assert_eq!(with_outcome(&lines, "robots_fetched").len(), 3);
    // squid logs a tunnel when it closes: the proxy's pool is gone now.
    let connect = format!("CONNECT secure.test:{ps}");
    let log = squid.access_log_with(&connect).await;
    assert!(
        log.contains(&connect),
        "{connect} not in squid's log:\n{log}"
    );
}

/// A provider stand-in: answers in absolute form as a parent would, `200`
/// with the target's status in `original_status` (and its own verdict in
/// `cb_status`), as Crawlbase does.
fn provider() -> Handler {
    handler(|req| async move {
        let (status, cb) = match req.uri().path() {
            "/robots.txt" => ("404", None),
            "/limited" => ("429", Some("706")),
            _ => ("200", None),
        };
        let mut r = text(200, format!("provider page for {}", req.uri()));
        let h = r.headers_mut();
        h.insert("original_status", status.parse().unwrap());
        if let Some(cb) = cb {
            h.insert("cb_status", cb.parse().unwrap());
            h.insert("retry-after", "2".parse().unwrap());
        }
        r
    })
}

#[tokio::test]
async fn a_target_429_carried_in_a_providers_200_pauses_the_target() {
    let provider = Origin::http(provider()).await;
    let direct = Origin::http(site()).await;
    let (pp, pd) = (provider.port(), direct.port());
    let mut proxy = TestProxy::start(move |c| {
        c.upstream.proxy = format!("http://crawler:s3cret-pw@127.0.0.1:{pp}");
        c.upstream.status_header = "original_status".into();
        c.upstream.no_proxy = vec![".direct.test".into(), "10.0.0.0/8".into()];
        // Well short of the 2 s pause: the throttle is passed on, not
        // retried, and the next request is refused, not held.
        c.budget.max_hold_secs = 0.5;
        pin(c, "shop.test", 80);
        pin(c, "www.direct.test", pd);
    })
    .await;
    let c = proxy.client();

    let r = c.get("http://shop.test/ok").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(decision(&r), "fetched; waited_ms=0");

    // The provider's 200 carries the target's 429: the target is paused.
    let r = c.get("http://shop.test/limited").send().await.unwrap();
    assert_eq!(r.status(), 200, "the provider's answer is passed on");
    assert!(decision(&r).starts_with("throttled"), "{}", decision(&r));
    let r = c.get("http://shop.test/next").send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert!(decision(&r).starts_with("paused"), "{}", decision(&r));
    let ra: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // Whole seconds, rounded up from the budget's millisecond clock.
    assert!((1..=3).contains(&ra), "{ra}");
    assert_eq!(provider.seen.count("/next"), 0, "held away from the target");

    // no_proxy: reached directly, without the parent's credentials.
    let r = c
        .get(format!("http://www.direct.test:{pd}/here"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "page /here");
    assert_eq!(direct.seen.count("/here"), 1);
    assert!(direct
        .seen
        .all()
        .iter()
        .all(|r| !r.headers.contains_key("proxy-authorization")));

    // The credentials went to the parent, in Proxy-Authorization only.
    let seen = provider.seen.all();
    assert!(!seen.is_empty());
    for r in &seen {
        // base64("crawler:s3cret-pw")
        assert_eq!(
            r.headers["proxy-authorization"], "Basic Y3Jhd2xlcjpzM2NyZXQtcHc=",
            "{r:?}"
        );
    }

    let lines = proxy.stop().await;
    let throttled = with_outcome(&lines, "throttled");
    assert_eq!(throttled.len(), 1);
    assert_eq!(throttled[0]["status"], 200);
    assert_eq!(throttled[0]["target_status"], 429);
    assert_eq!(throttled[0]["retry_after"], "2");
    assert_eq!(throttled[0]["pause_s"], 2.0);
    assert_eq!(throttled[0]["host"], "shop.test");
    let ok = lines
        .iter()
        .find(|l| l["url"] == "http://shop.test/ok")
        .unwrap();
    assert_eq!(ok["target_status"], 200);
    // A line without a parent keeps its old shape.
    let here = lines
        .iter()
        .find(|l| l["url"].as_str().is_some_and(|u| u.ends_with("/here")))
        .unwrap();
    assert!(here.get("target_status").is_none(), "{here}");
    let raw = std::fs::read_to_string(&proxy.audit_path).unwrap();
    assert!(!raw.contains("s3cret-pw") && !raw.contains("Y3Jhd2xlcjpzM2NyZXQtcHc"));
}

#[tokio::test]
async fn a_parent_answering_407_is_the_parents_error_and_the_target_learns_nothing() {
    let refusing = Arc::new(AtomicBool::new(true));
    let r2 = refusing.clone();
    let parent = Origin::http(handler(move |req| {
        let refusing = r2.load(Ordering::SeqCst);
        async move {
            if refusing {
                let mut r = text(407, "who are you");
                r.headers_mut().insert(
                    "proxy-authenticate",
                    "Basic realm=\"egress\"".parse().unwrap(),
                );
                return r;
            }
            match req.uri().path() {
                "/robots.txt" => text(404, ""),
                p => text(200, format!("page {p}")),
            }
        }
    }))
    .await;
    let pp = parent.port();
    let mut proxy = TestProxy::start(move |c| {
        c.upstream.proxy = format!("http://crawler:wrong@127.0.0.1:{pp}");
        pin(c, "site.test", 80);
        pin(c, "site.test", 443);
    })
    .await;
    let c = proxy.client();

    // Refused already for robots.txt: the request is answered as the
    // parent's error, not as the site's rules being unknown.
    let r = c.get("http://site.test/page").send().await.unwrap();
    assert_eq!(r.status(), 502);
    let d = decision(&r);
    assert!(d.starts_with("error") && d.contains("407"), "{d}");
    assert!(r.text().await.unwrap().contains("upstream.proxy"));
    // A request that needs no robots.txt meets the parent's 407 itself.
    let r = c.get("http://site.test/robots.txt").send().await.unwrap();
    assert_eq!(r.status(), 502);
    assert!(decision(&r).contains("407"), "{}", decision(&r));

    // HTTPS: the parent refuses the CONNECT itself.
    let r = c.get("https://site.test/page").send().await.unwrap();
    assert_eq!(r.status(), 502);
    let d = decision(&r);
    assert!(d.contains("CONNECT") && d.contains("407"), "{d}");

    // Once the parent lets us through, the target is not paused: the 407s
    // were not the target's.
    refusing.store(false, Ordering::SeqCst);
    // The failed robots.txt fetch is retried after its backoff (0.2-0.4 s
    // in tests); until then requests are answered robots_unavailable.
    let mut last = String::new();
    for _ in 0..50 {
        let r = c.get("http://site.test/page").send().await.unwrap();
        last = decision(&r);
        if r.status() == 200 {
            break;
        }
        assert!(last.starts_with("robots_unavailable"), "{last}");
        // A poll interval: the 200 is what is waited on.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last, "fetched; waited_ms=0");

    let lines = proxy.stop().await;
    let parent_lines: Vec<_> = lines.iter().filter(|l| l["source"] == "parent").collect();
    assert!(parent_lines.len() >= 3, "{parent_lines:?}");
    for l in &parent_lines {
        assert_eq!(l["host"], "site.test");
        assert!(l["pause_s"].is_null() && l["rate"].is_null(), "{l}");
        assert!(l["reason"].as_str().unwrap().contains("407"), "{l}");
    }
    assert!(with_outcome(&lines, "paused").is_empty());
    assert!(with_outcome(&lines, "throttled").is_empty());
}

#[tokio::test]
async fn the_guard_still_judges_the_target_and_allows_the_named_parent() {
    let parent = Origin::http(handler(|req| async move {
        match req.uri().path() {
            "/robots.txt" => text(404, ""),
            _ => text(200, format!("via parent: {}", req.uri())),
        }
    }))
    .await;
    let pp = parent.port();
    let mut proxy = TestProxy::start(move |c| {
        // Loopback targets are refused; the parent on loopback is allowed
        // because it is named in upstream.proxy.
        c.upstream.allow_private = false;
        c.upstream.proxy = format!("http://127.0.0.1:{pp}");
        // Never connected to: the parent answers for it.
        c.upstream
            .resolve
            .insert("public.test:80".into(), "8.8.8.8:80".parse().unwrap());
        c.upstream
            .resolve
            .insert("inside.test:80".into(), "127.0.0.1:80".parse().unwrap());
    })
    .await;
    let c = proxy.client();
    let r = c.get("http://public.test/p").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "via parent: http://public.test/p");

    for url in [
        "http://inside.test/secret",
        "http://10.0.0.1/secret",
        "http://169.254.169.254/latest/meta-data/",
    ] {
        let r = c.get(url).send().await.unwrap();
        assert_eq!(r.status(), 403, "{url}");
        assert!(
            decision(&r).starts_with("blocked"),
            "{url}: {}",
            decision(&r)
        );
    }
    assert!(
        parent
            .seen
            .all()
            .iter()
            .all(|r| r.path != "/secret" && !r.path.starts_with("/latest")),
        "nothing blocked reached the parent"
    );
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "blocked").len(), 3);
}

#[tokio::test]
async fn a_parent_spoken_to_over_tls_carries_plain_http_targets() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let parent = Origin::https(
        handler(|req| async move {
            match req.uri().path() {
                "/robots.txt" => text(404, ""),
                _ => text(200, format!("over TLS: {} {:?}", req.uri(), req.version())),
            }
        }),
        &ca,
        &["egress.test"],
    )
    .await;
    let pp = parent.port();
    let roots = ca.pem_path.clone();
    let mut proxy = TestProxy::start(move |c| {
        c.upstream.proxy = format!("https://user:pw@egress.test:{pp}");
        c.upstream.extra_roots = vec![roots];
        pin(c, "egress.test", pp);
        pin(c, "plain.test", 80);
    })
    .await;
    let r = proxy
        .client()
        .get("http://plain.test/x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.text().await.unwrap(),
        "over TLS: http://plain.test/x HTTP/1.1"
    );
    assert!(parent
        .seen
        .all()
        .iter()
        .all(|r| r.headers["proxy-authorization"] == "Basic dXNlcjpwdw=="));
    let lines = proxy.stop().await;
    assert_eq!(with_outcome(&lines, "fetched").len(), 1);
}
