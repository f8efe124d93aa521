//! How the keeper makes a task's process: `clone(CLONE_VM | CLONE_VFORK | CLONE_FILES)`, as
//! `posix_spawn` does, instead of `fork`, and a descriptor table of three entries for the child.
//!
//! Why (docs/benchmarks.md, "What a restart does, profiled"): a `fork` copies the
//! keeper's page tables and descriptor table, the child's first writes copy pages, and its
//! `execve` tears that copy down again and closes every descriptor it inherited — five per task
//! the keeper holds (a pidfd, two pipes, two log files). With 1,000 tasks, closing 5,000
//! descriptors was the largest part of a restart. Here the child shares the keeper's memory
//! (the keeper waits, as `vfork` makes it, until the child has called `execve` or exited) and
//! its table, and leaves that table with `close_range(6, ~0, CLOSE_RANGE_UNSHARE)`, which copies
//! descriptors 0 to 5 only. So the keeper reserves descriptors 3, 4 and 5 at start-up
//! ([`reserve_slots`]): before each start it puts the task's stdout and stderr pipes in 4 and 5
//! (3 is `/dev/null`, the task's stdin), and after it, `/dev/null` again.
//!
//! What the child does between `clone` and `execve` only makes system calls on memory prepared
//! before the `clone` ([`Plan`]); it allocates nothing, takes no lock and cannot panic. All
//! signals are blocked across the `clone`, and the child resets every caught signal to its
//! default before it unblocks them, so a signal never runs one of the keeper's handlers in the
//! child (the keeper's SIGTERM handler would stop every task). Its credentials are changed with
//! the raw system calls: glibc's wrappers would try to change those of every thread of what it
//! takes for the keeper.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use crate::StartTask;

/// The task's stdin (`/dev/null`, always), stdout and stderr in the keeper's descriptor table.
const STDIN_SLOT: i32 = 3;
const STDOUT_SLOT: i32 = 4;
const STDERR_SLOT: i32 = 5;
/// The first descriptor the child does not copy.
const FIRST_UNCOPIED: u32 = 6;
/// The child's stack: it makes a few system calls, nothing deep.
const STACK_SIZE: usize = 64 * 1024;
/// Signals are numbered 1 to 64 on Linux.
const NSIG: i32 = 65;

/// Makes descriptors 3, 4 and 5 `/dev/null`, closing whatever was there: the slots through which
/// the keeper hands a task its stdio. Called first thing at start-up, before anything else takes
/// those numbers (the kernel gives out the lowest free one).
pub fn reserve_slots() -> io::Result<()> {
    // SAFETY: open and dup3 take a path and descriptors; the result is checked.
    unsafe {
        // Read-only, as the stdin it is; in the other two slots it only holds the place.
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if null < 0 {
            return Err(io::Error::last_os_error());
        }
        for slot in [STDIN_SLOT, STDOUT_SLOT, STDERR_SLOT] {
            if null != slot && libc::dup3(null, slot, libc::O_CLOEXEC) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if null > STDERR_SLOT {
            libc::close(null);
        }
    }
    Ok(())
}

/// What the keeper gives back to a task of what it changed for itself: its PID (for the
/// parent-death check), the open-file limit the keeper had before it raised its own, and the OOM
/// score adjustment it had before it lowered its own (as the bytes written to `/proc`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inherit {
    pub keeper: i32,
    pub nofile: libc::rlimit,
    pub oom_score_adj: Option<([u8; 16], usize)>,
}

/// An `oom_score_adj` as the child writes it, and whether the start fails when it cannot be
/// written: a task's own value must hold; the inherited 0 is given back where the kernel lets it.
#[derive(Debug, Clone, Copy)]
struct OomScoreAdj {
    text: ([u8; 16], usize),
    required: bool,
}

impl OomScoreAdj {
    fn of(n: i32) -> OomScoreAdj {
        let mut text = [0u8; 16];
        let digits = n.to_string();
        let len = digits.len().min(text.len());
        text[..len].copy_from_slice(&digits.as_bytes()[..len]);
        OomScoreAdj {
            text: (text, len),
            required: true,
        }
    }
}

/// Everything the child needs, prepared before the `clone`: it only reads this.
pub(crate) struct Plan {
    program: CString,
    _args: Vec<CString>,
    _env: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    run_as: Option<(u32, u32, Vec<libc::gid_t>)>,
    inherit: Inherit,
    /// The task's own `oom_score_adj` (its jobspec's), as the bytes written to `/proc`; else the
    /// keeper's [`Inherit::oom_score_adj`].
    oom_score_adj: Option<OomScoreAdj>,
    /// The `exec` driver's namespaces and root ([`crate::isolate`]).
    isolate: Option<crate::isolate::Prepared>,
    cgroup: crate::cgroup::Join,
}

impl Plan {
    pub(crate) fn new(spec: &StartTask, inherit: Inherit) -> io::Result<Plan> {
        let nul =
            |_| io::Error::other("a NUL byte in the task's command, arguments or environment");
        let program = CString::new(spec.program.as_os_str().as_encoded_bytes()).map_err(nul)?;
        let mut args = vec![program.clone()];
        for a in &spec.args {
            args.push(CString::new(a.as_bytes()).map_err(nul)?);
        }
        let env = spec
            .env
            .iter()
            .map(|(k, v)| CString::new(format!("{k}={v}")).map_err(nul))
            .collect::<io::Result<Vec<_>>>()?;
        let isolate = spec
            .isolate
            .as_ref()
            .map(crate::isolate::Prepared::new)
            .transpose()?;
        // An isolated task starts in its root, which is its task directory.
        let cwd = if isolate.is_some() {
            "/".as_ref()
        } else {
            spec.cwd.as_os_str()
        };
        let cwd = CString::new(cwd.as_encoded_bytes())
            .map_err(|_| io::Error::other("task directory path has a NUL byte"))?;
        let argv = args
            .iter()
            .map(|a| a.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        let envp = env
            .iter()
            .map(|e| e.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        Ok(Plan {
            program,
            _args: args,
            _env: env,
            argv,
            envp,
            cwd,
            run_as: spec.run_as.clone(),
            inherit,
            oom_score_adj: match spec.oom_score_adj {
                Some(n) => Some(OomScoreAdj::of(n)),
                None => inherit.oom_score_adj.map(|text| OomScoreAdj {
                    text,
                    required: false,
                }),
            },
            isolate,
            cgroup: crate::cgroup::Join::new(spec.cgroup.as_ref())?,
        })
    }
}

/// The child's stack, mapped once (below it a page that faults, so an overflow cannot write
/// into the keeper's memory) and used by one child at a time: the keeper waits while it runs.
pub(crate) struct Spawner {
    base: *mut libc::c_void,
    len: usize,
}

impl Spawner {
    pub(crate) fn new() -> io::Result<Spawner> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = STACK_SIZE + page;
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the lowest page of the mapping made above.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: the mapping made above, used by nothing yet.
            unsafe { libc::munmap(base, len) };
            return Err(e);
        }
        Ok(Spawner { base, len })
    }

    /// Starts the task's process (its own process group; stdin `/dev/null`, stdout and stderr
    /// the given pipes) and answers its PID once it runs the program. A step that fails in the
    /// child (the `execve`, the directory, the credentials) is its OS error here, the child
    /// reaped.
    pub(crate) fn spawn(
        &mut self,
        plan: &Plan,
        stdout: OwnedFd,
        stderr: OwnedFd,
    ) -> io::Result<i32> {
        // SAFETY: dup3 onto the reserved slots; the keeper is single-threaded, so nothing opens
        // or closes a descriptor between these calls and the clone.
        unsafe {
            if libc::dup3(stdout.as_raw_fd(), STDOUT_SLOT, libc::O_CLOEXEC) < 0
                || libc::dup3(stderr.as_raw_fd(), STDERR_SLOT, libc::O_CLOEXEC) < 0
            {
                let e = io::Error::last_os_error();
                release_slots();
                return Err(e);
            }
        }
        drop((stdout, stderr));
        let mut child = Child {
            plan,
            err: 0,
            oom_failed: false,
        };
        // SAFETY: sigset_t is plain data; sigfillset and pthread_sigmask fill and read them.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        let mut keeper_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: see above. Every signal is blocked from here until the child has exec'd.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut keeper_mask);
        }
        // SAFETY: the stack is ours and unused (one child at a time, and CLONE_VFORK suspends
        // the keeper until the child has exec'd or exited); `child` outlives the child's use of
        // it for the same reason; `child_main` only makes system calls (module doc).
        let pid = unsafe {
            let top = (self.base as *mut u8).add(self.len);
            libc::clone(
                child_main,
                top.cast(),
                libc::CLONE_VM
                    | libc::CLONE_VFORK
                    | libc::CLONE_FILES
                    | libc::SIGCHLD
                    | plan
                        .isolate
                        .as_ref()
                        .map_or(0, |_| crate::isolate::CLONE_FLAGS),
                (&mut child as *mut Child).cast(),
            )
        };
        let clone_err = io::Error::last_os_error();
        // SAFETY: the mask saved above; the slots are the keeper's again.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &keeper_mask, std::ptr::null_mut());
            release_slots();
        }
        if pid < 0 {
            return Err(clone_err);
        }
        // SAFETY: the child wrote them, if at all, before it exited; it runs no more.
        let (err, oom_failed) = unsafe {
            (
                std::ptr::read_volatile(&child.err),
                std::ptr::read_volatile(&child.oom_failed),
            )
        };
        if err != 0 {
            let _ = Proc { pid }.wait();
            let e = io::Error::from_raw_os_error(err);
            if let (true, Some(oom)) = (oom_failed, &plan.oom_score_adj) {
                // Not the command's error: said as what it is, without the errno the agent would
                // print as the command's.
                let (text, len) = oom.text;
                return Err(io::Error::other(format!(
                    "cannot set the task's oom_score_adj to {}: {e}",
                    String::from_utf8_lossy(&text[..len])
                )));
            }
            return Err(e);
        }
        Ok(pid)
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; no child runs on it now.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Puts `/dev/null` back in the stdout and stderr slots, closing the keeper's copies of the pipes.
///
/// # Safety
/// Only with the slots reserved (see [`reserve_slots`]).
unsafe fn release_slots() {
    // SAFETY: dup3 between the reserved slots.
    unsafe {
        libc::dup3(STDIN_SLOT, STDOUT_SLOT, libc::O_CLOEXEC);
        libc::dup3(STDIN_SLOT, STDERR_SLOT, libc::O_CLOEXEC);
    }
}

/// A task process the keeper started and has not reaped yet.
#[derive(Debug)]
pub(crate) struct Proc {
    pub pid: i32,
}

impl Proc {
    /// Reaps it if it has exited.
    pub(crate) fn try_wait(&self) -> io::Result<Option<ExitStatus>> {
        self.wait_with(libc::WNOHANG)
    }

    /// Waits until it exits and reaps it.
    pub(crate) fn wait(&self) -> io::Result<ExitStatus> {
        loop {
            if let Some(st) = self.wait_with(0)? {
                return Ok(st);
            }
        }
    }

    fn wait_with(&self, flags: i32) -> io::Result<Option<ExitStatus>> {
        let mut status = 0;
        loop {
            // SAFETY: waitpid writes one int we own.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, flags) };
            match rc {
                0 => return Ok(None),
                r if r == self.pid => return Ok(Some(ExitStatus::from_raw(status))),
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }
}

/// Shared between the keeper and the child it clones: the plan, and the OS error of the step that
/// failed, which the keeper reads once the child has exited.
struct Child<'a> {
    plan: &'a Plan,
    err: i32,
    /// The step that failed was writing the task's `oom_score_adj`.
    oom_failed: bool,
}

/// The child: from the `clone` to the `execve`. Writes the failed step's OS error and exits 127.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    let child = arg.cast::<Child>();
    // SAFETY: `arg` is the `Child` the keeper passed, alive while the keeper waits for this
    // process; the steps only make system calls on the plan (module doc).
    unsafe {
        let err = prepare_and_exec((*child).plan, &mut (*child).oom_failed);
        std::ptr::write_volatile(&mut (*child).err, err.max(1));
        libc::_exit(127)
    }
}

/// The last OS error (set by the failed call before it), as a raw number.
fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// # Safety
/// Only in the child of [`Spawner::spawn`], with every signal blocked. `oom_failed` is set when
/// the step that failed is the `oom_score_adj`'s.
unsafe fn prepare_and_exec(plan: &Plan, oom_failed: &mut bool) -> i32 {
    // SAFETY: system calls on memory the plan owns, in the child (see the callers).
    unsafe {
        // A caught signal would run the keeper's handler here: back to the default, as at exec.
        // SIGPIPE, which the Rust runtime ignores, to the default too (std does the same).
        let mut old: libc::sigaction = std::mem::zeroed();
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for sig in 1..NSIG {
            if sig == libc::SIGKILL
                || sig == libc::SIGSTOP
                || libc::sigaction(sig, std::ptr::null(), &mut old) != 0
            {
                continue;
            }
            let handler = old.sa_sigaction;
            if handler == libc::SIG_DFL || (handler == libc::SIG_IGN && sig != libc::SIGPIPE) {
                continue;
            }
            libc::sigaction(sig, &default, std::ptr::null_mut());
        }
        // A table of its own holding descriptors 0 to 5 only. Kernels before 5.9 have no
        // close_range: a copy of the whole table, whose descriptors are all close-on-exec.
        if libc::syscall(
            libc::SYS_close_range,
            FIRST_UNCOPIED,
            u32::MAX,
            libc::CLOSE_RANGE_UNSHARE,
        ) != 0
            && libc::unshare(libc::CLONE_FILES) != 0
        {
            return errno();
        }
        if libc::dup2(STDIN_SLOT, 0) < 0
            || libc::dup2(STDOUT_SLOT, 1) < 0
            || libc::dup2(STDERR_SLOT, 2) < 0
        {
            return errno();
        }
        for slot in [STDIN_SLOT, STDOUT_SLOT, STDERR_SLOT] {
            libc::close(slot);
        }
        if libc::setpgid(0, 0) != 0 {
            return errno();
        }
        // Before anything of the task runs, and while still root (cgroup files are root's).
        if let Err(e) = plan.cgroup.join() {
            return e;
        }
        // Before the credentials change: a process whose user changed is not dumpable, and the
        // files of /proc/self are root's then, so it could no longer write its own. Before the
        // isolation too, while /proc is the host's. Raising the keeper's lowered value back
        // needs no privilege; lowering one below what a privileged process set needs
        // CAP_SYS_RESOURCE, which a keeper not run as root lacks.
        if let Some(oom) = &plan.oom_score_adj {
            let fd = libc::open(
                c"/proc/self/oom_score_adj".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            let (text, len) = &oom.text;
            let written = fd >= 0 && libc::write(fd, text.as_ptr().cast(), *len) == *len as isize;
            let e = errno();
            if fd >= 0 {
                libc::close(fd);
            }
            if !written && oom.required {
                std::ptr::write_volatile(oom_failed, true);
                return e;
            }
        }
        if let Some(isolate) = &plan.isolate {
            let err = isolate.apply();
            if err != 0 {
                return err;
            }
        }
        // The data directory is 0700, so a task of another user could not enter its directory
        // once it is that user: enter it first, then drop privileges.
        if libc::chdir(plan.cwd.as_ptr()) != 0 {
            return errno();
        }
        if let Some((uid, gid, groups)) = &plan.run_as {
            if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) != 0
                || libc::syscall(libc::SYS_setgid, *gid) != 0
                || libc::syscall(libc::SYS_setuid, *uid) != 0
            {
                return errno();
            }
        }
        let Inherit { keeper, nofile, .. } = plan.inherit;
        // After the credentials change, which clears it: a keeper that dies takes the task with
        // it. A keeper already gone before this line is caught by getppid.
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
            // An isolated task's parent is outside its PID namespace: getppid says 0.
            || libc::getppid() != if plan.isolate.is_some() { 0 } else { keeper }
        {
            return libc::ESRCH;
        }
        libc::setrlimit(libc::RLIMIT_NOFILE, &nofile);
        // The task starts with no signal blocked.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // execve itself, not execvp: execvp runs a file the kernel refuses to execute (ENOEXEC)
        // with /bin/sh, where the task must fail to start.
        libc::execve(
            plan.program.as_ptr(),
            plan.argv.as_ptr(),
            plan.envp.as_ptr(),
        );
        errno()
    }
}
