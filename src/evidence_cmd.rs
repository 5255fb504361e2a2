//! `mannerly audit evidence` and `mannerly audit verify-evidence`: one
//! site's lines of a log with the proofs that they are all there, and the
//! check a site owner runs on them with the audit public key alone.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use mannerly_policy::{Evidence, EvidenceBuilder, SealReason};

use crate::audit_cmd::{each_line, log_files, read_pubkey, witness_head};

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
/// the sealed log and none was left out, 1 naming the line otherwise, 3
/// when every line holds but the evidence cannot show that it reaches the
/// log's end or that a file without the site's lines had none.
pub fn verify(pubkey: &str, file: &Path, witness: Option<&str>) -> Result<ExitCode> {
    let key = read_pubkey(pubkey)?;
    let head = witness.map(|w| witness_head(w, &key)).transpose()?;
    let text = std::fs::read_to_string(file).with_context(|| format!("{}", file.display()))?;
    let evidence: Evidence = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a mannerly evidence file", file.display()))?;
    let checked = evidence.verify(&key).and_then(|s| match &head {
        Some((chain, cp)) => evidence.witnessed(chain, cp).map(|()| s),
        None => Ok(s),
    });
    let s = match checked {
        Err(problem) => {
            println!("FAILED: {problem}");
            return Ok(ExitCode::from(1));
        }
        Ok(s) => s,
    };
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
    let mut sure = true;
    let end = match (&head, s.end) {
        (Some(_), _) => "to the witness's newest checkpoint".to_string(),
        (None, Some(SealReason::Shutdown | SealReason::Rotation)) => {
            "to the last checkpoint (a clean stop or a rotation)".to_string()
        }
        (None, end) => {
            sure = false;
            let why = format!("{end:?}").to_lowercase();
            format!("to a checkpoint ({why}) that is not where a log ends: the proxy was still running or stopped uncleanly, or later checkpoints were left out; --witness tells which")
        }
    };
    println!(
        "verified: {} lines of {}, {start} {end}, each in the log sealed with the key, none left out",
        s.lines, s.host
    );
    if !s.absent_files.is_empty() {
        println!(
            "no line of {} in {}: proven by each file's host tree",
            s.host,
            s.absent_files.join(", ")
        );
    }
    if !s.empty_files.is_empty() {
        sure = false;
        println!(
            "cannot tell: no line of {} in {}, whose checkpoints (format 3) cannot prove there is none: lines there may have been removed",
            s.host,
            s.empty_files.join(", ")
        );
    }
    if s.unsealed > 0 {
        println!(
            "note: the maker says {} later lines follow the last checkpoint and are not covered",
            s.unsealed
        );
    }
    Ok(if sure {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
