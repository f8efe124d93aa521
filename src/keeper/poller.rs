//! A level-triggered `epoll(7)` set for the keeper's loop. Each descriptor is registered once, with
//! a token that says what it is, and removed before it is closed; a wake-up then costs the ready
//! descriptors only. With `poll(2)` every wake-up rebuilt and had the kernel scan the whole set
//! (three descriptors per task): with 1,000 tasks that was most of the keeper's CPU per restart
//! (docs/benchmarks.md).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Ready for reading (or at its end: hang-up and error are always reported).
pub const READ: u32 = libc::EPOLLIN as u32;
/// Ready for writing.
pub const WRITE: u32 = libc::EPOLLOUT as u32;

/// How many ready descriptors one wait answers at most; the rest come with the next wait.
const BATCH: usize = 256;

pub struct Poller {
    epoll: OwnedFd,
    ready: Vec<libc::epoll_event>,
}

impl Poller {
    pub fn new() -> io::Result<Poller> {
        // SAFETY: epoll_create1 takes flags and returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Poller {
            // SAFETY: a fresh descriptor that nothing else owns.
            epoll: unsafe { OwnedFd::from_raw_fd(fd) },
            ready: Vec::with_capacity(BATCH),
        })
    }

    /// Watches `fd` for `events` (`READ`, `WRITE` or both); its wake-ups carry `token`.
    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// Changes what a watched `fd` is watched for.
    pub fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// Stops watching `fd`; call it before the descriptor is closed. The kernel drops a closed
    /// descriptor by itself only once no copy of it is left open anywhere, so this is not left to
    /// it.
    pub fn remove(&self, fd: &impl AsRawFd) {
        // A descriptor that was never added, or is already gone, is no error here.
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd.as_raw_fd(), 0, 0);
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: epoll_ctl reads one epoll_event, valid for the call.
        let rc = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout_ms` (-1: no limit) and answers the tokens and events of the ready
    /// descriptors (none on a timeout or a signal).
    pub fn wait(&mut self, timeout_ms: i32) -> io::Result<impl Iterator<Item = (u64, u32)> + '_> {
        self.ready.clear();
        // SAFETY: the buffer has room for BATCH events; the kernel fills at most that many, and
        // set_len below takes only what it answered.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                self.ready.as_mut_ptr(),
                BATCH as i32,
                timeout_ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        } else {
            // SAFETY: the kernel initialised the first n entries.
            unsafe { self.ready.set_len(n as usize) };
        }
        Ok(self.ready.iter().map(|e| (e.u64, e.events)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_ready_descriptor_wakes_the_wait_with_its_token_and_a_removed_one_does_not() {
        let mut p = Poller::new().unwrap();
        let (mut a, b) = UnixStream::pair().unwrap();
        let (mut c, d) = UnixStream::pair().unwrap();
        p.add(b.as_raw_fd(), READ, 7).unwrap();
        p.add(d.as_raw_fd(), READ, 9).unwrap();
        assert_eq!(p.wait(0).unwrap().count(), 0, "nothing written yet");
        a.write_all(b"x").unwrap();
        c.write_all(b"y").unwrap();
        p.remove(&d);
        let ready: Vec<(u64, u32)> = p.wait(1000).unwrap().collect();
        assert_eq!(ready.len(), 1, "{ready:?}");
        assert_eq!(ready[0].0, 7);
        assert_ne!(ready[0].1 & READ, 0);
        // Level-triggered: unread data wakes it again.
        assert_eq!(p.wait(0).unwrap().count(), 1);
        p.modify(b.as_raw_fd(), READ | WRITE, 8).unwrap();
        let tokens: Vec<u64> = p.wait(0).unwrap().map(|(t, _)| t).collect();
        assert_eq!(tokens, vec![8]);
    }

    #[test]
    fn a_peer_that_hangs_up_wakes_the_wait() {
        let mut p = Poller::new().unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        p.add(b.as_raw_fd(), READ, 1).unwrap();
        drop(a);
        let ready: Vec<(u64, u32)> = p.wait(1000).unwrap().collect();
        assert_eq!(ready.len(), 1);
        assert_ne!(ready[0].1 & (libc::EPOLLHUP as u32 | READ), 0);
    }
}
