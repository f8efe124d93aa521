//! Task log files: `alloc/logs/<task>.stdout.N` and `.stderr.N`, rotated at `max_file_size`,
//! keeping the newest `max_files`, the way Nomad's logmon names them.
//!
//! A [`RotatingFile`] appends to the highest-numbered file and moves to the next index when the
//! current one would pass the size limit; files that fall out of the window are removed. A restart
//! of the task continues the newest file, so `alloc logs` shows one continuous stream.
//!
//! The log directory is inside the allocation directory, where a task (one run as root) can put
//! links: it is opened with [`open_log_dir`] and every file in it through its [`Dir`]
//! ([`crate::beneath`]), so neither the keeper writing nor the agent's API reading ever follows a
//! link out. A log file is a regular file with one link; anything else under a log file's name is
//! not listed, not served, and replaced when the keeper writes that file.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use crate::beneath::{Dir, Kind};

/// `stdout` or `stderr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One log file of a stream: its index and name in the log directory, and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFile {
    pub index: u64,
    pub name: OsString,
    pub len: u64,
}

/// Opens the log directory `log_dir`, which must be beneath `alloc_root` (the allocation root,
/// `<data_dir>/alloc`, opened as the operator named it): below it, no link is followed.
pub fn open_log_dir(alloc_root: &Path, log_dir: &Path) -> io::Result<Dir> {
    let rel = log_dir.strip_prefix(alloc_root).map_err(|_| {
        io::Error::other(format!(
            "log directory {} is not inside the allocation root {}",
            log_dir.display(),
            alloc_root.display()
        ))
    })?;
    Dir::open(alloc_root)?.open_dir(rel)
}

/// The log files of one stream of one task, oldest first. Only regular files with one link count:
/// a link (or anything else) a task put there under a log file's name is not a log file.
pub fn log_files(dir: &Dir, task: &str, stream: Stream) -> Vec<LogFile> {
    let prefix = format!("{task}.{}.", stream.as_str());
    let mut files: Vec<LogFile> = dir
        .names()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|name| {
            let index = name.to_str()?.strip_prefix(&prefix)?.parse::<u64>().ok()?;
            let entry = dir.entry(&name).ok().filter(|e| e.is_plain_file())?;
            Some(LogFile {
                index,
                name,
                len: entry.len,
            })
        })
        .collect();
    files.sort_by_key(|f| f.index);
    files
}

/// Where a stream's writer stands: the index of the file it appends to, and how many bytes that
/// file holds as far as rotation is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub index: u64,
    pub size: u64,
}

pub struct RotatingFile {
    dir: Dir,
    task: String,
    stream: Stream,
    max_size: u64,
    max_files: u64,
    index: u64,
    size: u64,
    file: Option<File>,
}

impl RotatingFile {
    /// Writes the files of `task`'s `stream` in `dir` (from [`open_log_dir`]).
    pub fn open(
        dir: Dir,
        task: &str,
        stream: Stream,
        max_files: u32,
        max_file_size_mb: u32,
    ) -> RotatingFile {
        let max_size = u64::from(max_file_size_mb.max(1)) * 1024 * 1024;
        RotatingFile::with_max_size(dir, task, stream, max_files, max_size)
    }

    /// [`RotatingFile::open`] with the size limit in bytes (tests rotate at a few bytes).
    pub fn with_max_size(
        dir: Dir,
        task: &str,
        stream: Stream,
        max_files: u32,
        max_size: u64,
    ) -> RotatingFile {
        let (index, size) = log_files(&dir, task, stream)
            .last()
            .map(|f| (f.index, f.len))
            .unwrap_or((0, 0));
        RotatingFile {
            dir,
            task: task.to_string(),
            stream,
            max_size: max_size.max(1),
            max_files: u64::from(max_files.max(1)),
            index,
            size,
            file: None,
        }
    }

    /// Where the next byte goes.
    pub fn position(&self) -> Position {
        Position {
            index: self.index,
            size: self.size,
        }
    }

    /// Puts the stream back at `to`, a position this writer's stream had before: files with a
    /// higher index are removed and the file at `to.index` is cut to `to.size`. A writer that
    /// copies a stream it can replay (the docker driver's log copier) uses it to drop what it
    /// wrote after its last saved position, and then writes it again.
    ///
    /// The size is taken from `to`, not from the file: when the file is shorter or gone (rotation
    /// removed it when `max_files` is 1, or the task deleted it), the next rotation still happens
    /// at the byte it would have happened at, so the files after it come out the same.
    pub fn truncate_to(&mut self, to: Position) -> io::Result<()> {
        self.file = None;
        for f in log_files(&self.dir, &self.task, self.stream) {
            if f.index > to.index {
                self.dir.remove_file(&f.name)?;
            }
        }
        let name = self.name(to.index);
        // Not a log file (a link the task put there): removed without being followed, as a
        // write would replace it; the stream goes on in a new file.
        if let Ok(entry) = self.dir.entry(&name) {
            if !entry.is_plain_file() && entry.kind != Kind::Dir {
                self.dir.remove_file(&name)?;
                self.say(&format!(
                    "removed the {} {} without following it",
                    entry.describe(),
                    self.dir.path().join(&name).display()
                ));
            }
        }
        self.dir.truncate_file(&name, to.size)?;
        self.index = to.index;
        self.size = to.size;
        Ok(())
    }

    fn name(&self, index: u64) -> OsString {
        OsString::from(format!("{}.{}.{index}", self.task, self.stream.as_str()))
    }

    fn current(&mut self) -> io::Result<&mut File> {
        if self.file.is_none() {
            let name = self.name(self.index);
            let (f, replaced) = self.dir.open_append(OsStr::new(&name), 0o640)?;
            if let Some(r) = replaced {
                self.say(&format!("{r}, and wrote a new file in its place"));
                // What was there may have had a size: this file starts empty.
                self.size = 0;
            }
            self.file = Some(f);
        }
        Ok(self.file.as_mut().expect("just opened"))
    }

    /// Reports what was done to a log file a task tampered with. The keeper's stderr is its log,
    /// `<data_dir>/keeper.log`; the agent (which writes docker tasks' logs) logs to its stderr
    /// too: the prefix says which of them wrote it.
    fn say(&self, what: &str) {
        let program = std::env::args_os()
            .next()
            .and_then(|p| Path::new(&p).file_name().map(OsStr::to_os_string))
            .unwrap_or_else(|| OsString::from("nodeward"));
        eprintln!(
            "{}: log file of task {}: {what}",
            program.to_string_lossy(),
            self.task
        );
    }

    fn rotate(&mut self) {
        self.file = None;
        self.index += 1;
        self.size = 0;
        if self.index >= self.max_files {
            let oldest_kept = self.index + 1 - self.max_files;
            for f in log_files(&self.dir, &self.task, self.stream) {
                if f.index < oldest_kept {
                    let _ = self.dir.remove_file(&f.name);
                }
            }
        }
    }

    /// Appends `data`, splitting it across files at the size limit.
    pub fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            if self.size >= self.max_size {
                self.rotate();
            }
            let room = (self.max_size - self.size) as usize;
            let n = room.min(data.len());
            self.current()?.write_all(&data[..n])?;
            self.size += n as u64;
            data = &data[n..];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tempdir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "nodeward-logs-{tag}-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        fs::create_dir_all(dir.join("a/alloc/logs")).unwrap();
        dir
    }

    #[test]
    fn rotates_and_keeps_max_files() {
        let root = tempdir("rotate");
        let logs = root.join("a/alloc/logs");
        let dir = || open_log_dir(&root, &logs).unwrap();
        let mut f = RotatingFile::open(dir(), "web", Stream::Stdout, 3, 1);
        let chunk = vec![b'x'; 700 * 1024];
        for _ in 0..10 {
            f.write(&chunk).unwrap();
        }
        let files = log_files(&dir(), "web", Stream::Stdout);
        let indices: Vec<u64> = files.iter().map(|f| f.index).collect();
        // 7000 KiB over 1 MiB files is 7 files (0..=6); the newest 3 stay.
        assert_eq!(indices, vec![4, 5, 6]);
        for f in &files[..2] {
            let len = fs::metadata(logs.join(&f.name)).unwrap().len();
            assert_eq!((f.len, len), (1024 * 1024, 1024 * 1024), "file {}", f.index);
        }
        // A new writer (a restarted task) continues the newest file.
        let mut again = RotatingFile::open(dir(), "web", Stream::Stdout, 3, 1);
        again.write(b"more").unwrap();
        assert_eq!(
            log_files(&dir(), "web", Stream::Stdout)
                .last()
                .unwrap()
                .index,
            6
        );
        assert!(log_files(&dir(), "web", Stream::Stderr).is_empty());
        let _ = fs::remove_dir_all(&root);
    }

    /// A writer put back at an earlier position: later files gone, the file cut, and rotation
    /// at the same byte as before even when the file at that position is gone.
    #[test]
    fn truncate_to_drops_what_came_after_a_position() {
        let root = tempdir("truncate");
        let logs = root.join("a/alloc/logs");
        let dir = || open_log_dir(&root, &logs).unwrap();
        let mut f = RotatingFile::with_max_size(dir(), "web", Stream::Stderr, 10, 10);
        f.write(b"0123456789abc").unwrap();
        let at = f.position();
        assert_eq!(at, Position { index: 1, size: 3 });
        f.write(b"defghijklmnopqrstuvwxyz").unwrap();
        assert_eq!(f.position().index, 3);
        let mut f = RotatingFile::with_max_size(dir(), "web", Stream::Stderr, 10, 10);
        f.truncate_to(at).unwrap();
        let names: Vec<u64> = log_files(&dir(), "web", Stream::Stderr)
            .iter()
            .map(|f| f.index)
            .collect();
        assert_eq!(names, vec![0, 1]);
        assert_eq!(fs::read(logs.join("web.stderr.1")).unwrap(), b"abc");
        f.write(b"DEFGHIJKLM").unwrap();
        assert_eq!(fs::read(logs.join("web.stderr.1")).unwrap(), b"abcDEFGHIJ");
        assert_eq!(fs::read(logs.join("web.stderr.2")).unwrap(), b"KLM");
        // The file at the position is gone: nothing is created, the size is the position's.
        fs::remove_file(logs.join("web.stderr.2")).unwrap();
        f.truncate_to(Position { index: 2, size: 8 }).unwrap();
        assert!(!logs.join("web.stderr.2").exists());
        f.write(b"xyz").unwrap();
        assert_eq!(fs::read(logs.join("web.stderr.2")).unwrap(), b"xy");
        assert_eq!(fs::read(logs.join("web.stderr.3")).unwrap(), b"z");
        // A link the task put under the name is removed, not followed: its target is untouched.
        let outside = root.join("outside");
        fs::write(&outside, "keep this").unwrap();
        fs::remove_file(logs.join("web.stderr.3")).unwrap();
        std::os::unix::fs::symlink(&outside, logs.join("web.stderr.3")).unwrap();
        f.truncate_to(Position { index: 3, size: 1 }).unwrap();
        assert_eq!(fs::read_to_string(&outside).unwrap(), "keep this");
        assert!(fs::symlink_metadata(logs.join("web.stderr.3")).is_err());
        let _ = fs::remove_dir_all(&root);
    }

    /// A task (run as root) that links the next log file, or the log directory, somewhere else
    /// must not make the keeper write there.
    #[test]
    fn links_in_the_log_directory_are_never_followed() {
        let root = tempdir("links");
        let logs = root.join("a/alloc/logs");
        let outside = root.join("outside");
        fs::write(&outside, "keep").unwrap();
        std::os::unix::fs::symlink(&outside, logs.join("web.stdout.1")).unwrap();
        let dir = open_log_dir(&root, &logs).unwrap();
        // Not a log file: not listed (so not served, not counted).
        assert!(log_files(&dir, "web", Stream::Stdout).is_empty());
        let mut f = RotatingFile::open(dir, "web", Stream::Stdout, 3, 1);
        f.write(&vec![b'x'; 1024 * 1024 + 5]).unwrap();
        assert_eq!(fs::read_to_string(&outside).unwrap(), "keep");
        assert_eq!(fs::metadata(logs.join("web.stdout.1")).unwrap().len(), 5);
        assert!(!fs::symlink_metadata(logs.join("web.stdout.1"))
            .unwrap()
            .file_type()
            .is_symlink());
        // The log directory itself replaced by a link: refused, with the reason.
        fs::rename(&logs, root.join("a/alloc/old")).unwrap();
        std::os::unix::fs::symlink(root.join("a/alloc/old"), &logs).unwrap();
        let e = open_log_dir(&root, &logs).unwrap_err().to_string();
        assert!(e.contains("logs is a symbolic link"), "{e}");
        let e = open_log_dir(&root.join("a/alloc"), Path::new("/etc")).unwrap_err();
        assert!(
            e.to_string().contains("is not inside the allocation root"),
            "{e}"
        );
        let _ = fs::remove_dir_all(&root);
    }
}
