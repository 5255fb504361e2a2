//! Who may use the proxy: a client-address allow-list (`proxy.allow`) and
//! Basic proxy authentication (`proxy.auth = "basic"`, users with argon2
//! hashes in `proxy.users_file`). A refused client gets 407 with
//! `Proxy-Authenticate` (or 403 off the allow-list) and a `denied` audit
//! line that never holds the password.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use argon2::password_hash::{rand_core::OsRng, PasswordHash, PasswordHasher, SaltString};
use argon2::{Argon2, PasswordVerifier};
use base64::Engine as _;
use http::header::{HeaderValue, PROXY_AUTHORIZATION};
use http::HeaderMap;
use sha2::{Digest, Sha256};

use crate::answer::{failure, Stop};
use crate::config::{Config, ProxyAuth};
use crate::datadir;
use crate::error::{AuthError, ConfigError};

pub use mannerly_policy::Cidr;

/// The check every request read on the proxy port goes through.
/// Password checks that may run at once (see `Gate::checking`).
const CHECKS_AT_ONCE: usize = 4;

pub(crate) struct Gate {
    allow: Vec<Cidr>,
    users: Option<HashMap<String, String>>,
    /// Credentials already verified (SHA-256 of the header value → user):
    /// an argon2 verification per request would cost more than proxying it.
    verified: Mutex<HashMap<[u8; 32], String>>,
    /// Verified against when the user is unknown, so that an unknown name
    /// takes as long as a wrong password.
    dummy: String,
    /// Password checks running at once. Each argon2 check takes ~19 MiB and
    /// a blocking thread; without a bound, a flood of wrong credentials
    /// (never cached) could take hundreds of both.
    checking: tokio::sync::Semaphore,
}

const VERIFIED_CAP: usize = 4096;

impl Gate {
    /// Reads the users file (when auth is on) and refuses a configuration
    /// that would be an open proxy on a non-loopback address.
    pub(crate) fn new(cfg: &Config) -> Result<Gate, AuthError> {
        let p = &cfg.proxy;
        let allow = p
            .allow
            .iter()
            .map(|s| Cidr::parse(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|why| ConfigError::Invalid {
                key: "proxy.allow".into(),
                why,
            })?;
        let users = match p.auth {
            ProxyAuth::None => None,
            ProxyAuth::Basic => Some(read_users(&users_path(cfg))?),
        };
        if !p.listen.ip().is_loopback() && users.is_none() && allow.is_empty() {
            if p.open {
                tracing::warn!(
                    "proxy.open = true: listening on {} with neither proxy.auth nor proxy.allow; anyone who can reach this address can use the proxy",
                    p.listen
                );
            } else {
                return Err(ConfigError::Invalid {
                    key: "proxy.listen".into(),
                    why: format!(
                        "{} is not a loopback address, and neither proxy.auth nor proxy.allow is set: anyone who can reach it could use the proxy. Set proxy.auth = \"basic\" (users via `mannerly users add NAME`), or proxy.allow = [\"10.0.0.0/8\", ...], or proxy.open = true to run an open proxy on purpose",
                        p.listen
                    ),
                }
                .into());
            }
        }
        let dummy = hash_password("not a password")?;
        Ok(Gate {
            allow,
            users,
            verified: Mutex::new(HashMap::new()),
            dummy,
            checking: tokio::sync::Semaphore::new(CHECKS_AT_ONCE),
        })
    }

    /// `Ok(user)` to go on (`None` when auth is off), or the refusal.
    pub(crate) async fn check(
        &self,
        headers: &HeaderMap,
        peer: SocketAddr,
    ) -> Result<Option<String>, Stop> {
        if !self.allow.is_empty() && !self.allow.iter().any(|c| c.contains(peer.ip())) {
            return Err(failure::client_not_allowed(peer.ip()));
        }
        let Some(users) = &self.users else {
            return Ok(None);
        };
        let mut given = headers.get_all(PROXY_AUTHORIZATION).iter();
        let Some(value) = given.next() else {
            return Err(failure::proxy_auth_required(
                "proxy authentication required (Proxy-Authorization: Basic)",
            ));
        };
        if given.next().is_some() {
            // Which one decides differs between proxies in a chain: the
            // request is refused rather than judged by one of them.
            return Err(failure::proxy_auth_twice());
        }
        let digest: [u8; 32] = Sha256::digest(value.as_bytes()).into();
        if let Some(u) = self
            .verified
            .lock()
            .ok()
            .and_then(|v| v.get(&digest).cloned())
        {
            return Ok(Some(u));
        }
        let Some((name, password)) = basic_credentials(value) else {
            return Err(failure::proxy_auth_required(
                "Proxy-Authorization is not Basic user:password",
            ));
        };
        let hash = users
            .get(&name)
            .cloned()
            .unwrap_or_else(|| self.dummy.clone());
        let known = users.contains_key(&name);
        let ok = match self.checking.acquire().await {
            Ok(_turn) => tokio::task::spawn_blocking(move || verify_password(&hash, &password))
                .await
                .unwrap_or(false),
            Err(_) => false,
        };
        if !(ok && known) {
            return Err(failure::proxy_auth_required(
                "unknown user or wrong password",
            ));
        }
        if let Ok(mut v) = self.verified.lock() {
            if v.len() >= VERIFIED_CAP {
                v.clear();
            }
            v.insert(digest, name.clone());
        }
        Ok(Some(name))
    }
}

fn basic_credentials(value: &HeaderValue) -> Option<(String, String)> {
    let v = value.to_str().ok()?.trim();
    let (scheme, token) = v.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, pass) = text.split_once(':')?;
    Some((user.to_string(), pass.to_string()))
}

fn verify_password(hash: &str, password: &str) -> bool {
    // argon2's comparison of the derived hash is constant-time.
    PasswordHash::new(hash).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

fn hash_password(password: &str) -> Result<String, AuthError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AuthError::Hash(e.to_string()))
}

/// The users file of `cfg`: `proxy.users_file`, else `users` in the data dir.
pub fn users_path(cfg: &Config) -> PathBuf {
    if cfg.proxy.users_file.is_empty() {
        cfg.data_dir.join("users")
    } else {
        PathBuf::from(&cfg.proxy.users_file)
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-@".contains(&b))
}

fn read_users(path: &Path) -> Result<HashMap<String, String>, AuthError> {
    let text = match datadir::read_key(path) {
        Ok(t) => t,
        Err(crate::error::DataDirError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Err(AuthError::NoUsers(path.to_path_buf()))
        }
        Err(e) => return Err(e.into()),
    };
    let mut users = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| AuthError::BadLine {
            path: path.to_path_buf(),
            line: i + 1,
            why: why.to_string(),
        };
        let (name, hash) = line
            .split_once(':')
            .ok_or_else(|| bad("expected NAME:HASH"))?;
        if !valid_name(name) {
            return Err(bad("user names are letters, digits and . _ - @"));
        }
        PasswordHash::new(hash).map_err(|_| bad("not an argon2 hash (PHC string)"))?;
        users.insert(name.to_string(), hash.to_string());
    }
    if users.is_empty() {
        return Err(AuthError::NoUsers(path.to_path_buf()));
    }
    Ok(users)
}

/// Adds or replaces `name` in the users file (created 0600), with an argon2
/// hash of `password`.
pub fn add_user(path: &Path, name: &str, password: &str) -> Result<(), AuthError> {
    if !valid_name(name) {
        return Err(AuthError::BadName(name.to_string()));
    }
    if password.is_empty() {
        return Err(AuthError::Hash("the password is empty".into()));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        datadir::prepare(dir)?;
    }
    let old = match datadir::read_key(path) {
        Ok(t) => t,
        Err(crate::error::DataDirError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            String::new()
        }
        Err(e) => return Err(e.into()),
    };
    let mut out: String = old
        .lines()
        .filter(|l| l.split_once(':').map(|(n, _)| n) != Some(name))
        .map(|l| format!("{l}\n"))
        .collect();
    out.push_str(&format!("{name}:{}\n", hash_password(password)?));
    datadir::write_atomic(path, out.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_blocks() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains("10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.0.0.1".parse().unwrap()));
        let h = Cidr::parse("::1").unwrap();
        assert!(h.contains("::1".parse().unwrap()));
        assert!(!h.contains("::2".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("ten").is_err());
    }

    #[test]
    fn users_file_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("users");
        add_user(&p, "alice", "s3cret").unwrap();
        add_user(&p, "bob", "pw").unwrap();
        add_user(&p, "alice", "new").unwrap();
        let users = read_users(&p).unwrap();
        assert_eq!(users.len(), 2);
        assert!(verify_password(&users["alice"], "new"));
        assert!(!verify_password(&users["alice"], "s3cret"));
        assert!(add_user(&p, "a:b", "x").is_err());
        let v = HeaderValue::from_static("Basic YWxpY2U6czNjcmV0");
        assert_eq!(
            basic_credentials(&v),
            Some(("alice".into(), "s3cret".into()))
        );
    }
}
