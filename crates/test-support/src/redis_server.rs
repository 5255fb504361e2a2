//! A throwaway redis-server on a free loopback port, for tests and examples.
//! Shared by the state tests, the end-to-end tests and the cluster examples.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running redis-server, stopped on drop.
pub struct RedisServer {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
}

/// Where redis-server lives, or `None` (after saying so) when the test must
/// be skipped. With `CI` set a missing server is a failure.
pub fn redis_server_binary(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("redis-server"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let msg =
            format!("{test}: redis-server not found; install the Debian package `redis-server`");
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("SKIPPED {msg}");
    }
    found
}

impl RedisServer {
    /// Starts redis-server on a free port (no persistence) and waits until
    /// it answers. `None` when it is not installed (see
    /// [`redis_server_binary`]).
    pub fn start(test: &str) -> Option<RedisServer> {
        let bin = redis_server_binary(test)?;
        // A free port can be taken by another process (an outgoing
        // connection of a test running beside this one) between our probe
        // and redis-server's bind; then it exits, and another port is tried.
        for _ in 0..5 {
            let port = crate::ports::free_port();
            let dir =
                std::env::temp_dir().join(format!("mannerly-redis-{}-{port}", std::process::id()));
            let _ = std::fs::create_dir_all(&dir);
            let mut s = RedisServer {
                child: None,
                port,
                dir,
            };
            if s.spawn(&bin) {
                return Some(s);
            }
        }
        panic!("redis-server did not start on a free port in five tries");
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills the server (SIGKILL): everything it held is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        if let Some(bin) = redis_server_binary("restart") {
            assert!(
                self.spawn(&bin),
                "redis-server did not start again on port {}",
                self.port
            );
        }
    }

    /// Runs one command with redis-cli and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output();
        match out {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(e) => format!("redis-cli failed: {e}"),
        }
    }

    /// Starts the server on `self.port`; `false` when it exited (its port
    /// was taken).
    fn spawn(&mut self, bin: &PathBuf) -> bool {
        let mut child = Command::new(bin)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        // Ready when it answers as itself: another test's server on a
        // taken port would answer PING too.
        let pid = format!("process_id:{}", child.id());
        for _ in 0..400 {
            if self.cli(&["INFO", "server"]).contains(&pid) {
                self.child = Some(child);
                return true;
            }
            if child.try_wait().ok().flatten().is_some() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("redis-server on port {} did not answer in 10 s", self.port);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
