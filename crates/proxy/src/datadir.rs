//! The data dir holds the CA key, the audit key, the audit log and the
//! store. Another local user who can write to it, or plant a symlink in it,
//! could read crawl history, swap keys or make us overwrite their choice of
//! file. So: the dir must be ours and closed to group and others, files are
//! created 0600 without following symlinks, and key files are read only when
//! they are ours and private.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::DataDirError;

fn io(path: &Path) -> impl FnOnce(io::Error) -> DataDirError + '_ {
    move |source| DataDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Creates `dir` (mode 0700) if it does not exist, and refuses one that
/// group or others can write to, or that belongs to another user.
pub(crate) fn prepare(dir: &Path) -> Result<(), DataDirError> {
    if !dir.exists() {
        let mut b = fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            b.mode(0o700);
        }
        b.create(dir).map_err(io(dir))?;
    }
    check_dir(dir)
}

/// The lock file's name in the data dir.
const LOCK: &str = "mannerly.lock";

/// The data dir held by this process: while it lives no other mannerly
/// starts on the dir. The OS drops the lock when the process ends, however
/// it ends, so a crash leaves no stale lock behind.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

/// Takes the data dir's lock before anything else in the dir is opened:
/// a second proxy on a dir in use must leave the live audit log, the store
/// and the keys untouched, and say so before it tries any port. The lock
/// file names the holder's PID for that message.
pub fn lock(dir: &Path) -> Result<DataDirLock, DataDirError> {
    prepare(dir)?;
    let path = dir.join(LOCK);
    check_regular(&path)?;
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    private_options(&mut opts);
    let mut file = opts.open(&path).map_err(|e| symlink_or_io(&path, e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            return Err(DataDirError::InUse {
                dir: dir.to_path_buf(),
                pid: read_pid(&mut file),
            })
        }
        Err(fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
    }
    file.set_len(0).map_err(io(&path))?;
    file.write_all(format!("{}\n", std::process::id()).as_bytes())
        .map_err(io(&path))?;
    Ok(DataDirLock { _file: file })
}

/// The PID of the process that holds `dir`'s lock, `Some(None)` when one
/// holds it without a readable PID, `None` when no process holds it.
/// Looking takes a shared lock for an instant.
pub fn holder(dir: &Path) -> Option<Option<u32>> {
    let path = dir.join(LOCK);
    if !check_regular(&path).unwrap_or(false) {
        return None;
    }
    let mut file = File::open(&path).ok()?;
    match file.try_lock_shared() {
        Ok(()) => None,
        Err(fs::TryLockError::WouldBlock) => Some(read_pid(&mut file)),
        Err(fs::TryLockError::Error(_)) => None,
    }
}

fn read_pid(file: &mut File) -> Option<u32> {
    use std::io::{Read, Seek};
    let mut text = String::new();
    file.seek(io::SeekFrom::Start(0)).ok()?;
    file.take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(unix)]
fn check_dir(dir: &Path) -> Result<(), DataDirError> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(dir).map_err(io(dir))?;
    if !meta.is_dir() {
        return Err(unsafe_path(dir, "is not a directory", "use a directory"));
    }
    if let Some(uid) = euid() {
        if meta.uid() != uid {
            return Err(unsafe_path(
                dir,
                &format!(
                    "belongs to uid {}, not to this user (uid {uid})",
                    meta.uid()
                ),
                &format!("chown {uid} {}", dir.display()),
            ));
        }
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(unsafe_path(
            dir,
            &format!("is writable by group or others (mode {mode:o})"),
            &format!("chmod 700 {}", dir.display()),
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_dir(_dir: &Path) -> Result<(), DataDirError> {
    Ok(())
}

fn unsafe_path(path: &Path, why: &str, fix: &str) -> DataDirError {
    DataDirError::Unsafe {
        path: path.to_path_buf(),
        why: why.to_string(),
        fix: fix.to_string(),
    }
}

/// The effective uid of this process: the owner of `/proc/self`, which needs
/// no unsafe call. `None` where there is no procfs.
#[cfg(unix)]
pub(crate) fn euid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self").ok().map(|m| m.uid())
}

fn private_options(opts: &mut OpenOptions) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    #[cfg(not(unix))]
    let _ = opts;
}

/// Refuses a symlink or anything but a regular file at `path`; `Ok(false)`
/// when nothing is there.
pub(crate) fn check_regular(path: &Path) -> Result<bool, DataDirError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(unsafe_path(
            path,
            "is a symbolic link where a file is expected",
            &format!("remove it: rm {}", path.display()),
        )),
        Ok(m) if !m.is_file() => Err(unsafe_path(
            path,
            "is not a regular file",
            "move it out of the way",
        )),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io(path)(e)),
    }
}

/// Opens `path` for appending, creating it 0600; never through a symlink.
/// An existing file readable by others is made private (older versions
/// created logs 0644).
pub(crate) fn open_append(path: &Path) -> Result<File, DataDirError> {
    check_regular(path)?;
    let mut opts = OpenOptions::new();
    opts.create(true).append(true).read(true);
    private_options(&mut opts);
    let f = opts.open(path).map_err(|e| symlink_or_io(path, e))?;
    tighten(path, &f)?;
    Ok(f)
}

/// Creates a new private file; fails if anything is already at `path`.
pub(crate) fn create_new(path: &Path) -> Result<File, DataDirError> {
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    private_options(&mut opts);
    opts.open(path).map_err(|e| symlink_or_io(path, e))
}

/// Makes sure a file exists at `path` as a private regular file (for files
/// other code opens by path, like the store).
pub(crate) fn ensure_private_file(path: &Path) -> Result<(), DataDirError> {
    if check_regular(path)? {
        let f = File::open(path).map_err(io(path))?;
        return tighten(path, &f);
    }
    match create_new(path) {
        Ok(_) => Ok(()),
        Err(DataDirError::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {
            check_regular(path).map(drop)
        }
        Err(e) => Err(e),
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, so a
/// reader never sees half a file and a symlink at `path` is replaced, not
/// followed.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DataDirError> {
    let tmp = temp_name(path);
    let _ = fs::remove_file(&tmp);
    let mut f = create_new(&tmp)?;
    let written = f
        .write_all(bytes)
        .and_then(|()| f.sync_all())
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io(path)(e));
    }
    if let Some(dir) = path.parent() {
        // The rename is only durable once the directory is synced.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

fn temp_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    path.with_file_name(name)
}

/// Reads a key file: refused if it is a symlink, not ours, or readable by
/// group or others.
pub(crate) fn read_key(path: &Path) -> Result<String, DataDirError> {
    check_regular(path)?;
    let mut opts = OpenOptions::new();
    opts.read(true);
    private_options(&mut opts);
    let mut f = opts.open(path).map_err(|e| symlink_or_io(path, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = f.metadata().map_err(io(path))?;
        if let Some(uid) = euid() {
            if meta.uid() != uid {
                return Err(unsafe_path(
                    path,
                    &format!(
                        "belongs to uid {}, not to this user (uid {uid})",
                        meta.uid()
                    ),
                    "remove it and let mannerly create a new one, or chown it",
                ));
            }
        }
        let mode = meta.mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(DataDirError::KeyPermissions {
                path: path.to_path_buf(),
                mode,
            });
        }
    }
    let mut s = String::new();
    io::Read::read_to_string(&mut f, &mut s).map_err(io(path))?;
    Ok(s)
}

fn tighten(path: &Path, f: &File) -> Result<(), DataDirError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = f.metadata().map_err(io(path))?;
        if meta.mode() & 0o077 != 0 {
            tracing::warn!(
                "{}: was readable by group or others (mode {:o}); made private (0600)",
                path.display(),
                meta.mode() & 0o777
            );
            f.set_permissions(fs::Permissions::from_mode(0o600))
                .map_err(io(path))?;
        }
    }
    #[cfg(not(unix))]
    let _ = (path, f);
    Ok(())
}

fn symlink_or_io(path: &Path, e: io::Error) -> DataDirError {
    // O_NOFOLLOW fails with ELOOP on a symlink planted between our check
    // and the open.
    #[cfg(unix)]
    if e.raw_os_error() == Some(libc::ELOOP) {
        return unsafe_path(
            path,
            "is a symbolic link where a file is expected",
            &format!("remove it: rm {}", path.display()),
        );
    }
    io(path)(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_dir_others_can_write_is_refused_naming_the_fix() {
        let d = tempfile::tempdir().unwrap();
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let err = prepare(d.path()).unwrap_err().to_string();
        assert!(err.contains("chmod 700"), "{err}");
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o700)).unwrap();
        prepare(d.path()).unwrap();
        let sub = d.path().join("new/inner");
        prepare(&sub).unwrap();
        let mode = fs::metadata(&sub).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn symlinks_are_refused_and_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let link = d.path().join("audit.jsonl");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = open_append(&link).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert!(read_key(&link).is_err());
        // An atomic write replaces the link itself.
        write_atomic(&link, b"cert").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(fs::read_to_string(&link).unwrap(), "cert");
        let mode = fs::metadata(&link).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn new_files_are_private() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("audit.jsonl");
        open_append(&p).unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let q = d.path().join("store.redb");
        fs::write(&q, "").unwrap();
        fs::set_permissions(&q, fs::Permissions::from_mode(0o644)).unwrap();
        ensure_private_file(&q).unwrap();
        assert_eq!(
            fs::metadata(&q).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let k = d.path().join("key.pem");
        fs::write(&k, "k").unwrap();
        fs::set_permissions(&k, fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(
            read_key(&k),
            Err(DataDirError::KeyPermissions { .. })
        ));
    }

    #[test]
    fn a_held_data_dir_is_refused_naming_the_holder_and_freed_with_its_lock() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(holder(d.path()), None);
        let held = lock(d.path()).unwrap();
        assert_eq!(holder(d.path()), Some(Some(std::process::id())));
        let err = lock(d.path()).unwrap_err();
        assert!(
            matches!(err, DataDirError::InUse { pid: Some(p), .. } if p == std::process::id()),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!("another mannerly (PID {})", std::process::id())),
            "{text}"
        );
        drop(held);
        assert_eq!(holder(d.path()), None);
        lock(d.path()).unwrap();
    }
}
