//! The CSI part of an allocation's gate (`super::gate`): claiming and mounting its CSI volumes
//! before the first task starts, failing it when a plugin call fails, and handing its volumes to
//! the CSI volume manager's `csi-unmount` thread when it is over.
//!
//! Runs on the allocation's gate thread only. The gate of an allocation with CSI volumes does not
//! return once its tasks run: it waits (a `select!` over its stop channel, the agent's shutdown
//! and a [`CSI_POLL`] tick) until they are all dead or the allocation is stopped, then queues the
//! unmount. On shutdown it returns without: the mounts stay for the tasks that outlive the agent
//! (live-restore.md), and the next agent's gate finds them recorded and publishes nothing again.

use crossbeam_channel::{select, Receiver};
use std::sync::Arc;
use std::time::Duration;

use super::manager::AllocManager;
use super::model::Allocation;
use crate::csi::volumes::attach::{AllocVolumes, Prepared};
use crate::task::events::{now_nanos, now_rfc3339, TaskEvent, TaskStatus};
use crate::thread::Never;

/// How often a waiting allocation looks at its CSI volumes again, and a running one at whether
/// its tasks are all dead. The plugin registry and the claims tell nobody of their changes, so
/// a short poll is what wakes a waiting allocation when a plugin turns healthy or a claim frees.
pub(super) const CSI_POLL: Duration = Duration::from_millis(500);

/// True when the allocation's group asks for a CSI volume.
pub(super) fn has_csi(alloc: &Allocation) -> bool {
    alloc.group_spec().volumes.values().any(|v| v.is_csi())
}

/// True when every task of the allocation is dead.
pub(super) fn all_dead(alloc: &Allocation) -> bool {
    alloc
        .tasks
        .values()
        .all(|s| s.lock().state == TaskStatus::Dead)
}

impl AllocManager {
    /// Claims and mounts the allocation's CSI volumes ([`Prepared::Ready`] when it has none).
    pub(super) fn prepare_csi(&self, alloc: &Allocation) -> Prepared {
        let Some(csi) = &self.engine.csi_volumes else {
            return Prepared::Ready;
        };
        let group = alloc.group_spec();
        let requests = group.volumes.values().filter(|v| v.is_csi()).collect();
        let volumes = AllocVolumes {
            alloc_id: &alloc.id,
            job_id: &alloc.job.id,
            group: &alloc.group,
            index: alloc.index,
            requests,
        };
        csi.mount_alloc(&self.engine.data_dir, &self.engine.node_id, &volumes)
    }

    /// Fails every task that has not started with the mount's error, as Nomad fails an
    /// allocation whose pre-run hook failed.
    pub(super) fn fail_csi_setup(&self, alloc: &Allocation, message: &str) {
        log::warn!("alloc {}: {message}", alloc.id);
        alloc.inner.lock().pending_reason = None;
        for state in alloc.tasks.values() {
            let mut s = state.lock();
            if s.state == TaskStatus::Dead {
                continue;
            }
            s.push(TaskEvent::setup_failure(now_nanos(), message, true));
            s.state = TaskStatus::Dead;
            s.failed = true;
            s.finished_at = Some(now_rfc3339());
        }
        self.engine.deps.store.save_soon();
    }

    /// Hands the allocation's volumes to the `csi-unmount` thread, to be taken down once its
    /// tasks are dead.
    pub(super) fn release_csi(&self, alloc: &Arc<Allocation>) {
        if let Some(csi) = &self.engine.csi_volumes {
            let a = alloc.clone();
            csi.unmount_alloc(&alloc.id, Box::new(move || all_dead(&a)));
        }
    }

    /// Waits while the allocation's tasks run; queues the unmount when they are all dead or the
    /// allocation is stopped, not when the agent shuts down.
    pub(super) fn watch_csi(&self, alloc: &Arc<Allocation>, stop: &Receiver<Never>) {
        let tick = crossbeam_channel::tick(CSI_POLL);
        while !all_dead(alloc) {
            select! {
                recv(stop) -> _ => break,
                recv(self.engine.deps.shutdown) -> _ => return,
                recv(tick) -> _ => {},
            }
        }
        self.release_csi(alloc);
    }
}
