//! Reading a task's rotated log files as one stream, for `GET /v1/client/fs/logs/:alloc_id`.
//!
//! [`LogReader`] walks `<task>.<type>.N` from the oldest kept file to the newest. With `follow`, at
//! the end of the newest file it waits for more (checking every [`FOLLOW_POLL`], or at once when the
//! agent shuts down) and moves on when the task rotates to a new file; it ends when the task is dead
//! and everything was read.

use crossbeam_channel::{select, Receiver};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::driver::logs::{log_files, Stream};
use crate::thread::Never;

pub const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Whether the task may still write (the reader keeps following while it does).
pub type Alive = Arc<dyn Fn() -> bool + Send + Sync>;

/// What a following reader watches to know when to stop.
pub struct Follow {
    pub alive: Alive,
    pub shutdown: Receiver<Never>,
}

pub struct LogReader {
    dir: PathBuf,
    task: String,
    stream: Stream,
    index: Option<u64>,
    file: Option<File>,
    follow: Option<Follow>,
}

impl LogReader {
    /// `origin_end` with `offset` starts `offset` bytes before the end of everything kept;
    /// otherwise `offset` bytes after the start.
    pub fn open(
        dir: PathBuf,
        task: &str,
        stream: Stream,
        origin_end: bool,
        offset: u64,
        follow: Option<Follow>,
    ) -> io::Result<LogReader> {
        let files = log_files(&dir, task, stream);
        let sizes: Vec<u64> = files
            .iter()
            .map(|(_, p)| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            .collect();
        let total: u64 = sizes.iter().sum();
        let mut skip = if origin_end {
            total.saturating_sub(offset)
        } else {
            offset.min(total)
        };
        let mut reader = LogReader {
            dir,
            task: task.to_string(),
            stream,
            index: None,
            file: None,
            follow,
        };
        for ((index, path), size) in files.iter().zip(&sizes) {
            if skip >= *size && Some(index) != files.last().map(|(i, _)| i) {
                skip -= size;
                continue;
            }
            let mut f = File::open(path)?;
            f.seek(SeekFrom::Start(skip.min(*size)))?;
            reader.index = Some(*index);
            reader.file = Some(f);
            break;
        }
        Ok(reader)
    }

    /// Moves to the next newer file, if the task has rotated to one.
    fn advance(&mut self) -> io::Result<bool> {
        let next = log_files(&self.dir, &self.task, self.stream)
            .into_iter()
            .find(|(i, _)| self.index.is_none_or(|cur| *i > cur));
        match next {
            Some((i, p)) => {
                self.file = Some(File::open(p)?);
                self.index = Some(i);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

impl Read for LogReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some(f) = &mut self.file {
                let n = f.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
            }
            if self.advance()? {
                continue;
            }
            let Some(follow) = &self.follow else {
                return Ok(0);
            };
            // Read once more after seeing the task dead: its last words may have landed meanwhile.
            let alive = (follow.alive)();
            let shutdown = follow.shutdown.clone();
            if let Some(f) = &mut self.file {
                let n = f.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
            }
            if !alive {
                return Ok(0);
            }
            select! {
                recv(shutdown) -> _ => return Ok(0),
                default(FOLLOW_POLL) => {}
            }
        }
    }
}
