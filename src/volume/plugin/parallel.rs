//! A bounded fan-out over borrowed work: fingerprinting every plugin, restoring every volume.

/// Runs `f` over `items` on at most `bound` scoped threads; answers in no particular order.
pub(crate) fn parallel_map<T, R, F>(items: Vec<T>, bound: usize, f: F) -> Vec<R>
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
        for _ in 0..workers {
            let (rx, out_tx, f) = (rx.clone(), out_tx.clone(), &f);
            s.spawn(move || {
                for item in rx.iter() {
                    let _ = out_tx.send(f(item));
                }
            });
        }
    });
    drop(out_tx);
    out_rx.into_iter().collect()
}
