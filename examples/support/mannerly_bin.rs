//! Where the examples that run `mannerly` as a process find its binary.

use std::path::{Path, PathBuf};

/// `MANNERLY_BIN`, else the `mannerly` built beside the running example
/// (`target/<profile>/examples/x` -> `target/<profile>/mannerly`).
pub fn mannerly_bin() -> Result<PathBuf, Box<dyn std::error::Error + Send + Sync>> {
    if let Some(p) = std::env::var_os("MANNERLY_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("mannerly"))
        .ok_or("cannot find the mannerly binary; set MANNERLY_BIN")?;
    if !bin.exists() {
        return Err(format!(
            "{} not found: cargo build --release --bin mannerly (or set MANNERLY_BIN)",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}
