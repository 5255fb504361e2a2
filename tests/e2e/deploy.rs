//! deploy/: the Dockerfile, the compose file and the Kubernetes manifests.
//! No container engine runs here, so the files are parsed and checked, the
//! Kubernetes ones validated against the API schemas (`kubernetes-validate`),
//! and the exact command line and environment each gives mannerly is run
//! against the built binary, which must start and answer `/readyz`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::redis_server::RedisServer;
use super::support::{free_port, stdout_lines};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A check that needs a tool or feature: skips with a message where it is
/// absent, fails when `CI` is set.
fn need(present: bool, what: &str) -> bool {
    if present {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{what} (CI is set: this is a failure)");
    }
    eprintln!("SKIP: {what}");
    false
}

/// The YAML documents of a file, read by PyYAML (installed with
/// kubernetes-validate) into JSON.
fn yaml_docs(path: &Path) -> Option<Vec<Value>> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, json, yaml; json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None], sys.stdout)",
        ])
        .arg(path)
        .output()
        .ok()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("No module named"), "{}: {err}", path.display());
        return None;
    }
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

fn yaml_or_skip(path: &Path) -> Option<Vec<Value>> {
    let docs = yaml_docs(path);
    if need(
        docs.is_some(),
        "python3 with PyYAML is needed to read deploy/*.yaml (pip install kubernetes-validate)",
    ) {
        docs
    } else {
        None
    }
}

// === the Dockerfile ===

#[derive(Default, Debug)]
struct Dockerfile {
    froms: Vec<String>,
    /// The final stage's.
    env: Vec<(String, String)>,
    user: Option<String>,
    expose: Vec<u16>,
    volumes: Vec<String>,
    healthcheck: Vec<String>,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    stopsignal: Option<String>,
}

/// Splits words the way a Dockerfile's ENV does: quotes group and are removed.
fn shell_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    cur.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => cur.extend(chars.next()),
                        c => cur.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

fn json_args(s: &str) -> Vec<String> {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not a JSON array ({e}): {s}"))
}

fn dockerfile() -> Dockerfile {
    let text = std::fs::read_to_string(repo().join("deploy/Dockerfile")).unwrap();
    let mut instructions = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && cur.is_empty()) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
        } else {
            cur.push_str(t);
            instructions.push(std::mem::take(&mut cur));
        }
    }
    let mut d = Dockerfile::default();
    for ins in instructions {
        let (op, rest) = ins.split_once(' ').unwrap_or((&ins, ""));
        match op.to_ascii_uppercase().as_str() {
            "FROM" => {
                d.froms.push(rest.to_string());
                d.env.clear();
                d.user = None;
            }
            "ENV" => {
                for w in shell_words(rest) {
                    let (k, v) = w.split_once('=').unwrap();
                    d.env.push((k.to_string(), v.to_string()));
                }
            }
            "USER" => d.user = Some(rest.trim().to_string()),
            "EXPOSE" => {
                d.expose = rest
                    .split_whitespace()
                    .map(|p| p.trim_end_matches("/tcp").parse().unwrap())
                    .collect()
            }
            "VOLUME" => d.volumes = json_args(rest),
            "HEALTHCHECK" => {
                let (_, cmd) = rest.split_once("CMD").unwrap();
                d.healthcheck = json_args(cmd);
            }
            "ENTRYPOINT" => d.entrypoint = json_args(rest),
            "CMD" => d.cmd = json_args(rest),
            "STOPSIGNAL" => d.stopsignal = Some(rest.trim().to_string()),
            _ => {}
        }
    }
    d
}

fn env_get<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(n, _)| n == k)
        .map(|(_, v)| v.as_str())
}

/// Listening on all interfaces needs a client allow-list or proxy auth.
fn assert_exposure_is_guarded(env: &[(String, String)], what: &str) {
    let listen = env_get(env, "MANNERLY_PROXY__LISTEN").unwrap_or("127.0.0.1:3128");
    if listen.starts_with("127.") || listen.starts_with("localhost:") {
        return;
    }
    let allow = env_get(env, "MANNERLY_PROXY__ALLOW")
        .is_some_and(|v| !v.trim_matches(['[', ']', ' ']).is_empty());
    let auth = env_get(env, "MANNERLY_PROXY__AUTH") == Some("basic")
        && env_get(env, "MANNERLY_PROXY__USERS_FILE").is_some();
    assert!(
        allow || auth,
        "{what}: listens on {listen} without proxy.allow or proxy.auth"
    );
    assert_ne!(
        env_get(env, "MANNERLY_PROXY__OPEN"),
        Some("true"),
        "{what}: proxy.open"
    );
    if let Some(admin) = env_get(env, "MANNERLY_ADMIN__LISTEN") {
        if !admin.starts_with("127.") {
            assert!(
                env_get(env, "MANNERLY_ADMIN__TOKEN").is_some(),
                "{what}: admin on {admin} without a token"
            );
        }
    }
}

#[test]
fn dockerfile_builds_in_two_stages_and_runs_as_non_root() {
    let d = dockerfile();
    assert!(d.froms.len() >= 2, "multi-stage: {:?}", d.froms);
    assert!(
        d.froms[0].starts_with("rust:") && d.froms[0].ends_with(" AS build"),
        "{:?}",
        d.froms
    );
    let user = d.user.clone().expect("USER in the final stage");
    let uid = user.split(':').next().unwrap();
    assert!(uid != "0" && uid != "root", "runs as {user}");
    assert_eq!(d.expose, vec![3128, 9128]);
    assert_eq!(d.volumes, vec!["/data"]);
    assert_eq!(env_get(&d.env, "MANNERLY_DATA_DIR"), Some("/data"));
    assert_eq!(d.stopsignal.as_deref(), Some("SIGTERM"));
    let hc = d.healthcheck.join(" ");
    assert!(hc.contains("http://127.0.0.1:9128/healthz"), "{hc}");
    assert_eq!(
        env_get(&d.env, "MANNERLY_ADMIN__LISTEN"),
        Some("127.0.0.1:9128")
    );
    assert_eq!(d.entrypoint, vec!["/usr/local/bin/mannerly"]);
    assert_eq!(d.cmd, vec!["run"]);
    assert_exposure_is_guarded(&d.env, "Dockerfile");
}

// === compose ===

fn compose() -> Option<Value> {
    yaml_or_skip(&repo().join("deploy/compose.yaml")).map(|mut d| d.remove(0))
}

fn compose_env(service: &Value) -> Vec<(String, String)> {
    service["environment"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn compose_shares_redis_and_the_ca_between_two_instances_and_a_crawler() {
    let Some(c) = compose() else { return };
    let s = &c["services"];
    let m = &s["mannerly"];
    assert_eq!(m["deploy"]["replicas"], 2);
    let image_env = dockerfile().env;
    let mut env = image_env.clone();
    env.extend(compose_env(m));
    assert_exposure_is_guarded(&env, "compose mannerly");
    assert_eq!(env_get(&env, "MANNERLY_STATE__BACKEND"), Some("redis"));
    let url = env_get(&env, "MANNERLY_STATE__REDIS_URL").unwrap();
    let host = url
        .trim_start_matches("redis://")
        .split(':')
        .next()
        .unwrap();
    assert!(
        s[host]["image"].as_str().unwrap().starts_with("redis:"),
        "{url}"
    );
    // One CA for both: made by the `ca` service in a volume both read.
    let ca_dir = env_get(&env, "MANNERLY_CA_DIR").unwrap();
    let ca_cmd = strings(&s["ca"]["command"]);
    assert_eq!(ca_cmd[..3], ["ca", "export", "--out"]);
    let public = &ca_cmd[3];
    assert!(public.starts_with(&format!("{ca_dir}/")), "{public}");
    let mounts = |svc: &str| strings(&s[svc]["volumes"]);
    let ca_volume = format!("ca:{ca_dir}");
    assert!(mounts("ca").contains(&ca_volume));
    assert!(mounts("mannerly").contains(&format!("{ca_volume}:ro")));
    assert!(mounts("crawler").contains(&format!("{ca_volume}:ro")));
    assert_eq!(
        s["mannerly"]["depends_on"]["ca"]["condition"],
        "service_completed_successfully"
    );
    // The crawler: every proxy spelling, and the CA from the shared volume.
    let crawler = compose_env(&s["crawler"]);
    for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
        assert_eq!(env_get(&crawler, k), Some("http://mannerly:3128"), "{k}");
    }
    assert_eq!(env_get(&crawler, "SSL_CERT_FILE"), Some(public.as_str()));
    let crawler_user = s["crawler"]["user"].as_str().unwrap();
    assert!(
        !crawler_user.starts_with("0") && !crawler_user.starts_with("10001"),
        "{crawler_user}"
    );
    // Health on the admin listener; stop grace above the proxy's drain time.
    let hc = strings(&m["healthcheck"]["test"]).join(" ");
    assert!(hc.contains("127.0.0.1:9128/readyz"), "{hc}");
    let grace: f64 = env_get(&env, "MANNERLY_PROXY__SHUTDOWN_GRACE_SECS")
        .unwrap()
        .parse()
        .unwrap();
    let stop: f64 = m["stop_grace_period"]
        .as_str()
        .unwrap()
        .trim_end_matches('s')
        .parse()
        .unwrap();
    assert!(
        stop > grace,
        "stop_grace_period {stop} <= shutdown grace {grace}"
    );
    // The allow-list is the compose network.
    let subnet = c["networks"]["crawl"]["ipam"]["config"][0]["subnet"]
        .as_str()
        .unwrap();
    assert!(env_get(&env, "MANNERLY_PROXY__ALLOW")
        .unwrap()
        .contains(subnet));
}

// === Kubernetes ===

fn k8s_docs() -> Option<Vec<Value>> {
    let mut all = Vec::new();
    for f in ["configmap.yaml", "crawler.yaml", "redis.yaml"] {
        all.extend(yaml_or_skip(&repo().join("deploy/kubernetes").join(f))?);
    }
    Some(all)
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

/// The environment a container gets, with ConfigMap references resolved from
/// the manifests and Secret references from `secrets`.
fn k8s_env(
    docs: &[Value],
    container: &Value,
    secrets: &BTreeMap<(&str, &str), &str>,
) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for e in container["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap().to_string();
        let value = if let Some(v) = e["value"].as_str() {
            v.to_string()
        } else if let Some(r) = e["valueFrom"]["configMapKeyRef"].as_object() {
            let cm = find(docs, "ConfigMap", r["name"].as_str().unwrap());
            cm["data"][r["key"].as_str().unwrap()]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: key {} not in ConfigMap", r["key"]))
                .to_string()
        } else if let Some(r) = e["valueFrom"]["secretKeyRef"].as_object() {
            let key = (r["name"].as_str().unwrap(), r["key"].as_str().unwrap());
            secrets
                .get(&key)
                .unwrap_or_else(|| panic!("secret {key:?}"))
                .to_string()
        } else {
            panic!("{name}: no value")
        };
        env.push((name, value));
    }
    env
}

fn test_secrets() -> BTreeMap<(&'static str, &'static str), &'static str> {
    BTreeMap::from([(("mannerly-admin", "token"), "test-admin-token")])
}

#[test]
fn kubernetes_manifests_validate_against_the_api_schemas() {
    let dir = repo().join("deploy/kubernetes");
    let present = Command::new("kubernetes-validate")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !need(
        present,
        "kubernetes-validate is not installed (pip install kubernetes-validate)",
    ) {
        return;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    // 1.29: the first release with native sidecars on by default. Its schemas
    // ship with the package, so this works offline.
    for version in ["1.29.0", "1.33.0"] {
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "--kubernetes-version", version])
            .args(&files)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "k8s {version}:\n{text}");
        assert_eq!(text.matches(" passed for resource ").count(), 5, "{text}");
    }
}

#[test]
fn kubernetes_sidecar_has_what_a_crawl_cluster_needs() {
    let Some(docs) = k8s_docs() else { return };
    let dep = find(&docs, "Deployment", "crawler");
    let pod = &dep["spec"]["template"];
    let spec = &pod["spec"];
    // Native sidecar: an init container that keeps running.
    let side = named(&spec["initContainers"], "mannerly");
    assert_eq!(side["restartPolicy"], "Always");
    let copy = named(&spec["initContainers"], "mannerly-ca");
    let inits: Vec<&str> = spec["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        inits,
        ["mannerly-ca", "mannerly"],
        "the CA is copied before the sidecar starts"
    );
    assert!(copy["restartPolicy"].is_null());
    // Non-root everywhere.
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_ne!(spec["securityContext"]["runAsUser"], 0);
    // Ports and probes on the admin listener.
    let ports: Vec<i64> = side["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_i64().unwrap())
        .collect();
    assert_eq!(ports, [3128, 9128]);
    let probe = strings(&side["readinessProbe"]["exec"]["command"]).join(" ");
    assert!(
        probe.contains("http://127.0.0.1:9128/readyz")
            && probe.contains("Authorization: Bearer $MANNERLY_ADMIN__TOKEN"),
        "{probe}"
    );
    let live = strings(&side["livenessProbe"]["exec"]["command"]).join(" ");
    assert!(live.contains("/healthz"), "{live}");
    // Prometheus scrape annotations point at the admin port.
    let ann = &pod["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert_eq!(ann["prometheus.io/port"], "9128");
    assert_eq!(ann["prometheus.io/path"], "/metrics");
    // The CA Secret: read-only, 0400; the crawler sees only the certificate.
    let vols = &spec["volumes"];
    let ca = named(vols, "ca-secret");
    assert_eq!(ca["secret"]["secretName"], "mannerly-ca");
    assert_eq!(ca["secret"]["defaultMode"], 0o400);
    let mount = named(&copy["volumeMounts"], "ca-secret");
    assert_eq!(mount["readOnly"], true);
    let cert = named(vols, "ca-cert");
    assert_eq!(cert["secret"]["items"].as_array().unwrap().len(), 1);
    assert_eq!(cert["secret"]["items"][0]["key"], "ca.pem");
    // Redis URL from the ConfigMap, naming the Service of the Redis Deployment.
    let env = k8s_env(&docs, side, &test_secrets());
    let redis_ref = named(&side["env"], "MANNERLY_STATE__REDIS_URL");
    assert_eq!(
        redis_ref["valueFrom"]["configMapKeyRef"]["name"],
        "mannerly"
    );
    let url = env_get(&env, "MANNERLY_STATE__REDIS_URL").unwrap();
    let (host, port) = url
        .trim_start_matches("redis://")
        .split('/')
        .next()
        .unwrap()
        .split_once(':')
        .unwrap();
    let svc = find(&docs, "Service", host);
    assert_eq!(
        svc["spec"]["ports"][0]["port"]
            .as_i64()
            .unwrap()
            .to_string(),
        port
    );
    let redis = find(&docs, "Deployment", "redis");
    for (k, v) in svc["spec"]["selector"].as_object().unwrap() {
        assert_eq!(
            &redis["spec"]["template"]["metadata"]["labels"][k], v,
            "selector {k}"
        );
    }
    // Drain: the pod's grace covers preStop + the proxy's own shutdown grace.
    let grace: f64 = env_get(&env, "MANNERLY_PROXY__SHUTDOWN_GRACE_SECS")
        .unwrap()
        .parse()
        .unwrap();
    let pre = strings(&side["lifecycle"]["preStop"]["exec"]["command"]);
    assert_eq!(pre[0], "sleep");
    let pre: f64 = pre[1].parse().unwrap();
    let term = spec["terminationGracePeriodSeconds"].as_f64().unwrap();
    assert!(
        term > grace + pre,
        "terminationGracePeriodSeconds {term} <= {grace} + {pre}"
    );
    // The crawler uses the sidecar on loopback and trusts the CA.
    let crawler = named(&spec["containers"], "crawler");
    let cenv = k8s_env(&docs, crawler, &test_secrets());
    for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
        assert_eq!(env_get(&cenv, k), Some("http://127.0.0.1:3128"), "{k}");
    }
    assert_eq!(
        env_get(&env, "MANNERLY_PROXY__LISTEN"),
        Some("127.0.0.1:3128")
    );
    let ca_mount = named(&crawler["volumeMounts"], "ca-cert")["mountPath"]
        .as_str()
        .unwrap();
    assert_eq!(
        env_get(&cenv, "SSL_CERT_FILE"),
        Some(format!("{ca_mount}/ca.pem").as_str())
    );
    assert_ne!(
        crawler["securityContext"]["runAsUser"],
        spec["securityContext"]["runAsUser"]
    );
    // The script in the ConfigMap is deploy/crawler/crawl.py.
    let script = std::fs::read_to_string(repo().join("deploy/crawler/crawl.py")).unwrap();
    assert_eq!(
        find(&docs, "ConfigMap", "crawler-script")["data"]["crawl.py"],
        script.as_str()
    );
    let mut image_env = dockerfile().env;
    image_env.extend(env);
    assert_exposure_is_guarded(&image_env, "kubernetes sidecar");
}

// === every MANNERLY_* name is a config key ===

const NOT_KEYS: &[&str] = &["MANNERLY_CONFIG", "MANNERLY_LOG", "MANNERLY_LOG_FORMAT"];

fn documented(table: &toml::Table, path: &[String]) -> bool {
    let mut t = table;
    let mut i = 0;
    while i < path.len() {
        match t.get(&path[i]) {
            Some(toml::Value::Table(inner)) if inner.is_empty() => return true,
            Some(toml::Value::Table(inner)) => t = inner,
            Some(_) => return i + 1 == path.len(),
            None => return false,
        }
        i += 1;
    }
    false
}

fn all_deploy_env() -> Option<Vec<(String, String, String)>> {
    let mut out: Vec<(String, String, String)> = dockerfile()
        .env
        .into_iter()
        .map(|(k, v)| ("deploy/Dockerfile".to_string(), k, v))
        .collect();
    let c = compose()?;
    for (name, svc) in c["services"].as_object().unwrap() {
        for (k, v) in compose_env(svc) {
            out.push((format!("compose.yaml {name}"), k, v));
        }
    }
    let docs = k8s_docs()?;
    let spec = &find(&docs, "Deployment", "crawler")["spec"]["template"]["spec"];
    for c in spec["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(spec["containers"].as_array().unwrap())
    {
        if c["env"].is_array() {
            for (k, v) in k8s_env(&docs, c, &test_secrets()) {
                out.push((format!("kubernetes {}", c["name"]), k, v));
            }
        }
    }
    Some(out)
}

/// Asserts that every `MANNERLY_*` variable the deploy files set is a key
/// of config/mannerly.toml; `None` where the deploy files cannot be read
/// here (a missing tool: skipped, or a failure under CI).
fn check_keys() -> Option<()> {
    let text = std::fs::read_to_string(repo().join("config/mannerly.toml")).unwrap();
    let table: toml::Table = text.parse().unwrap();
    for (file, name, _) in all_deploy_env()? {
        let Some(rest) = name.strip_prefix("MANNERLY_") else {
            continue;
        };
        if NOT_KEYS.contains(&name.as_str()) {
            continue;
        }
        let path: Vec<String> = rest.split("__").map(|s| s.to_ascii_lowercase()).collect();
        assert!(
            documented(&table, &path),
            "{file}: {name} is not a key of config/mannerly.toml"
        );
    }
    Some(())
}

#[test]
fn every_variable_the_deploy_files_set_is_a_documented_key() {
    check_keys();
}

// === run the exact command line and environment ===

/// What changes between a container and this machine, and nothing else:
/// paths move into a temp dir, ports to free ones, 0.0.0.0 to loopback
/// (tests only talk to 127.0.0.0/8), the redis host to our redis-server.
struct Place {
    root: tempfile::TempDir,
    proxy: u16,
    admin: u16,
    redis: u16,
}

impl Place {
    fn new(redis: u16) -> Place {
        Place {
            root: tempfile::tempdir().unwrap(),
            proxy: free_port(),
            admin: free_port(),
            redis,
        }
    }
    fn path(&self, p: &str) -> String {
        self.root
            .path()
            .join(p.trim_start_matches('/'))
            .display()
            .to_string()
    }
    fn map(&self, s: &str) -> String {
        let mut s = s.to_string();
        for dir in ["/ca-secret", "/data", "/ca"] {
            let mapped = self.path(dir);
            s = s
                .split(' ')
                .map(|w| {
                    let bare = w.trim_start_matches(['"', '\'']);
                    if bare == dir || bare.starts_with(&format!("{dir}/")) {
                        w.replacen(dir, &mapped, 1)
                    } else {
                        w.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ");
        }
        s.replace("0.0.0.0:", "127.0.0.1:")
            .replace(":3128", &format!(":{}", self.proxy))
            .replace(":9128", &format!(":{}", self.admin))
            .replace(
                "redis://redis:6379",
                &format!("redis://127.0.0.1:{}", self.redis),
            )
    }
}

/// Runs `argv` (ENTRYPOINT first) with exactly `env`, waits for the banner,
/// checks `/readyz` (and each probe command), then SIGTERM: a clean exit.
fn start_and_check_ready(
    place: &Place,
    argv: &[String],
    env: &[(String, String)],
    token: Option<&str>,
    probes: &[Vec<String>],
) {
    assert_eq!(argv[0], "/usr/local/bin/mannerly", "{argv:?}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mannerly"));
    cmd.args(argv[1..].iter().map(|a| place.map(a)))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, place.map(v));
    }
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let errs = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let rx = stdout_lines(stdout);
    let banner = rx.recv_timeout(Duration::from_secs(30));
    let Ok(banner) = banner else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "mannerly did not start with {argv:?} {env:?}:\n{}",
            errs.join().unwrap()
        );
    };
    assert_eq!(
        banner,
        format!("mannerly listening on http://127.0.0.1:{}", place.proxy)
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = rt.block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let mut req = client.get(format!("http://127.0.0.1:{}/readyz", place.admin));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        // Ready once the listener, CA, store and state backend are up; the
        // banner comes after the proxy listener, so allow a moment.
        let mut last = 0;
        for _ in 0..100 {
            if let Ok(r) = req.try_clone().unwrap().send().await {
                last = r.status().as_u16();
                if last == 200 {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        last
    });
    let curl = Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let mut probe_results = Vec::new();
    if need(
        curl,
        "curl is not installed: the HEALTHCHECK/probe commands are not run",
    ) {
        for probe in probes {
            let mut c = Command::new(&probe[0]);
            c.args(probe[1..].iter().map(|a| place.map(a)));
            for (k, v) in env {
                c.env(k, place.map(v));
            }
            probe_results.push((probe.clone(), c.output().unwrap()));
        }
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let exit = child.wait().unwrap();
    let errs = errs.join().unwrap();
    assert_eq!(status, 200, "/readyz answered {status}:\n{errs}");
    for (probe, out) in probe_results {
        assert!(
            out.status.success(),
            "{probe:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        exit.success(),
        "SIGTERM did not end in a clean exit ({exit}):\n{errs}"
    );
}

/// The deploy files could be read and every setting they make exists.
fn features_present() -> bool {
    check_keys().is_some()
}

#[test]
fn the_image_command_starts_and_answers_readyz() {
    if !features_present() {
        return;
    }
    let d = dockerfile();
    let place = Place::new(0);
    std::fs::create_dir_all(place.path("/data")).unwrap();
    set_mode(&place.path("/data"), 0o700);
    let argv: Vec<String> = d.entrypoint.iter().chain(&d.cmd).cloned().collect();
    start_and_check_ready(
        &place,
        &argv,
        &d.env,
        None,
        std::slice::from_ref(&d.healthcheck),
    );
}

#[test]
fn the_compose_commands_start_and_answer_readyz() {
    // Both services load the image's whole environment: admin listener, proxy.allow, redis.
    if !features_present() {
        return;
    }
    let Some(c) = compose() else { return };
    let Some(redis) = RedisServer::start("the_compose_commands_start_and_answer_readyz") else {
        return;
    };
    let place = Place::new(redis.port);
    let d = dockerfile();
    for dir in ["/data", "/ca"] {
        std::fs::create_dir_all(place.path(dir)).unwrap();
    }
    set_mode(&place.path("/data"), 0o700);
    // First the one-shot `ca` service, as compose runs it.
    let ca = &c["services"]["ca"];
    let mut env = d.env.clone();
    env.extend(compose_env(ca));
    let argv: Vec<String> = d
        .entrypoint
        .iter()
        .cloned()
        .chain(strings(&ca["command"]).into_iter().map(|a| place.map(&a)))
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_mannerly"))
        .args(&argv[1..])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.clone(), place.map(v))))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let public = place.path("/ca/public.pem");
    assert_eq!(mode(&public) & 0o777, 0o644);
    assert!(std::fs::read_to_string(&public)
        .unwrap()
        .starts_with("-----BEGIN CERTIFICATE-----"));
    // Then an instance.
    let m = &c["services"]["mannerly"];
    let token = "compose-admin-token";
    let mut env = d.env.clone();
    for (k, v) in compose_env(m) {
        let v = if v.starts_with("${MANNERLY_ADMIN_TOKEN") {
            token.to_string()
        } else {
            v
        };
        env.push((k, v));
    }
    let argv: Vec<String> = d
        .entrypoint
        .iter()
        .cloned()
        .chain(strings(&m["command"]))
        .collect();
    let probe = strings(&m["healthcheck"]["test"]);
    assert_eq!(probe[0], "CMD-SHELL");
    let probe = vec![
        "sh".to_string(),
        "-c".to_string(),
        probe[1].replace("$$", "$"),
    ];
    start_and_check_ready(&place, &argv, &env, Some(token), &[probe]);
}

#[test]
fn the_kubernetes_sidecar_starts_and_answers_readyz() {
    let Some(docs) = k8s_docs() else { return };
    let Some(redis) = RedisServer::start("the_kubernetes_sidecar_starts_and_answers_readyz") else {
        return;
    };
    let place = Place::new(redis.port);
    let d = dockerfile();
    let spec = &find(&docs, "Deployment", "crawler")["spec"]["template"]["spec"];
    // The Secret as the kubelet mounts it with fsGroup: 0440.
    let secret = place.path("/ca-secret");
    let made = Command::new(env!("CARGO_BIN_EXE_mannerly"))
        .args(["ca", "init"])
        .env_clear()
        .env("MANNERLY_DATA_DIR", &secret)
        .output()
        .unwrap();
    assert!(made.status.success());
    for f in ["ca.pem", "ca-key.pem"] {
        set_mode(&format!("{secret}/{f}"), 0o440);
    }
    std::fs::create_dir_all(place.path("/data")).unwrap();
    set_mode(&place.path("/data"), 0o777); // an emptyDir
                                           // The copy step, exactly as the init container runs it.
    let copy = named(&spec["initContainers"], "mannerly-ca");
    let cmd = strings(&copy["command"]);
    let out = Command::new(&cmd[0])
        .args(cmd[1..].iter().map(|a| place.map(a)))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&place.path("/data/mannerly")) & 0o777, 0o700);
    assert_eq!(
        mode(&place.path("/data/mannerly/ca-key.pem")) & 0o777,
        0o600
    );
    // The sidecar.
    let side = named(&spec["initContainers"], "mannerly");
    let secrets = test_secrets();
    let mut env = d.env.clone();
    env.extend(k8s_env(&docs, side, &secrets));
    let argv: Vec<String> = d
        .entrypoint
        .iter()
        .cloned()
        .chain(strings(&side["args"]))
        .collect();
    let probes: Vec<Vec<String>> = ["startupProbe", "readinessProbe", "livenessProbe"]
        .iter()
        .map(|p| strings(&side[*p]["exec"]["command"]))
        .collect();
    // The sidecar needs the admin listener and the redis backend.
    if features_present() {
        start_and_check_ready(
            &place,
            &argv,
            &env,
            Some(secrets[&("mannerly-admin", "token")]),
            &probes,
        );
    }
}

fn set_mode(path: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(path: &str) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode()
}

/// The image ships the release binary without debug info (line tables made
/// it 105 MB); profiling has a profile of its own.
#[test]
fn release_builds_carry_no_debug_info_and_profiling_has_its_own_profile() {
    let manifest: toml::Table =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap();
    let profiles = manifest["profile"].as_table().unwrap();
    let debug = |name: &str| {
        profiles[name]
            .get("debug")
            .and_then(toml::Value::as_integer)
    };
    assert_eq!(debug("release"), Some(0));
    assert_eq!(debug("profiling"), Some(1));
    assert_eq!(profiles["profiling"]["inherits"].as_str(), Some("release"));
    let dockerfile =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/Dockerfile")).unwrap();
    assert!(
        dockerfile.contains("cargo build --release --locked --bin mannerly"),
        "the image builds the release profile"
    );
}
