//! Paths beneath a directory, reached without following a symbolic link.
//!
//! A task owns directories inside its allocation directory (its task directory, `local/`,
//! `secrets/`; a task run as root can change anything there), so it can replace any of them, or a
//! log file, with a symbolic link. The agent and the keeper run as root: a path they opened by
//! name would follow such a link out of the allocation directory and chown, chmod, write, remove
//! or serve whatever it points at (a task run as `nobody` that links `local` to a root directory
//! would be given that directory). So every path nodeward creates, changes, opens or removes
//! inside an allocation directory goes through a [`Dir`]:
//!
//! - a [`Dir`] is an open directory descriptor; the one at the top (the allocation root,
//!   `<data_dir>/alloc`, the operator's) is opened by name with [`Dir::open`], everything below
//!   it relative to an open parent, one component at a time, with `O_NOFOLLOW | O_DIRECTORY`;
//!   paths are plain names only (no `..`, no `.`, not absolute);
//! - owners and modes are changed with `fchown`/`fchmod` on the open descriptor, never by name;
//! - files are opened with `O_NOFOLLOW | O_NONBLOCK` and must be regular files with one link (a
//!   FIFO cannot wedge the keeper or an API worker, a hard link cannot alias another file);
//! - a symbolic link where nodeward keeps a directory of its own ([`Dir::make_dir`]) or a log file
//!   ([`Dir::open_append`]) is removed, never followed, and the directory or file is created in its
//!   place; the [`Replaced`] value says what was removed so the caller can report it. Reading
//!   ([`Dir::open_dir`], [`Dir::open_read`]) refuses a link with an error that names it.
//!
//! Not `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`: creating directories needs the walk one
//! level at a time anyway, and one code path on every kernel is the one the tests exercise.
//!
//! Removing a whole allocation directory needs nothing of this module: the agent unmounts what is
//! mounted inside first and removes links without following them (`nodeward::util::mounts`);
//! `std::fs::remove_dir_all` (Rust 1.58.1 and later, CVE-2022-21658) does not follow them either,
//! which `remove_dir_all_does_not_follow_links` below holds.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// How many times a name that changes under nodeward (a task that plants a link again as soon as
/// the last one was removed) is tried before giving up.
const ATTEMPTS: usize = 8;

/// An open directory, and the path it was reached by (for messages only: nothing is opened by it).
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl fmt::Debug for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Dir({}, fd {})",
            self.path.display(),
            self.fd.as_raw_fd()
        )
    }
}

/// The descriptor, for a call that takes a path where `/proc/self/fd/<fd>` names this
/// directory without a lookup a link could redirect (the agent's bind mounts of volumes).
impl AsRawFd for Dir {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

/// A symbolic link (or other non-directory, non-file entry) nodeward removed to put its own
/// directory or file in its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    pub path: PathBuf,
    /// Where the link pointed, if it was one.
    pub target: Option<PathBuf>,
    /// `symbolic link`, `FIFO`, `file with 2 links`...
    pub what: String,
}

impl fmt::Display for Replaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "removed the {} {}", self.what, self.path.display())?;
        if let Some(target) = &self.target {
            write!(f, " (to {target:?})")?;
        }
        write!(f, " without following it")
    }
}

/// What [`Dir::make_dir`] found and did.
#[derive(Debug)]
pub struct Made {
    pub dir: Dir,
    /// The directory was not there (or something else was in its place): it is new.
    pub created: bool,
    pub replaced: Option<Replaced>,
}

/// What an entry of a directory is, from `fstatat(AT_SYMLINK_NOFOLLOW)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

/// An entry's kind, size and link count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    pub len: u64,
    pub nlink: u64,
}

impl Entry {
    /// A regular file with one link: the only thing nodeward reads or appends to as a file.
    pub fn is_plain_file(&self) -> bool {
        self.kind == Kind::File && self.nlink == 1
    }

    /// What it is, for messages: `symbolic link`, `file with 2 links`...
    pub fn describe(&self) -> String {
        match self.kind {
            Kind::Dir => "directory".to_string(),
            Kind::Symlink => "symbolic link".to_string(),
            Kind::File => format!("file with {} links", self.nlink),
            Kind::Other => "special file".to_string(),
        }
    }

    fn from_stat(st: &libc::stat) -> Entry {
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFREG => Kind::File,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        };
        Entry {
            kind,
            len: st.st_size as u64,
            // nlink_t is u32 on some targets.
            #[allow(clippy::unnecessary_cast)]
            nlink: st.st_nlink as u64,
        }
    }
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// `e` with the path it happened on, keeping its kind (a caller may look for `NotFound`).
fn on(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// The components of `rel`, which must be a relative path of plain names.
fn names(rel: &Path) -> io::Result<Vec<&OsStr>> {
    rel.components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: not a relative path of plain names (no \"..\", no \".\", not absolute)",
                    rel.display()
                ),
            )),
        })
        .collect()
}

/// One plain name: not empty, no `/`, not `.` or `..`.
fn one_name(name: &OsStr) -> io::Result<CString> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{:?} is not a plain file name", name),
        ));
    }
    cstring(name)
}

impl Dir {
    /// Opens the directory at `path`, following links: for the top of a tree, a path the operator
    /// chose (the data directory may be a link they made), never one inside an allocation.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let c = cstring(path.as_os_str())?;
        // SAFETY: a NUL-terminated path; open returns a new descriptor or -1.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(on(path, last_error()));
        }
        Ok(Dir {
            // SAFETY: a fresh descriptor nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            path: path.to_path_buf(),
        })
    }

    /// The path this directory was reached by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A second descriptor of the same directory.
    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
            path: self.path.clone(),
        })
    }

    /// The entry `name` of this directory, not following a link.
    pub fn entry(&self, name: &OsStr) -> io::Result<Entry> {
        let c = one_name(name)?;
        // SAFETY: an all-zero stat is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor, a NUL-terminated name and a stat buffer.
        let rc = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(on(&self.path.join(name), last_error()));
        }
        Ok(Entry::from_stat(&st))
    }

    /// This directory's own owner and mode (`fstat`).
    pub fn owner_and_mode(&self) -> io::Result<(u32, u32, u32)> {
        let st = fstat(self.fd.as_raw_fd()).map_err(|e| on(&self.path, e))?;
        Ok((st.st_uid, st.st_gid, st.st_mode & 0o7777))
    }

    /// Where the link `name` points.
    fn read_link(&self, name: &CString) -> Option<PathBuf> {
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: a valid descriptor, a NUL-terminated name and a buffer of buf.len() bytes.
        let n = unsafe {
            libc::readlinkat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return None;
        }
        buf.truncate(n as usize);
        Some(PathBuf::from(OsString::from_vec(buf)))
    }

    /// `openat(name, flags | O_NOFOLLOW | O_CLOEXEC)`; the raw OS error on failure.
    fn open_at(&self, name: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
        // SAFETY: a valid descriptor and a NUL-terminated name; returns a new descriptor or -1.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(last_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Why `name` could not be opened as a directory or a file: says it is a link, not just
    /// "too many levels of symbolic links".
    fn refused(&self, name: &OsStr, c: &CString, e: io::Error) -> io::Error {
        let path = self.path.join(name);
        if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR | libc::ENXIO) {
            if let Ok(entry) = self.entry(name) {
                let mut msg = format!("{} is a {}", path.display(), entry.describe());
                if entry.kind == Kind::Symlink {
                    if let Some(t) = self.read_link(c) {
                        msg.push_str(&format!(" (to {t:?})"));
                    }
                    msg.push_str(", which nodeward does not follow inside an allocation directory");
                }
                return io::Error::other(msg);
            }
        }
        on(&path, e)
    }

    fn child(&self, name: &OsStr) -> io::Result<Dir> {
        let c = one_name(name)?;
        match self.open_at(&c, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
            Ok(fd) => Ok(Dir {
                fd,
                path: self.path.join(name),
            }),
            Err(e) => Err(self.refused(name, &c, e)),
        }
    }

    /// Opens the directory `rel` beneath this one; no component may be a link.
    pub fn open_dir(&self, rel: impl AsRef<Path>) -> io::Result<Dir> {
        let rel = rel.as_ref();
        let mut dir = self.try_clone()?;
        for name in names(rel)? {
            dir = dir.child(name)?;
        }
        Ok(dir)
    }

    /// Opens the directory `name`, creating it with `mode` (less the umask) when it is missing.
    /// A symbolic link or special file in its place is removed without being followed and the
    /// directory created instead; the answer says so. A regular file there is an error.
    pub fn make_dir(&self, name: &OsStr, mode: u32) -> io::Result<Made> {
        let c = one_name(name)?;
        let path = self.path.join(name);
        let mut replaced = None;
        let mut created = false;
        for _ in 0..ATTEMPTS {
            match self.open_at(&c, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                Ok(fd) => {
                    return Ok(Made {
                        dir: Dir { fd, path },
                        created: created || replaced.is_some(),
                        replaced,
                    })
                }
                Err(e) if errno(&e) == libc::ENOENT => {
                    created = true;
                    // SAFETY: a valid descriptor and a NUL-terminated name.
                    let rc = unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), mode as _) };
                    let e = last_error();
                    if rc != 0 && errno(&e) != libc::EEXIST {
                        return Err(on(&path, e));
                    }
                }
                Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR) => {
                    let entry = match self.entry(name) {
                        Ok(entry) => entry,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(e),
                    };
                    if matches!(entry.kind, Kind::File | Kind::Dir) {
                        return Err(io::Error::other(format!(
                            "{} exists and is not a directory",
                            path.display()
                        )));
                    }
                    replaced = Some(Replaced {
                        path: path.clone(),
                        target: self.read_link(&c),
                        what: entry.describe(),
                    });
                    self.unlink(&c, &path)?;
                }
                Err(e) => return Err(on(&path, e)),
            }
        }
        Err(io::Error::other(format!(
            "{} kept changing while nodeward created it",
            path.display()
        )))
    }

    /// [`Dir::make_dir`] for every component of `rel`; every replacement is in the answer.
    pub fn make_dirs(&self, rel: impl AsRef<Path>, mode: u32) -> io::Result<(Dir, Vec<Replaced>)> {
        let mut dir = self.try_clone()?;
        let mut replaced = Vec::new();
        for name in names(rel.as_ref())? {
            let made = dir.make_dir(name, mode)?;
            replaced.extend(made.replaced);
            dir = made.dir;
        }
        Ok((dir, replaced))
    }

    /// `fchmod` of this directory: its mode changes, never a link's target.
    pub fn chmod(&self, mode: u32) -> io::Result<()> {
        // SAFETY: a valid descriptor.
        if unsafe { libc::fchmod(self.fd.as_raw_fd(), mode as libc::mode_t) } != 0 {
            return Err(on(&self.path, last_error()));
        }
        Ok(())
    }

    /// `fchown` of this directory.
    pub fn chown(&self, uid: u32, gid: u32) -> io::Result<()> {
        // SAFETY: a valid descriptor.
        if unsafe { libc::fchown(self.fd.as_raw_fd(), uid, gid) } != 0 {
            return Err(on(&self.path, last_error()));
        }
        Ok(())
    }

    /// The names in this directory (not `.` and `..`), in no particular order.
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        // A descriptor of its own: readdir moves the file offset, which a duplicate would share.
        let fd = self
            .open_at(c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|e| on(&self.path, e))?;
        let raw = std::os::fd::IntoRawFd::into_raw_fd(fd);
        // SAFETY: a descriptor of a directory, which fdopendir takes over.
        let dirp = unsafe { libc::fdopendir(raw) };
        if dirp.is_null() {
            let e = last_error();
            // SAFETY: fdopendir failed, so the descriptor is still ours to close.
            unsafe { libc::close(raw) };
            return Err(on(&self.path, e));
        }
        let mut out = Vec::new();
        loop {
            // SAFETY: dirp is a valid DIR stream until closedir below.
            let ent = unsafe { libc::readdir(dirp) };
            if ent.is_null() {
                break;
            }
            // SAFETY: d_name is NUL-terminated inside the dirent readdir returned.
            let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) };
            let bytes = name.to_bytes();
            if bytes != b"." && bytes != b".." {
                out.push(OsString::from_vec(bytes.to_vec()));
            }
        }
        // SAFETY: closes the stream and its descriptor once.
        unsafe { libc::closedir(dirp) };
        Ok(out)
    }

    /// Opens the file `name` for reading. It must be a regular file with one link: a link, a
    /// FIFO or a device is an error that names it (and never blocks).
    pub fn open_read(&self, name: &OsStr) -> io::Result<File> {
        let c = one_name(name)?;
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
        let fd = self
            .open_at(&c, flags, 0)
            .map_err(|e| self.refused(name, &c, e))?;
        plain(fd).map_err(|(entry, _)| self.not_plain(name, entry))
    }

    fn not_plain(&self, name: &OsStr, entry: Entry) -> io::Error {
        io::Error::other(format!(
            "{} is a {}, not a regular file with one link: not opened",
            self.path.join(name).display(),
            entry.describe()
        ))
    }

    /// Opens the file `name` for appending, creating it with `mode` (less the umask). Anything
    /// but a regular file with one link in its place (a link, a FIFO, a hard link to another file)
    /// is removed without being followed and a new file created; the answer says so. A directory
    /// there is an error.
    pub fn open_append(&self, name: &OsStr, mode: u32) -> io::Result<(File, Option<Replaced>)> {
        let c = one_name(name)?;
        let path = self.path.join(name);
        let flags =
            libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NONBLOCK | libc::O_NOCTTY;
        let mut replaced = None;
        for _ in 0..ATTEMPTS {
            match self.open_at(&c, flags, mode) {
                Ok(fd) => match plain(fd) {
                    Ok(f) => return Ok((f, replaced)),
                    Err((entry, _fd)) => {
                        replaced = Some(Replaced {
                            path: path.clone(),
                            target: None,
                            what: entry.describe(),
                        });
                    }
                },
                // A link (ELOOP), a FIFO nobody reads (ENXIO), a directory (EISDIR).
                Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENXIO | libc::EISDIR) => {
                    let entry = match self.entry(name) {
                        Ok(entry) => entry,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(e),
                    };
                    if entry.kind == Kind::Dir {
                        return Err(io::Error::other(format!(
                            "{} is a directory, not a log file",
                            path.display()
                        )));
                    }
                    replaced = Some(Replaced {
                        path: path.clone(),
                        target: self.read_link(&c),
                        what: entry.describe(),
                    });
                }
                Err(e) => return Err(on(&path, e)),
            }
            self.unlink(&c, &path)?;
        }
        Err(io::Error::other(format!(
            "{} kept changing while nodeward opened it",
            path.display()
        )))
    }

    /// Cuts the file `name` to `len` bytes if it is longer; a shorter or missing file is left as
    /// it is (nothing is created or extended). Only a regular file with one link is cut: anything
    /// else under that name is an error that names it, and is not touched.
    pub fn truncate_file(&self, name: &OsStr, len: u64) -> io::Result<()> {
        let c = one_name(name)?;
        let flags = libc::O_WRONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
        let fd = match self.open_at(&c, flags, 0) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(self.refused(name, &c, e)),
        };
        let file = plain(fd).map_err(|(entry, _)| self.not_plain(name, entry))?;
        let path = self.path.join(name);
        if file.metadata().map_err(|e| on(&path, e))?.len() > len {
            file.set_len(len).map_err(|e| on(&path, e))?;
        }
        Ok(())
    }

    /// Removes the entry `name` (a file or a link; a link is removed, not what it points at).
    /// A missing entry is not an error.
    pub fn remove_file(&self, name: &OsStr) -> io::Result<()> {
        let c = one_name(name)?;
        self.unlink(&c, &self.path.join(name))
    }

    fn unlink(&self, c: &CString, path: &Path) -> io::Result<()> {
        // SAFETY: a valid descriptor and a NUL-terminated name; unlinkat never follows the name.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
            let e = last_error();
            if e.kind() != io::ErrorKind::NotFound {
                return Err(on(path, e));
            }
        }
        Ok(())
    }

    /// Creates the symbolic link `name` in this directory, pointing at `target`.
    pub fn symlink(&self, target: &Path, name: &OsStr) -> io::Result<()> {
        let c = one_name(name)?;
        let t = cstring(target.as_os_str())?;
        // SAFETY: NUL-terminated strings and a valid descriptor.
        if unsafe { libc::symlinkat(t.as_ptr(), self.fd.as_raw_fd(), c.as_ptr()) } != 0 {
            return Err(on(&self.path.join(name), last_error()));
        }
        Ok(())
    }
}

/// `fd` if it is a plain file (blocking again), or what it is.
fn plain(fd: OwnedFd) -> Result<File, (Entry, OwnedFd)> {
    let entry = match fstat(fd.as_raw_fd()) {
        Ok(st) => Entry::from_stat(&st),
        Err(_) => {
            return Err((
                Entry {
                    kind: Kind::Other,
                    len: 0,
                    nlink: 0,
                },
                fd,
            ))
        }
    };
    if !entry.is_plain_file() {
        return Err((entry, fd));
    }
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
    Ok(File::from(fd))
}

fn fstat(fd: i32) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor and a stat buffer.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(last_error());
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::{Read, Write};
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    struct Temp(PathBuf);

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// `<tmp>/in` (the tree nodeward works in) and `<tmp>/out` (what links point at, 0700 with a
    /// file in it), fresh per test.
    fn setup(tag: &str) -> (Temp, Dir, PathBuf) {
        let base = std::env::temp_dir().join(format!(
            "nodeward-beneath-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(base.join("in")).unwrap();
        fs::create_dir_all(base.join("out")).unwrap();
        fs::set_permissions(base.join("out"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(base.join("out/secret"), "secret").unwrap();
        let dir = Dir::open(&base.join("in")).unwrap();
        let out = base.join("out");
        (Temp(base), dir, out)
    }

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_link_in_the_middle_or_at_the_end_is_not_followed() {
        let (_t, dir, out) = setup("middle");
        fs::create_dir_all(dir.path().join("a")).unwrap();
        fs::create_dir_all(out.join("b")).unwrap();
        symlink(&out, dir.path().join("a/link")).unwrap();
        let e = dir.open_dir("a/link/b").unwrap_err().to_string();
        assert!(e.contains("a/link is a symbolic link (to "), "{e}");
        assert!(e.contains("does not follow"), "{e}");
        let e = dir.open_dir("a/link").unwrap_err().to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        // A link to a file, and a file, as the last component.
        symlink(out.join("secret"), dir.path().join("a/file-link")).unwrap();
        assert!(dir.open_dir("a/file-link").is_err());
        let a = dir.open_dir("a").unwrap();
        let e = a
            .open_read(OsStr::new("file-link"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        assert_eq!(
            dir.open_dir("a/nope").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn only_plain_relative_names() {
        let (_t, dir, _out) = setup("names");
        fs::create_dir_all(dir.path().join("a/b")).unwrap();
        for bad in ["..", "a/../..", "a/..", "/etc", "./a", "a/./b"] {
            let e = dir.open_dir(bad);
            // `a/./b` is `a/b` to Path::components (it drops inner `.`): that one is fine.
            if bad == "a/./b" {
                assert!(e.is_ok(), "{bad}");
                continue;
            }
            let e = e.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}: {e}");
            assert!(dir.make_dirs(bad, 0o755).is_err(), "{bad}");
        }
        for bad in ["..", ".", "", "a/b"] {
            assert!(dir.open_read(OsStr::new(bad)).is_err(), "{bad:?}");
            assert!(dir.remove_file(OsStr::new(bad)).is_err(), "{bad:?}");
            assert!(dir.make_dir(OsStr::new(bad), 0o755).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn make_dir_says_whether_it_created() {
        let (_t, dir, _out) = setup("created");
        let made = dir.make_dir(OsStr::new("new"), 0o755).unwrap();
        assert!(made.created && made.replaced.is_none());
        let made = dir.make_dir(OsStr::new("new"), 0o755).unwrap();
        assert!(!made.created && made.replaced.is_none());
    }

    /// The takeover: a task replaced its `local` with a link to a root 0700 directory; building
    /// the task directory again must replace the link and change the new directory only.
    #[test]
    fn make_dir_replaces_a_link_and_chmods_the_new_directory_only() {
        let (_t, dir, out) = setup("make");
        fs::create_dir_all(dir.path().join("task")).unwrap();
        symlink(&out, dir.path().join("task/local")).unwrap();
        let (local, replaced) = dir.make_dirs("task/local", 0o700).unwrap();
        let r = replaced.into_iter().next().expect("the link was replaced");
        assert_eq!(r.path, dir.path().join("task/local"));
        assert_eq!(r.target.as_deref(), Some(out.as_path()));
        assert!(
            r.to_string().starts_with("removed the symbolic link "),
            "{r}"
        );
        local.chmod(0o755).unwrap();
        assert_eq!(mode(&out), 0o700, "the link's target is untouched");
        assert_eq!(fs::read_to_string(out.join("secret")).unwrap(), "secret");
        let m = fs::symlink_metadata(dir.path().join("task/local")).unwrap();
        assert!(m.is_dir() && mode(&dir.path().join("task/local")) == 0o755);
        let (uid, _, m) = local.owner_and_mode().unwrap();
        assert_eq!((uid, m), (m_uid(), 0o755));
        // In the middle of the path too, and again a second time (nothing left to replace).
        fs::remove_dir(dir.path().join("task/local")).unwrap();
        symlink(&out, dir.path().join("task/local")).unwrap();
        let (_, replaced) = dir.make_dirs("task/local/sub", 0o755).unwrap();
        assert_eq!(replaced.len(), 1);
        assert!(!out.join("sub").exists());
        let (_, replaced) = dir.make_dirs("task/local/sub", 0o755).unwrap();
        assert!(replaced.is_empty());
        // A regular file in the way is the task's data: an error, left alone.
        fs::write(dir.path().join("task/file"), "x").unwrap();
        let e = dir.make_dirs("task/file", 0o755).unwrap_err().to_string();
        assert!(e.contains("exists and is not a directory"), "{e}");
        assert_eq!(
            fs::read_to_string(dir.path().join("task/file")).unwrap(),
            "x"
        );
    }

    fn m_uid() -> u32 {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() }
    }

    #[test]
    fn open_append_replaces_what_is_not_a_plain_file() {
        let (_t, dir, out) = setup("append");
        symlink(out.join("secret"), dir.path().join("t.stdout.0")).unwrap();
        let (mut f, replaced) = dir.open_append(OsStr::new("t.stdout.0"), 0o640).unwrap();
        f.write_all(b"log").unwrap();
        assert!(replaced.unwrap().target.is_some());
        assert_eq!(fs::read_to_string(out.join("secret")).unwrap(), "secret");
        assert_eq!(
            fs::read_to_string(dir.path().join("t.stdout.0")).unwrap(),
            "log"
        );
        // Appends to a plain file, replaces nothing.
        let (mut f, replaced) = dir.open_append(OsStr::new("t.stdout.0"), 0o640).unwrap();
        f.write_all(b"+").unwrap();
        assert!(replaced.is_none());
        assert_eq!(
            fs::read_to_string(dir.path().join("t.stdout.0")).unwrap(),
            "log+"
        );
        // A hard link to another file, and a FIFO (which must not block the open).
        fs::hard_link(out.join("secret"), dir.path().join("t.stdout.1")).unwrap();
        let (_, replaced) = dir.open_append(OsStr::new("t.stdout.1"), 0o640).unwrap();
        assert_eq!(replaced.unwrap().what, "file with 2 links");
        assert_eq!(fs::metadata(out.join("secret")).unwrap().nlink(), 1);
        let fifo = cstring(dir.path().join("t.stdout.2").as_os_str()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let (_, replaced) = dir.open_append(OsStr::new("t.stdout.2"), 0o640).unwrap();
        assert_eq!(replaced.unwrap().what, "special file");
        fs::create_dir(dir.path().join("t.stdout.3")).unwrap();
        assert!(dir.open_append(OsStr::new("t.stdout.3"), 0o640).is_err());
    }

    #[test]
    fn open_read_refuses_links_fifos_and_hard_links() {
        let (_t, dir, out) = setup("read");
        fs::write(dir.path().join("plain"), "ok").unwrap();
        let mut s = String::new();
        dir.open_read(OsStr::new("plain"))
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "ok");
        symlink(out.join("secret"), dir.path().join("link")).unwrap();
        fs::hard_link(out.join("secret"), dir.path().join("hard")).unwrap();
        let fifo = cstring(dir.path().join("fifo").as_os_str()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        for name in ["link", "hard", "fifo"] {
            let e = dir.open_read(OsStr::new(name)).unwrap_err().to_string();
            assert!(e.contains(&format!("{name} is a ")), "{e}");
        }
        let mut names = dir.names().unwrap();
        names.sort();
        assert_eq!(names, ["fifo", "hard", "link", "plain"]);
        // Listing twice lists everything twice (each listing has its own offset).
        assert_eq!(dir.names().unwrap().len(), 4);
        assert_eq!(
            dir.entry(OsStr::new("link")).unwrap().kind,
            Kind::Symlink,
            "entry does not follow"
        );
        dir.remove_file(OsStr::new("link")).unwrap();
        dir.remove_file(OsStr::new("link")).unwrap();
        assert!(out.join("secret").exists());
    }

    /// What removing an allocation directory relies on: the standard library's removal removes
    /// links, never what they point at.
    #[test]
    fn remove_dir_all_does_not_follow_links() {
        let (_t, dir, out) = setup("rmall");
        fs::create_dir_all(dir.path().join("alloc/t")).unwrap();
        symlink(&out, dir.path().join("alloc/t/local")).unwrap();
        symlink(out.join("secret"), dir.path().join("alloc/t/file")).unwrap();
        fs::remove_dir_all(dir.path().join("alloc")).unwrap();
        assert!(!dir.path().join("alloc").exists());
        assert_eq!(fs::read_to_string(out.join("secret")).unwrap(), "secret");
    }
}
