//! The allocation hooks: what an allocation runner ([`super`]) does around its tasks, in the
//! shape of Nomad's alloc runner hooks (`client/allocrunner/alloc_runner_hooks.go`).
//!
//! ```text
//!  prerun (each hook in order, again on every wake-up while one waits) ──► tasks start
//!     │ Failed: every task fails with the message                              │
//!     ▼                                                                        ▼
//!  postrun ◄── stop of the allocation, or (a hook with `holds`) every task dead
//! ```
//!
//! Guarantees a hook can rely on:
//! - `prerun` runs on the allocation's gate thread, hook after hook in list order (the host
//!   volumes first, then the CSI volumes), before any task starts; the next hook runs only once
//!   the one before answered [`Prerun::Ready`]. While one answers [`Prerun::Wait`] the allocation
//!   is `pending` with that reason, and the runner waits for a hook's `wake` channel, a poll tick
//!   (when a hook [`polls`](AllocHook::polls)), its stop or the shutdown, then asks again from the
//!   first hook. A resumed stop (restored stopped) asks no hook: its live tasks are killed at once.
//! - `postrun` runs once, on the gate thread, after the tasks: when the allocation is stopped
//!   before they start, when a prerun failed, or, for an allocation with a hook that
//!   [`holds`](AllocHook::holds) what it set up, once every task is dead or the allocation is
//!   stopped. It never runs at the agent's shutdown: the tasks outlive the agent and keep their
//!   mounts (live-restore.md).

use crossbeam_channel::Receiver;
use std::sync::Arc;
use std::time::Duration;

use crate::alloc::manager::AllocManager;
use crate::alloc::model::Allocation;
use crate::csi::volumes::attach::{AllocVolumes, Prepared};
use crate::task::events::TaskStatus;

/// How often a waiting allocation looks at its CSI volumes again, and a running one at whether
/// its tasks are all dead. The plugin registry and the claims tell nobody of their changes, so
/// a short poll is what wakes a waiting allocation when a plugin turns healthy or a claim frees.
pub(in crate::alloc) const CSI_POLL: Duration = Duration::from_millis(500);

/// What a hook's prerun answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::alloc) enum Prerun {
    /// Done: the next hook, or the tasks, may go on.
    Ready,
    /// The allocation waits `pending`, for this reason (Nomad's words).
    Wait(String),
    /// The allocation fails with this message, as Nomad fails one whose pre-run hook failed.
    Failed(String),
}

/// One step of an allocation's life around its tasks. Runs on the allocation's gate thread only.
pub(in crate::alloc) trait AllocHook: Send {
    /// Before any task starts; asked again after every wake-up while it waits.
    fn prerun(&self, alloc: &Allocation) -> Prerun;

    /// A channel that wakes a waiting allocation when what the hook waits for may have changed.
    /// Taken once, when the gate starts; the gate returns when it disconnects (its source is
    /// gone).
    fn wake(&self) -> Option<Receiver<()>> {
        None
    }

    /// Nothing tells the hook of its changes: the gate polls every [`CSI_POLL`] instead.
    fn polls(&self) -> bool {
        false
    }

    /// What the hook set up stays while the tasks run: the gate stays on after starting them
    /// and runs `postrun` once they are all dead (or the allocation is stopped).
    fn holds(&self) -> bool {
        false
    }

    /// Hands back what prerun set up; see the module doc for when.
    fn postrun(&self, _alloc: &Arc<Allocation>) {}
}

/// Why an allocation waits for a host volume (`pending`): the reason the API shows.
pub(in crate::alloc) fn missing_reason(source: &str) -> String {
    format!("missing host volume {source:?}")
}

/// True when the allocation's group asks for a CSI volume.
fn has_csi(alloc: &Allocation) -> bool {
    alloc.group_spec().volumes.values().any(|v| v.is_csi())
}

/// True when every task of the allocation is dead.
pub(in crate::alloc) fn all_dead(alloc: &Allocation) -> bool {
    alloc
        .tasks
        .values()
        .all(|s| s.lock().state == TaskStatus::Dead)
}

impl AllocManager {
    /// The hooks of `alloc`, in their order: the host volumes (always: its wake channel is the
    /// volume manager's, whose end ends the gate), then its CSI volumes when it has any.
    pub(in crate::alloc) fn alloc_hooks(
        self: &Arc<Self>,
        alloc: &Allocation,
    ) -> Vec<Box<dyn AllocHook>> {
        let mut hooks: Vec<Box<dyn AllocHook>> = vec![Box::new(HostVolumes(self.clone()))];
        if has_csi(alloc) {
            hooks.push(Box::new(CsiVolumes(self.clone())));
        }
        hooks
    }

    /// The first host volume of the allocation's group that is not ready.
    pub(in crate::alloc) fn missing_volume(&self, alloc: &Allocation) -> Option<String> {
        alloc
            .group_spec()
            .volumes
            .values()
            .find(|v| !v.is_csi() && self.engine.volumes.lookup(&v.source).is_none())
            .map(|v| v.source.clone())
    }
}

/// The host-volume wait: every host volume of the group ready (the volume manager's changes
/// wake it).
struct HostVolumes(Arc<AllocManager>);

impl AllocHook for HostVolumes {
    fn prerun(&self, alloc: &Allocation) -> Prerun {
        match self.0.missing_volume(alloc) {
            Some(missing) => Prerun::Wait(missing_reason(&missing)),
            None => Prerun::Ready,
        }
    }

    fn wake(&self) -> Option<Receiver<()>> {
        Some(self.0.engine.volumes.changes())
    }
}

/// The CSI volumes: claimed and mounted before the first task starts, handed to the CSI volume
/// manager's `csi-unmount` thread when the allocation is over.
struct CsiVolumes(Arc<AllocManager>);

impl AllocHook for CsiVolumes {
    fn prerun(&self, alloc: &Allocation) -> Prerun {
        let engine = &self.0.engine;
        let Some(csi) = &engine.csi_volumes else {
            return Prerun::Ready;
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
        match csi.mount_alloc(&engine.data_dir, &engine.node_id, &volumes) {
            Prepared::Ready => Prerun::Ready,
            Prepared::Wait(reason) => Prerun::Wait(reason),
            Prepared::Failed(message) => Prerun::Failed(message),
        }
    }

    fn polls(&self) -> bool {
        true
    }

    fn holds(&self) -> bool {
        true
    }

    /// Queues the unmount, to be done once the tasks are dead.
    fn postrun(&self, alloc: &Arc<Allocation>) {
        if let Some(csi) = &self.0.engine.csi_volumes {
            let a = alloc.clone();
            csi.unmount_alloc(&alloc.id, Box::new(move || all_dead(&a)));
        }
    }
}
