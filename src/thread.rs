//! The one way nodeward starts a long-lived thread.
//!
//! [`spawn`] names the thread (it shows in `top -H` and in panics), gives it a small stack (the agent
//! runs thousands of them, and only touched pages cost memory), and turns a panic into an error in
//! the log and a counter in `/v1/agent/self` instead of a thread that silently vanished.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

/// Stack size of every nodeward thread. Runners, waiters and supervisors keep little on the stack.
pub const STACK_SIZE: usize = 256 * 1024;

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

/// Spawns a named thread; a panic inside is logged and counted, never silent.
pub fn spawn<F, T>(name: impl Into<String>, f: F) -> io::Result<JoinHandle<Option<T>>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let name = name.into();
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
                    None
                }
            }
        });
    if spawned.is_err() {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
    spawned
}
