//! The proxy's configuration: plain serde structs with the documented
//! defaults. Loading files and `MANNERLY_*` variables is the binary's job.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use mannerly_policy::budget::BudgetParams;
use mannerly_policy::conditional::CacheParams;
use mannerly_policy::identity::{BrowserUa, Form, Forms, Prefix, UaMode, UaPolicy};
use mannerly_policy::payment::PaymentParams;
use mannerly_policy::prefs::{DeclaredUse, ResponsePreferences};
use mannerly_policy::robots::agents::Agent;
use mannerly_policy::robots::Purpose;
use mannerly_policy::robots_cache::RobotsParams;
use serde::Deserialize;

use crate::error::ConfigError;

mod validate;

pub(crate) use validate::{parent_settings, resolve_key};

/// Everything the proxy needs to run. See `config/mannerly.toml` for every
/// key with its default and meaning.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the CA, the audit log and stored state live.
    /// Empty: `$MANNERLY_DATA_DIR`, else `$XDG_DATA_HOME/mannerly`, else `~/.local/share/mannerly`.
    pub data_dir: PathBuf,
    /// Where the interception CA (`ca.pem`, `ca-key.pem`) lives; empty means
    /// the data dir. Lets several instances share one CA while each keeps its
    /// own data dir.
    pub ca_dir: PathBuf,
    /// The listener.
    pub proxy: ProxyConfig,
    /// The client towards origins.
    pub upstream: UpstreamConfig,
    /// The audit log.
    pub audit: AuditConfig,
    /// Who the crawl is.
    pub crawler: CrawlerConfig,
    /// Enforcement switch.
    pub policy: PolicyConfig,
    /// Fetching and caching robots.txt.
    pub robots: RobotsParams,
    /// Per-host budgets.
    pub budget: BudgetParams,
    /// Stored responses and conditional requests. The store is the file
    /// `store.redb` in the data dir (it also keeps budget state across restarts).
    pub cache: CacheParams,
    /// Web Bot Auth: signing every request sent to an origin.
    pub identity: IdentityConfig,
    /// The admin listener: metrics, hosts API, dashboard.
    pub admin: AdminConfig,
    /// Where host budgets live: this process, or Redis for a cluster.
    pub state: StateConfig,
    /// Sites that charge: which hosts may be paid, and how much.
    pub payment: PaymentParams,
}

/// `[admin]`: the listener operators use to see and steer the proxy.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Address of the admin listener; empty turns it off. A non-loopback
    /// address requires `token`.
    pub listen: String,
    /// Bearer token required on the API and metrics when set. Required for a
    /// non-loopback `listen`.
    pub token: String,
    /// Hosts that get per-host labels on `/metrics` (cardinality is opt-in).
    pub host_labels: Vec<String>,
    /// Hosts whose recent activity (last decisions, 429s of the last hour,
    /// rate history) is remembered for `/hosts`; the least recently active
    /// are forgotten first.
    pub max_hosts: usize,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: "127.0.0.1:9128".into(),
            token: String::new(),
            host_labels: Vec::new(),
            max_hosts: 20_000,
        }
    }
}

impl AdminConfig {
    /// The address to listen on, `None` when the listener is off.
    pub fn addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        let listen = self.listen.trim();
        if listen.is_empty() {
            return Ok(None);
        }
        let addr: SocketAddr = listen.parse().map_err(|e| ConfigError::Invalid {
            key: "admin.listen".into(),
            why: format!("{listen:?} is not an address like 127.0.0.1:9128 ({e})"),
        })?;
        if !addr.ip().is_loopback() && self.token.is_empty() {
            return Err(ConfigError::Invalid {
                key: "admin.listen".into(),
                why: format!(
                    "{addr} is not a loopback address: set admin.token so that only those holding it can see and reset hosts"
                ),
            });
        }
        Ok(Some(addr))
    }
}

/// `[state]`: where host budgets (and the robots.txt copies of a cluster) live.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateConfig {
    /// `memory` (this process) or `redis` (shared by every proxy pointed at
    /// the same Redis and `key_prefix`).
    pub backend: StateBackend,
    /// `redis://host:port/db` (with `redis` only).
    pub redis_url: String,
    /// Prepended to every Redis key, so that several crawls can share one Redis.
    pub key_prefix: String,
    /// How many proxies share the budgets. While Redis is out of reach each
    /// proxy decides alone at 1/`instances_hint` of a host's last shared rate.
    pub instances_hint: u32,
    /// A Redis command slower than this counts as Redis being out of reach.
    pub command_timeout_ms: f64,
    /// A concurrency lease of a proxy that died expires this long after
    /// `upstream.connect_timeout_secs + upstream.first_byte_timeout_secs`.
    pub lease_margin_secs: f64,
    /// With `redis`: share stored pages too, as a second tier behind each
    /// proxy's own store, so any proxy revalidates a page another stored.
    pub share_pages: bool,
    /// A shared page is forgotten this long after it was last stored (or
    /// earlier, by Redis's `maxmemory-policy`).
    pub pages_ttl_secs: f64,
}

/// `state.backend`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateBackend {
    /// One process.
    #[default]
    Memory,
    /// Shared through Redis.
    Redis,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            backend: StateBackend::Memory,
            redis_url: String::from("redis://127.0.0.1:6379/0"),
            key_prefix: String::from("mannerly:"),
            instances_hint: 4,
            command_timeout_ms: 50.0,
            lease_margin_secs: 5.0,
            share_pages: false,
            pages_ttl_secs: 7.0 * 86_400.0,
        }
    }
}

/// `[proxy]`: the listener and what it accepts.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProxyConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Ports a pass-through CONNECT (`intercept = false`) may name. An
    /// intercepted tunnel may name any port: what it carries is HTTP or TLS
    /// and walks the pipeline.
    pub connect_ports: Vec<u16>,
    /// Intercept TLS inside CONNECT (needed to apply the policy to HTTPS).
    /// `false` passes tunnels through untouched, with one `tunneled` audit line each.
    pub intercept: bool,
    /// Largest request head (request line + headers) in bytes; larger gets 431.
    pub max_header_bytes: usize,
    /// Most header lines in a request; more gets 431.
    pub max_headers: usize,
    /// Time a client has to send a complete request head.
    #[serde(rename = "header_read_timeout_secs", deserialize_with = "seconds")]
    pub header_read_timeout: Duration,
    /// Time in-flight requests and tunnels get to finish on shutdown.
    #[serde(rename = "shutdown_grace_secs", deserialize_with = "seconds")]
    pub shutdown_grace: Duration,
    /// Longest silence inside a client's request body; longer gets 408.
    #[serde(rename = "body_idle_timeout_secs", deserialize_with = "seconds")]
    pub body_idle_timeout: Duration,
    /// Slowest a request body may come, bytes/s, once the grace is over
    /// (as Apache's mod_reqtimeout `MinRate`); 0 turns it off.
    pub body_min_rate: u64,
    /// Time a request body has before `body_min_rate` counts.
    #[serde(rename = "body_rate_grace_secs", deserialize_with = "seconds")]
    pub body_rate_grace: Duration,
    /// Leaf certificates kept in memory.
    pub leaf_cache: usize,
    /// Proxy authentication: `none` or `basic` (users in `users_file`).
    pub auth: ProxyAuth,
    /// Users for `auth = "basic"`: `NAME:ARGON2-HASH` lines, written by
    /// `mannerly users add NAME`. Empty: `users` in the data dir.
    pub users_file: String,
    /// Client addresses allowed to use the proxy (`"10.0.0.0/8"`); empty: any.
    pub allow: Vec<String>,
    /// Allow a non-loopback `listen` with neither `auth` nor `allow`.
    pub open: bool,
    /// Open client connections at most; more are closed at accept.
    pub max_connections: usize,
    /// Open connections per client address at most.
    pub max_connections_per_client: usize,
    /// Listen backlog (capped by the kernel's `net.core.somaxconn`).
    pub backlog: u32,
    /// HTTP/2 (inside intercepted TLS): concurrent streams per connection.
    pub h2_max_streams: u32,
    /// Threads that serve client connections, each with its own pool of
    /// origin connections; 0: one per CPU.
    pub threads: usize,
    /// The longest a client's requests are held, seconds, when they carry
    /// no `Prefer: wait=N` of their own: by user name (`proxy.auth`), by
    /// client address, or `*` for every client. Absent: the budget's hold.
    pub prefer_wait: BTreeMap<String, u64>,
}

impl ProxyConfig {
    /// The number of serving threads `threads` asks for.
    pub fn serving_threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        }
    }
}

/// `proxy.auth`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyAuth {
    /// No credentials asked.
    #[default]
    None,
    /// `Proxy-Authorization: Basic`, checked against the users file.
    Basic,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 3128)),
            connect_ports: vec![443, 80],
            intercept: true,
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            header_read_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
            body_idle_timeout: Duration::from_secs(10),
            body_min_rate: 500,
            body_rate_grace: Duration::from_secs(10),
            leaf_cache: 1024,
            auth: ProxyAuth::None,
            users_file: String::new(),
            allow: Vec::new(),
            open: false,
            max_connections: 10_000,
            max_connections_per_client: 1_000,
            backlog: 4096,
            h2_max_streams: 100,
            threads: 0,
            prefer_wait: BTreeMap::new(),
        }
    }
}

/// `[upstream]`: how the proxy reaches origins.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Allow loopback, private, link-local and metadata targets. Off by default:
    /// a crawler fed hostile links must not reach the machine's own network.
    pub allow_private: bool,
    /// PEM files with extra root certificates trusted for origins (corporate CAs, tests).
    pub extra_roots: Vec<PathBuf>,
    /// `"name:port" = "ip:port"` overrides of name resolution, like curl --resolve;
    /// `"*.name:port"` matches every name under `name`, an exact name wins.
    pub resolve: BTreeMap<String, SocketAddr>,
    /// TCP connect timeout.
    #[serde(rename = "connect_timeout_secs", deserialize_with = "seconds")]
    pub connect_timeout: Duration,
    /// Time from sending a request to the response head.
    #[serde(rename = "first_byte_timeout_secs", deserialize_with = "seconds")]
    pub first_byte_timeout: Duration,
    /// Longest silence inside a response body.
    #[serde(rename = "idle_timeout_secs", deserialize_with = "seconds")]
    pub idle_timeout: Duration,
    /// How long an idle pooled connection to an origin is kept.
    #[serde(rename = "pool_idle_secs", deserialize_with = "seconds")]
    pub pool_idle: Duration,
    /// Idle pooled connections kept per origin (an h2 origin's one shared
    /// connection included); 0 keeps none, h2 included.
    pub pool_max_idle_per_host: usize,
    /// Idle pooled connections kept over all origins; the one idle longest
    /// is closed first.
    pub pool_max_idle_total: usize,
    /// Connections being opened at once; more wait their turn within the
    /// connect timeout.
    pub max_connecting: usize,
    /// A parent proxy every origin is reached through
    /// (`http://[user:pass@]host:port` or `https://…`); empty: direct.
    /// Plain HTTP targets are sent to it in absolute form, HTTPS targets
    /// through CONNECT with TLS to the target inside the tunnel.
    pub proxy: String,
    /// Targets reached directly despite `proxy`, `NO_PROXY` style: names
    /// (and every name under them), `.suffix`, IPs, CIDRs, `*`.
    pub no_proxy: Vec<String>,
    /// The response header in which a proxy provider carries the target's
    /// own status (e.g. `original_status`); the budget learns from it.
    pub status_header: String,
}

impl std::fmt::Debug for UpstreamConfig {
    // By hand, so that the parent proxy's password never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let proxy = match mannerly_policy::parent::ParentUrl::parse(&self.proxy) {
            Ok(p) => p.to_string(),
            Err(_) if self.proxy.is_empty() => String::new(),
            Err(_) => "(invalid)".into(),
        };
        f.debug_struct("UpstreamConfig")
            .field("allow_private", &self.allow_private)
            .field("extra_roots", &self.extra_roots)
            .field("resolve", &self.resolve)
            .field("connect_timeout", &self.connect_timeout)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("pool_idle", &self.pool_idle)
            .field("pool_max_idle_per_host", &self.pool_max_idle_per_host)
            .field("pool_max_idle_total", &self.pool_max_idle_total)
            .field("max_connecting", &self.max_connecting)
            .field("proxy", &proxy)
            .field("no_proxy", &self.no_proxy)
            .field("status_header", &self.status_header)
            .finish()
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            allow_private: false,
            extra_roots: Vec::new(),
            resolve: BTreeMap::new(),
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            pool_idle: Duration::from_secs(4),
            pool_max_idle_per_host: 32,
            pool_max_idle_total: 256,
            max_connecting: 128,
            proxy: String::new(),
            no_proxy: Vec::new(),
            status_header: String::new(),
        }
    }
}

/// The size at which the audit file rotates by default: host names come
/// from clients, and the writer's state grows with the hosts of the
/// current file (about 300 bytes each), so an unrotated file lets a broad
/// crawl, or a hostile client, grow it without bound. 16 MiB of lines
/// hold at most ~60,000 hosts (lines are over 250 bytes).
pub(crate) const DEFAULT_ROTATE_BYTES: u64 = 16 << 20;

/// `[audit]`: where decisions are written, how durably, how sealed.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// File to append to; empty means `audit.jsonl` in the data dir, `-` means stdout.
    pub path: String,
    /// When lines are forced to disk (`fsync`). Every line reaches the OS
    /// before its answer completes whatever this says.
    pub sync: AuditSync,
    /// A signed checkpoint after this many lines.
    pub checkpoint_lines: u64,
    /// A signed checkpoint after this many seconds with unsealed lines.
    pub checkpoint_secs: u64,
    /// Rotate the file when it reaches this many bytes; 0: never. The
    /// writer keeps an entry per host of the current file and reads the
    /// whole file at start, so this bounds both.
    pub rotate_bytes: u64,
    /// Rotate the file when it is this old (`"1d"`, `"12h"`); empty: never.
    pub rotate_every: String,
    /// An HTTP(S) endpoint every checkpoint line is POSTed to, outside the
    /// log, so that `audit verify --witness` finds a log cut after a
    /// checkpoint; empty: none.
    pub witness: String,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            path: String::new(),
            sync: AuditSync::Batch,
            checkpoint_lines: 1000,
            checkpoint_secs: 10,
            rotate_bytes: DEFAULT_ROTATE_BYTES,
            rotate_every: String::new(),
            witness: String::new(),
        }
    }
}

impl AuditConfig {
    /// `rotate_every` as a duration; `None` when rotation by age is off
    /// (or the value is invalid, which `validate` refuses).
    pub fn rotate_every(&self) -> Option<Duration> {
        if self.rotate_every.trim().is_empty() {
            return None;
        }
        humantime::parse_duration(self.rotate_every.trim()).ok()
    }
}

/// `audit.sync`: when the log is forced to disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditSync {
    /// Never: lines reach the OS (they survive a crash of the proxy, not of the machine).
    None,
    /// At least once a second and at shutdown.
    #[default]
    Batch,
    /// Before any answer whose line is in the batch is released.
    Every,
}

/// `[crawler]`: who the crawl is and what it is for.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CrawlerConfig {
    /// robots.txt product token; empty means the first product token of each
    /// client's User-Agent.
    pub agent: String,
    /// Declared purposes (`search`, `ai-input`, `ai-train`) checked against the
    /// site's Content-Signal / Content-Usage statements.
    pub purposes: Vec<Purpose>,
    /// How much of a page the crawl reproduces (`reference`, `full`, or `""`
    /// for not declared), checked against a site's Content-Signal `use`.
    #[serde(rename = "use")]
    pub usage: DeclaredUse,
    /// The crawler's User-Agent: a product token and a comment with a
    /// contact URL (`ExampleBot/1.0 (+https://crawler.example.org/bot)`).
    /// Empty: clients' User-Agents go as sent, and no page is served.
    pub user_agent: String,
    /// A client User-Agent without the product: `append` it, or `require`
    /// it (refused, 403 `blocked`).
    pub user_agent_mode: UaMode,
    /// A client User-Agent claiming a browser (`Mozilla/…`): `rewrite`
    /// (sent as `user_agent` alone) or `refuse`.
    pub browser_user_agent: BrowserUa,
    /// What the crawl is for, in words: the public page's first line.
    pub about: String,
    /// The egress IP ranges (CIDR) the crawl comes from, published in the
    /// JAFAR format beside the page.
    pub egress_ranges: Vec<String>,
    /// Ask for `gzip, br` on behalf of a client that sends no
    /// `Accept-Encoding`, and decode for it.
    pub compression: bool,
    /// Several identities, each a product token with its purposes
    /// (`[[crawler.agents]]`); replaces `agent` and `purposes`.
    pub agents: Vec<Agent>,
}

impl Default for CrawlerConfig {
    fn default() -> Self {
        CrawlerConfig {
            agent: String::new(),
            purposes: Vec::new(),
            usage: DeclaredUse::default(),
            user_agent: String::new(),
            user_agent_mode: UaMode::default(),
            browser_user_agent: BrowserUa::default(),
            about: String::new(),
            egress_ranges: Vec::new(),
            compression: true,
            agents: Vec::new(),
        }
    }
}

impl CrawlerConfig {
    /// The User-Agent policy, when `user_agent` is set (checked at start).
    pub fn ua_policy(&self) -> Option<UaPolicy> {
        match self.user_agent.is_empty() {
            true => None,
            false => UaPolicy::new(
                &self.user_agent,
                self.user_agent_mode,
                self.browser_user_agent,
            )
            .ok(),
        }
    }

    /// The egress ranges (checked at start; any that would not parse is left out).
    pub fn ranges(&self) -> Vec<Prefix> {
        self.egress_ranges
            .iter()
            .filter_map(|r| Prefix::parse(r).ok())
            .collect()
    }
}

/// `[identity]`: Web Bot Auth, in the directory-03 form Cloudflare verifies
/// or the -01 form (draft-ietf-webbotauth-httpsig-protocol-01), per host.
/// When enabled, every request sent to an origin (robots.txt fetches and
/// retries included) carries `Signature-Agent`, `Signature-Input` and
/// `Signature`, made with the key in `key_file`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdentityConfig {
    /// Sign requests.
    pub enabled: bool,
    /// Ed25519 private key, PKCS#8 PEM, mode 0600 (`mannerly identity init`
    /// writes it). Empty: `identity-key.pem` in the data dir.
    pub key_file: String,
    /// The https origin that serves the key directory at
    /// `/.well-known/http-message-signatures-directory` (sent as `Signature-Agent`).
    pub signature_agent: String,
    /// Seconds a signature stays valid after it is made (`expires - created`), at most 86400.
    pub validity_secs: u64,
    /// Hosts never signed for: `example.org` (that host) or `*.example.org` (its subdomains).
    pub skip_hosts: Vec<String>,
    /// The form of every signature: `directory-03` (Signature-Agent the
    /// origin, the whole field signed: what Cloudflare verifies) or `01`.
    pub form: Form,
    /// Hosts signed in another form than `form`: `{ "example.org" = "01" }`;
    /// a host of its own wins over `*.` patterns, the longest of those next.
    pub host_forms: BTreeMap<String, Form>,
}

impl IdentityConfig {
    /// The forms as the signer takes them.
    pub fn forms(&self) -> Forms {
        Forms::new(
            self.form,
            self.host_forms.iter().map(|(h, f)| (h.clone(), *f)),
        )
    }
}

impl Default for IdentityConfig {
    fn default() -> Self {
        IdentityConfig {
            enabled: false,
            key_file: String::new(),
            signature_agent: String::new(),
            validity_secs: 300,
            skip_hosts: Vec::new(),
            form: Form::default(),
            host_forms: BTreeMap::new(),
        }
    }
}

/// `[policy]`: enforcement.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// `false` = observe mode: everything is forwarded and the audit log says
    /// what would have been decided (`would`).
    pub enforce: bool,
    /// A response whose `Content-Usage` / `Content-Signal` header refuses a
    /// declared purpose: `withhold` (403 `signal_refused`) or `annotate`
    /// (passed on with `Mannerly-Preferences`).
    pub response_preferences: ResponsePreferences,
    /// Bytes of an HTML page's body read for its `<meta name="robots">`
    /// before the answer goes on (0: not read).
    pub meta_prefix_bytes: usize,
}

/// The largest `policy.meta_prefix_bytes`: a page's head, not the page.
pub(crate) const MAX_META_PREFIX: usize = 1024 * 1024;

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            enforce: true,
            response_preferences: ResponsePreferences::Withhold,
            meta_prefix_bytes: 16 * 1024,
        }
    }
}

/// Reads a number of seconds (`2`, `0.5`) as a [`Duration`], once, when the
/// configuration is read.
fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let v = f64::deserialize(d)?;
    if v.is_finite() && v > 0.0 && v < 1e9 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(serde::de::Error::custom(format!(
            "must be a positive number of seconds, got {v}"
        )))
    }
}

impl Config {
    /// The directory of the interception CA.
    pub fn ca_dir(&self) -> PathBuf {
        if self.ca_dir.as_os_str().is_empty() {
            self.data_dir.clone()
        } else {
            self.ca_dir.clone()
        }
    }

    /// The embedded store: stored responses and budget state that must
    /// survive a restart.
    pub fn store_path(&self) -> PathBuf {
        self.data_dir.join("store.redb")
    }

    /// The Web Bot Auth signing key, resolved against the data dir.
    pub fn identity_key_path(&self) -> PathBuf {
        match self.identity.key_file.as_str() {
            "" => self.data_dir.join("identity-key.pem"),
            p => PathBuf::from(p),
        }
    }

    /// The audit log path, resolved against the data dir.
    pub fn audit_target(&self) -> AuditTarget {
        match self.audit.path.as_str() {
            "-" => AuditTarget::Stdout,
            "" => AuditTarget::File(self.data_dir.join("audit.jsonl")),
            p => AuditTarget::File(PathBuf::from(p)),
        }
    }
}

/// Where audit lines go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuditTarget {
    /// Standard output.
    Stdout,
    /// Appended to a file.
    File(PathBuf),
}
