//! The audit signing key: Ed25519, `audit-key.pem` (PKCS#8 v1, as the
//! identity key: `mannerly_policy::identity::key_to_pem` says why) in the
//! data dir, created 0600 on first use, refused when it is not ours or not
//! private. Files in the v2 form written before still load.

use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use mannerly_policy::identity::{key_from_pem, key_to_pem};

use crate::datadir;
use crate::error::{AuditError, DataDirError};

/// File name of the key in the data dir.
pub(super) const KEY_FILE: &str = "audit-key.pem";

/// Where the audit key of `data_dir` lives.
pub fn key_path(data_dir: &Path) -> PathBuf {
    data_dir.join(KEY_FILE)
}

/// Loads the key, creating it on first use.
pub fn load_or_create(data_dir: &Path) -> Result<SigningKey, AuditError> {
    datadir::prepare(data_dir)?;
    let path = key_path(data_dir);
    if datadir::check_regular(&path)? {
        return load(&path);
    }
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed).map_err(|e| AuditError::Key {
        path: path.clone(),
        why: format!("no randomness for a new key: {e}"),
    })?;
    let key = SigningKey::from_bytes(&seed);
    let pem = key_to_pem(&seed).map_err(|e| AuditError::Key {
        path: path.clone(),
        why: e.to_string(),
    })?;
    let mut f = datadir::create_new(&path)?;
    std::io::Write::write_all(&mut f, pem.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|source| DataDirError::Io {
            path: path.clone(),
            source,
        })?;
    Ok(key)
}

/// Loads an existing key (refusing an unsafe file).
pub fn load(path: &Path) -> Result<SigningKey, AuditError> {
    let pem = datadir::read_key(path)?;
    key_from_pem(&pem).map_err(|e| AuditError::Key {
        path: path.to_path_buf(),
        why: e.to_string(),
    })
}
