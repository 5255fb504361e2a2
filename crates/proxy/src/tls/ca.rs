//! The interception CA: created once in the data dir, then used to mint a
//! leaf certificate per server name, kept in a bounded in-memory cache.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::ServerConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};

use mannerly_state::hosts::{Bound, Tier};

use crate::datadir;
use crate::error::{CaError, DataDirError};

const CA_CERT_FILE: &str = "ca.pem";
const CA_KEY_FILE: &str = "ca-key.pem";
const CA_NAME: &str = "mannerly interception CA";

/// The CA and its leaf cache.
pub struct CertificateAuthority {
    cert_path: PathBuf,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    issuer: rcgen::Certificate,
    issuer_key: KeyPair,
    // One key for every leaf: minting stays cheap (no key generation per
    // host) and the leaves are worthless without the CA key anyway.
    leaf_key: KeyPair,
    /// Each leaf with a `minted` stamp.
    leaves: DashMap<String, (Arc<ServerConfig>, u64)>,
    minted: Bound,
    leaf_cap: usize,
    serial: AtomicU64,
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    dn.push(DnType::OrganizationName, "mannerly");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CaError + '_ {
    move |source| CaError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl CertificateAuthority {
    /// Loads the CA from `dir`, creating it (and `dir`) on first use. The key
    /// is written with mode 0600 and refused if group or others can read it.
    pub fn load_or_create(dir: &Path, leaf_cap: usize) -> Result<Self, CaError> {
        datadir::prepare(dir)?;
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        let (key, cert_pem) = if datadir::check_regular(&key_path)? {
            let key_pem = datadir::read_key(&key_path).map_err(|e| match e {
                DataDirError::KeyPermissions { path, mode } => {
                    CaError::KeyPermissions { path, mode }
                }
                e => CaError::DataDir(e),
            })?;
            let key = KeyPair::from_pem(&key_pem)?;
            datadir::check_regular(&cert_path)?;
            let cert_pem = match fs::read_to_string(&cert_path) {
                Ok(pem) => pem,
                // The certificate follows from the key; a lost one is made again.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let pem = new_ca_cert(&key)?;
                    datadir::write_atomic(&cert_path, pem.as_bytes())?;
                    pem
                }
                Err(e) => return Err(io_err(&cert_path)(e)),
            };
            (key, cert_pem)
        } else {
            let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
            let pem = new_ca_cert(&key)?;
            write_private(&key_path, key.serialize_pem().as_bytes())?;
            // Written through a temp file and a rename: a symlink planted
            // at ca.pem is replaced, never followed.
            datadir::write_atomic(&cert_path, pem.as_bytes())?;
            (key, pem)
        };
        let cert_der = rustls_pki_types::pem::PemObject::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| CaError::Io {
                path: cert_path.clone(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
            })?;
        // The issuer is rebuilt from the same name and key: leaves only carry
        // the issuer's name and key identifier, which both follow from these.
        let issuer = ca_params().self_signed(&key)?;
        Ok(CertificateAuthority {
            cert_path,
            cert_pem,
            cert_der,
            issuer,
            issuer_key: key,
            leaf_key: KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?,
            leaves: DashMap::new(),
            minted: Bound::default(),
            leaf_cap,
            serial: AtomicU64::new(0),
        })
    }

    /// Path of the CA certificate (PEM) that clients must trust.
    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }

    /// The CA certificate as PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A TLS server configuration presenting a leaf for `name` (a DNS name or
    /// an IP literal), minted on first use.
    pub fn server_config(&self, name: &str) -> Result<Arc<ServerConfig>, CaError> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(leaf) = self.leaves.get(&name) {
            return Ok(leaf.0.clone());
        }
        let cfg = Arc::new(self.mint(&name)?);
        self.leaves.insert(name, (cfg.clone(), self.minted.stamp()));
        // The earliest minted go first, an eighth of the cap at a time:
        // minting is cheap, so recency is not tracked on every handshake,
        // and no clearing of the whole map makes memory fall and climb.
        self.minted
            .hold(&self.leaves, self.leaf_cap, |_, l| Some((Tier::Idle, l.1)));
        Ok(cfg)
    }

    fn mint(&self, name: &str) -> Result<ServerConfig, CaError> {
        let bare = name.trim_start_matches('[').trim_end_matches(']');
        let mut params = CertificateParams::new(vec![bare.to_string()])?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, bare);
        params.distinguished_name = dn;
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + time::Duration::days(30);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.serial_number = Some(self.next_serial(bare));
        let leaf = params.signed_by(&self.leaf_key, &self.issuer, &self.issuer_key)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.serialize_der()));
        let mut cfg = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), self.cert_der.clone()], key)?;
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(cfg)
    }

    // Serials must differ between leaves of one issuer, or browsers reject
    // the second certificate they see for a reused serial.
    // Not the proxy clock: this only needs bits that differ between runs.
    #[allow(clippy::disallowed_methods)]
    fn next_serial(&self, name: &str) -> SerialNumber {
        let n = self.serial.fetch_add(1, Ordering::Relaxed);
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut h = Sha256::new();
        h.update(name.as_bytes());
        h.update(n.to_be_bytes());
        h.update(t.to_be_bytes());
        let mut bytes = h.finalize()[..16].to_vec();
        bytes[0] &= 0x7f;
        SerialNumber::from_slice(&bytes)
    }
}

fn new_ca_cert(key: &KeyPair) -> Result<String, CaError> {
    let mut params = ca_params();
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(3650);
    Ok(params.self_signed(key)?.pem())
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), CaError> {
    let mut f = datadir::create_new(path)?;
    f.write_all(bytes).map_err(io_err(path))?;
    f.sync_all().map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_then_loaded_with_the_same_certificate() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let a = CertificateAuthority::load_or_create(&dir, 4).unwrap();
        let b = CertificateAuthority::load_or_create(&dir, 4).unwrap();
        assert_eq!(a.cert_pem(), b.cert_pem());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.join(CA_KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
            fs::set_permissions(dir.join(CA_KEY_FILE), fs::Permissions::from_mode(0o644)).unwrap();
            let err = CertificateAuthority::load_or_create(&dir, 4).err().unwrap();
            assert!(matches!(err, CaError::KeyPermissions { .. }), "{err}");
        }
        for i in 0..10 {
            a.server_config(&format!("h{i}.test")).unwrap();
        }
        assert!(a.leaves.len() <= 4);
        // The earliest minted went; the last one is kept.
        assert!(a.leaves.contains_key("h9.test") && !a.leaves.contains_key("h0.test"));
        a.server_config("127.0.0.1").unwrap();
        a.server_config("[::1]").unwrap();
        let _ = fs::remove_dir_all(&dir);
    }
}
