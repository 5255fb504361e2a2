//! The README's client table, as it is written: each client, set up the way
//! its row says (proxy variables, the CA), fetches an `http://` and an
//! `https://` page of origins on ports of their own through the proxy, and
//! gets both pages with the decision header.

use std::process::Command;

use super::realweb::undici_dir;
use super::support::*;

/// What every client needs to know: the pages, the proxy, the CA to trust.
struct Setup {
    proxy: TestProxy,
    plain: Origin,
    secure: Origin,
    ca: String,
}

impl Setup {
    async fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let origin_ca = TestCa::new(dir.path());
        let page = |_| async { text(200, "hello client") };
        let plain = Origin::http(handler(page)).await;
        let secure = Origin::https(handler(page), &origin_ca, &["secure.test"]).await;
        let (hp, sp) = (plain.port(), secure.port());
        let ca_path = origin_ca.pem_path.clone();
        let proxy = TestProxy::start(|c| {
            assert_eq!(c.proxy.connect_ports, vec![443, 80], "the shipped list");
            c.upstream.extra_roots = vec![ca_path];
            resolve_to_loopback(c, &format!("plain.test:{hp}"), hp);
            resolve_to_loopback(c, &format!("secure.test:{sp}"), sp);
        })
        .await;
        // The origin CA file is read at start; the dir may go.
        drop(dir);
        let ca = proxy.dir.path().join("ca.pem").display().to_string();
        Setup {
            proxy,
            plain,
            secure,
            ca,
        }
    }

    fn urls(&self) -> [String; 2] {
        [
            format!("http://plain.test:{}/page", self.plain.port()),
            format!("https://secure.test:{}/page", self.secure.port()),
        ]
    }

    /// `cmd` with the proxy variables every row starts from, and nothing
    /// the test machine set.
    fn command(&self, program: &str) -> Command {
        let url = self.proxy.url();
        let mut cmd = Command::new(program);
        for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
            cmd.env(k, &url);
        }
        for k in ["no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"] {
            cmd.env_remove(k);
        }
        cmd
    }

    /// Runs the client and checks that both pages came through the proxy.
    async fn fetched_both(mut self, name: &str, cmd: Command) {
        let stdout = tool_stdout(cmd).await;
        assert_eq!(
            stdout.matches("hello client").count(),
            2,
            "{name}: {stdout}"
        );
        assert_eq!(self.plain.seen.count("/page"), 1, "{name}");
        assert_eq!(self.secure.seen.count("/page"), 1, "{name}");
        let lines = self.proxy.stop().await;
        let fetched = with_outcome(&lines, "fetched");
        assert_eq!(fetched.len(), 2, "{name}: {lines:#?}");
    }
}

#[tokio::test]
async fn curl_with_x_and_cacert() {
    if !have_tool("curl", "curl") {
        return;
    }
    let s = Setup::new().await;
    let mut cmd = s.command("curl");
    cmd.args(["-sS", "-x", &s.proxy.url(), "--cacert", &s.ca]);
    cmd.args(s.urls());
    s.fetched_both("curl", cmd).await;
}

#[tokio::test]
async fn wget_with_use_proxy_and_ca_certificate() {
    if !have_tool("wget", "wget") {
        return;
    }
    let s = Setup::new().await;
    let mut cmd = s.command("wget");
    let https_proxy = format!("https_proxy={}", s.proxy.url());
    let http_proxy = format!("http_proxy={}", s.proxy.url());
    cmd.args(["-q", "-O", "-", "-e", "use_proxy=on", "-e", &https_proxy])
        .args(["-e", &http_proxy, "--ca-certificate", &s.ca]);
    cmd.args(s.urls());
    s.fetched_both("wget", cmd).await;
}

/// Python's clients, each with the variable its row names.
async fn python(name: &str, module: &str, ca_var: &str, fetch: &str) {
    if !have_tool("python3", "python3") || !have_python_module(module) {
        return;
    }
    let s = Setup::new().await;
    let mut cmd = s.command("python3");
    cmd.env(ca_var, &s.ca).arg("-c").arg(format!(
        "import sys, {module}\nfor url in sys.argv[1:]:\n    print({fetch})"
    ));
    cmd.args(s.urls());
    s.fetched_both(name, cmd).await;
}

#[tokio::test]
async fn python_requests_with_requests_ca_bundle() {
    python(
        "requests",
        "requests",
        "REQUESTS_CA_BUNDLE",
        "requests.get(url).text",
    )
    .await;
}

#[tokio::test]
async fn python_httpx_with_ssl_cert_file() {
    // httpx reads the proxy variables only with trust_env, its default.
    python("httpx", "httpx", "SSL_CERT_FILE", "httpx.get(url).text").await;
}

#[tokio::test]
async fn python_urllib_with_ssl_cert_file() {
    python(
        "urllib",
        "urllib.request",
        "SSL_CERT_FILE",
        "urllib.request.urlopen(url).read().decode()",
    )
    .await;
}

#[tokio::test]
async fn scrapy_with_the_proxy_variables_alone() {
    if !have_tool("scrapy", "python3-pip (pip install scrapy)") {
        return;
    }
    let s = Setup::new().await;
    let dir = tempfile::tempdir().unwrap();
    let spider = dir.path().join("spider.py");
    std::fs::write(
        &spider,
        "import scrapy, os\n\
         class Pages(scrapy.Spider):\n    \
             name = 'pages'\n    \
             start_urls = os.environ['PAGES'].split()\n    \
             def parse(self, response):\n        \
                 print(response.status, response.text)\n",
    )
    .unwrap();
    let mut cmd = s.command("scrapy");
    cmd.args(["runspider", "--nolog"])
        .arg(&spider)
        .env("PAGES", s.urls().join(" "))
        .current_dir(dir.path());
    s.fetched_both("scrapy", cmd).await;
}

/// Python requests uploading a body in pieces (a generator: chunked, each
/// piece its own write), then a sized body and a GET, on
/// the one kept-alive connection its session holds: every head and body
/// byte the client wrote reaches the origin, in whichever reads of the
/// proxy they arrive (`clients::heads` passes whole heads from hyper's
/// buffer and gathers the rest).
#[tokio::test]
async fn python_requests_uploads_in_pieces_on_one_connection() {
    if !have_tool("python3", "python3") || !have_python_module("requests") {
        return;
    }
    let echo = |req: hyper::Request<hyper::body::Incoming>| async move {
        use http_body_util::BodyExt;
        let path = req.uri().path().to_string();
        let body = req.into_body().collect().await.unwrap().to_bytes();
        text(200, format!("{path} {}", String::from_utf8_lossy(&body)))
    };
    let origin = Origin::http(handler(echo)).await;
    let port = origin.port();
    let mut proxy =
        TestProxy::start(|c| resolve_to_loopback(c, &format!("up.test:{port}"), port)).await;
    let mut cmd = Command::new("python3");
    cmd.env("http_proxy", proxy.url())
        .env_remove("no_proxy")
        .env_remove("NO_PROXY");
    cmd.arg("-c").arg(
        [
            "import sys, requests",
            "def pieces():",
            "    for i in range(5):",
            "        yield b'piece%d;' % i",
            "s, u = requests.Session(), sys.argv[1]",
            "print(s.post(u + '/up', data=pieces()).text)",
            "print(s.post(u + '/sized', data=b'x' * 3000).text)",
            "print(s.get(u + '/page').text)",
        ]
        .join("\n"),
    );
    cmd.arg(format!("http://up.test:{port}"));
    let stdout = tool_stdout(cmd).await;
    let want = format!(
        "/up piece0;piece1;piece2;piece3;piece4;\n/sized {}\n/page \n",
        "x".repeat(3000)
    );
    assert_eq!(stdout, want);
    let lines = proxy.stop().await;
    let fetched = with_outcome(&lines, "fetched");
    assert_eq!(fetched.len(), 3, "{lines:#?}");
    let clients: Vec<_> = fetched.iter().map(|l| l["client"].clone()).collect();
    assert!(
        clients.iter().all(|c| *c == clients[0]),
        "one connection: {clients:?}"
    );
}

/// Node's `EnvHttpProxyAgent` sends `CONNECT plain.test:PORT` for the
/// `http://` page too: with the shipped `proxy.connect_ports` (443, 80),
/// that tunnel's plain HTTP walks the pipeline whatever its port.
#[tokio::test]
async fn node_with_extra_ca_certs_and_env_http_proxy_agent() {
    let Some(node_dir) = undici_dir() else {
        return;
    };
    let s = Setup::new().await;
    let mut cmd = s.command("node");
    cmd.env("NODE_EXTRA_CA_CERTS", &s.ca)
        .current_dir(node_dir)
        .arg("-e")
        .arg(
            "const { EnvHttpProxyAgent, setGlobalDispatcher, fetch } = require('undici');\n\
             setGlobalDispatcher(new EnvHttpProxyAgent());\n\
             (async () => { for (const u of process.argv.slice(1)) console.log(await (await fetch(u)).text()); })()\n\
             .catch((e) => { console.error(e, e.cause); process.exit(1); });",
        );
    cmd.args(s.urls());
    s.fetched_both("node", cmd).await;
}

/// Whether python3 can import `module`; absent under CI is a failure,
/// since `.ci/run` installs it.
fn have_python_module(module: &str) -> bool {
    let found = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 module {module} is needed: .ci/run installs it"
        );
        eprintln!("skipped: python3 module {module} not installed");
    }
    found
}
