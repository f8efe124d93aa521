//! Host readings shared by the fingerprint and the stats: a file system's size and free space.

use std::io;
use std::path::Path;

/// A file system's size, in bytes (`statvfs`): `available` is what an unprivileged user may
/// still take, as `df` counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Disk {
    pub size: u64,
    pub used: u64,
    pub available: u64,
    pub inodes_used_percent_x100: u64,
}

/// The file system `path` is on.
pub fn disk_of(path: &Path) -> io::Result<Disk> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statvfs writes into the zeroed struct it is given; `c` is a valid C string.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let unit = s.f_frsize as u64;
    let (blocks, free, avail) = (s.f_blocks as u64, s.f_bfree as u64, s.f_bavail as u64);
    let (files, ffree) = (s.f_files as u64, s.f_ffree as u64);
    Ok(Disk {
        size: blocks * unit,
        used: blocks.saturating_sub(free) * unit,
        available: avail * unit,
        inodes_used_percent_x100: (files.saturating_sub(ffree) * 10_000)
            .checked_div(files)
            .unwrap_or(0),
    })
}
