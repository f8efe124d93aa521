//! Shared by the fuzz targets.

/// Runs `f` on a thread with the stack of nodeward's threads ([`nodeward::thread::STACK_SIZE`]):
/// the agent parses API request bodies on such threads, so recursion that fits in a main thread's
/// 8 MiB but not there must count as a crash. A panic or stack overflow aborts the process, which
/// libFuzzer reports.
pub fn on_agent_stack(f: impl FnOnce() + Send) {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(nodeward::thread::STACK_SIZE)
            .spawn_scoped(s, f)
            .expect("cannot start a thread")
            .join()
            .expect("the input panicked");
    });
}
