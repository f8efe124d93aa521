//! The log route, `GET /v1/client/fs/logs/:alloc_id`, and reading a task's rotated log files as
//! one stream for it.
//!
//! [`LogReader`] walks `<task>.<type>.N` from the oldest kept file to the newest. With `follow`, at
//! the end of the newest file it waits for more (checking every [`FOLLOW_POLL`], or at once when the
//! agent shuts down) and moves on when the task rotates to a new file; it ends when the task is dead
//! and everything was read, and with an error when the client has gone away (checked before each
//! wait: a follower nobody reads would otherwise hold a stream slot for as long as the task is
//! quiet).
//!
//! The log directory is inside the allocation directory, where a task can plant links: it is
//! opened beneath the allocation root and its files through it (`nodeward_keeper::logs`), so a
//! link named like a log file (`t.stdout.0 -> /etc/shadow`) is not a log file and is never served,
//! and a link in place of the log directory is an error that names it.

use crossbeam_channel::{select, Receiver};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::PathBuf;

use nodeward_keeper::beneath::Dir;
use nodeward_keeper::logs::open_log_dir;
use std::sync::Arc;
use std::time::Duration;

use super::allocations::alloc_id;
use super::router::{ApiError, PeerGone, Request, Response, Router};
use crate::agent::Agent;
use crate::driver::logs::{log_files, Stream};
use crate::task::events::TaskStatus;
use crate::thread::Never;
use crate::util::allocdir;

pub const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Whether the task may still write (the reader keeps following while it does).
pub type Alive = Arc<dyn Fn() -> bool + Send + Sync>;

/// What a following reader watches to know when to stop.
pub struct Follow {
    pub alive: Alive,
    pub shutdown: Receiver<Never>,
    /// The client closed its connection: nobody reads what follows.
    pub peer_gone: PeerGone,
}

pub struct LogReader {
    /// The allocation root and the log directory below it, opened when it exists.
    alloc_root: PathBuf,
    log_dir: PathBuf,
    dir: Option<Dir>,
    task: String,
    stream: Stream,
    index: Option<u64>,
    file: Option<File>,
    follow: Option<Follow>,
}

impl LogReader {
    /// Reads the logs of `task` in `log_dir`, which is beneath `alloc_root` (`<data_dir>/alloc`).
    /// `origin_end` with `offset` starts `offset` bytes before the end of everything kept;
    /// otherwise `offset` bytes after the start.
    pub fn open(
        alloc_root: PathBuf,
        log_dir: PathBuf,
        task: &str,
        stream: Stream,
        origin_end: bool,
        offset: u64,
        follow: Option<Follow>,
    ) -> io::Result<LogReader> {
        let mut reader = LogReader {
            alloc_root,
            log_dir,
            dir: None,
            task: task.to_string(),
            stream,
            index: None,
            file: None,
            follow,
        };
        let Some(dir) = reader.dir()? else {
            return Ok(reader);
        };
        let files = log_files(dir, task, stream);
        let total: u64 = files.iter().map(|f| f.len).sum();
        let mut skip = if origin_end {
            total.saturating_sub(offset)
        } else {
            offset.min(total)
        };
        let last = files.last().map(|f| f.index);
        let mut first = None;
        for f in &files {
            if skip >= f.len && Some(f.index) != last {
                skip -= f.len;
                continue;
            }
            let mut file = dir.open_read(&f.name)?;
            file.seek(SeekFrom::Start(skip.min(f.len)))?;
            first = Some((f.index, file));
            break;
        }
        if let Some((index, file)) = first {
            reader.index = Some(index);
            reader.file = Some(file);
        }
        Ok(reader)
    }

    /// The log directory, once it exists (a task that has not started yet has none).
    fn dir(&mut self) -> io::Result<Option<&Dir>> {
        if self.dir.is_none() {
            match open_log_dir(&self.alloc_root, &self.log_dir) {
                Ok(d) => self.dir = Some(d),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(self.dir.as_ref())
    }

    /// Moves to the next newer file, if the task has rotated to one.
    fn advance(&mut self) -> io::Result<bool> {
        let (task, stream, current) = (self.task.clone(), self.stream, self.index);
        let Some(dir) = self.dir()? else {
            return Ok(false);
        };
        let next = log_files(dir, &task, stream)
            .into_iter()
            .find(|f| current.is_none_or(|cur| f.index > cur));
        match next {
            Some(f) => {
                self.file = Some(dir.open_read(&f.name)?);
                self.index = Some(f.index);
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
            if (follow.peer_gone)() {
                return Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the client closed the connection",
                ));
            }
            select! {
                recv(shutdown) -> _ => return Ok(0),
                default(FOLLOW_POLL) => {}
            }
        }
    }
}

/// The answer for the logs of a task with `logs { disabled = true }`: it has none.
pub fn log_collection_disabled(task: &str) -> String {
    format!(
        "log collection is disabled for task {task:?} (logs {{ disabled = true }}): its stdout \
         and stderr go to /dev/null and no log is kept"
    )
}

pub(super) fn routes(r: &mut Router, agent: &Arc<Agent>) {
    let a = agent.clone();
    r.get("/v1/client/fs/logs/:id", move |req| logs(&a, req));
}

/// `GET /v1/client/fs/logs/:alloc_id?task=T&type=stdout|stderr&origin=start|end&offset=N&follow=bool`:
/// the task's log as plain text; with `follow`, a stream that ends when the task is dead. A task
/// whose logs are disabled has none: 404, saying so.
fn logs(agent: &Agent, req: &Request) -> Result<Response, ApiError> {
    let id = alloc_id(agent, req)?;
    let alloc = agent.allocs.get(&id)?;
    let task = match req.query("task") {
        Some(t) if !t.is_empty() => t.to_string(),
        _ if alloc.tasks.len() == 1 => alloc.tasks.keys().next().cloned().unwrap_or_default(),
        _ => return Err(ApiError::BadRequest("missing task name".to_string())),
    };
    let state =
        alloc.tasks.get(&task).cloned().ok_or_else(|| {
            ApiError::BadRequest(format!("task {task:?} not found in allocation"))
        })?;
    // Nomad answers 404 for a log that has no file; nodeward says why there is none.
    let disabled = alloc
        .job
        .task_groups
        .iter()
        .filter(|g| g.name == alloc.group)
        .flat_map(|g| &g.tasks)
        .any(|t| t.name == task && t.log_config.disabled);
    if disabled {
        return Err(ApiError::NotFound(log_collection_disabled(&task)));
    }
    let stream = match req.query("type").unwrap_or("stdout") {
        "stdout" => Stream::Stdout,
        "stderr" => Stream::Stderr,
        other => {
            return Err(ApiError::BadRequest(format!(
                "type must be stdout or stderr, got {other:?}"
            )))
        }
    };
    let origin_end = match req.query("origin").unwrap_or("start") {
        "start" => false,
        "end" => true,
        other => {
            return Err(ApiError::BadRequest(format!(
                "origin must be start or end, got {other:?}"
            )))
        }
    };
    let offset = match req.query("offset") {
        None | Some("") => 0,
        Some(o) => o
            .parse::<u64>()
            .map_err(|_| ApiError::BadRequest(format!("offset must be a number, got {o:?}")))?,
    };
    let follow = req.query_bool("follow")?.then(|| Follow {
        alive: Arc::new(move || state.lock().state != TaskStatus::Dead),
        shutdown: req.shutdown(),
        peer_gone: req.peer_gone(),
    });
    let root = allocdir::alloc_root(&agent.config.data_dir);
    let dir = allocdir::log_dir(&allocdir::alloc_dir(&agent.config.data_dir, &id));
    let reader = LogReader::open(root, dir, &task, stream, origin_end, offset, follow)
        .map_err(|e| ApiError::Internal(format!("cannot read logs: {e}")))?;
    Ok(Response::Stream(Box::new(reader)))
}
