//! Reading a task's log files for `GET /v1/client/fs/logs/:alloc_id`, optionally following them.
//!
//! The driver writes `<alloc_dir>/alloc/logs/<task>.<stdout|stderr>.<N>` and starts `N + 1` when a
//! file is full. [`LogReader`] reads them in order from an offset counted from the start or the end,
//! and, when following, waits for more: it polls for new bytes or the next file, and ends when the
//! task is dead (after a last read of what it wrote before dying) or when the server shuts down.
//! It is meant to be the body of a [`super::Response::Stream`], which runs on its own thread.

use crossbeam_channel::Receiver;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::router::ApiError;
use super::server::wait_shutdown;
use crate::task::hooks::Never;

/// How often a followed log is checked for new output.
pub const FOLLOW_POLL: Duration = Duration::from_millis(250);

/// `type=stdout|stderr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    Stdout,
    Stderr,
}

impl LogKind {
    pub fn parse(s: &str) -> Result<LogKind, ApiError> {
        match s {
            "stdout" => Ok(LogKind::Stdout),
            "stderr" => Ok(LogKind::Stderr),
            other => Err(ApiError::BadRequest(format!(
                "log type must be \"stdout\" or \"stderr\", got {other:?}"
            ))),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            LogKind::Stdout => "stdout",
            LogKind::Stderr => "stderr",
        }
    }
}

/// `origin=start|end`: where `offset` counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Start,
    End,
}

impl Origin {
    pub fn parse(s: &str) -> Result<Origin, ApiError> {
        match s {
            "start" => Ok(Origin::Start),
            "end" => Ok(Origin::End),
            other => Err(ApiError::BadRequest(format!(
                "origin must be \"start\" or \"end\", got {other:?}"
            ))),
        }
    }
}

/// What a followed log waits on.
pub struct Follow {
    /// True once the task is dead for good: the reader then ends after one last read.
    pub task_dead: Box<dyn Fn() -> bool + Send>,
    /// Disconnects when the server stops ([`super::Request::shutdown`]).
    pub shutdown: Receiver<Never>,
    pub poll: Duration,
}

/// Reads one task's stdout or stderr across its numbered files.
pub struct LogReader {
    dir: PathBuf,
    base: String,
    index: u32,
    file: Option<File>,
    follow: Option<Follow>,
    last_pass: bool,
}

impl LogReader {
    /// Opens the logs of `task` in `logs_dir` at `offset` bytes from `origin`.
    pub fn open(
        logs_dir: &Path,
        task: &str,
        kind: LogKind,
        origin: Origin,
        offset: u64,
        follow: Option<Follow>,
    ) -> Result<LogReader, ApiError> {
        let base = format!("{task}.{}", kind.as_str());
        let files = numbered_files(logs_dir, &base)
            .map_err(|e| ApiError::Internal(format!("cannot list {}: {e}", logs_dir.display())))?;
        let total: u64 = files.iter().map(|(_, len)| len).sum();
        let mut skip = match origin {
            Origin::Start => offset,
            Origin::End => total.saturating_sub(offset),
        };
        let mut index = files.first().map(|(i, _)| *i).unwrap_or(0);
        let mut start_in_file = 0;
        for (i, len) in &files {
            index = *i;
            if skip < *len || Some(i) == files.last().map(|(i, _)| i) {
                start_in_file = skip.min(*len);
                break;
            }
            skip -= len;
        }
        let mut reader = LogReader {
            dir: logs_dir.to_path_buf(),
            base,
            index,
            file: None,
            follow,
            last_pass: false,
        };
        if let Some(mut f) = reader.open_index(index) {
            f.seek(SeekFrom::Start(start_in_file)).map_err(|e| {
                ApiError::Internal(format!(
                    "cannot seek in {}: {e}",
                    reader.path(index).display()
                ))
            })?;
            reader.file = Some(f);
        }
        Ok(reader)
    }

    fn path(&self, index: u32) -> PathBuf {
        self.dir.join(format!("{}.{index}", self.base))
    }

    fn open_index(&self, index: u32) -> Option<File> {
        File::open(self.path(index)).ok()
    }
}

impl Read for LogReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.file.is_none() {
                self.file = self.open_index(self.index);
            }
            if let Some(f) = self.file.as_mut() {
                let n = f.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                if let Some(next) = self.open_index(self.index + 1) {
                    self.index += 1;
                    self.file = Some(next);
                    continue;
                }
            }
            let Some(follow) = &self.follow else {
                return Ok(0);
            };
            if self.last_pass {
                return Ok(0);
            }
            // What the task wrote before it died is still read once more before the end.
            if (follow.task_dead)() {
                self.last_pass = true;
                continue;
            }
            if wait_shutdown(&follow.shutdown, follow.poll) {
                return Ok(0);
            }
        }
    }
}

/// `(N, length)` of every `<base>.<N>` in `dir`, by N.
fn numbered_files(dir: &Path, base: &str) -> io::Result<Vec<(u32, u64)>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let prefix = format!("{base}.");
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        files.push((n, entry.metadata()?.len()));
    }
    files.sort_unstable();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("nodeward-logs-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn read_all(r: &mut LogReader) -> String {
        let mut s = String::new();
        r.read_to_string(&mut s).unwrap();
        s
    }

    #[test]
    fn reads_across_rotated_files_from_start_and_end() {
        let d = dir();
        fs::write(d.join("web.stdout.0"), "hello ").unwrap();
        fs::write(d.join("web.stdout.1"), "world").unwrap();
        fs::write(d.join("web.stderr.0"), "oops").unwrap();
        let open = |origin, offset| {
            LogReader::open(&d, "web", LogKind::Stdout, origin, offset, None).unwrap()
        };
        assert_eq!(read_all(&mut open(Origin::Start, 0)), "hello world");
        assert_eq!(read_all(&mut open(Origin::Start, 8)), "rld");
        assert_eq!(read_all(&mut open(Origin::End, 3)), "rld");
        assert_eq!(read_all(&mut open(Origin::End, 100)), "hello world");
        assert_eq!(read_all(&mut open(Origin::Start, 100)), "");
        let mut err = LogReader::open(&d, "web", LogKind::Stderr, Origin::Start, 0, None).unwrap();
        assert_eq!(read_all(&mut err), "oops");
        let mut none = LogReader::open(&d, "db", LogKind::Stdout, Origin::Start, 0, None).unwrap();
        assert_eq!(read_all(&mut none), "");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn follow_sees_new_output_and_the_next_file_and_ends_when_the_task_dies() {
        let d = dir();
        fs::write(d.join("web.stdout.0"), "a").unwrap();
        let dead = Arc::new(AtomicBool::new(false));
        let dead2 = dead.clone();
        let (_tx, shutdown) = bounded::<Never>(0);
        let follow = Follow {
            task_dead: Box::new(move || dead2.load(Ordering::SeqCst)),
            shutdown,
            poll: Duration::from_millis(10),
        };
        let mut r =
            LogReader::open(&d, "web", LogKind::Stdout, Origin::Start, 0, Some(follow)).unwrap();
        let writer = {
            let d = d.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                let mut f = fs::OpenOptions::new()
                    .append(true)
                    .open(d.join("web.stdout.0"))
                    .unwrap();
                f.write_all(b"b").unwrap();
                std::thread::sleep(Duration::from_millis(100));
                fs::write(d.join("web.stdout.1"), "c").unwrap();
                dead.store(true, Ordering::SeqCst);
            })
        };
        assert_eq!(read_all(&mut r), "abc");
        writer.join().unwrap();
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn follow_ends_at_shutdown() {
        let d = dir();
        let (tx, shutdown) = bounded::<Never>(0);
        let follow = Follow {
            task_dead: Box::new(|| false),
            shutdown,
            poll: Duration::from_secs(60),
        };
        let mut r =
            LogReader::open(&d, "web", LogKind::Stdout, Origin::Start, 0, Some(follow)).unwrap();
        drop(tx);
        assert_eq!(read_all(&mut r), "");
        fs::remove_dir_all(&d).unwrap();
    }
}
