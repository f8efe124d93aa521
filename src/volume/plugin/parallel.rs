//! A bounded fan-out over borrowed work: fingerprinting every plugin, restoring every volume.
//!
//! Protocol: the items go into a channel that is closed before any worker starts; at most `bound`
//! scoped workers take items from it until it is empty and send each answer back; the scope joins
//! every worker before [`parallel_map`] returns, so no worker outlives the data it borrows. A
//! worker's panic is re-raised on the caller when the scope ends, as a panic of the caller's own
//! would be.
//!
//! The closure borrows its caller (the volume manager, the plugin set), so the workers are scoped
//! threads rather than [`crate::thread::spawn`]'s `'static` ones; they get the same names and
//! the same small stack ([`crate::thread::STACK_SIZE`]).

use std::thread::Builder;

/// Runs `f` over `items` on at most `bound` scoped threads; answers in no particular order. When
/// no thread can be started the caller does the work itself.
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
        let mut started = 0;
        for i in 0..workers {
            let (rx, out_tx, f) = (rx.clone(), out_tx.clone(), &f);
            let spawned = Builder::new()
                .name(format!("fan-out-{i}"))
                .stack_size(crate::thread::STACK_SIZE)
                .spawn_scoped(s, move || {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
