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

/// [`static_files`]: a robots.txt refusing `/private/`, and `/page.html`.
fn private_and_a_page(ca: &TestCa, dir: &std::path::Path) -> Option<Nginx> {
    let robots = "User-agent: *\nDisallow: /private/\n";
    let files = [("robots.txt", robots), ("page.html", "a page\n")];
    static_files(ca, dir, &files, "")
}

/// The rules kept still refuse `/private/`.
async fn private_is_refused(client: &reqwest::Client, base: &str) {
    let r = client
        .get(format!("{base}/private/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(decision(&r).starts_with("disallowed"), "{}", decision(&r));
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
    let Some(nginx) = private_and_a_page(&ca, dir.path()) else {
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
    private_is_refused(&client, &base).await;

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

/// Two proxies sharing state through a real redis-server: A fetches
/// robots.txt, B takes A's copy; once its age has run out, B's fetch is
/// conditional on the validators of A's answer (B never fetched it), nginx
/// answers 304 (its access log counts one 200 and the 304s), and A goes on
/// with the copy B revalidated without asking nginx itself.
#[tokio::test]
async fn a_clusters_shared_robots_txt_is_revalidated_and_nginx_answers_304() {
    use mannerly_proxy::StateBackend;
    let Some(redis) = super::redis_server::RedisServer::start(
        "a_clusters_shared_robots_txt_is_revalidated_and_nginx_answers_304",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let Some(nginx) = private_and_a_page(&ca, dir.path()) else {
        return;
    };
    let port = nginx.port;
    let config = |c: &mut mannerly_proxy::Config| {
        to_origin_test(c, ca.pem_path.clone(), port);
        c.state.backend = StateBackend::Redis;
        c.state.redis_url = redis.url();
        c.state.key_prefix = String::from("e2e-robots:");
        // A loaded test machine must not look like an unreachable Redis.
        c.state.command_timeout_ms = 500.0;
        c.robots.max_age_secs = 2.0;
    };
    let a = TestProxy::start(config).await;
    let b = TestProxy::start(config).await;
    let base = format!("https://origin.test:{port}");
    let page = format!("{base}/page.html");
    let (ca_client, cb_client) = (a.client(), b.client());
    let r = ca_client.get(&page).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", nginx.error_log());
    let r = cb_client.get(&page).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(robots_fetches(&a).len(), 1);
    assert_eq!(robots_fetches(&b).len(), 0, "B took A's copy");
    // Pages through B until the copy's age has run out and B fetched.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while robots_fetches(&b).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no second fetch");
        let r = cb_client.get(&page).send().await.unwrap();
        assert_eq!(r.status(), 200, "{}", nginx.error_log());
    }
    let fetched = robots_fetches(&b);
    assert_eq!(fetched[0]["status"], 304, "{fetched:?}");
    assert_eq!(fetched[0]["cache"], "revalidated", "{fetched:?}");
    // A uses the copy B revalidated (its own has expired): no fetch of its own.
    private_is_refused(&ca_client, &base).await;
    assert_eq!(robots_fetches(&a).len(), 1, "A fetched again");

    let log = nginx.access_log_with("\"GET /robots.txt HTTP/2.0\" 304", 1);
    let fetches = log.matches("GET /robots.txt").count();
    assert_eq!(
        log.matches("\"GET /robots.txt HTTP/2.0\" 200").count(),
        1,
        "{log}"
    );
    assert_eq!(
        log.matches("\"GET /robots.txt HTTP/2.0\" 304").count(),
        fetches - 1,
        "{log}"
    );
}

const AGENTS_ROBOTS: &str = "User-agent: ExampleBot\nAllow: /\n\n\
    User-agent: ExampleBot-AI\nUser-agent: __ns_ai\nDisallow: /members/\n\n\
    User-agent: *\nAllow: /\n";

const META_PAGE: &str = "<!doctype html><html><head><title>t</title>\n\
    <meta name=\"robots\" content=\"noai\">\n</head><body>a page that says noai</body></html>\n";

/// A crawl that searches as ExampleBot and trains as ExampleBot-AI.
fn two_identities(c: &mut mannerly_proxy::Config) {
    use mannerly_policy::robots::agents::Agent;
    use mannerly_policy::robots::Purpose;
    c.crawler.agents = vec![
        Agent::new("ExampleBot", &[Purpose::Search]),
        Agent::new("ExampleBot-AI", &[Purpose::AiTrain]),
    ];
}

/// nginx's `add_header X-Robots-Tag` and a page's `<meta name="robots"
/// content="noai">`, judged per purpose and per agent token: the training
/// identity's pages are withheld, the search identity gets them with
/// `noindex`/`nofollow` told in the decision header, robots.txt binds each
/// token by its own group, and a client naming neither goes only where both
/// may. Each decision is on the audit line.
#[tokio::test]
async fn page_directives_and_agent_tokens_against_nginx() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let long_head = format!(
        "<html><head>{}<meta name=\"robots\" content=\"noai\"></head><body>late</body></html>",
        "<!-- padding -->".repeat(1200)
    );
    let files = [
        ("robots.txt", AGENTS_ROBOTS),
        ("meta.html", META_PAGE),
        ("long.html", long_head.as_str()),
        ("tagged.html", "<html><body>tagged</body></html>"),
        ("scoped.html", "<html><body>scoped</body></html>"),
    ];
    let www = dir.path().join("www");
    std::fs::create_dir_all(www.join("members")).unwrap();
    std::fs::write(www.join("members/x.html"), "members").unwrap();
    let directives = r#"default_type text/html;
      location = /tagged.html { add_header X-Robots-Tag "noai"; }
      location = /scoped.html {
        add_header X-Robots-Tag "examplebot: noindex, nofollow";
        add_header X-Robots-Tag "examplebot-ai: noai";
      }"#;
    let Some(nginx) = static_files(&ca, dir.path(), &files, directives) else {
        return;
    };
    let port = nginx.port;
    let ca_path = ca.pem_path.clone();
    let mut proxy = TestProxy::start(|c| {
        to_origin_test(c, ca_path, port);
        two_identities(c);
    })
    .await;
    let client = proxy.client();
    let base = format!("https://origin.test:{port}");
    let get = |path: &str, ua: &str| {
        client
            .get(format!("{base}{path}"))
            .header("user-agent", ua)
            .send()
    };
    let (search, train) = (
        "ExampleBot/1.0 (+https://example.test)",
        "ExampleBot-AI/1.0",
    );

    // X-Robots-Tag: noai. Withheld from training, given to search.
    let r = get("/tagged.html", train).await.unwrap();
    assert_eq!(r.status(), 403, "{}", nginx.error_log());
    let d = decision(&r);
    assert!(
        d.starts_with("signal_refused") && d.contains("purpose=ai-train"),
        "{d}"
    );
    let body = r.text().await.unwrap();
    assert!(body.contains("header x-robots-tag: noai"), "{body}");
    let r = get("/tagged.html", search).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        decision(&r).contains("agent=ExampleBot;"),
        "{}",
        decision(&r)
    );
    assert_eq!(r.text().await.unwrap(), "<html><body>tagged</body></html>");

    // <meta name="robots" content="noai"> in the head: the same, and the
    // page read ahead reaches the search client whole.
    let r = get("/meta.html", train).await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(
        decision(&r).starts_with("signal_refused"),
        "{}",
        decision(&r)
    );
    let r = get("/meta.html", search).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), META_PAGE);

    // Per-agent fields: noindex/nofollow told to ExampleBot, noai binds
    // ExampleBot-AI only.
    let r = get("/scoped.html", search).await.unwrap();
    assert_eq!(r.status(), 200);
    let d = decision(&r);
    assert!(d.contains("robots=\"noindex,nofollow\""), "{d}");
    let r = get("/scoped.html", train).await.unwrap();
    assert_eq!(r.status(), 403, "{}", decision(&r));

    // A <meta> past the prefix read is not heard, and the line says why.
    let r = get("/long.html", train).await.unwrap();
    assert_eq!(r.status(), 200, "{}", decision(&r));
    assert_eq!(r.text().await.unwrap(), long_head);

    // robots.txt: each token by its own group; a client naming neither
    // speaks for both, and the refusal names the token that bound it.
    let r = get("/members/x.html", train).await.unwrap();
    assert_eq!(r.status(), 403);
    let d = decision(&r);
    assert!(
        d.starts_with("disallowed") && d.contains("agent=ExampleBot-AI"),
        "{d}"
    );
    assert!(d.contains("group=ExampleBot-AI"), "{d}");
    let r = get("/members/x.html", search).await.unwrap();
    assert_eq!(r.status(), 200);
    let r = get("/members/x.html", "curl/8.0").await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(
        decision(&r).contains("agent=ExampleBot-AI"),
        "{}",
        decision(&r)
    );

    let log = nginx.access_log_with("GET /members/x.html", 1);
    assert_eq!(log.matches("GET /members/x.html").count(), 1, "{log}");
    let lines = proxy.stop().await;
    let line = |path: &str, ua: &str| {
        lines
            .iter()
            .find(|l| {
                l["url"].as_str().is_some_and(|u| u.ends_with(path))
                    && l["agent"] == ua.split('/').next().unwrap()
            })
            .unwrap_or_else(|| panic!("no line for {path} as {ua}"))
            .clone()
    };
    let meta = line("/meta.html", train);
    assert_eq!(meta["outcome"], "signal_refused", "{meta}");
    let source = meta["prefs"]["sources"][0].as_str().unwrap();
    assert!(
        source.starts_with("<meta> at byte ") && source.ends_with(": noai"),
        "{meta}"
    );
    assert_eq!(meta["prefs"]["ai-train"], "disallowed", "{meta}");
    let scoped = line("/scoped.html", search);
    assert_eq!(scoped["outcome"], "fetched", "{scoped}");
    assert_eq!(
        scoped["prefs"]["directives"],
        serde_json::json!(["noindex", "nofollow"])
    );
    let long = line("/long.html", train);
    assert_eq!(long["outcome"], "fetched", "{long}");
    let why = long["prefs"]["ignored"][0].as_str().unwrap_or("");
    assert!(why.contains("not read"), "{long}");

    // The conduct report counts the pages each directive marked.
    let json = dir.path().join("report.json");
    let log = proxy.audit_path.to_str().unwrap();
    let (code, out) = mannerly(&["report", log, "--json", json.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let host = report["hosts"]
        .as_array()
        .and_then(|h| h.iter().find(|h| h["host"] == "origin.test"))
        .unwrap_or_else(|| panic!("{report}"));
    let marked = |d: &str| {
        host["robots"]["directives"]
            .as_array()
            .and_then(|a| a.iter().find(|b| b["directive"] == d))
            .map_or(0, |b| b["count"].as_u64().unwrap())
    };
    // noai: tagged.html and meta.html for each token, scoped.html for
    // ExampleBot-AI; noindex and nofollow: scoped.html for ExampleBot.
    let counts = (marked("noai"), marked("noindex"), marked("nofollow"));
    assert_eq!(counts, (5, 1, 1), "{host}");
    assert_eq!(host["robots"]["directives_ignored"]["count"], 1, "{host}");
}

/// `HHMM` of the UTC wall clock moved by `minutes`.
fn hhmm(minutes: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let m = (now / 60 + minutes).rem_euclid(24 * 60);
    format!("{:02}{:02}", m / 60, m % 60)
}

/// An origin whose robots.txt is `robots`, its pages plain text.
async fn origin_with_robots(robots: String) -> Origin {
    Origin::http(handler(move |req| {
        let robots = robots.clone();
        async move {
            match req.uri().path() {
                "/robots.txt" => text(200, robots),
                p => text(200, format!("page {p}")),
            }
        }
    }))
    .await
}

/// What the client got for one page, and what the origin and the log saw.
struct Seen {
    status: u16,
    decision: String,
    retry_after: Option<u64>,
    body: String,
    origin: Origin,
    lines: Vec<serde_json::Value>,
}

/// One GET of `/page` through a proxy configured by `edit`, to an origin
/// whose robots.txt is `robots`.
async fn one_page(robots: String, edit: impl FnOnce(&mut mannerly_proxy::Config)) -> Seen {
    let origin = origin_with_robots(robots).await;
    let mut proxy = TestProxy::start(edit).await;
    let url = format!("http://127.0.0.1:{}/page", origin.port());
    let r = proxy.client().get(&url).send().await.unwrap();
    let retry_after = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    Seen {
        status: r.status().as_u16(),
        decision: decision(&r),
        retry_after,
        body: r.text().await.unwrap(),
        lines: proxy.stop().await,
        origin,
    }
}

/// `HH:MM` of an `HHMM`.
fn colon(hhmm: &str) -> String {
    format!("{}:{}", &hhmm[..2], &hhmm[2..])
}

/// robots.txt `Visit-time` (UTC) and `Request-rate`, and the operator's
/// quiet hours: outside the window, a request is answered 503 `paced` with
/// Retry-After to the window's start and never reaches the origin (nor, in
/// quiet hours, does its robots.txt fetch); inside,
/// it goes, paced by the rate; every line names its source.
#[tokio::test]
async fn visit_time_request_rate_and_quiet_hours_decide_when_a_host_is_visited() {
    // Closed: the window starts in two hours.
    let closed = format!(
        "User-agent: *\nVisit-time: {}-{}\nDisallow: /private/\n",
        hhmm(120),
        hhmm(180)
    );
    let seen = one_page(closed, |_| {}).await;
    assert_eq!(seen.status, 503);
    assert!(seen.decision.starts_with("paced"), "{}", seen.decision);
    let wait = seen.retry_after.unwrap();
    assert!((120 * 60 - 60..=120 * 60).contains(&wait), "{wait}");
    assert!(
        seen.body.contains("robots.txt line 2: Visit-time:"),
        "{}",
        seen.body
    );
    assert_eq!(seen.origin.seen.count("/page"), 0);
    let refused = with_outcome(&seen.lines, "paced");
    assert_eq!(refused.len(), 1, "{:?}", seen.lines);
    let reason = refused[0]["reason"].as_str().unwrap();
    assert!(reason.contains("Visit-time"), "{reason}");

    // Open: the window holds now; Request-rate paces the host.
    let open = format!(
        "User-agent: *\nVisit-time: {}-{}\nRequest-rate: 1/2\nDisallow: /private/\n",
        hhmm(-60),
        hhmm(60)
    );
    let seen = one_page(open, |_| {}).await;
    assert_eq!(seen.status, 200, "{}", seen.decision);
    assert_eq!(seen.origin.seen.count("/page"), 1);
    let fetched = with_outcome(&seen.lines, "fetched");
    let rule = fetched[0]["rule"].as_str().unwrap();
    assert!(
        rule.ends_with("paced by robots.txt line 3: Request-rate: 1/2"),
        "{rule}"
    );

    // Quiet hours for this host, now: the same answer, naming the key.
    let (from, to) = (colon(&hhmm(-60)), colon(&hhmm(60)));
    let seen = one_page("User-agent: *\nDisallow:\n".into(), |c| {
        c.budget.quiet_hours = vec![mannerly_policy::visit::QuietHours {
            hosts: vec!["127.0.0.1".into()],
            from,
            to,
        }];
    })
    .await;
    assert_eq!(seen.status, 503);
    let wait = seen.retry_after.unwrap();
    assert!((60 * 60 - 60..=60 * 60).contains(&wait), "{wait}");
    let key = "quiet hours of budget.quiet_hours[0]";
    assert!(seen.body.contains(key), "{}", seen.body);
    assert_eq!(seen.origin.seen.count("/page"), 0);
    // Nor robots.txt: its fetch is a request to the host like the page.
    assert_eq!(seen.origin.seen.count("/robots.txt"), 0);
    assert_eq!(with_outcome(&seen.lines, "robots_fetched").len(), 0);
}

/// `mannerly robots check` says what a group's Visit-time and Request-rate
/// are, and which lines it could not read.
#[test]
fn robots_check_shows_visit_times_rates_and_what_it_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("robots.txt");
    let body =
        "User-agent: *\nVisit-time: 0600-0845\nRequest-rate: 1/10m\nVisit-time: 99\nDisallow: /x\n";
    std::fs::write(&file, body).unwrap();
    let args = [
        "robots",
        "check",
        "--robots-file",
        file.to_str().unwrap(),
        "--agent",
        "MyBot",
        "/page",
    ];
    let (code, out) = mannerly(&args, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "request-rate: one request per 600 s (robots.txt line 3: Request-rate: 1/10m)"
        ),
        "{out}"
    );
    assert!(
        out.contains("visit-time: 06:00-08:45 UTC (robots.txt line 2: Visit-time: 0600-0845)"),
        "{out}"
    );
    assert!(
        out.contains("ignored: robots.txt line 4: Visit-time: 99: no HHMM-HHMM window"),
        "{out}"
    );
}
