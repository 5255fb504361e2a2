//! `--fetch` for `mannerly robots check`: fetch one robots.txt the way the
//! proxy does (same client, same guard, same redirect rules).

use std::path::PathBuf;

use anyhow::{Context, Result};

/// The body of the robots.txt for `url`'s origin; `None` when the site has
/// none (4xx), an error when it cannot be had (5xx, network, redirects).
pub fn fetch(config: Option<PathBuf>, url: &str) -> Result<Option<Vec<u8>>> {
    let cfg = crate::settings::load(config.as_deref())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(mannerly_proxy::fetch_robots_once(&cfg, url))
        .map_err(|e| anyhow::anyhow!("{e}"))
}
