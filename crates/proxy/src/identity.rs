//! Web Bot Auth keys on disk, and the signer the request path calls. The
//! signing rule itself is `mannerly_policy::identity`; this module reads
//! and writes key files, enforces their mode, and picks up a rotated key
//! while the proxy runs.
//!
//! Files (next to each other): the signing key (`identity.key_file`,
//! Ed25519, PKCS#8 PEM, mode 0600); `<key file stem>.retired.json`, the
//! public halves of rotated-out keys with the time their overlap ends; and
//! `<key file stem>.retired-<keyid>.pem` (0600), the private half of each
//! retired key for its overlap, with which it signs the directory it is
//! listed in (-01 Appendix B: one possession proof per listed key) and
//! nothing else. The directory is the signing key plus every retired key
//! still in its overlap; a retired key's file is deleted once its overlap
//! is over (at the next rotation, or the next directory built).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ed25519_dalek::{SigningKey, VerifyingKey};
use mannerly_policy::identity::{
    directory_json, jwk_x, key_from_pem, key_to_pem, DirectoryKey, Forms, Identity, KeyId,
    SignedDirectory,
};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::error::KeyFileError;

/// How often a running proxy looks for a rotated key.
const WATCH_EVERY: Duration = Duration::from_secs(5);

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> KeyFileError + '_ {
    move |source| KeyFileError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A key rotated out: its public half and when it leaves the directory.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Retired {
    /// JWK `x` (base64url public key).
    x: String,
    /// When it was rotated out (Unix seconds).
    retired_at: u64,
    /// When it leaves the directory (Unix seconds).
    until: u64,
}

#[derive(Default, Serialize, Deserialize)]
struct RetiredFile {
    retired: Vec<Retired>,
}

/// What `rotate` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// The key that signed until now; stays in the directory until `until`.
    pub old: KeyId,
    /// The key that signs from now on.
    pub new: KeyId,
    /// End of the overlap (Unix seconds).
    pub until: u64,
}

/// The identity's files.
#[derive(Clone, Debug)]
pub struct KeyStore {
    key_path: PathBuf,
    retired_path: PathBuf,
}

impl KeyStore {
    /// The key files of `cfg`: `identity.key_file`, or `identity-key.pem`
    /// in the data dir when that is empty.
    pub fn of(cfg: &Config) -> KeyStore {
        KeyStore::at(cfg.identity_key_path())
    }

    /// The key files around `key_path`.
    pub fn at(key_path: PathBuf) -> KeyStore {
        let stem = key_path.file_stem().map_or_else(
            || "identity-key".into(),
            |s| s.to_string_lossy().into_owned(),
        );
        let retired_path = key_path.with_file_name(format!("{stem}.retired.json"));
        KeyStore {
            key_path,
            retired_path,
        }
    }

    /// The signing key's file.
    pub fn key_path(&self) -> &Path {
        &self.key_path
    }

    /// Writes a new signing key. An existing key is kept unless `force`
    /// (then it is replaced outright; `rotate` keeps it in the directory).
    pub fn init(&self, force: bool) -> Result<KeyId, KeyFileError> {
        if self.key_path.exists() && !force {
            return Err(KeyFileError::Exists {
                path: self.key_path.clone(),
            });
        }
        let key = self.write_new_key()?;
        Ok(KeyId::of(&key.verifying_key()))
    }

    /// The signing key, refused if group or others can read its file.
    pub fn load(&self) -> Result<SigningKey, KeyFileError> {
        key_from_pem(&self.read_pem()?).map_err(|e| KeyFileError::Key {
            path: self.key_path.clone(),
            why: e.to_string(),
        })
    }

    fn read_pem(&self) -> Result<String, KeyFileError> {
        if !self.key_path.exists() {
            return Err(KeyFileError::Missing {
                path: self.key_path.clone(),
            });
        }
        check_key_mode(&self.key_path)?;
        fs::read_to_string(&self.key_path).map_err(io_err(&self.key_path))
    }

    /// A new signing key; the current one stays in the directory for
    /// `overlap` after `now`. Retired keys whose overlap is over are dropped.
    pub fn rotate(&self, overlap: Duration, now: SystemTime) -> Result<Rotation, KeyFileError> {
        let old = self.load()?.verifying_key();
        let until = unix(now).saturating_add(overlap.as_secs());
        let mut file = self.read_retired()?;
        file.retired.push(Retired {
            x: jwk_x(&old),
            retired_at: unix(now),
            until,
        });
        // The old key's private half first, then the retired list: should
        // a later write fail, the old key still signs and is listed twice,
        // which verifies fine.
        let pem = fs::read_to_string(&self.key_path).map_err(io_err(&self.key_path))?;
        replace_file(
            &self.retired_key_path(&KeyId::of(&old)),
            pem.as_bytes(),
            0o600,
        )?;
        self.write_retired(&file)?;
        self.prune(now)?;
        let new = self.write_new_key()?;
        Ok(Rotation {
            old: KeyId::of(&old),
            new: KeyId::of(&new.verifying_key()),
            until,
        })
    }

    /// The keys a verifier needs at `now`: the signing key first, then the
    /// retired keys still in their overlap (with `exp`).
    pub fn directory_keys(&self, now: SystemTime) -> Result<Vec<DirectoryKey>, KeyFileError> {
        let mut keys = vec![DirectoryKey {
            key: self.load()?.verifying_key(),
            nbf: None,
            exp: None,
        }];
        for r in self.read_retired()?.retired {
            if r.until <= unix(now) {
                continue;
            }
            let key = public_from_x(&r.x).ok_or_else(|| KeyFileError::Key {
                path: self.retired_path.clone(),
                why: format!("{:?} is not an Ed25519 public key", r.x),
            })?;
            if keys.iter().all(|k| k.key != key) {
                keys.push(DirectoryKey {
                    key,
                    nbf: None,
                    exp: Some(r.until),
                });
            }
        }
        Ok(keys)
    }

    /// The private halves of the retired keys still in their overlap at
    /// `now` (those rotated out before their halves were kept have none):
    /// they sign the directory, never a request.
    pub fn retired_signing_keys(&self, now: SystemTime) -> Result<Vec<SigningKey>, KeyFileError> {
        let mut keys = Vec::new();
        for r in self.read_retired()?.retired {
            let Some(public) = public_from_x(&r.x).filter(|_| r.until > unix(now)) else {
                continue;
            };
            let path = self.retired_key_path(&KeyId::of(&public));
            if !path.exists() {
                continue;
            }
            check_key_mode(&path)?;
            let pem = fs::read_to_string(&path).map_err(io_err(&path))?;
            let key = key_from_pem(&pem).map_err(|e| KeyFileError::Key {
                path: path.clone(),
                why: e.to_string(),
            })?;
            if key.verifying_key() != public {
                return Err(KeyFileError::Key {
                    path,
                    why: format!("is not the private half of the retired key {:?}", r.x),
                });
            }
            keys.push(key);
        }
        Ok(keys)
    }

    /// Deletes what rotated-out keys left whose overlap is over at `now`:
    /// their private halves, and their lines in the retired list.
    pub fn prune(&self, now: SystemTime) -> Result<(), KeyFileError> {
        let mut file = self.read_retired()?;
        let before = file.retired.len();
        let (live, over): (Vec<Retired>, Vec<Retired>) =
            file.retired.drain(..).partition(|r| r.until > unix(now));
        for r in &over {
            if let Some(public) = public_from_x(&r.x) {
                let path = self.retired_key_path(&KeyId::of(&public));
                match fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(io_err(&path)(e))
                    }
                    _ => {}
                }
            }
        }
        file.retired = live;
        if file.retired.len() != before {
            self.write_retired(&file)?;
        }
        Ok(())
    }

    fn retired_key_path(&self, keyid: &KeyId) -> PathBuf {
        let stem = self.key_path.file_stem().map_or_else(
            || "identity-key".into(),
            |s| s.to_string_lossy().into_owned(),
        );
        self.key_path
            .with_file_name(format!("{stem}.retired-{keyid}.pem"))
    }

    /// The directory JSON to serve at
    /// `/.well-known/http-message-signatures-directory`.
    pub fn directory(&self, now: SystemTime) -> Result<String, KeyFileError> {
        Ok(directory_json(&self.directory_keys(now)?))
    }

    fn read_retired(&self) -> Result<RetiredFile, KeyFileError> {
        match fs::read_to_string(&self.retired_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| KeyFileError::Key {
                path: self.retired_path.clone(),
                why: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RetiredFile::default()),
            Err(e) => Err(io_err(&self.retired_path)(e)),
        }
    }

    fn write_retired(&self, file: &RetiredFile) -> Result<(), KeyFileError> {
        let text = serde_json::to_string_pretty(file).map_err(|e| KeyFileError::Key {
            path: self.retired_path.clone(),
            why: e.to_string(),
        })?;
        replace_file(&self.retired_path, text.as_bytes(), 0o644)
    }

    fn write_new_key(&self) -> Result<SigningKey, KeyFileError> {
        let mut seed = [0u8; 32];
        getrandom::getrandom(&mut seed).map_err(|e| KeyFileError::Random(e.to_string()))?;
        let pem = key_to_pem(&seed).map_err(|e| KeyFileError::Key {
            path: self.key_path.clone(),
            why: e.to_string(),
        })?;
        replace_file(&self.key_path, pem.as_bytes(), 0o600)?;
        Ok(SigningKey::from_bytes(&seed))
    }
}

fn public_from_x(x: &str) -> Option<VerifyingKey> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(x)
        .ok()?;
    VerifyingKey::try_from(bytes.as_slice()).ok()
}

/// Writes `path` whole or not at all: a temporary file with `mode` in the
/// same directory, synced, then renamed over it. A reader (the running
/// proxy) never sees half a key.
fn replace_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), KeyFileError> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let name = path
        .file_name()
        .map_or_else(|| "key".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let written = opts.open(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written.and_then(|()| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(path)(e));
    }
    Ok(())
}

#[cfg(unix)]
fn check_key_mode(path: &Path) -> Result<(), KeyFileError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(path)
        .map_err(io_err(path))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Permissions {
            path: path.to_path_buf(),
            mode: mode & 0o777,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_key_mode(_path: &Path) -> Result<(), KeyFileError> {
    Ok(())
}

/// The signer the request path uses: the current [`Identity`], swapped for
/// a new one when the key file changes (after `mannerly identity rotate`).
pub struct Signer {
    current: RwLock<Arc<Identity>>,
    store: KeyStore,
    pem: Mutex<String>,
    agent_url: String,
    validity: Duration,
    skip_hosts: Vec<String>,
    forms: Forms,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("identity", &self.identity())
            .finish()
    }
}

impl Signer {
    /// The signer of `cfg`, or `None` when `identity.enabled` is false.
    pub fn load(cfg: &Config) -> Result<Option<Arc<Signer>>, KeyFileError> {
        let id = &cfg.identity;
        if !id.enabled {
            return Ok(None);
        }
        let store = KeyStore::of(cfg);
        let pem = store.read_pem()?;
        let signer = Signer {
            current: RwLock::new(Arc::new(Self::build(
                &store,
                &pem,
                &id.signature_agent,
                Duration::from_secs(id.validity_secs),
                &id.skip_hosts,
                &id.forms(),
            )?)),
            store,
            pem: Mutex::new(pem),
            agent_url: id.signature_agent.clone(),
            validity: Duration::from_secs(id.validity_secs),
            skip_hosts: id.skip_hosts.clone(),
            forms: id.forms(),
        };
        Ok(Some(Arc::new(signer)))
    }

    fn build(
        store: &KeyStore,
        pem: &str,
        agent: &str,
        validity: Duration,
        skip: &[String],
        forms: &Forms,
    ) -> Result<Identity, KeyFileError> {
        let key = key_from_pem(pem).map_err(|e| KeyFileError::Key {
            path: store.key_path.clone(),
            why: e.to_string(),
        })?;
        Identity::new(key, agent, validity, skip, forms.clone()).map_err(|e| KeyFileError::Key {
            path: store.key_path.clone(),
            why: e.to_string(),
        })
    }

    /// The identity signing right now.
    pub fn identity(&self) -> Arc<Identity> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Signs a request's headers for `authority` at `now` (see
    /// [`Identity::sign`]).
    pub fn sign_headers(
        &self,
        headers: &mut http::HeaderMap,
        authority: &str,
        now: SystemTime,
    ) -> Option<KeyId> {
        self.identity().sign_headers(headers, authority, now)
    }

    /// The key directory as served: every key of the store at `now` (the
    /// retired ones for their overlap), signed by each of them (the key
    /// signing now first), for a verifier that asked `authority`. Retired
    /// keys whose overlap is over are deleted first. Reads and writes the
    /// key files: call it off the serving threads.
    pub fn directory(
        &self,
        authority: &str,
        now: SystemTime,
    ) -> Result<SignedDirectory, KeyFileError> {
        if let Err(e) = self.store.prune(now) {
            tracing::warn!("identity: retired keys past their overlap not deleted: {e}");
        }
        let keys = self.store.directory_keys(now)?;
        // The key file's key first: right after a rotation it is listed
        // before this signer has picked it up.
        let mut signing = vec![self.store.load()?];
        signing.extend(self.store.retired_signing_keys(now)?);
        let current = self.identity();
        Ok(current.signed_directory(&keys, &signing, authority, now))
    }

    /// Loads the key file again if its content changed. `Ok(true)` when the
    /// signing key was replaced. On an error the current key keeps signing.
    pub fn reload(&self) -> Result<bool, KeyFileError> {
        let pem = self.store.read_pem()?;
        let mut last = self.pem.lock().unwrap_or_else(|p| p.into_inner());
        if *last == pem {
            return Ok(false);
        }
        let id = Self::build(
            &self.store,
            &pem,
            &self.agent_url,
            self.validity,
            &self.skip_hosts,
            &self.forms,
        )?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(id);
        *last = pem;
        Ok(true)
    }

    /// Looks for a rotated key every few seconds while the signer is in
    /// use (a task on the current tokio runtime).
    pub fn watch(self: &Arc<Self>) {
        let every = WATCH_EVERY;
        let weak: Weak<Signer> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(signer) = weak.upgrade() else { return };
                let store = signer.clone();
                let result = tokio::task::spawn_blocking(move || store.reload()).await;
                match result {
                    Ok(Ok(true)) => tracing::info!(
                        keyid = %signer.identity().keyid(),
                        "identity: signing with the rotated key"
                    ),
                    Ok(Ok(false)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!("identity: key file not reloaded, old key still signs: {e}")
                    }
                    Err(e) => tracing::warn!("identity: reload task failed: {e}"),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IdentityConfig;

    fn cfg(dir: &Path) -> Config {
        Config {
            data_dir: dir.to_path_buf(),
            identity: IdentityConfig {
                enabled: true,
                signature_agent: "https://crawler.example".into(),
                ..IdentityConfig::default()
            },
            ..Config::default()
        }
    }

    fn parts() -> http::request::Parts {
        http::Request::get("http://example.com/")
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn init_writes_a_0600_key_and_refuses_to_overwrite_without_force() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::of(&cfg(dir.path()));
        assert_eq!(store.key_path(), dir.path().join("identity-key.pem"));
        let first = store.init(false).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(store.key_path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(matches!(
            store.init(false),
            Err(KeyFileError::Exists { .. })
        ));
        assert_eq!(KeyId::of(&store.load().unwrap().verifying_key()), first);
        let second = store.init(true).unwrap();
        assert_ne!(first, second);
    }

    #[cfg(unix)]
    #[test]
    fn a_key_readable_by_others_is_refused_with_the_fix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(dir.path());
        let store = KeyStore::of(&c);
        store.init(false).unwrap();
        fs::set_permissions(store.key_path(), fs::Permissions::from_mode(0o644)).unwrap();
        let err = Signer::load(&c).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
    }

    #[test]
    fn missing_or_garbage_keys_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(dir.path());
        let err = Signer::load(&c).unwrap_err().to_string();
        assert!(
            err.contains("identity-key.pem") && err.contains("identity init"),
            "{err}"
        );
        replace_file(&c.identity_key_path(), b"not a key", 0o600).unwrap();
        let err = Signer::load(&c).unwrap_err().to_string();
        assert!(
            err.contains("identity-key.pem") && err.contains("PKCS#8"),
            "{err}"
        );
    }

    #[test]
    fn rotation_switches_signing_and_keeps_the_old_key_listed_for_the_overlap() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(dir.path());
        let store = KeyStore::of(&c);
        let old = store.init(false).unwrap();
        let signer = Signer::load(&c).unwrap().unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            signer.sign_headers(&mut parts().headers, "example.com", now),
            Some(old.clone())
        );

        let r = store.rotate(Duration::from_secs(3600), now).unwrap();
        assert_eq!(r.old, old);
        assert_eq!(r.until, 1_700_003_600);
        assert!(signer.reload().unwrap(), "rotated key picked up");
        assert!(!signer.reload().unwrap(), "unchanged file, no reload");
        assert_eq!(
            signer.sign_headers(&mut parts().headers, "example.com", now),
            Some(r.new.clone())
        );

        let listed = |t: u64| -> Vec<String> {
            let json = store
                .directory(UNIX_EPOCH + Duration::from_secs(t))
                .unwrap();
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            v["keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k["kid"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            listed(1_700_000_001),
            vec![r.new.to_string(), old.to_string()]
        );
        assert_eq!(listed(1_700_003_600), vec![r.new.to_string()]);
    }

    #[test]
    fn a_retired_key_signs_the_directory_for_its_overlap_and_is_deleted_after() {
        let dir = tempfile::tempdir().unwrap();
        let c = cfg(dir.path());
        let store = KeyStore::of(&c);
        let old = store.init(false).unwrap();
        let signer = Signer::load(&c).unwrap().unwrap();
        let at = |t: u64| UNIX_EPOCH + Duration::from_secs(t);
        let r = store
            .rotate(Duration::from_secs(3600), at(1_700_000_000))
            .unwrap();
        let kept = dir.path().join(format!("identity-key.retired-{old}.pem"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&kept).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let retired = store.retired_signing_keys(at(1_700_000_001)).unwrap();
        assert_eq!(
            retired
                .iter()
                .map(|k| KeyId::of(&k.verifying_key()))
                .collect::<Vec<_>>(),
            vec![old.clone()]
        );
        // Before the signer has picked the new key up, and after: both sign.
        for reloaded in [false, true] {
            if reloaded {
                assert!(signer.reload().unwrap());
            }
            let d = signer
                .directory("crawler.example", at(1_700_000_001))
                .unwrap();
            for keyid in [&r.new, &old] {
                assert!(
                    d.signature_input.contains(&format!("keyid=\"{keyid}\"")),
                    "{keyid} in {}",
                    d.signature_input
                );
            }
            assert_eq!(d.signature.matches("binding").count(), 2, "{}", d.signature);
        }
        // Once the overlap is over: listed no more, signs no more, deleted.
        let d = signer
            .directory("crawler.example", at(1_700_003_600))
            .unwrap();
        assert!(
            !d.signature_input.contains(old.as_str()),
            "{}",
            d.signature_input
        );
        assert_eq!(d.signature.matches("binding").count(), 1);
        assert!(!kept.exists(), "the retired private half is deleted");
        assert!(store
            .retired_signing_keys(at(1_700_000_001))
            .unwrap()
            .is_empty());
        // A tampered retired file is an error naming it, not a silent signer.
        let r2 = store
            .rotate(Duration::from_secs(3600), at(1_700_010_000))
            .unwrap();
        let kept2 = dir
            .path()
            .join(format!("identity-key.retired-{}.pem", r2.old));
        replace_file(&kept2, key_to_pem(&[3u8; 32]).unwrap().as_bytes(), 0o600).unwrap();
        let err = store
            .retired_signing_keys(at(1_700_010_001))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("retired-") && err.contains("private half"),
            "{err}"
        );
    }

    #[test]
    fn disabled_identity_loads_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cfg(dir.path());
        c.identity.enabled = false;
        assert!(Signer::load(&c).unwrap().is_none());
    }
}
