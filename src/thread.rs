//! Threads: the one way nodeward starts a long-lived thread, and the stop signals they share.
//!
//! - [`Never`]: the message type of channels that only signal by disconnecting. Dropping the one
//!   sender is the broadcast "stop"; every receiver sees it at once in its `select!`.
//! - [`StopSwitch`]: the agent-wide shutdown channel, tripped once.
//! - [`spawn_scoped`] and [`parallel_map`]: short-lived threads that borrow their caller,
//!   named and counted the same way; the scope joins them.
//! - [`spawn`], [`spawn_guarded`], [`spawn_stoppable`]: a named thread with a small stack (the agent runs thousands,
//!   and only touched pages cost memory) whose panic is logged, counted in `/v1/agent/self` and
//!   handed to the owner's `on_panic` (a task runner marks its task failed), never silent. Both
//!   return a [`Worker`]: the owner stops it (drops its stop sender) and joins it.
//!
//! Ownership: whoever spawns a thread keeps its [`Worker`] and joins it before it is dropped
//! itself (the agent joins the flusher, the volume retry and reload workers at shutdown; the
//! allocation manager joins the runners and gates). A `Worker` dropped unjoined detaches the
//! thread, as a `JoinHandle` does; that is a bug where the owner outlives the thread.

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Stack size of every nodeward thread. Runners, waiters and supervisors keep little on the stack.
pub const STACK_SIZE: usize = 256 * 1024;

/// Never sent: channels of this type only signal by disconnecting.
#[derive(Debug, Clone, Copy)]
pub enum Never {}

static PANICS: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicU64 = AtomicU64::new(0);

/// Panics caught in nodeward threads since start.
pub fn panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

/// nodeward threads alive now.
pub fn live() -> u64 {
    LIVE.load(Ordering::Relaxed)
}

/// The owner's side of a thread started by [`spawn`] or [`spawn_stoppable`].
pub struct Worker<T> {
    handle: JoinHandle<Option<T>>,
    /// Dropped by [`Worker::stop`]: the thread's stop receiver disconnects.
    stop: Option<Sender<Never>>,
}

impl<T> Worker<T> {
    /// Asks the thread to stop (a [`spawn_stoppable`] thread sees its receiver disconnect).
    pub fn stop(&mut self) {
        self.stop.take();
    }

    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Stops the thread and waits for it. `None` when it panicked.
    pub fn join(mut self) -> Option<T> {
        self.stop();
        self.handle.join().ok().flatten()
    }

    /// Stops the thread and waits for it until `deadline`; gives the worker back when it has not
    /// ended by then (std has no timed join, so this polls `is_finished`).
    pub fn join_until(mut self, deadline: Instant) -> Result<Option<T>, Worker<T>> {
        self.stop();
        while !self.handle.is_finished() {
            let now = Instant::now();
            if now >= deadline {
                return Err(self);
            }
            std::thread::sleep((deadline - now).min(Duration::from_millis(5)));
        }
        Ok(self.join())
    }
}

/// Spawns a named thread; a panic inside is logged and counted, never silent.
pub fn spawn<F, T>(name: impl Into<String>, f: F) -> io::Result<Worker<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    start(name.into(), None, f, |_| {})
}

/// Spawns a named thread like [`spawn`]; `on_panic` runs on that thread with the panic message,
/// after the panic was logged and counted: the owner marks what the thread owned.
pub fn spawn_guarded<F, T, P>(name: impl Into<String>, f: F, on_panic: P) -> io::Result<Worker<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
    P: FnOnce(&str) + Send + 'static,
{
    start(name.into(), None, f, on_panic)
}

/// Spawns a named thread that receives a stop channel, disconnected by [`Worker::stop`] (and by
/// [`Worker::join`], or when the worker is dropped); `on_panic` as for [`spawn_guarded`].
pub fn spawn_stoppable<F, T, P>(name: impl Into<String>, f: F, on_panic: P) -> io::Result<Worker<T>>
where
    F: FnOnce(Receiver<Never>) -> T + Send + 'static,
    T: Send + 'static,
    P: FnOnce(&str) + Send + 'static,
{
    let (tx, rx) = bounded::<Never>(0);
    start(name.into(), Some(tx), move || f(rx), on_panic)
}

fn start<F, T, P>(
    name: String,
    stop: Option<Sender<Never>>,
    f: F,
    on_panic: P,
) -> io::Result<Worker<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
    P: FnOnce(&str) + Send + 'static,
{
    let thread_name = name.clone();
    LIVE.fetch_add(1, Ordering::Relaxed);
    let spawned = std::thread::Builder::new()
        .name(name)
        .stack_size(STACK_SIZE)
        .spawn(move || {
            let result = catch_unwind(AssertUnwindSafe(f));
            LIVE.fetch_sub(1, Ordering::Relaxed);
            match result {
                Ok(v) => Some(v),
                Err(payload) => {
                    PANICS.fetch_add(1, Ordering::Relaxed);
                    let msg = payload
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".to_string());
                    log::error!("thread {thread_name} panicked: {msg}");
                    // The owner's marking must not turn one panic into an abort.
                    let _ = catch_unwind(AssertUnwindSafe(|| on_panic(&msg)));
                    None
                }
            }
        });
    match spawned {
        Ok(handle) => Ok(Worker { handle, stop }),
        Err(e) => {
            LIVE.fetch_sub(1, Ordering::Relaxed);
            Err(e)
        }
    }
}

/// Spawns a named thread inside `scope`, for short work that borrows its caller (a bounded
/// fan-out, a parser on a larger stack): counted in [`live`] like every nodeward thread; a panic
/// is logged and counted, then continues in whoever joins it (the scope re-raises it), as a panic
/// of the caller's own would.
pub fn spawn_scoped<'scope, 'env, F, T>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    name: impl Into<String>,
    stack_size: usize,
    f: F,
) -> io::Result<std::thread::ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    let name = name.into();
    let thread_name = name.clone();
    LIVE.fetch_add(1, Ordering::Relaxed);
    let spawned = std::thread::Builder::new()
        .name(name)
        .stack_size(stack_size)
        .spawn_scoped(scope, move || {
            let result = catch_unwind(AssertUnwindSafe(f));
            LIVE.fetch_sub(1, Ordering::Relaxed);
            result.unwrap_or_else(|payload| {
                PANICS.fetch_add(1, Ordering::Relaxed);
                log::error!("thread {thread_name} panicked");
                std::panic::resume_unwind(payload)
            })
        });
    if spawned.is_err() {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
    spawned
}

/// Runs `f` over `items` on at most `bound` scoped threads (`fan-out-N`); answers in no
/// particular order. When no thread can be started the caller does the work itself.
///
/// Protocol: the items go into a channel that is closed before any worker starts; the workers
/// take items until it is empty and send each answer back; the scope joins every worker before
/// this returns, so no worker outlives the data it borrows.
pub fn parallel_map<T, R, F>(items: Vec<T>, bound: usize, f: F) -> Vec<R>
where
    T: Send,
    R: Send,
    F: Fn(T) -> R + Sync,
{
    let workers = bound.max(1).min(items.len());
    let (tx, rx) = crossbeam_channel::unbounded();
    for item in items {
        let _ = tx.send(item);
    }
    drop(tx);
    let (out_tx, out_rx) = crossbeam_channel::unbounded();
    std::thread::scope(|s| {
        let mut started = 0;
        for i in 0..workers {
            let (rx, out_tx, f) = (rx.clone(), out_tx.clone(), &f);
            let spawned = spawn_scoped(s, format!("fan-out-{i}"), STACK_SIZE, move || {
                for item in rx.iter() {
                    let _ = out_tx.send(f(item));
                }
            });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => log::warn!("cannot start a fan-out worker: {e}"),
            }
        }
        if started == 0 {
            for item in rx.iter() {
                let _ = out_tx.send(f(item));
            }
        }
    });
    drop(out_tx);
    out_rx.into_iter().collect()
}

/// The agent-wide stop: tripping it drops the one sender, which disconnects every receiver of
/// the shutdown channel at once. It also records whether the agent has finished starting, under
/// the same lock, so that a stop signal either cancels the start-up or is left to the main loop,
/// never both and never neither.
#[derive(Clone)]
pub struct StopSwitch {
    /// Guards: the sender (present until tripped) and whether the start-up is over.
    inner: Arc<Mutex<SwitchState>>,
    rx: Receiver<Never>,
}

struct SwitchState {
    tx: Option<Sender<Never>>,
    started: bool,
}

impl Default for StopSwitch {
    fn default() -> Self {
        let (tx, rx) = bounded::<Never>(0);
        StopSwitch {
            inner: Arc::new(Mutex::new(SwitchState {
                tx: Some(tx),
                started: false,
            })),
            rx,
        }
    }
}

impl StopSwitch {
    /// Disconnects when the switch trips.
    pub fn receiver(&self) -> Receiver<Never> {
        self.rx.clone()
    }

    /// Trips the switch; true the first time.
    pub fn trip(&self) -> bool {
        self.inner.lock().tx.take().is_some()
    }

    /// Trips the switch only while the agent is starting; true if it did.
    pub fn trip_if_starting(&self) -> bool {
        let mut s = self.inner.lock();
        !s.started && s.tx.take().is_some()
    }

    /// The start-up is over; false when a stop signal already cancelled it.
    pub fn mark_started(&self) -> bool {
        let mut s = self.inner.lock();
        s.started = true;
        s.tx.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{select, TryRecvError};

    #[test]
    fn a_stoppable_worker_stops_and_joins() {
        let w = spawn_stoppable(
            "t-stop",
            |stop: Receiver<Never>| {
                select! { recv(stop) -> _ => 7 }
            },
            |_| {},
        )
        .unwrap();
        assert_eq!(w.join(), Some(7));
    }

    #[test]
    fn a_panic_reaches_the_owner_and_counts() {
        let (tx, rx) = bounded::<String>(1);
        let before = panics();
        let w = spawn_stoppable(
            "t-panic",
            |_stop| -> u32 { panic!("boom") },
            move |msg| {
                let _ = tx.send(msg.to_string());
            },
        )
        .unwrap();
        assert_eq!(w.join(), None);
        assert_eq!(rx.recv().unwrap(), "boom");
        assert!(panics() > before);
    }

    #[test]
    fn join_until_gives_back_a_thread_that_does_not_end() {
        let (release_tx, release) = bounded::<()>(0);
        let w = spawn("t-slow", move || {
            let _ = release.recv();
        })
        .unwrap();
        let w = w
            .join_until(Instant::now() + Duration::from_millis(20))
            .unwrap_err();
        drop(release_tx);
        assert!(w
            .join_until(Instant::now() + Duration::from_secs(60))
            .is_ok());
    }

    #[test]
    fn every_item_is_mapped_once_within_the_bound() {
        let running = std::sync::atomic::AtomicUsize::new(0);
        let peak = std::sync::atomic::AtomicUsize::new(0);
        let mut out = parallel_map((0..50).collect(), 4, |i: u32| {
            use std::sync::atomic::Ordering::SeqCst;
            let now = running.fetch_add(1, SeqCst) + 1;
            peak.fetch_max(now, SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(1));
            running.fetch_sub(1, SeqCst);
            i * 2
        });
        out.sort();
        assert_eq!(out, (0..50).map(|i| i * 2).collect::<Vec<_>>());
        assert!(peak.load(std::sync::atomic::Ordering::SeqCst) <= 4);
    }

    #[test]
    fn a_stop_signal_cancels_the_start_up_or_is_left_to_the_main_loop() {
        let starting = StopSwitch::default();
        let rx = starting.receiver();
        assert!(starting.trip_if_starting(), "a signal while starting trips");
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
        assert!(
            !starting.mark_started(),
            "the start-up learns it was cancelled"
        );

        let running = StopSwitch::default();
        let rx = running.receiver();
        assert!(running.mark_started());
        assert!(
            !running.trip_if_starting(),
            "once started, the main loop decides"
        );
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
        assert!(running.trip());
        assert!(!running.trip(), "tripping twice is harmless");
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
    }
}
