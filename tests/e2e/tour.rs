//! The README's local HTTPS origin, run as the README writes it: its
//! openssl and Python lines, `mannerly run --local cert.pem`, and its curl
//! line through the proxy, with only the ports and the data dir changed.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::support::*;

/// The shell lines of the fenced blocks that follow `heading` in the
/// README, up to the next paragraph that is not a block.
fn recipe(heading: &str) -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let from = readme.find(heading).expect("the README has the recipe");
    let mut lines = Vec::new();
    let mut inside = false;
    let mut blocks = 0;
    for line in readme[from..].lines() {
        if line.starts_with("```") {
            inside = !inside;
            if !inside {
                blocks += 1;
                if blocks == 2 {
                    break;
                }
            }
            continue;
        }
        if inside && !line.starts_with('#') && !line.trim().is_empty() {
            lines.push(line.to_string());
        }
    }
    lines
}

/// The decision lines the README shows as output (`# mannerly-decision:
/// …` comments) in the blocks after `heading`, with the annotation in
/// parentheses that may follow one removed.
fn shown_decisions(heading: &str) -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let from = readme.find(heading).expect("the README has the recipe");
    let end = readme[from + heading.len()..]
        .find("\n### ")
        .map_or(readme.len(), |i| from + heading.len() + i);
    readme[from..end]
        .lines()
        .filter_map(|l| l.trim().strip_prefix("# "))
        .filter(|l| l.starts_with("mannerly-decision:"))
        .map(|l| l.split("  ").next().unwrap_or(l).trim().to_string())
        .collect()
}

/// The answer's decision line, as the README would show it.
fn decision_line(answer: &str) -> String {
    answer
        .lines()
        .find(|l| l.starts_with("mannerly-decision:"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn sh(dir: &std::path::Path, line: &str) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(line)
        .current_dir(dir)
        .output()
        .unwrap()
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `mannerly` with the README line's arguments on `data`; its
/// listening address.
fn start_proxy(work: &std::path::Path, data: &std::path::Path, line: &str) -> (Killed, String) {
    let args: Vec<&str> = line
        .strip_prefix("mannerly ")
        .expect("a mannerly line")
        .split_whitespace()
        .collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mannerly"))
        .args(&args)
        .current_dir(work)
        .env("MANNERLY_DATA_DIR", data)
        .env("MANNERLY_PROXY__LISTEN", "127.0.0.1:0")
        .env("MANNERLY_ADMIN__LISTEN", "")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = stdout_lines(child.stdout.take().unwrap());
    let child = Killed(child);
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the proxy prints its address");
        if let Some(a) = line.strip_prefix("mannerly listening on http://") {
            return (child, a.to_string());
        }
    }
}

fn wait_for_port(port: u16) {
    for _ in 0..500 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the origin never listened on {port}");
}

#[test]
fn the_readme_local_https_origin_answers_200_through_the_proxy() {
    if !(have_tool("openssl", "openssl")
        && have_tool("python3", "python3")
        && have_tool("curl", "curl"))
    {
        return;
    }
    let lines = recipe("An HTTPS origin of your own");
    assert_eq!(lines.len(), 4, "{lines:#?}");
    let work = tempfile::tempdir().unwrap();
    let port = free_port().to_string();

    let made = sh(work.path(), &lines[0]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let serve = lines[1].trim_end_matches('&').trim().replace("8443", &port);
    let origin = Command::new("sh")
        .arg("-c")
        .arg(format!("exec {serve}"))
        .current_dir(work.path())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _origin = Killed(origin);
    wait_for_port(port.parse().unwrap());
    std::fs::write(work.path().join("index.html"), "hello over TLS\n").unwrap();

    let curl = |data: &std::path::Path, proxy: &str| {
        let line = lines[3]
            .replace("http://127.0.0.1:3128", &format!("http://{proxy}"))
            .replace("~/.local/share/mannerly", &data.display().to_string())
            .replace("8443", &port);
        let out = sh(work.path(), &format!("{line} -sS"));
        let out = String::from_utf8_lossy(&out.stdout).to_string();
        // After the proxy's own answer to CONNECT.
        let origin = out.rfind("\r\n\r\nHTTP/").map_or(0, |i| i + 4);
        out[origin..].to_string()
    };

    // As the README writes it: the exact certificate named to --local.
    let data = tempfile::tempdir().unwrap();
    let (_proxy, addr) = start_proxy(work.path(), data.path(), &lines[2]);
    let out = curl(data.path(), &addr);
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    let shown = shown_decisions("An HTTPS origin of your own");
    assert_eq!(shown.last(), Some(&decision_line(&out)), "{out}");
    assert!(out.contains("hello over TLS"), "{out}");

    // Without it: a 503 that says what is wrong and how to fix it.
    let data = tempfile::tempdir().unwrap();
    let (_proxy, addr) = start_proxy(work.path(), data.path(), "mannerly run --local");
    let out = curl(data.path(), &addr);
    assert!(out.starts_with("HTTP/2 503"), "{out}");
    assert!(out.contains("robots_unavailable"), "{out}");
    assert!(out.contains("CA:TRUE"), "{out}");
    assert!(out.contains("--local cert.pem"), "{out}");
}

/// The README's first page on this machine, as it writes it: any local
/// origin, `mannerly run --local`, and curl's answer with the decision
/// line the README shows.
#[test]
fn the_readme_first_page_shows_the_decision_the_build_gives() {
    if !(have_tool("python3", "python3") && have_tool("curl", "curl")) {
        return;
    }
    let heading = "### Try it on this machine";
    let lines = recipe(heading);
    // The first block; the next is the HTTPS recipe.
    assert_eq!(
        lines[2],
        "curl -x http://127.0.0.1:3128 -i http://127.0.0.1:8000/"
    );
    let work = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let serve = lines[0].split(" #").next().unwrap_or_default();
    let serve = serve
        .trim()
        .trim_end_matches('&')
        .trim()
        .replace("8000", &port);
    let origin = Command::new("sh")
        .arg("-c")
        .arg(format!("exec {serve}"))
        .current_dir(work.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _origin = Killed(origin);
    wait_for_port(port.parse().unwrap());

    let data = tempfile::tempdir().unwrap();
    let (_proxy, addr) = start_proxy(work.path(), data.path(), &lines[1]);
    let line = lines[2]
        .replace("http://127.0.0.1:3128", &format!("http://{addr}"))
        .replace("8000", &port);
    let out = sh(work.path(), &format!("{line} -sS"));
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(
        shown_decisions(heading).first(),
        Some(&decision_line(&out)),
        "{out}"
    );
}
