//! `mannerly audit verify|pubkey`.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use mannerly_policy::{
    hex, last_chain, parse_public_key, split_line, Checkpoint, Problem, Report, SealReason,
    Verifier, VerifyingKey,
};

/// Exit code for a log whose chain is intact but whose last lines no
/// checkpoint seals (a crash, or lines cut from the end).
const UNSEALED: u8 = 3;

/// Prints the audit public key of the data dir (creating the key if needed).
pub fn pubkey(config: Option<&Path>) -> Result<ExitCode> {
    let cfg = crate::settings::load(config)?;
    let key = mannerly_proxy::load_or_create_audit_key(&cfg.data_dir).context("audit key")?;
    println!("{}", mannerly_policy::hex(key.verifying_key().as_bytes()));
    Ok(ExitCode::SUCCESS)
}

/// A public key given as hex, or as a file holding the hex.
pub fn read_pubkey(arg: &str) -> Result<VerifyingKey> {
    if let Some(k) = parse_public_key(arg) {
        return Ok(k);
    }
    let text = std::fs::read_to_string(arg).with_context(|| {
        format!("--pubkey {arg}: neither a key (64 hex digits) nor a readable file")
    })?;
    match parse_public_key(&text) {
        Some(k) => Ok(k),
        None => bail!("--pubkey {arg}: the file does not hold a key (64 hex digits, as `mannerly audit pubkey` prints)"),
    }
}

/// The files to check, in log order: directories are expanded to their
/// audit files, rotated ones (`audit.jsonl.<time>`) before the current one.
pub fn log_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("reading {}", p.display()))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|f| {
                    f.is_file()
                        && f.file_name()
                            .is_some_and(|n| n.to_string_lossy().contains(".jsonl"))
                })
                .collect();
            found.sort_by_key(|f| order_key(f));
            if found.is_empty() {
                bail!(
                    "{}: no audit files (*.jsonl*) in this directory",
                    p.display()
                );
            }
            out.extend(found);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// `audit.jsonl.20261130T...` sorts by its time, and `audit.jsonl` after
/// every file rotated out of it.
fn order_key(f: &Path) -> (String, u8, String) {
    let name = f
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    match name.find(".jsonl") {
        Some(i) => {
            let base = name[..i + 6].to_string();
            let rest = name[i + 6..].to_string();
            let current = u8::from(rest.is_empty());
            (base, current, rest)
        }
        None => (name, 0, String::new()),
    }
}

/// Checks the chain (and, given the key, the checkpoints) of the files,
/// prints what it found, and exits 1 on tamper evidence, [`UNSEALED`] for
/// an unsealed tail, 0 otherwise. With a witness (its URL, or a file of
/// the heads it holds), also 1 when the witness holds a newer checkpoint
/// than the log: the log was cut after its last one.
pub fn verify(
    config: Option<&Path>,
    pubkey: Option<&str>,
    paths: &[PathBuf],
    witness: Option<&str>,
) -> Result<ExitCode> {
    let key = pubkey.map(read_pubkey).transpose()?;
    let files = log_files(paths)?;
    if files.is_empty() {
        bail!("no audit files given");
    }
    let heads = match (witness, &key) {
        (Some(w), Some(k)) => Some(witness_head(w, k)?),
        (Some(_), None) => {
            bail!("--witness needs --pubkey: the witness's heads are checked against the key")
        }
        _ => None,
    };
    let whole_set = files.len() > 1 || paths.iter().any(|p| p.is_dir());
    let mut v = Verifier::new(key).whole_set(whole_set);
    let mut seals = Seals::default();
    for f in &files {
        feed(&mut v, f, &mut seals)?;
    }
    let report = v.finish(|ts| {
        humantime::parse_rfc3339(ts)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64())
    });
    print_files(&report);
    let live = files.last().and_then(|f| writer_running(config, f));
    let mut code = verdict(&report, live.as_ref());
    if let (Some(bytes), Some(last)) = (report.torn, files.last()) {
        println!(
            "torn: {} ends in {bytes} bytes that are not a line and have no newline: the start of a line whose write the proxy died in (kill -9, power loss); no answer waited on it, and the proxy drops it when it next opens the file",
            last.display()
        );
        if report.problems.is_empty() && report.keyed {
            // Not a clean stop, whatever the checkpoints say.
            code = ExitCode::from(UNSEALED);
        }
    }
    match heads {
        Some(head) if !witnessed(&head, &seals) => Ok(ExitCode::from(1)),
        _ => Ok(code),
    }
}

/// The checkpoints a log holds, by chain value, and its last one.
#[derive(Default)]
struct Seals {
    chains: std::collections::HashSet<String>,
    last: Option<(String, u64, String)>,
}

/// The newest head the witness holds that `key` signed: its chain value
/// and checkpoint. Heads come in the order the witness received them.
pub(crate) fn witness_head(source: &str, key: &VerifyingKey) -> Result<(String, Checkpoint)> {
    let lines = if source.starts_with("http://") || source.starts_with("https://") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the runtime")?
            .block_on(mannerly_proxy::fetch_witness_heads(source))
            .map_err(|e| anyhow::anyhow!("--witness {e}"))?
    } else {
        std::fs::read_to_string(source)
            .with_context(|| format!("--witness {source}"))?
            .lines()
            .map(str::to_string)
            .collect()
    };
    let ours = hex(key.as_bytes());
    lines
        .iter()
        .rev()
        .find_map(|l| {
            let (content, chain) = split_line(l.trim())?;
            let cp: Checkpoint = serde_json::from_str(&content).ok()?;
            (cp.key == ours && cp.verify(key)).then(|| (chain.to_string(), cp))
        })
        .with_context(|| {
            format!(
                "--witness {source}: holds no checkpoint signed with this key ({} lines read)",
                lines.len()
            )
        })
}

/// Whether the log holds the witness's newest head; says which way.
fn witnessed((chain, cp): &(String, Checkpoint), seals: &Seals) -> bool {
    let why = format!("{:?}", cp.why).to_lowercase();
    if seals.chains.contains(chain) {
        println!(
            "witness: the log holds the witness's newest head ({why} checkpoint of {}), so nothing sealed up to it was cut",
            cp.ts
        );
        return true;
    }
    let last = seals.last.as_ref().map_or_else(
        || "the log has no checkpoint".to_string(),
        |(file, line, ts)| format!("the log's last checkpoint is {file} line {line} ({ts})"),
    );
    println!(
        "FAILED: cut: the witness holds a {why} checkpoint of {} (after line {} of its file) that the log does not; {last}: the lines after it were cut, or the log was rewritten",
        cp.ts, cp.lines
    );
    false
}

/// Gives the verifier one file, line by line, noting its checkpoints.
/// Bytes that are not UTF-8 are replaced rather than refused, so that the
/// chain check, not this reader, names the line as tampered with.
/// A line without a newline (a file's last) goes to the verifier as such:
/// the start of a line a crash cut is not tampering at the log's end.
fn feed(v: &mut Verifier, f: &Path, seals: &mut Seals) -> Result<()> {
    let name = f.display().to_string();
    v.start_file(&name);
    let mut n = 0;
    each_line_ended(f, |line, ended| {
        n += 1;
        if ended {
            v.line(line);
        } else {
            v.unended_line(line);
        }
        if line.contains("\"outcome\":\"checkpoint\"") {
            if let Some(chain) = last_chain(line) {
                seals.chains.insert(chain);
                let ts = line.get(7..31).unwrap_or("").to_string();
                seals.last = Some((name.clone(), n, ts));
            }
        }
        Ok(())
    })
}

/// One line per file: its length, whether its chain held, how far it is
/// sealed.
fn print_files(report: &Report) {
    let broken: Vec<&str> = report
        .problems
        .iter()
        .filter_map(|p| match p {
            Problem::Malformed { file, .. }
            | Problem::Broken { file, .. }
            | Problem::BadSignature { file, .. }
            | Problem::Rechained { file, .. }
            | Problem::Gap { file } => Some(file.as_str()),
            _ => None,
        })
        .collect();
    for f in &report.files {
        let seal = if f.checkpoints == 0 {
            "no checkpoint".to_string()
        } else {
            format!(
                "{} checkpoints, sealed through line {}",
                f.checkpoints, f.sealed_through
            )
        };
        if broken.contains(&f.name.as_str()) {
            println!("{}: {} lines read; {seal}", f.name, f.lines);
        } else {
            println!("{}: {} lines, chain intact; {seal}", f.name, f.lines);
        }
    }
}

/// A proxy that holds the lock of the data dir `file` is written from:
/// the dir, and the holder's PID. The dir is the file's own, or the
/// configured data dir when the configured log is this file.
fn writer_running(config: Option<&Path>, file: &Path) -> Option<(PathBuf, Option<u32>)> {
    let file = std::fs::canonicalize(file).ok()?;
    let mut dirs: Vec<PathBuf> = file.parent().map(Path::to_path_buf).into_iter().collect();
    if let Ok(cfg) = crate::settings::load(config) {
        if let mannerly_proxy::AuditTarget::File(p) = cfg.audit_target() {
            if std::fs::canonicalize(&p).ok().as_ref() == Some(&file) {
                dirs.push(cfg.data_dir.clone());
            }
        }
    }
    dirs.into_iter()
        .find_map(|d| mannerly_proxy::data_dir_holder(&d).map(|pid| (d, pid)))
}

/// The conclusion over the whole log, printed, and the exit code it gives.
/// `live`: the proxy that still writes the last file, if one runs.
fn verdict(report: &Report, live: Option<&(PathBuf, Option<u32>)>) -> ExitCode {
    if report.starts_mid_log {
        println!("note: the first file continues a log whose earlier files were not given; its first line is taken as it is");
    }
    if !report.problems.is_empty() {
        for p in &report.problems {
            println!("FAILED: {p}");
        }
        return ExitCode::from(1);
    }
    if !report.keyed {
        println!("chain intact. Checkpoint signatures not checked (no --pubkey): truncation and re-chaining cannot be detected without the key.");
        return ExitCode::SUCCESS;
    }
    let unsealed = report.unsealed_tail();
    let last = report.files.last().cloned().unwrap_or_default();
    if report.ends_sealed() {
        let why = match last.last_seal {
            Some(SealReason::Shutdown) => "clean shutdown",
            Some(SealReason::Rotation) => "rotation; the file is checked alone",
            Some(SealReason::Interval | SealReason::Continuation) | None => {
                "interval, written before shutdown seals were always written (checkpoint format 1), so a cut there cannot be told from a clean stop"
            }
        };
        println!("sealed: every line is covered by a checkpoint signed with the key (last: {why})");
        return ExitCode::SUCCESS;
    }
    if let Some((dir, pid)) = live {
        let who = pid.map_or_else(
            || "a mannerly".to_string(),
            |p| format!("mannerly (PID {p})"),
        );
        println!(
            "still being written: {who} runs on {} and writes {}; lines after its last checkpoint (line {}) are sealed at its next checkpoint or when it stops. Stop it and verify again, or read this as verified through line {}",
            dir.display(),
            last.name,
            last.sealed_through,
            last.sealed_through
        );
        return ExitCode::from(UNSEALED);
    }
    if unsealed == 0 {
        println!(
            "end unsealed: {} ends on an interval checkpoint (line {}), not on the shutdown checkpoint a clean stop writes: the proxy did not stop cleanly (crash, kill -9) or the log was cut at that checkpoint",
            last.name, last.sealed_through
        );
        return ExitCode::from(UNSEALED);
    }
    println!(
        "unsealed: the last {unsealed} lines of {} follow the last checkpoint (line {}); the proxy did not stop cleanly (crash, kill -9), which leaves at most one checkpoint interval unsealed, or lines after them were cut",
        last.name, last.sealed_through
    );
    ExitCode::from(UNSEALED)
}

/// Calls `f` with each line of a file, without its newline; bytes that are
/// not UTF-8 are replaced, so the proofs, not this reader, refuse them.
pub fn each_line(path: &Path, mut f: impl FnMut(&str) -> Result<()>) -> Result<()> {
    each_line_ended(path, |line, _| f(line))
}

/// [`each_line`], also saying whether the line ended with a newline (only
/// a file's last line can lack one).
fn each_line_ended(path: &Path, mut f: impl FnMut(&str, bool) -> Result<()>) -> Result<()> {
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
        let ended = buf.last() == Some(&b'\n');
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        if !line.is_empty() {
            f(line, ended)?;
        }
    }
}
