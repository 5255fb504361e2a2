//! The I/O side of mannerly: listener, CONNECT and TLS interception, the upstream client and the pipeline that carries each request through the policy crate's decisions; no policy rule is decided here.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

mod admin;
mod answer;
mod audit;
mod body;
mod cache;
mod clients;
mod clock;
mod config;
mod datadir;
mod decode;
mod error;
mod flights;
mod heap;
mod hosts;
mod identity;
mod listen;
mod payments;
mod pipeline;
mod shared;
mod target;
mod tls;
mod upstream;

pub use admin::{call as admin_call, AdminReply};
pub use audit::{
    fetch_witness_heads, key_path as audit_key_path, load_key as load_audit_key,
    load_or_create_key as load_or_create_audit_key, open as open_audit, rotated_files, AuditSink,
    AuditWriter, Written,
};
pub use clients::auth::{add_user, users_path, Cidr};
#[doc(hidden)]
pub use clients::intake::check_request_head;
pub use config::{
    AdminConfig, AuditConfig, AuditSync, AuditTarget, Config, CrawlerConfig, IdentityConfig,
    PolicyConfig, ProxyAuth, ProxyConfig, StateBackend, StateConfig, UpstreamConfig,
};
pub use datadir::{holder as data_dir_holder, lock as lock_data_dir, DataDirLock};
pub use error::{
    AuditError, AuthError, CaError, ConfigError, DataDirError, KeyFileError, StartError,
};
pub use identity::{KeyStore, Rotation, Signer};
pub use listen::server::{Proxy, Reloader};
pub use shared::Reloaded;
pub use tls::CertificateAuthority;

/// Fetches the robots.txt of `url`'s origin once, as the proxy would (same
/// client, guard and redirect rules): `Some(body)` on 2xx, `None` when the
/// site has none (4xx other than 429), an error when it cannot be known.
pub async fn fetch_robots_once(cfg: &Config, url: &str) -> Result<Option<Vec<u8>>, String> {
    use mannerly_policy::robots_cache::FetchResult;
    let uri: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let target = target::Target::from_absolute(&uri)?;
    let guard = upstream::Guard::new(&cfg.upstream, clock::Clock::system());
    let client = upstream::client(&cfg.upstream, guard, 0).map_err(|e| e.to_string())?;
    let robots_url = format!("{}robots.txt", target.url(None));
    let signer = identity::Signer::load(cfg).map_err(|e| e.to_string())?;
    let clock = clock::Clock::system();
    let report = hosts::robots::fetch(
        &client,
        &robots_url,
        None,
        cfg.robots.max_redirects,
        signer.as_deref().map(|s| (s, &clock)),
        None,
        None,
    )
    .await;
    match report.result {
        FetchResult::Body(b) => Ok(Some(b)),
        r if r.means_no_rules() => Ok(None),
        other => Err(mannerly_policy::robots_cache::classify(&other)
            .err()
            .unwrap_or_else(|| "unexpected answer".into())),
    }
}
