//! The log's files on disk: opening one to go on from its last line, the
//! chain value a new file continues, and the names of rotated files.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use mannerly_policy::{last_chain, split_line, Checkpoint, FileTrees, SealReason, GENESIS};

use crate::clock::Clock;
use crate::datadir;
use crate::error::AuditError;

/// Opens `path` for appending: its line count and the chain value to go on
/// from (the last line's, or the newest rotated file's when `path` is new).
pub(super) fn open_file(path: &Path) -> Result<(File, u64, String), AuditError> {
    let mut file = datadir::open_append(path)?;
    let log = |e: io::Error| AuditError::Log(format!("{}: {e}", path.display()));
    drop_torn_tail(&mut file, path).map_err(log)?;
    let (lines, last) = scan(&mut file).map_err(log)?;
    let prev = match last {
        Some(line) => last_chain(&line).ok_or_else(|| {
            AuditError::Log(format!(
                "{}: last line has no chain field; move the file aside or run `mannerly audit verify` on it",
                path.display()
            ))
        })?,
        None => match newest_rotated(path) {
            Some(old) => read_last_chain(&old)?,
            None => GENESIS.to_string(),
        },
    };
    Ok((file, lines, prev))
}

/// Drops what follows the file's last newline: the start of a line whose
/// `write` the process died in (a kill -9 lands between two pages of one
/// write, and the kernel keeps the pages before it). No answer waited on
/// it: an answer is released only once its line's write has returned. Left
/// in place, the next line would follow it on the same line, and the
/// file would read as tampered with. Returns the bytes dropped.
pub(super) fn drop_torn_tail(f: &mut File, path: &Path) -> io::Result<u64> {
    let (start, tail) = read_tail(f)?;
    let len = start + tail.len() as u64;
    if tail.is_empty() || tail.last() == Some(&b'\n') {
        return Ok(0);
    }
    let keep = match tail.iter().rposition(|b| *b == b'\n') {
        Some(i) => start + i as u64 + 1,
        None if start == 0 => 0,
        // No newline in the last 256 KiB: no line of ours; left for
        // `audit verify` to name.
        None => return Ok(0),
    };
    f.set_len(keep)?;
    tracing::warn!(
        "{}: dropped {} bytes after its last newline: a line whose write the proxy died in (its answer was never released)",
        path.display(),
        len - keep
    );
    Ok(len - keep)
}

/// The file's last 256 KiB (all of a smaller one) and where they start:
/// enough for its last line, which is a few hundred bytes.
fn read_tail(f: &mut File) -> io::Result<(u64, Vec<u8>)> {
    let len = f.seek(SeekFrom::End(0))?;
    let start = len.saturating_sub(256 * 1024);
    f.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    f.take(len - start).read_to_end(&mut tail)?;
    Ok((start, tail))
}

/// Counts the lines of a file and returns its last non-empty line.
pub(super) fn scan(f: &mut File) -> io::Result<(u64, Option<String>)> {
    f.seek(SeekFrom::Start(0))?;
    let mut lines = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
    }
    let (_, tail) = read_tail(f)?;
    let last = BufReader::new(&tail[..])
        .lines()
        .map_while(Result::ok)
        .filter(|l| !l.trim().is_empty())
        .last();
    Ok((lines, last))
}

/// The Merkle trees of a file the writer goes on with, from its lines, and
/// the chain value its first line continues (its continuation checkpoint's,
/// else the start of a log). Reads the whole file once, at start-up or
/// when a reopened path already holds lines.
pub(super) fn rebuild(path: &Path) -> io::Result<(FileTrees, String)> {
    let mut trees = FileTrees::default();
    let mut start = None;
    let mut r = BufReader::with_capacity(256 * 1024, File::open(path)?);
    let mut buf = Vec::new();
    while r.read_until(b'\n', &mut buf)? > 0 {
        let text = String::from_utf8_lossy(&buf);
        let line = text.trim_end_matches(['\n', '\r']);
        if !line.is_empty() {
            match split_line(line) {
                Some((content, chain)) => {
                    if start.is_none() {
                        let cp = serde_json::from_str::<Checkpoint>(&content).ok();
                        start = Some(match cp {
                            Some(cp) if cp.why == SealReason::Continuation => cp.sealed,
                            _ => GENESIS.to_string(),
                        });
                    }
                    trees.line(line, &content, chain);
                }
                // Such a line fails `audit verify` already; it still takes
                // its place in the line tree, as a leaf no chain value has.
                None => trees.checkpoint(line, ""),
            }
        }
        buf.clear();
    }
    Ok((trees, start.unwrap_or_else(|| GENESIS.to_string())))
}

pub(super) fn read_last_chain(path: &Path) -> Result<String, AuditError> {
    datadir::check_regular(path)?;
    let mut f =
        File::open(path).map_err(|e| AuditError::Log(format!("{}: {e}", path.display())))?;
    let (_, last) =
        scan(&mut f).map_err(|e| AuditError::Log(format!("{}: {e}", path.display())))?;
    match last.as_deref().map(last_chain) {
        Some(Some(c)) => Ok(c),
        Some(None) => Err(AuditError::Log(format!(
            "{}: last line has no chain field",
            path.display()
        ))),
        None => Ok(GENESIS.to_string()),
    }
}

/// Files rotated out of `path`, oldest first: `audit.jsonl.20261130T111746.123Z`.
pub fn rotated_files(path: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Vec::new();
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.strip_prefix(&prefix).is_some_and(is_rotation_stamp)
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

pub(super) fn is_rotation_stamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 9 && b[..8].iter().all(u8::is_ascii_digit) && b[8] == b'T'
}

pub(super) fn newest_rotated(path: &Path) -> Option<PathBuf> {
    rotated_files(path).pop()
}

pub(super) fn rotated_name(path: &Path, clock: &Clock) -> PathBuf {
    let stamp: String = now_rfc3339(clock)
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    let base = format!(
        "{}.{stamp}",
        path.file_name().unwrap_or_default().to_string_lossy()
    );
    let mut candidate = path.with_file_name(&base);
    let mut n = 1;
    while candidate.exists() {
        candidate = path.with_file_name(format!("{base}-{n}"));
        n += 1;
    }
    candidate
}

pub(super) fn now_rfc3339(clock: &Clock) -> String {
    humantime::format_rfc3339_millis(clock.wall()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is left of a file holding `bytes` once its torn tail is dropped,
    /// and how many bytes went.
    fn after_drop(bytes: &[u8]) -> (Vec<u8>, u64) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, bytes).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .read(true)
            .open(&path)
            .unwrap();
        let dropped = drop_torn_tail(&mut f, &path).unwrap();
        (std::fs::read(&path).unwrap(), dropped)
    }

    #[test]
    fn only_what_follows_the_last_newline_is_dropped() {
        assert_eq!(
            after_drop(b"{\"a\":1}\n{\"b\""),
            (b"{\"a\":1}\n".to_vec(), 4)
        );
        assert_eq!(after_drop(b"{\"a\":1}\n"), (b"{\"a\":1}\n".to_vec(), 0));
        assert_eq!(after_drop(b""), (Vec::new(), 0));
        assert_eq!(after_drop(b"{\"a\""), (Vec::new(), 4));
    }
}
