//! How the keeper process starts: it binds `<data_dir>/keeper.sock` (0600), forks, and the parent
//! prints the keeper's PID and exits 0 once the child is ready (exit 1 and a message on stderr
//! otherwise), so the agent that ran it knows the socket is there and is never the keeper's parent.
//! The child leaves the agent's session, raises its own open-file limit and sets its OOM score
//! adjustment to -500 (tasks get 0), and serves ([`crate::serve`]).

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::serve::Keeper;
use crate::{PID_FILE, SOCKET_FILE};

/// Runs the keeper; returns the process's exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let [_, dir] = &args[..] else {
        eprintln!("usage: nodeward-keeper <data_dir>\n(started by the nodeward agent; see docs/live-restore.md)");
        return 2;
    };
    let dir = PathBuf::from(dir);
    if let Err(e) = crate::spawn::reserve_slots() {
        eprintln!("nodeward-keeper: cannot reserve descriptors 3 to 5: {e}");
        return 1;
    }
    match prepare(&dir) {
        Ok(listener) => daemonize(&dir, listener),
        Err(e) => {
            eprintln!("nodeward-keeper: {e}");
            1
        }
    }
}

fn prepare(dir: &Path) -> io::Result<UnixListener> {
    if !dir.is_absolute() {
        return Err(io::Error::other(format!(
            "{} is not an absolute path",
            dir.display()
        )));
    }
    let path = dir.join(SOCKET_FILE);
    if UnixStream::connect(&path).is_ok() {
        return Err(io::Error::other(format!(
            "another keeper serves {}",
            path.display()
        )));
    }
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(&path)?,
        Ok(_) => {
            return Err(io::Error::other(format!(
                "{} exists and is not a socket",
                path.display()
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    // SAFETY: umask only changes this process's file creation mask.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(&path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener =
        bound.map_err(|e| io::Error::other(format!("cannot bind {}: {e}", path.display())))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Forks: the parent reports the child's PID once it is ready and exits; the child serves.
fn daemonize(dir: &Path, listener: UnixListener) -> i32 {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        eprintln!("nodeward-keeper: pipe: {}", io::Error::last_os_error());
        return 1;
    }
    // SAFETY: fresh descriptors that only these two owners hold.
    let (mut ready_r, ready_w) =
        unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the keeper is single-threaded here; the child goes on with this same code.
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!("nodeward-keeper: fork: {}", io::Error::last_os_error());
            1
        }
        0 => {
            drop(ready_r);
            match Keeper::start(dir, listener, ready_w) {
                Ok(mut keeper) => {
                    keeper.run();
                    forget_pid_file(dir);
                    0
                }
                Err(e) => {
                    eprintln!("nodeward-keeper: {e}");
                    1
                }
            }
        }
        child => {
            drop(ready_w);
            drop(listener);
            let mut byte = [0u8; 1];
            if matches!(ready_r.read(&mut byte), Ok(1)) {
                println!("{child}");
                0
            } else {
                // The child said why on the stderr it still shared.
                1
            }
        }
    }
}

/// Removes `keeper.pid` when it still names this keeper, which is ending: a PID left there would
/// name whatever process the kernel gives that PID next (`kill $(cat keeper.pid)` would signal it).
fn forget_pid_file(dir: &Path) {
    let path = dir.join(PID_FILE);
    let me = std::process::id().to_string();
    if std::fs::read_to_string(&path).is_ok_and(|s| s.trim() == me) {
        let _ = std::fs::remove_file(&path);
    }
}

/// Raises the keeper's soft open-file limit to its hard limit (each task holds a pidfd, two pipes
/// and two log files here) and answers the limit it had, which tasks get back.
pub(crate) fn raise_nofile() -> libc::rlimit {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit value.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &raised);
        }
    }
    lim
}

/// The keeper's OOM score adjustment: below every task's (0), so the kernel picks a task before
/// the keeper (a keeper killed takes every task with it, a task killed takes only itself), and
/// above the agent's (`-999`), which holds the state and comes back for the tasks.
pub const KEEPER_OOM_SCORE_ADJ: i32 = -500;

/// Sets the keeper's OOM score adjustment (lowering it needs CAP_SYS_RESOURCE; without it the
/// keeper keeps what it inherited) and answers what tasks get: 0, whatever the agent's and the
/// keeper's are, as Nomad's executor resets it, since it is inherited across `execve`.
pub(crate) fn protect_from_oom() -> Option<([u8; 16], usize)> {
    let _ = std::fs::write("/proc/self/oom_score_adj", KEEPER_OOM_SCORE_ADJ.to_string());
    let mut value = [0u8; 16];
    value[0] = b'0';
    Some((value, 1))
}
