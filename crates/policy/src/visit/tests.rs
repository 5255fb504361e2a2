use super::*;
use crate::robots::Robots;

/// 2026-12-06 at `h:m:s` UTC.
fn at(h: u64, m: u64, s: u64) -> SystemTime {
    // 2026-12-06T00:00:00Z
    UNIX_EPOCH + Duration::from_secs(1_796_515_200 + h * 3600 + m * 60 + s)
}

const FILE: &str = "User-agent: *\nVisit-time: 0600-0845\nRequest-rate: 1/5\nRequest-rate: 2/1m\nDisallow: /x\n\n\
    User-agent: NightBot\nVisit-time: 2200-0200\nVisit-time: 25:00-26:00\nRequest-rate: 1/10m 0800-1000\n";

#[test]
fn windows_and_rates_are_read_from_their_groups() {
    let robots = Robots::parse(FILE.as_bytes());
    let star = robots.visit_times(["bot"]);
    assert_eq!(star.len(), 1);
    assert_eq!(
        star[0][0].window,
        Window {
            start: 360,
            end: 525
        }
    );
    assert_eq!(
        star[0][0].source,
        "robots.txt line 2: Visit-time: 0600-0845"
    );
    // Of 1/5 s and 2/min, the slower.
    assert_eq!(
        robots.request_interval(["bot"]),
        Some((30.0, "robots.txt line 4: Request-rate: 2/1m"))
    );
    assert_eq!(
        robots.request_interval(["NightBot"]).map(|r| r.0),
        Some(600.0)
    );
    assert_eq!(robots.visit_times(["NightBot"])[0].len(), 1);
    assert_eq!(
        robots.ignored(),
        ["robots.txt line 9: Visit-time: 25:00-26:00: no HHMM-HHMM window"]
    );
}

#[test]
fn outside_the_window_the_wait_runs_to_its_start() {
    let robots = Robots::parse(FILE.as_bytes());
    let visit = robots.visit_times(["bot"]);
    assert_eq!(judge(&visit, &[], at(6, 0, 0)), Visit::Open);
    assert_eq!(judge(&visit, &[], at(8, 44, 59)), Visit::Open);
    match judge(&visit, &[], at(8, 45, 0)) {
        Visit::Closed { opens_in, why } => {
            // 08:45 to 06:00 the next day.
            assert_eq!(opens_in, Duration::from_secs(21 * 3600 + 15 * 60));
            assert_eq!(
                why,
                "outside robots.txt line 2: Visit-time: 0600-0845 (06:00-08:45 UTC)"
            );
        }
        Visit::Open => panic!("08:45 is outside"),
    }
    match judge(&visit, &[], at(5, 59, 30)) {
        Visit::Closed { opens_in, .. } => assert_eq!(opens_in, Duration::from_secs(30)),
        Visit::Open => panic!("05:59 is outside"),
    }
    // Over midnight.
    let night = robots.visit_times(["NightBot"]);
    assert_eq!(judge(&night, &[], at(23, 0, 0)), Visit::Open);
    assert_eq!(judge(&night, &[], at(1, 59, 0)), Visit::Open);
    assert!(matches!(
        judge(&night, &[], at(2, 0, 0)),
        Visit::Closed { .. }
    ));
    // Two identities: open only where both are.
    let both = robots.visit_times(["bot", "NightBot"]);
    match judge(&both, &[], at(23, 0, 0)) {
        Visit::Closed { opens_in, why } => {
            assert_eq!(opens_in, Duration::from_secs(24 * 3600));
            assert!(why.ends_with("no minute of the day is open"), "{why}");
        }
        Visit::Open => panic!("never open for both"),
    }
}

#[test]
fn quiet_hours_close_the_hosts_they_name() {
    let q = QuietHours {
        hosts: vec!["*.example.org".into(), "example.net".into()],
        from: "22:00".into(),
        to: "06:30".into(),
    };
    assert!(validate_quiet_hours(std::slice::from_ref(&q)).is_ok());
    assert!(q.covers("www.Example.org") && q.covers("example.net"));
    assert!(!q.covers("example.org") && !q.covers("badexample.org"));
    let quiet = [Stated {
        window: q.window().unwrap(),
        source: q.source(0),
    }];
    match judge(&[], &quiet, at(23, 0, 0)) {
        Visit::Closed { opens_in, why } => {
            assert_eq!(opens_in, Duration::from_secs(7 * 3600 + 30 * 60));
            assert_eq!(
                why,
                "inside the quiet hours of budget.quiet_hours[0] (22:00-06:30 UTC)"
            );
        }
        Visit::Open => panic!("quiet"),
    }
    assert_eq!(judge(&[], &quiet, at(6, 30, 0)), Visit::Open);
    let bad = |from: &str, to: &str, hosts: &[&str]| {
        let q = QuietHours {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            from: from.into(),
            to: to.into(),
        };
        validate_quiet_hours(&[q]).unwrap_err().key
    };
    assert_eq!(bad("25:00", "06:00", &["*"]), "budget.quiet_hours[0].from");
    assert_eq!(bad("22:00", "22:00", &["*"]), "budget.quiet_hours[0].to");
    assert_eq!(bad("22:00", "06:00", &[]), "budget.quiet_hours[0].hosts");
    assert_eq!(
        bad("22:00", "06:00", &["a.*.org"]),
        "budget.quiet_hours[0].hosts"
    );
}

#[test]
fn rates_and_windows_that_cannot_be_read_are_none() {
    for v in ["", "5", "1/", "0/5", "-1/5", "1/5x", "a/b", "1/-5"] {
        assert_eq!(parse_request_rate(v), None, "{v}");
    }
    assert_eq!(parse_request_rate("1/5s"), Some(5.0));
    assert_eq!(parse_request_rate("3/1h"), Some(1200.0));
    for v in [
        "",
        "0600",
        "06-08",
        "0600-2460",
        "0600-0800-1000",
        "06:00:00-07:00",
        "٠٦٠٠-٠٨٠٠",
    ] {
        assert_eq!(Window::parse(v), None, "{v}");
    }
    assert_eq!(
        Window::parse("2200 - 2400"),
        Some(Window {
            start: 1320,
            end: 0
        })
    );
}
