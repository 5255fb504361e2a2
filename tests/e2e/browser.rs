//! Headless Chromium driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`: commands on fd 3, answers on fd 4, each a
//! JSON message ended by a NUL byte), so no WebSocket client is needed.

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

const CHROMIUM: &str = "chromium";

pub struct Browser {
    child: Child,
    stdin: ChildStdin,
    rx: mpsc::Receiver<Value>,
    next_id: u64,
    session: Option<String>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A browser, or `None` (with a message) when Chromium is not
    /// installed; with `CI` set its absence fails the test instead.
    pub fn start() -> Option<Browser> {
        let present = Command::new(CHROMIUM)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !present {
            if std::env::var_os("CI").is_some() {
                panic!("chromium is not installed (CI is set: apt-get install -y chromium)");
            }
            eprintln!("SKIP: chromium is not installed (apt-get install -y chromium)");
            return None;
        }
        let profile = tempfile::tempdir().unwrap();
        let script = format!(
            "exec {CHROMIUM} --headless --no-sandbox --disable-gpu --disable-background-networking \
             --disable-component-update --disable-sync --no-first-run --hide-scrollbars \
             --window-size=1280,760 --user-data-dir='{}' --remote-debugging-pipe \
             3<&0 4>&1 </dev/null >/dev/null",
            profile.path().display()
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 64 * 1024];
            while let Ok(n) = stdout.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                while let Some(end) = buf.iter().position(|&b| b == 0) {
                    let msg: Vec<u8> = buf.drain(..=end).collect();
                    if let Ok(v) = serde_json::from_slice::<Value>(&msg[..msg.len() - 1]) {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Some(Browser {
            child,
            stdin,
            rx,
            next_id: 0,
            session: None,
            _profile: profile,
        })
    }

    /// One DevTools command; its `result`.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.stdin.write_all(&bytes).unwrap();
        self.stdin.flush().unwrap();
        loop {
            let v = self
                .rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("no answer from chromium to {method}"));
            if v["id"] == json!(id) {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// Opens `url` in a new tab and attaches to it.
    pub fn open(&mut self, url: &str) {
        self.session = None;
        let t = self.call("Target.createTarget", json!({ "url": url }));
        let target = t["targetId"].as_str().unwrap().to_string();
        let a = self.call(
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        );
        self.session = Some(a["sessionId"].as_str().unwrap().to_string());
    }

    /// Evaluates `expr` in the page (promises awaited) and returns its value.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }),
        );
        r["result"]["value"].clone()
    }

    /// Evaluates `expr` until it is truthy (the page refreshes on its own
    /// timers); gives up after a generous bound and returns the last value.
    pub fn wait_for(&mut self, expr: &str) -> Value {
        let mut last = Value::Null;
        for _ in 0..300 {
            last = self.eval(expr);
            let truthy = match &last {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            if truthy {
                return last;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        last
    }

    /// A PNG of the page as it is now.
    pub fn screenshot(&mut self, path: &std::path::Path) {
        let r = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let data = r["data"].as_str().unwrap();
        std::fs::write(path, base64_decode(data)).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            _ => 63,
        }
    };
    let bytes: Vec<u8> = s
        .bytes()
        .filter(|&c| c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c) << (18 - 6 * i);
        }
        out.push((n >> 16) as u8);
        if chunk.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}
