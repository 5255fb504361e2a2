//! Errors of the proxy crate, one enum per domain.

use std::path::PathBuf;
use std::time::Duration;

/// A configuration value that parses but cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The key and what is wrong with its value.
    #[error("config key {key}: {why}")]
    Invalid {
        /// Dotted key, e.g. `proxy.listen`.
        key: String,
        /// What is wrong.
        why: String,
    },
}

impl From<mannerly_policy::ParamError> for ConfigError {
    fn from(e: mannerly_policy::ParamError) -> Self {
        ConfigError::Invalid {
            key: e.key,
            why: e.why,
        }
    }
}

/// Creating, loading or using the interception CA.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// Reading or writing a CA file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The key file can be read by group or others.
    #[error(
        "{path}: CA key is readable by group or others (mode {mode:o}); run `chmod 600 {path}`"
    )]
    KeyPermissions {
        /// The key file.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// The data dir or a CA file is not safe.
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    /// Certificate generation or parsing failed.
    #[error("certificate: {0}")]
    Cert(#[from] rcgen::Error),
    /// The TLS library refused a certificate or key.
    #[error("tls: {0}")]
    Tls(#[from] rustls::Error),
}

/// Reading or writing the Web Bot Auth key files.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// Reading or writing a key file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// There is no key yet.
    #[error("{path}: no identity key; create one with `mannerly identity init`")]
    Missing {
        /// The key file.
        path: PathBuf,
    },
    /// `init` without `--force` found a key.
    #[error("{path}: an identity key exists already; `mannerly identity rotate` replaces it keeping the old one verifiable, `identity init --force` replaces it outright")]
    Exists {
        /// The key file.
        path: PathBuf,
    },
    /// The key file can be read by group or others.
    #[error(
        "{path}: identity key is readable by group or others (mode {mode:o}); run `chmod 600 {path}`"
    )]
    Permissions {
        /// The key file.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// A file holds something that is not a usable key.
    #[error("{path}: {why}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The system's random source failed.
    #[error("no randomness for a new key: {0}")]
    Random(String),
}

/// The data dir or a file in it is not safe to use.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    /// Someone else could read or change it; `fix` says what to do.
    #[error("{path}: {why}; refusing to use it (fix: `{fix}`)")]
    Unsafe {
        /// The dir or file.
        path: PathBuf,
        /// What is wrong.
        why: String,
        /// The command that fixes it.
        fix: String,
    },
    /// A key file group or others can read.
    #[error("{path}: key is readable by group or others (mode {mode:o}); run `chmod 600 {path}`")]
    KeyPermissions {
        /// The key file.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The dir or file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Another process holds the data dir's lock.
    #[error("another mannerly ({}) runs on this data dir ({}): stop it, or give this one its own with --data-dir or MANNERLY_DATA_DIR", holder_text(*.pid), .dir.display())]
    InUse {
        /// The data dir.
        dir: PathBuf,
        /// The process that holds it, as its lock file says.
        pid: Option<u32>,
    },
}

fn holder_text(pid: Option<u32>) -> String {
    match pid {
        Some(p) => format!("PID {p}"),
        None => "PID unknown".to_string(),
    }
}

/// Opening the audit log or its signing key.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The file, the key or the data dir.
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    /// The key file does not hold an Ed25519 key.
    #[error("{path}: not an Ed25519 private key (PKCS#8 PEM): {why}")]
    Key {
        /// The key file.
        path: PathBuf,
        /// What the parser said.
        why: String,
    },
    /// The existing log cannot be continued.
    #[error("{0}")]
    Log(String),
    /// Starting the writer thread failed.
    #[error("audit writer: {0}")]
    Thread(std::io::Error),
}

/// Proxy authentication: the users file and the listen/allow rules.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// A setting that cannot work (open proxy, bad CIDR).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The users file or the data dir is not safe.
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    /// `proxy.auth = "basic"` with no users.
    #[error("{0}: no users; add one with `mannerly users add NAME` (proxy.auth = \"basic\")")]
    NoUsers(PathBuf),
    /// A line of the users file that is not `NAME:ARGON2-HASH`.
    #[error("{path} line {line}: {why}")]
    BadLine {
        /// The users file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// A user name that cannot be used.
    #[error("user name {0:?}: use letters, digits and . _ - @ (at most 64)")]
    BadName(String),
    /// Hashing failed.
    #[error("password hash: {0}")]
    Hash(String),
}

/// Starting the proxy.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The CA could not be loaded or created.
    #[error(transparent)]
    Ca(#[from] CaError),
    /// The Web Bot Auth key could not be loaded.
    #[error("identity: {0}")]
    Identity(#[from] KeyFileError),
    /// A listener, data dir or audit log could not be opened.
    #[error("{what}: {source}")]
    Io {
        /// What was being opened.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The data dir or a file in it is not safe.
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    /// Proxy authentication cannot be set up.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// An extra root certificate could not be used.
    #[error("upstream.extra_roots: {0}")]
    Roots(String),
    /// The embedded store (responses, budget state) could not be opened.
    #[error("{path}: {why}")]
    Store {
        /// The store file.
        path: PathBuf,
        /// The cause.
        why: String,
    },
    /// The audit log or its key could not be opened.
    #[error("audit log: {0}")]
    Audit(#[from] AuditError),
    /// The system's random source failed.
    #[error("the system's random source failed ({0}); mannerly needs it for its Via name (what tells it from other proxies in a chain) and for TLS")]
    Random(String),
}

/// Why a connection to an origin was not made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// The target resolves to an address the configuration does not allow.
    #[error("{host} resolves to {addr}, a {} address; set upstream.allow_private to allow it (to try mannerly against an origin on this machine: `mannerly run --local`)", class.as_str())]
    Blocked {
        /// The host as requested.
        host: String,
        /// The refused address.
        addr: std::net::IpAddr,
        /// Its kind.
        class: mannerly_policy::AddressClass,
    },
    /// The name did not resolve.
    #[error("cannot resolve {host}: {why}")]
    Resolve {
        /// The host.
        host: String,
        /// The resolver's words.
        why: String,
    },
    /// No address accepted a connection in time.
    #[error("connect to {host} timed out")]
    Timeout {
        /// The host.
        host: String,
    },
    /// Every address refused or failed.
    #[error("connect to {host}: {source}")]
    Io {
        /// The host.
        host: String,
        /// The last failure.
        source: std::io::Error,
    },
    /// The URI has no host.
    #[error("no host in {0}")]
    NoHost(String),
    /// The proxy is at its own limits (file descriptors, connections being
    /// opened); the origin is not to blame and may be tried again soon.
    #[error("connect to {host}: {why}")]
    ProxyBusy {
        /// The host.
        host: String,
        /// Which limit.
        why: String,
    },
    /// The parent proxy (`upstream.proxy`) is unreachable or refused the
    /// tunnel; the target was never asked.
    #[error("{why}")]
    Parent {
        /// Plain words, naming the parent without its password.
        why: String,
    },
}

/// The client's body failed: it went silent, or its framing is broken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientBodyError {
    /// No body bytes from the client for this long.
    #[error("no request body data from the client for {0:?}")]
    Idle(Duration),
    /// The body could not be read (bad chunk size, connection lost).
    #[error("the client's request body is broken: {0}")]
    Broken(String),
    /// The body came slower than `proxy.body_min_rate` after the grace.
    #[error("the client's request body came slower than {rate} bytes/s after a {grace:?} grace ({got} bytes)")]
    TooSlow {
        /// The minimum rate, bytes/s.
        rate: u64,
        /// Time allowed before the rate counts.
        grace: Duration,
        /// Body bytes received by then.
        got: u64,
    },
    /// The body could not be spooled to the data dir (ours, not the
    /// client's: a full or unwritable disk).
    #[error("the request body could not be spooled to the data dir: {0}")]
    Spool(String),
}

impl ClientBodyError {
    /// The status the client gets.
    pub(crate) fn status(&self) -> u16 {
        match self {
            ClientBodyError::Idle(_) | ClientBodyError::TooSlow { .. } => 408,
            ClientBodyError::Broken(_) => 400,
            ClientBodyError::Spool(_) => 503,
        }
    }

    /// Whose failure it is.
    pub(crate) fn source(&self) -> Source {
        match self {
            ClientBodyError::Spool(_) => Source::Internal,
            _ => Source::Client,
        }
    }
}

/// Where an error came from, for the audit log's `source` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The client sent something we cannot accept.
    Client,
    /// The origin failed or misbehaved.
    Upstream,
    /// A policy rule refused the request.
    Policy,
    /// mannerly itself failed.
    Internal,
    /// The proxy is at its own limits (file descriptors, connections being
    /// opened): nobody's fault, try again shortly.
    Proxy,
    /// The parent proxy (`upstream.proxy`) failed or refused; the target
    /// was never asked.
    Parent,
}

impl Source {
    /// The audit log's spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Source::Client => "client",
            Source::Upstream => "upstream",
            Source::Policy => "policy",
            Source::Internal => "internal",
            Source::Proxy => "proxy",
            Source::Parent => "parent",
        }
    }
}

/// The first error of type `T` in `err`'s chain of sources, looking inside
/// `io::Error`s too (their own `source()` skips the error they wrap).
pub(crate) fn find_in_chain<'a, T: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cur: Option<&'a (dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        cur = match e.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|i| i as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}
