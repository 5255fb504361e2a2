//! `mannerly audit evidence` and `mannerly audit verify-evidence`: one
//! site's lines of a log with the proofs that they are all there, and the
//! check a site owner runs on them with the audit public key alone.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use mannerly_policy::{Evidence, EvidenceBuilder};

use crate::audit_cmd::{log_files, read_pubkey};

/// Writes the evidence for `host` from the log `paths` (files in order, or
/// directories) to `out`, and says what it holds.
pub fn write(host: &str, out: &Path, paths: &[PathBuf]) -> Result<ExitCode> {
    let files = log_files(paths)?;
    if files.is_empty() {
        bail!("no audit files given");
    }
    let mut b = EvidenceBuilder::new(host);
    for f in &files {
        let name = f
            .file_name()
            .map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into());
        b.start_file(&name).map_err(anyhow::Error::msg)?;
        each_line(f, |line| b.line(line).map_err(anyhow::Error::msg))?;
    }
    let evidence = b.finish().map_err(anyhow::Error::msg)?;
    let mut w = std::io::BufWriter::new(
        std::fs::File::create(out).with_context(|| format!("{}", out.display()))?,
    );
    serde_json::to_writer_pretty(&mut w, &evidence)
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(w))
        .and_then(|()| w.flush())
        .with_context(|| format!("writing {}", out.display()))?;
    let lines: usize = evidence.files.iter().map(|f| f.lines.len()).sum();
    let unsealed: u64 = evidence.files.iter().map(|f| f.unsealed).sum();
    println!(
        "{}: {lines} lines of {host} in {} files, each with its proof against the file's last signed checkpoint",
        out.display(),
        evidence.files.len()
    );
    if unsealed > 0 {
        println!("note: {unsealed} lines of {host} follow the last checkpoint and are not in the evidence yet (no checkpoint seals them)");
    }
    println!(
        "check it with: mannerly audit verify-evidence --pubkey {} {}",
        evidence.key,
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Checks an evidence file against the key: exit 0 when every line is in
/// the sealed log and none was left out, 1 naming the line otherwise.
pub fn verify(pubkey: &str, file: &Path) -> Result<ExitCode> {
    let key = read_pubkey(pubkey)?;
    let text = std::fs::read_to_string(file).with_context(|| format!("{}", file.display()))?;
    let evidence: Evidence = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a mannerly evidence file", file.display()))?;
    match evidence.verify(&key) {
        Err(problem) => {
            println!("FAILED: {problem}");
            Ok(ExitCode::from(1))
        }
        Ok(s) => {
            for (name, lines, ts, why) in &s.files {
                let why = format!("{why:?}").to_lowercase();
                println!(
                    "{name}: {lines} lines of {}, sealed by the {why} checkpoint of {ts}",
                    s.host
                );
            }
            let start = if s.starts_log {
                "from the start of the log"
            } else {
                "from the first file given (it continues an earlier one)"
            };
            println!(
                "verified: {} lines of {}, {start} to the last checkpoint, each in the log sealed with the key, none left out",
                s.lines, s.host
            );
            if !s.empty_files.is_empty() {
                println!(
                    "note: no line of {} in {}: the evidence shows none there, and cannot prove there is none",
                    s.host,
                    s.empty_files.join(", ")
                );
            }
            if s.unsealed > 0 {
                println!(
                    "note: {} later lines follow the last checkpoint and are not covered",
                    s.unsealed
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Calls `f` with each line of a file, without its newline; bytes that are
/// not UTF-8 are replaced, so the proofs, not this reader, refuse them.
pub fn each_line(path: &Path, mut f: impl FnMut(&str) -> Result<()>) -> Result<()> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).with_context(|| name.clone())?;
    let mut r = std::io::BufReader::with_capacity(256 * 1024, file);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if r.read_until(b'\n', &mut buf)
            .with_context(|| format!("reading {name}"))?
            == 0
        {
            return Ok(());
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        if !line.is_empty() {
            f(line)?;
        }
    }
}
