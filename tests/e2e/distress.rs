//! A site that struggles without saying 429 (cbcp-01 §3): pages that never
//! answer, and a storm of 503s without Retry-After. The host is paused,
//! its clients are told so at once, and crawling resumes after.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::support::*;

/// Arrival times of page requests (robots.txt left out), from the origin's
/// start.
#[derive(Default)]
struct Arrivals(Mutex<Vec<Duration>>);

impl Arrivals {
    fn pages(&self) -> Vec<Duration> {
        self.0.lock().unwrap().clone()
    }
}

/// An origin whose robots.txt is 404 and whose pages `page(elapsed)`
/// answers, noting when each page request arrived.
fn origin<F, Fut>(page: F) -> (Arc<Arrivals>, Handler)
where
    F: Fn(Duration) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = hyper::Response<OriginBody>> + Send + 'static,
{
    let arrivals = Arc::new(Arrivals::default());
    let start = Instant::now();
    let seen = arrivals.clone();
    let h = handler(move |req| {
        let (seen, page) = (seen.clone(), page.clone());
        async move {
            if req.uri().path() == "/robots.txt" {
                return text(404, "");
            }
            let at = start.elapsed();
            seen.0.lock().unwrap().push(at);
            page(at).await
        }
    });
    (arrivals, h)
}

/// The budget with its documented defaults (the test config keeps budgets
/// out of the way).
fn default_budget(c: &mut mannerly_proxy::Config) {
    c.budget = Default::default();
}

#[tokio::test]
async fn pages_that_never_answer_pause_the_host_and_its_clients_are_answered_at_once() {
    let (arrivals, h) = origin(|_| async {
        // An origin that never answers in time, on purpose.
        tokio::time::sleep(Duration::from_secs(60)).await;
        text(200, "too late")
    });
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|c| {
        default_budget(c);
        c.upstream.first_byte_timeout = Duration::from_secs(2);
        // Long enough that the second half of the test meets the pause.
        c.budget.distress_backoff_base_secs = 10.0;
    })
    .await;
    let c = proxy.client();
    let url = |i: usize| format!("http://127.0.0.1:{}/p{i}", origin.port());

    // Six at once: two in flight time out, and the host is paused.
    let first: Vec<_> = (0..6)
        .map(|i| {
            let (c, u) = (c.clone(), url(i));
            tokio::spawn(async move {
                let r = c.get(u).send().await.unwrap();
                (r.status().as_u16(), decision(&r))
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in first {
        answers.push(t.await.unwrap());
    }
    assert!(
        answers
            .iter()
            .any(|(s, d)| *s == 503 && d.starts_with("distressed")),
        "{answers:?}"
    );

    // Six more, one by one: each is told at once, not after a timeout.
    for i in 6..12 {
        let asked = Instant::now();
        let r = c.get(url(i)).send().await.unwrap();
        let took = asked.elapsed();
        assert_eq!(r.status().as_u16(), 503, "request {i}");
        assert!(decision(&r).starts_with("distressed"), "{}", decision(&r));
        let header = r.headers()["mannerly-decision"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(header.contains("distress=first_byte_timeout"), "{header}");
        let retry: u64 = r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=10).contains(&retry), "Retry-After {retry}");
        assert!(
            took < Duration::from_millis(1500),
            "request {i} took {took:?}"
        );
    }

    let sent = arrivals.pages().len();
    assert!(sent <= 5, "{sent} of 12 requests reached the origin");
    let lines = proxy.stop().await;
    let timeouts = lines
        .iter()
        .filter(|l| l["distress"] == "first_byte_timeout" && l["status"] == 504)
        .count();
    assert!(timeouts >= 2, "the timeouts are on the record");
    let paused = with_outcome(&lines, "distressed");
    assert!(paused.len() >= 6, "{} distressed lines", paused.len());
    assert!(paused.iter().all(|l| l["distress"] == "first_byte_timeout"));

    // The conduct report shows it beside the 429s.
    let (code, out) = mannerly(&["report", proxy.audit_path.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}");
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("127.0.0.1") && l.split_whitespace().count() == 6)
        .unwrap_or_else(|| panic!("no distress row in {out}"))
        .split_whitespace()
        .collect();
    // HOST TIMEOUTS 5xx SLOW AT-ONCE COLLAPSED
    assert_eq!(row[1], timeouts.to_string(), "{out}");
    assert_eq!(row[4], paused.len().to_string(), "{out}");
}

#[tokio::test]
async fn a_storm_of_503s_without_retry_after_is_waited_out_and_crawling_resumes() {
    const STORM: Duration = Duration::from_secs(15);
    let (arrivals, h) = origin(|at| async move {
        if at < STORM {
            text(503, "busy")
        } else {
            text(200, "page")
        }
    });
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|c| {
        default_budget(c);
        c.admin.listen = "127.0.0.1:0".into();
    })
    .await;
    let c = proxy.client();
    let started = Instant::now();

    // A crawler asking twice a second, each request on its own; 40 more
    // once the storm is over.
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut during = Vec::new();
    let mut after = Vec::new();
    let mut i = 0;
    while after.len() < 40 {
        tick.tick().await;
        let (c, u) = (
            c.clone(),
            format!("http://127.0.0.1:{}/p{i}", origin.port()),
        );
        i += 1;
        let task = tokio::spawn(async move {
            let r = c.get(u).send().await.unwrap();
            (r.status().as_u16(), decision(&r))
        });
        if started.elapsed() < STORM + Duration::from_millis(500) {
            during.push(task);
        } else {
            after.push(task);
        }
    }
    for t in during {
        let (status, d) = t.await.unwrap();
        assert!(status == 503 || status == 200, "{status} {d}");
    }
    let mut delivered = 0;
    for t in after {
        if t.await.unwrap().0 == 200 {
            delivered += 1;
        }
    }
    let in_storm = arrivals.pages().iter().filter(|&&a| a < STORM).count();
    eprintln!(
        "503 storm: {in_storm} requests reached the origin during the storm; {delivered} of 40 delivered after"
    );
    assert!(
        in_storm <= 8,
        "{in_storm} requests reached the origin during the storm"
    );
    assert!(
        delivered >= 10,
        "{delivered} of 40 delivered after the storm"
    );
    let lines = proxy.stop().await;
    assert!(lines
        .iter()
        .any(|l| l["distress"] == "503" && l["pause_s"].is_number()));
    assert!(!with_outcome(&lines, "distressed").is_empty());
}

/// Requests/s the origin received in the last second before `at`.
fn rate_before(arrivals: &[Duration], at: Duration) -> usize {
    let from = at.saturating_sub(Duration::from_secs(1));
    arrivals.iter().filter(|&&a| a > from && a <= at).count()
}

#[tokio::test]
async fn an_origin_that_slows_under_load_is_paced_where_it_stays_quick() {
    const RUN: Duration = Duration::from_secs(20);
    // 50 ms up to 5 requests/s, then 300 ms more for each request/s above.
    let arrivals = Arc::new(Arrivals::default());
    let start = Instant::now();
    let seen = arrivals.clone();
    let h = handler(move |req| {
        let seen = seen.clone();
        async move {
            if req.uri().path() == "/robots.txt" {
                return text(404, "");
            }
            let at = start.elapsed();
            let rate = {
                let mut a = seen.0.lock().unwrap();
                a.push(at);
                rate_before(&a, at)
            };
            let over = rate.saturating_sub(5) as u64;
            // The origin slows as the pace rises, on purpose.
            tokio::time::sleep(Duration::from_millis(50 + 300 * over)).await;
            text(200, "page")
        }
    });
    let origin = Origin::http(h).await;
    let mut proxy = TestProxy::start(|c| {
        default_budget(c);
        c.budget.start_rate = 8.0;
    })
    .await;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Eight workers that ask for the next page as soon as they have an
    // answer, whatever it was.
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let c = proxy.client();
            let (next, port) = (next.clone(), origin.port());
            tokio::spawn(async move {
                while start.elapsed() < RUN {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let _ = c.get(format!("http://127.0.0.1:{port}/p{i}")).send().await;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let pages = arrivals.pages();
    let settled = pages
        .iter()
        .filter(|&&a| a >= RUN - Duration::from_secs(5) && a < RUN)
        .count() as f64
        / 5.0;
    let per_second: Vec<usize> = (1..=20)
        .map(|s| rate_before(&pages, Duration::from_secs(s)))
        .collect();
    eprintln!("slowing origin: pace per second {per_second:?}; last 5 s {settled:.1}/s");
    assert!(
        (3.0..=6.5).contains(&settled),
        "the pace settled at {settled:.1}/s: {per_second:?}"
    );
    let lines = proxy.stop().await;
    let slow = lines.iter().filter(|l| l["distress"] == "slow").count();
    assert!(slow >= 1, "the slowdown is on the record");
    assert!(lines
        .iter()
        .any(|l| l["baseline_ms"].as_u64().is_some_and(|b| b < 200)));
}
