//! One request per resource at a time: identical GETs in flight together
//! reach the origin once, and every client gets the page and a line.

use super::support::*;

#[tokio::test]
async fn ten_identical_gets_of_a_slow_page_reach_the_origin_once() {
    let origin = Origin::http(ok_origin()).await;
    let mut proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    // Robots.txt first, so that the ten meet at the page, not behind it.
    get_ok(&c, &format!("http://127.0.0.1:{}/warm", origin.port())).await;
    let url = format!("http://127.0.0.1:{}/slow?1500", origin.port());
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (c, url) = (c.clone(), url.clone());
            tokio::spawn(async move {
                let r = c.get(url).send().await.unwrap();
                let (status, d) = (r.status().as_u16(), decision(&r));
                (status, d, r.text().await.unwrap())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    let ok = answers
        .iter()
        .filter(|(s, _, body)| *s == 200 && body == "page")
        .count();
    assert_eq!(ok, 10, "{answers:?}");
    let reached = origin.seen.count("/slow?1500");
    assert!(reached <= 2, "{reached} of 10 reached the origin");
    assert!(answers.iter().any(|(_, d, _)| d.starts_with("collapsed")));

    let lines = proxy.stop().await;
    let slow: Vec<_> = lines
        .iter()
        .filter(|l| l["url"].as_str().is_some_and(|u| u.ends_with("/slow?1500")))
        .collect();
    assert_eq!(slow.len(), 10, "one line per client");
    let collapsed = with_outcome(&lines, "collapsed");
    assert_eq!(collapsed.len(), 10 - reached);
    let fetched: Vec<_> = slow.iter().filter(|l| l["outcome"] == "fetched").collect();
    for l in &collapsed {
        assert!(
            fetched.iter().any(|f| f["id"] == l["collapsed_into"]),
            "{l}"
        );
        assert_eq!(l["status"], 200);
    }
}

#[tokio::test]
async fn private_requests_are_never_collapsed() {
    let origin = Origin::http(ok_origin()).await;
    let proxy = TestProxy::start(|_| {}).await;
    let c = proxy.client();
    get_ok(&c, &format!("http://127.0.0.1:{}/warm", origin.port())).await;
    let url = format!("http://127.0.0.1:{}/slow?500", origin.port());
    let tasks: Vec<_> = (0..3)
        .map(|i| {
            let (c, url) = (c.clone(), url.clone());
            tokio::spawn(async move {
                let r = c
                    .get(url)
                    .header("cookie", format!("session={i}"))
                    .send()
                    .await;
                r.unwrap().status().as_u16()
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert_eq!(origin.seen.count("/slow?500"), 3);
}
