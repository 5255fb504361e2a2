//! A throwaway Redis Cluster on loopback: six `redis-server --cluster-enabled
//! yes` nodes on free ports joined by `redis-cli --cluster create` as three
//! masters with one replica each. For the end-to-end tests and examples.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::ports::free_port;

/// How long a master may be silent before its replica takes over. Short, so
/// a failover happens inside a test; long enough that a loaded machine does
/// not fail nodes over by itself.
pub const NODE_TIMEOUT_MS: u64 = 2000;

/// One node of the cluster.
pub struct Node {
    child: Option<Child>,
    /// Its client port on 127.0.0.1.
    pub port: u16,
}

/// A running cluster, stopped on drop.
pub struct RedisCluster {
    /// Its nodes, masters first as created.
    pub nodes: Vec<Node>,
    dir: PathBuf,
}

/// Whether redis-server and redis-cli are both installed; says so and
/// returns `false` when the test must be skipped. With `CI` set a missing
/// tool is a failure.
fn tools_present(test: &str) -> bool {
    let on_path = |name: &str| {
        std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(name).is_file()))
    };
    let missing: Vec<&str> = ["redis-server", "redis-cli"]
        .into_iter()
        .filter(|t| !on_path(t))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "{test}: {} not found; install the Debian package `redis-server` (it brings redis-cli)",
        missing.join(" and ")
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("SKIPPED {msg}");
    false
}

impl Node {
    /// Starts one cluster node in its own directory under `dir` and waits
    /// until it answers. Ports come from [`free_port`], never twice in a
    /// process; one can still be taken by another process between our
    /// probe and redis-server's bind: a node that exits on start is tried
    /// again on other ports, and one that never answers fails the test
    /// with the end of its log.
    fn spawn(dir: &std::path::Path) -> Node {
        let mut last_log = String::new();
        for _ in 0..5 {
            let (port, bus) = (free_port(), free_port());
            let node_dir = dir.join(port.to_string());
            std::fs::create_dir_all(&node_dir).expect("node directory");
            let log = node_dir.join("redis.log");
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string()])
                .args(["--cluster-port", &bus.to_string()])
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
                .args(["--repl-diskless-sync-delay", "0"])
                .arg("--logfile")
                .arg(&log)
                .arg("--dir")
                .arg(&node_dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts");
            for _ in 0..1200 {
                // Another test's redis-server on a stolen port would answer
                // PING too; only our own process counts.
                let pid = format!("process_id:{}", child.id());
                if cli(port, &["INFO", "server"]).contains(&pid) {
                    return Node {
                        child: Some(child),
                        port,
                    };
                }
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            last_log = std::fs::read_to_string(&log).unwrap_or_default();
        }
        let tail: Vec<&str> = last_log.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!(
            "a redis cluster node did not start in five tries; its log ends:\n{}",
            tail.join("\n")
        );
    }
}

impl RedisCluster {
    /// Starts six nodes and joins them as three masters with a replica
    /// each; returns once every node reports `cluster_state:ok`. `None`
    /// when the tools are not installed.
    pub fn start(test: &str) -> Option<RedisCluster> {
        if !tools_present(test) {
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "mannerly-redis-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        let mut nodes: Vec<Node> = Vec::new();
        for _ in 0..6 {
            nodes.push(Node::spawn(&dir));
        }
        let cluster = RedisCluster { nodes, dir };
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli --cluster create runs");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        cluster.wait_ok();
        // A replica that never finished its first sync will not take over.
        for n in &cluster.nodes {
            wait_for(
                || {
                    let r = cli(n.port, &["INFO", "replication"]);
                    r.contains("role:master") || r.contains("master_link_status:up")
                },
                &format!("node {} is in sync with its master", n.port),
            );
        }
        Some(cluster)
    }

    /// `redis+cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Runs one command on the node at `port` with redis-cli.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        cli(port, args)
    }

    /// The port of the master that serves `key` now.
    pub fn master_of(&self, key: &str) -> u16 {
        let live = self.live_port();
        let slot = self.slot_of(key);
        let nodes = cli(live, &["CLUSTER", "NODES"]);
        owner(&nodes, slot).unwrap_or_else(|| panic!("no master serves slot {slot}:\n{nodes}"))
    }

    /// Waits until every live node agrees that a master other than `dead`
    /// serves `key`, and returns its port. `cluster_state:ok` alone is not
    /// that: a node that only suspects the dead master (`fail?`) still
    /// reports ok, before any replica has been promoted.
    pub fn wait_taken_over(&self, key: &str, dead: u16) -> u16 {
        let slot = self.slot_of(key);
        let views = || -> Vec<Option<u16>> {
            self.nodes
                .iter()
                .filter(|n| n.child.is_some())
                .map(|n| owner(&cli(n.port, &["CLUSTER", "NODES"]), slot))
                .collect()
        };
        wait_for(
            || {
                let seen = views();
                seen.iter()
                    .all(|o| o.is_some_and(|p| p != dead) && *o == seen[0])
            },
            &format!("every live node sees a master other than {dead} serve slot {slot}"),
        );
        self.wait_ok();
        self.master_of(key)
    }

    fn slot_of(&self, key: &str) -> u16 {
        cli(self.live_port(), &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("CLUSTER KEYSLOT answers a number")
    }

    /// Kills (SIGKILL) the node at `port`, as a crashed machine.
    pub fn kill(&mut self, port: u16) {
        for n in &mut self.nodes {
            if n.port == port {
                if let Some(mut c) = n.child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
        }
    }

    /// Waits until every live node says `cluster_state:ok` (after a
    /// failover: the replica promoted and the slots covered again).
    pub fn wait_ok(&self) {
        for n in self.nodes.iter().filter(|n| n.child.is_some()) {
            wait_for(
                || cli(n.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok"),
                &format!("node {} reports cluster_state:ok", n.port),
            );
        }
    }

    /// The sum of `calls=` of the named commands over the live masters'
    /// `INFO commandstats`, e.g. `["evalsha", "eval"]`.
    pub fn calls(&self, commands: &[&str]) -> u64 {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| commandstats(&cli(n.port, &["INFO", "commandstats"]), commands))
            .sum()
    }

    /// `args`' answer from every live node.
    pub fn each_node(&self, args: &[&str]) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| cli(n.port, args))
            .collect()
    }

    fn live_port(&self) -> u16 {
        self.nodes
            .iter()
            .find(|n| n.child.is_some())
            .map(|n| n.port)
            .expect("a live node")
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The port of the master that `nodes` (a `CLUSTER NODES` answer) says
/// serves `slot`, leaving out any master flagged as failing.
fn owner(nodes: &str, slot: u16) -> Option<u16> {
    for line in nodes.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
            continue;
        }
        let owns = f[8..].iter().any(|range| match range.split_once('-') {
            Some((a, b)) => {
                a.parse::<u16>().is_ok_and(|a| a <= slot)
                    && b.parse::<u16>().is_ok_and(|b| slot <= b)
            }
            None => range.parse::<u16>().is_ok_and(|s| s == slot),
        });
        if owns {
            let addr = f[1].split('@').next().unwrap_or_default();
            return addr.rsplit(':').next().and_then(|p| p.parse().ok());
        }
    }
    None
}

/// Every command a proxy sends Redis for its budgets and wake-ups: the
/// scripts, and taking and dropping the channels it listens on (pattern
/// subscriptions included, which it should never take).
pub const PROXY_CALLS: &[&str] = &[
    "evalsha",
    "eval",
    "subscribe",
    "unsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "psubscribe",
];

/// The summed `calls=` of `commands` in an `INFO commandstats` answer.
pub fn commandstats(info: &str, commands: &[&str]) -> u64 {
    info.lines()
        .filter(|l| {
            commands
                .iter()
                .any(|c| l.starts_with(&format!("cmdstat_{c}:")))
        })
        .filter_map(|l| l.split("calls=").nth(1))
        .filter_map(|v| v.split(',').next())
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => format!("redis-cli failed: {e}"),
    }
}

/// Polls `ok` for up to 60 s; a cluster that never gets there fails the test.
fn wait_for(ok: impl Fn() -> bool, what: &str) {
    // Each look runs redis-cli: not more often than every 50 ms.
    crate::poll::poll_until(what, Duration::from_secs(60), Duration::from_millis(50), ok);
}
