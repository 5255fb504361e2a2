//! The file descriptor limit: a broad crawl holds a connection per client
//! and per busy origin, and the usual soft limit of 1024 is reached within
//! a minute. The soft limit is raised to the hard one at start.

/// Soft and hard `RLIMIT_NOFILE` before and after raising the soft one.
pub(crate) struct NoFile {
    pub(crate) soft_before: u64,
    pub(crate) soft: u64,
    pub(crate) hard: u64,
}

/// Raises the soft limit on open files to the hard limit. `Err` says why
/// it could not be read or raised; the proxy runs on regardless.
#[cfg(unix)]
// `rlim_t` is u64 on Linux but not on every unix.
#[allow(clippy::useless_conversion)]
pub(crate) fn raise() -> Result<NoFile, std::io::Error> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let soft_before = u64::from(lim.rlim_cur);
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads one `rlimit` through a valid pointer.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        lim = raised;
    }
    Ok(NoFile {
        soft_before,
        soft: u64::from(lim.rlim_cur),
        hard: u64::from(lim.rlim_max),
    })
}

#[cfg(not(unix))]
pub(crate) fn raise() -> Result<NoFile, std::io::Error> {
    Err(std::io::Error::other("not supported on this platform"))
}
