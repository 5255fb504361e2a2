//! `Config::validate`: values that parse but cannot work, each named by its
//! key, checked section by section. The parsers the upstream client builds
//! its runtime pieces from (`upstream.resolve` keys, the parent proxy's
//! settings) live here too, so that a setting is judged by the same code at
//! start-up, on reload and when it is used.

use std::time::Duration;

use http::{HeaderName, HeaderValue};
use mannerly_policy::identity::{directory_origin, jwks_url, Form, Prefix, UaPolicy};
use mannerly_policy::parent::{NoProxy, ParentUrl};
use rustls_pki_types::ServerName;

use super::{
    AdminConfig, AuditConfig, Config, CrawlerConfig, IdentityConfig, ProxyConfig, StateBackend,
    StateConfig, UpstreamConfig,
};
use crate::error::ConfigError;

fn invalid(key: impl Into<String>, why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        why: why.into(),
    }
}

/// `Err` naming `key` unless `ok`.
fn require(ok: bool, key: &str, why: &str) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(invalid(key, why))
    }
}

impl Config {
    /// Checks values that parse but make no sense, naming the key.
    pub fn validate(self) -> Result<Self, ConfigError> {
        check_proxy(&self.proxy)?;
        check_upstream(&self.upstream)?;
        check_state(&self.state)?;
        check_audit(&self.audit)?;
        check_identity(&self.identity)?;
        check_crawler(&self.crawler)?;
        check_admin(&self.admin)?;
        require(
            self.policy.meta_prefix_bytes <= super::MAX_META_PREFIX,
            "policy.meta_prefix_bytes",
            "must be at most 1048576 (a page's head, not the page)",
        )?;
        let c = &self.crawler;
        mannerly_policy::robots::agents::validate(&c.agent, &c.purposes, &c.agents)?;
        let mut cfg = self;
        cfg.robots = cfg.robots.validate()?;
        cfg.budget = cfg.budget.validate()?;
        cfg.cache = cfg.cache.validate()?;
        cfg.payment = cfg.payment.validate()?;
        Ok(cfg)
    }
}

fn check_proxy(p: &ProxyConfig) -> Result<(), ConfigError> {
    require(
        p.max_header_bytes >= 1024,
        "proxy.max_header_bytes",
        "must be at least 1024",
    )?;
    for (key, v) in [
        ("proxy.max_headers", p.max_headers),
        ("proxy.max_connections", p.max_connections),
        (
            "proxy.max_connections_per_client",
            p.max_connections_per_client,
        ),
        ("proxy.backlog", p.backlog as usize),
        ("proxy.h2_max_streams", p.h2_max_streams as usize),
        ("proxy.leaf_cache", p.leaf_cache),
    ] {
        require(v != 0, key, "must be at least 1")?;
    }
    // Each serving thread is a runtime with its own origin pool; more than
    // this is a typo, not a machine.
    require(
        p.threads <= 1024,
        "proxy.threads",
        "must be between 0 (one per CPU) and 1024",
    )?;
    check_prefer_wait(p)
}

/// `proxy.prefer_wait`: keys a client can be known by, waits of a day at most.
fn check_prefer_wait(p: &ProxyConfig) -> Result<(), ConfigError> {
    for (who, secs) in &p.prefer_wait {
        let key = format!("proxy.prefer_wait.{who}");
        let named = !who.is_empty()
            && who
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-@:".contains(&b));
        require(
            who == "*" || named,
            &key,
            "must be a user name, a client address or \"*\"",
        )?;
        require(*secs <= 86_400, &key, "must be at most 86400 seconds")?;
    }
    Ok(())
}

fn check_upstream(u: &UpstreamConfig) -> Result<(), ConfigError> {
    for key in u.resolve.keys() {
        resolve_key(key)?;
    }
    parent_settings(u)?;
    require(
        u.max_connecting != 0,
        "upstream.max_connecting",
        "must be at least 1",
    )
}

fn check_state(st: &StateConfig) -> Result<(), ConfigError> {
    require(
        (1..=10_000).contains(&st.instances_hint),
        "state.instances_hint",
        "must be between 1 and 10000",
    )?;
    require(
        st.command_timeout_ms.is_finite() && (1.0..=10_000.0).contains(&st.command_timeout_ms),
        "state.command_timeout_ms",
        "must be between 1 and 10000",
    )?;
    require(
        st.lease_margin_secs.is_finite() && (0.0..=3600.0).contains(&st.lease_margin_secs),
        "state.lease_margin_secs",
        "must be between 0 and 3600",
    )?;
    let schemes = ["redis://", "unix://", mannerly_state::CLUSTER_SCHEME];
    if st.backend == StateBackend::Redis && !schemes.iter().any(|s| st.redis_url.starts_with(s)) {
        return Err(invalid(
            "state.redis_url",
            format!(
                "must start with redis:// (one node) or redis+cluster:// (a Redis Cluster) (got {:?})",
                st.redis_url
            ),
        ));
    }
    require(
        !st.share_pages || st.backend == StateBackend::Redis,
        "state.share_pages",
        "needs state.backend = \"redis\" (pages are shared through it)",
    )?;
    require(
        st.pages_ttl_secs.is_finite() && st.pages_ttl_secs >= 1.0,
        "state.pages_ttl_secs",
        "must be at least 1",
    )?;
    // The host inside braces is each key's hash tag: braces in the prefix
    // would put every key of the crawl in one Cluster slot.
    require(
        !st.key_prefix.contains(['{', '}']),
        "state.key_prefix",
        "must not contain { or }",
    )?;
    Ok(())
}

fn check_audit(a: &AuditConfig) -> Result<(), ConfigError> {
    require(
        a.checkpoint_lines != 0,
        "audit.checkpoint_lines",
        "must be at least 1",
    )?;
    require(
        a.checkpoint_secs != 0,
        "audit.checkpoint_secs",
        "must be at least 1",
    )?;
    let witness = a.witness.trim();
    if !witness.is_empty() {
        let ok = witness
            .parse::<http::Uri>()
            .is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
        require(
            ok,
            "audit.witness",
            "must be an http:// or https:// URL (the endpoint checkpoint heads are POSTed to)",
        )?;
    }
    let every = a.rotate_every.trim();
    if every.is_empty() {
        return Ok(());
    }
    match humantime::parse_duration(every) {
        Ok(d) if d >= Duration::from_secs(1) => Ok(()),
        Ok(_) => Err(invalid("audit.rotate_every", "must be at least one second")),
        Err(e) => Err(invalid(
            "audit.rotate_every",
            format!(
                "{:?} is not a duration like \"1d\" or \"12h\": {e}",
                a.rotate_every
            ),
        )),
    }
}

/// The User-Agent, the page and the ranges: a value that would not parse
/// is refused at start rather than sent or published wrong.
fn check_crawler(c: &CrawlerConfig) -> Result<(), ConfigError> {
    if !c.user_agent.is_empty() {
        UaPolicy::new(&c.user_agent, c.user_agent_mode, c.browser_user_agent)
            .map_err(|e| invalid("crawler.user_agent", e.to_string()))?;
    }
    for r in &c.egress_ranges {
        Prefix::parse(r).map_err(|e| invalid("crawler.egress_ranges", e))?;
    }
    require(
        !c.user_agent.is_empty() || (c.about.is_empty() && c.egress_ranges.is_empty()),
        "crawler.user_agent",
        "needed by crawler.about and crawler.egress_ranges (the page names the crawler by it)",
    )
}

fn check_identity(id: &IdentityConfig) -> Result<(), ConfigError> {
    if id.validity_secs == 0 || id.validity_secs > 86_400 {
        return Err(invalid(
            "identity.validity_secs",
            format!(
                "must be between 1 and 86400 (the draft recommends at most 24 h), got {}",
                id.validity_secs
            ),
        ));
    }
    if id.enabled || !id.signature_agent.is_empty() {
        let url = jwks_url(&id.signature_agent)
            .map_err(|e| invalid("identity.signature_agent", e.to_string()))?;
        if id.forms().uses(Form::Directory03) {
            directory_origin(&url)
                .map_err(|e| invalid("identity.signature_agent", e.to_string()))?;
        }
    }
    require(
        !id.host_forms.keys().any(|h| h.trim().is_empty()),
        "identity.host_forms",
        "a host is empty",
    )?;
    require(
        !id.skip_hosts.iter().any(|h| h.trim().is_empty()),
        "identity.skip_hosts",
        "an entry is empty",
    )
}

fn check_admin(a: &AdminConfig) -> Result<(), ConfigError> {
    a.addr()?;
    require(a.max_hosts != 0, "admin.max_hosts", "must be at least 1")
}

/// An `upstream.resolve` key, `"name:port"` → (lower-case name, port); a
/// wildcard is `*.` and a suffix, nothing else.
pub(crate) fn resolve_key(key: &str) -> Result<(String, u16), ConfigError> {
    let bad = |why: &str| invalid(format!("upstream.resolve.\"{key}\""), why);
    let (name, port) = key
        .rsplit_once(':')
        .ok_or_else(|| bad("keys are \"name:port\""))?;
    let port = port
        .parse::<u16>()
        .map_err(|_| bad("keys are \"name:port\""))?;
    let name = name.trim_start_matches('[').trim_end_matches(']');
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() {
        return Err(bad("keys are \"name:port\""));
    }
    let rest = name.strip_prefix("*.").unwrap_or(&name);
    if rest.is_empty() || rest.contains('*') {
        return Err(bad(
            "a wildcard is \"*.\" followed by a name, e.g. \"*.test:80\"",
        ));
    }
    Ok((name.clone(), port))
}

/// The parent proxy settings of `[upstream]`, parsed with the policy
/// crate's parsers; the upstream client adds the TLS connector.
pub(crate) struct ParentSettings {
    /// `upstream.proxy`.
    pub(crate) url: ParentUrl,
    /// `Basic …` for `Proxy-Authorization`, marked sensitive.
    pub(crate) auth: Option<HeaderValue>,
    /// `upstream.no_proxy`.
    pub(crate) no_proxy: NoProxy,
    /// `upstream.status_header`.
    pub(crate) status_header: Option<HeaderName>,
    /// The TLS name of an `https://` parent.
    pub(crate) tls_name: Option<ServerName<'static>>,
}

/// `None` when no parent is set.
pub(crate) fn parent_settings(u: &UpstreamConfig) -> Result<Option<ParentSettings>, ConfigError> {
    let bad = |key: &str, why: String| invalid(format!("upstream.{key}"), why);
    let no_proxy = NoProxy::parse(&u.no_proxy).map_err(|e| bad("no_proxy", e.to_string()))?;
    let status_header = match u.status_header.trim() {
        "" => None,
        name => Some(HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            bad(
                "status_header",
                "must be a header name, e.g. \"original_status\"".into(),
            )
        })?),
    };
    if u.proxy.trim().is_empty() {
        if status_header.is_some() {
            return Err(bad(
                "status_header",
                "applies only to answers through a parent: set upstream.proxy too".into(),
            ));
        }
        return Ok(None);
    }
    // The message never repeats the URL: it may hold a password.
    let url = ParentUrl::parse(u.proxy.trim()).map_err(|e| {
        bad(
            "proxy",
            format!("{e} (expected http://[user:pass@]host:port or https://…)"),
        )
    })?;
    let auth = match url.basic_auth() {
        Some(a) => {
            let mut v = HeaderValue::from_str(&a)
                .map_err(|_| bad("proxy", "the credentials cannot be sent in a header".into()))?;
            v.set_sensitive(true);
            Some(v)
        }
        None => None,
    };
    let tls_name = match url.tls {
        true => Some(
            ServerName::try_from(url.host.clone())
                .map_err(|_| bad("proxy", format!("{} is not a TLS server name", url.host)))?,
        ),
        false => None,
    };
    Ok(Some(ParentSettings {
        url,
        auth,
        no_proxy,
        status_header,
        tls_name,
    }))
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use mannerly_policy::conditional::CacheParams;

    #[test]
    fn cache_settings_that_cannot_work_name_their_key() {
        let cfg = Config {
            cache: CacheParams {
                max_size: 1024,
                ..CacheParams::default()
            },
            ..Config::default()
        };
        let err = cfg.validate().map(drop).map_err(|e| e.to_string());
        assert_eq!(
            err,
            Err("config key cache.max_size: 1024 is below cache.max_body (8388608): nothing could be stored".into())
        );
        let cfg = Config {
            cache: CacheParams {
                max_body: 0,
                ..CacheParams::default()
            },
            ..Config::default()
        };
        let err = cfg.validate().map(drop).map_err(|e| e.to_string());
        assert!(err.is_err_and(|e| e.starts_with("config key cache.max_body:")));
    }

    #[test]
    fn serving_threads_default_to_one_per_cpu_and_are_bounded() {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(ProxyConfig::default().serving_threads(), cpus);
        let mut cfg = Config::default();
        cfg.proxy.threads = 3;
        assert_eq!(cfg.proxy.serving_threads(), 3);
        assert!(cfg.clone().validate().is_ok());
        cfg.proxy.threads = 5000;
        let err = cfg.validate().map(drop).map_err(|e| e.to_string());
        assert!(
            err.as_ref()
                .is_err_and(|e| e.starts_with("config key proxy.threads:")),
            "{err:?}"
        );
    }
}
