//! The command line as a user meets it: config errors, `config check|show`,
//! `run --listen/--data-dir`, the banner, the logs.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::support::{mannerly, stdout_lines};

#[test]
fn config_check_accepts_the_defaults_and_names_a_bad_variable() {
    let (code, out) = mannerly(&["config", "check"], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("configuration OK"), "{out}");

    let (code, out) = mannerly(
        &["config", "check"],
        &[("MANNERLY_UPSTREAM__CONNECT_TIMEOUT_SECS", "soon")],
    );
    assert_eq!(code, 2, "{out}");
    assert_eq!(
        out.trim_end(),
        "mannerly: upstream.connect_timeout_secs = \"soon\" (environment variable \
         MANNERLY_UPSTREAM__CONNECT_TIMEOUT_SECS): invalid type: string \"soon\", expected a number"
    );
}

#[test]
fn config_check_names_file_line_and_suggests_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("my.toml");
    std::fs::write(
        &file,
        "[proxy]\nlisten = \"127.0.0.1:3128\"\nconect_ports = [443]\n",
    )
    .unwrap();
    let (code, out) = mannerly(
        &["config", "check", "--config", file.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("unknown key proxy.conect_ports (")
            && out.contains("my.toml line 3); did you mean proxy.connect_ports?"),
        "{out}"
    );
}

#[test]
fn a_single_value_fills_a_list_and_show_says_where_it_came_from() {
    let (code, out) = mannerly(
        &["config", "show"],
        &[("MANNERLY_PROXY__CONNECT_PORTS", "8443")],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "connect_ports = [8443]  # environment variable MANNERLY_PROXY__CONNECT_PORTS"
        ),
        "{out}"
    );
    assert!(
        out.contains("listen = \"127.0.0.1:3128\"  # default"),
        "{out}"
    );
}

struct Run {
    banner: Vec<String>,
    stderr: String,
    success: bool,
}

/// Starts `mannerly run ARGS`, reads the banner from stdout, stops it with
/// SIGTERM and returns what it printed.
fn run_and_stop(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mannerly"))
        .arg("run")
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let rx = stdout_lines(stdout);
    let mut banner = Vec::new();
    // The banner's last line names the CA bundle variables.
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
        let last = line.contains("NODE_EXTRA_CA_CERTS=");
        banner.push(line);
        if last {
            break;
        }
    }
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = child.wait().unwrap();
    Run {
        banner,
        stderr: err_reader.join().unwrap(),
        success: status.success(),
    }
}

#[test]
fn run_flags_banner_on_stdout_plain_logs_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = run_and_stop(
        &[
            "--listen",
            "localhost:0",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        // Tests run at once: the admin listener's default port is not theirs.
        &[
            ("MANNERLY_LOG", "info"),
            ("MANNERLY_ADMIN__LISTEN", "127.0.0.1:0"),
        ],
    );
    assert!(run.success, "{}", run.stderr);
    let banner = run.banner.join("\n");
    assert!(
        banner.starts_with("mannerly listening on http://127.0.0.1:"),
        "{banner}"
    );
    let ca = data.join("ca.pem");
    let ca = ca.display();
    for var in ["http_proxy=", "https_proxy=", "HTTP_PROXY=", "HTTPS_PROXY="] {
        assert!(
            banner.contains(&format!("{var}http://127.0.0.1:")),
            "{var} missing: {banner}"
        );
    }
    for var in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
    ] {
        assert!(
            banner.contains(&format!("{var}={ca}")),
            "{var} missing: {banner}"
        );
    }
    assert!(data.join("audit.jsonl").exists());
    // Logs: on stderr, no colour codes when stderr is not a terminal.
    assert!(run.stderr.contains("audit lines written"), "{}", run.stderr);
    assert!(
        !run.stderr.contains('\u{1b}'),
        "ANSI codes in {:?}",
        run.stderr
    );
    assert!(!run.stderr.contains("mannerly listening"), "{}", run.stderr);
}

#[test]
fn log_format_json_gives_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_and_stop(
        &[
            "--log-format",
            "json",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.path().to_str().unwrap(),
        ],
        &[("MANNERLY_ADMIN__LISTEN", "127.0.0.1:0")],
    );
    assert!(run.success, "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert!(!lines.is_empty(), "no log lines; banner: {:?}", run.banner);
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
    }
}

/// Runs `mannerly run` with one of its listeners on an address another
/// socket holds (`{taken}` in `listen` or in an env value is replaced by
/// it); returns the exit code and output.
fn run_on_taken(listen: &str, env: &[(&str, &str)]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let listen = listen.replace("{taken}", &addr);
    let env: Vec<(&str, String)> = env
        .iter()
        .map(|(k, v)| (*k, v.replace("{taken}", &addr)))
        .collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let data = dir.path().to_str().unwrap();
    mannerly(&["run", "--listen", &listen, "--data-dir", data], &env)
}

#[test]
fn address_in_use_is_said_once_with_the_key_to_change() {
    let (code, out) = run_on_taken("{taken}", &[]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(out.matches("Address already in use").count(), 1, "{out}");
    assert!(out.contains("change proxy.listen"), "{out}");
}

#[test]
fn a_taken_admin_address_names_admin_listen() {
    let (code, out) = run_on_taken("127.0.0.1:0", &[("MANNERLY_ADMIN__LISTEN", "{taken}")]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(out.matches("Address already in use").count(), 1, "{out}");
    assert!(out.contains("change admin.listen"), "{out}");
    assert!(!out.contains("change proxy.listen"), "{out}");
}

/// The README's local recipe: `mannerly run --local ORIGIN_CA` and curl to
/// an HTTPS origin of this machine on its own port, with no other setting:
/// private targets allowed, the origin's CA trusted, any CONNECT port, and
/// the banner says so. With a non-loopback listen it refuses to start.
// The origin runs on this test's runtime while the test waits on blocking
// calls: it needs a thread of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_mode_reaches_a_local_https_origin_with_one_flag() {
    use super::support::{handler, have_tool, text, Origin, TestCa};
    if !have_tool("curl", "curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path());
    let origin = Origin::https(
        handler(|_| async { text(200, "hello local") }),
        &ca,
        &["localhost"],
    )
    .await;
    let data = dir.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mannerly"))
        .args(["run", "--listen", "127.0.0.1:0", "--local"])
        .arg(&ca.pem_path)
        .env("MANNERLY_DATA_DIR", &data)
        .env("MANNERLY_ADMIN__LISTEN", "")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = stdout_lines(child.stdout.take().unwrap());
    let mut banner = Vec::new();
    while !banner.iter().any(|l: &String| l.starts_with("LOCAL MODE")) {
        match lines.recv_timeout(Duration::from_secs(30)) {
            Ok(l) => banner.push(l),
            Err(_) => break,
        }
    }
    let proxy = banner
        .iter()
        .find_map(|l| l.strip_prefix("mannerly listening on "))
        .map(str::to_string);
    let url = format!("https://localhost:{}/page", origin.port());
    let out = proxy.as_ref().map(|proxy| {
        Command::new("curl")
            .args(["-sS", "--max-time", "20", "-x", proxy, "--cacert"])
            .arg(data.join("ca.pem"))
            .args(["-D", "-", &url])
            .output()
            .unwrap()
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        banner.iter().any(|l| l.starts_with("LOCAL MODE")),
        "{banner:?}"
    );
    let out = out.expect("the banner names the proxy");
    let heads = String::from_utf8_lossy(&out.stdout).to_lowercase();
    // curl -D prints the CONNECT answer's head first.
    let got = heads.split_once("\r\n\r\n").map_or("", |(connect, rest)| {
        assert!(connect.contains("intercepted=yes"), "{connect}");
        rest
    });
    assert!(
        got.starts_with("http/1.1 200") || got.starts_with("http/2 200"),
        "{heads}"
    );
    assert!(got.contains("mannerly-decision: fetched"), "{got}");
    assert!(got.ends_with("hello local"), "{got}");
    assert_eq!(origin.seen.count("/page"), 1);

    let out = Command::new(env!("CARGO_BIN_EXE_mannerly"))
        .args(["run", "--listen", "0.0.0.0:0", "--local"])
        .env("MANNERLY_DATA_DIR", &data)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--local lets clients reach"), "{err}");
}

/// Corners a newcomer met, each answered in words that name the fix: a
/// misspelt log level, and a second instance on the same data dir.
#[test]
fn a_misspelt_log_level_and_a_second_instance_name_their_fix() {
    use super::support::RunningBinary;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().display().to_string();
    let (code, out) = super::support::mannerly(
        &["run", "--listen", "127.0.0.1:0"],
        &[("MANNERLY_LOG", "debugg"), ("MANNERLY_DATA_DIR", &data)],
    );
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(
            "MANNERLY_LOG=debugg: \"debugg\" is not a level (trace, debug, info, warn, error, off)"
        ),
        "{out}"
    );

    let mut first = RunningBinary::start(dir.path(), &[]);
    let pid = first.child.id();
    let (code, out) = super::support::mannerly(
        &["run", "--listen", "127.0.0.1:0"],
        &[("MANNERLY_DATA_DIR", &data), ("MANNERLY_ADMIN__LISTEN", "")],
    );
    first.signal("TERM");
    let _ = first.child.wait();
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "another mannerly (PID {pid}) runs on this data dir ("
        )) && out.contains("stop it, or give this one its own with --data-dir"),
        "{out}"
    );
}
