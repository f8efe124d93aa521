//! CSI volumes in allocations (csi-volumes.md "Claims and mounts"): the calls that claim, stage
//! and publish an allocation's volumes before its first task starts, and the background thread
//! that takes them down again once the allocation's tasks are dead.
//!
//! The plan (which call is due, where it goes) is the pure [`super::mounts`]; this file makes the
//! calls and records each success with [`CsiVolumeManager::record_step`] before the next call, so
//! an agent restarted in between neither repeats a call nor forgets to undo it.
//!
//! Protocol: the allocation's gate thread (`alloc::runner::hooks`) calls [`CsiVolumeManager::mount_alloc`]
//! (plugin calls on the caller's thread, each with the volume call timeout, cancelled by the
//! agent's shutdown) and, when the allocation is over, [`CsiVolumeManager::unmount_alloc`], which
//! only queues the allocation. The `csi-unmount` thread ([`CsiVolumeManager::start_unmounter`],
//! joined by the agent at shutdown) takes each queued allocation once its `ready` says the tasks
//! are dead, makes the reverse calls, and releases each claim once every call for it succeeded.
//! A failed call is retried with a backoff (1 s doubling to 60 s); the claim stays until then, so
//! the volume is never given to another allocation while it is still mounted here. The thread
//! waits in a `select!` over its wake channel, the shutdown and the next retry's deadline; the
//! queue's lock (a leaf) is held only to take or put back entries, never across a call or while
//! an entry's `ready` is asked.

use crossbeam_channel::{after, select, Receiver};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::manager::CsiVolumeManager;
use super::mounts::{self, PluginSteps, Step};
use super::request;
use crate::csi::client::CsiClient;
use crate::csi::proto;
use crate::csi::{PluginKind, PluginRecord};
use crate::jobspec::VolumeRequest;
use crate::records::{CsiCapability, CsiClaimRecord, CsiVolumeRecord};
use crate::thread::{Never, Worker};

/// Nomad's words before a mount failure: the allocation runner's prefix for a failed pre-run hook.
pub const MOUNT_FAILURE_PREFIX: &str = "failed to setup alloc: pre-run hook \"csi_hook\" failed";

const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(60);
/// How often a queued allocation is asked whether its tasks are dead (they end on their own
/// runner threads, which do not tell the volume manager).
const READY_POLL: Duration = Duration::from_millis(250);

/// An allocation as its CSI volumes see it.
pub struct AllocVolumes<'a> {
    pub alloc_id: &'a str,
    pub job_id: &'a str,
    pub group: &'a str,
    /// For `per_alloc` requests (`source[index]`).
    pub index: u32,
    /// Its group's CSI volume requests, in label order.
    pub requests: Vec<&'a VolumeRequest>,
}

/// What [`CsiVolumeManager::mount_alloc`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// Every volume is claimed and published: the tasks may start.
    Ready,
    /// The allocation waits `pending`, for this reason (Nomad's words).
    Wait(String),
    /// A plugin call failed; the allocation fails with this message. What was done is queued
    /// to be undone.
    Failed(String),
}

/// An allocation whose volumes are to be taken down.
pub(super) struct PendingUnmount {
    /// True once the allocation's tasks are dead and no longer use the mounts.
    ready: Box<dyn Fn() -> bool + Send>,
    failures: u32,
    next: Instant,
}

/// The queue of the `csi-unmount` thread: allocation ID → what is left to do.
pub(super) type UnmountQueue = BTreeMap<String, PendingUnmount>;

/// Where one claim is staged and published, and for which usage.
struct Paths {
    staging: PathBuf,
    target: PathBuf,
}

impl CsiVolumeManager {
    /// Claims and mounts an allocation's CSI volumes, or says why it must wait or why it failed.
    /// Called again after a restart, it makes no call that the claims record as done.
    pub fn mount_alloc(&self, data_dir: &Path, node: &str, a: &AllocVolumes) -> Prepared {
        for r in &a.requests {
            let id = r.source_for(a.index);
            // Published before an agent restart: its task may run on; nothing is called again.
            if self
                .claim_of(&id, a.alloc_id)
                .is_some_and(|(_, c)| c.progress.published)
            {
                continue;
            }
            if let Some(why) = mounts::wait_reason(&id, self.view(&id).as_ref(), node) {
                return Prepared::Wait(why);
            }
        }
        let mut claimed: Vec<String> = Vec::new();
        for r in &a.requests {
            let id = r.source_for(a.index);
            let Some(claim) = mounts::claim_for(r, a.alloc_id, a.job_id, a.group) else {
                continue;
            };
            if let Err(e) = self.claim(&id, claim) {
                // Claims are all or nothing: holding one while waiting for another could keep
                // two allocations waiting for each other.
                for id in claimed {
                    self.release_unused(&id, a.alloc_id);
                }
                return Prepared::Wait(e.to_string());
            }
            claimed.push(id);
        }
        for r in &a.requests {
            let id = r.source_for(a.index);
            if let Err(e) = self.mount_one(data_dir, &id, r, a.alloc_id) {
                return Prepared::Failed(format!("{MOUNT_FAILURE_PREFIX}: {e}"));
            }
        }
        Prepared::Ready
    }

    /// Releases a claim that has done nothing yet.
    fn release_unused(&self, id: &str, alloc_id: &str) {
        let unused = self
            .claim_of(id, alloc_id)
            .is_some_and(|(_, c)| c.progress.is_clear());
        if unused {
            self.release(id, alloc_id);
        }
    }

    fn claim_of(&self, id: &str, alloc_id: &str) -> Option<(CsiVolumeRecord, CsiClaimRecord)> {
        let record = self.registry.lock().get(id)?;
        let claim = record
            .claims
            .iter()
            .find(|c| c.alloc_id == alloc_id)?
            .clone();
        Some((record, claim))
    }

    /// The registration of the plugin's `kind` side calls go to: healthy first, then the newest.
    fn side(&self, plugin_id: &str, kind: PluginKind) -> Option<PluginRecord> {
        if kind == PluginKind::Controller {
            return self.plugins.controllers(plugin_id).into_iter().next();
        }
        let mut nodes: Vec<PluginRecord> = self
            .plugins
            .records()
            .into_iter()
            .filter(|r| r.plugin_id == plugin_id && r.kind == PluginKind::Node)
            .collect();
        nodes.sort_by(|a, b| {
            (b.info.healthy, &b.info.update_time).cmp(&(a.info.healthy, &a.info.update_time))
        });
        nodes.into_iter().next()
    }

    fn paths(data_dir: &Path, record: &CsiVolumeRecord, claim: &CsiClaimRecord) -> Paths {
        let usage = mounts::usage(
            claim.mode == crate::records::ClaimMode::Read,
            claim.attachment_mode,
            claim.access_mode,
        );
        Paths {
            staging: mounts::staging_dir(data_dir, &record.plugin_id, &record.id, &usage),
            target: mounts::publish_dir(data_dir, &claim.alloc_id, &record.id, &usage),
        }
    }

    /// Makes the calls still due for one claim, recording each before the next.
    fn mount_one(
        &self,
        data_dir: &Path,
        id: &str,
        r: &VolumeRequest,
        alloc_id: &str,
    ) -> Result<(), String> {
        let (record, claim) = self
            .claim_of(id, alloc_id)
            .ok_or_else(|| format!("volume {id:?} lost its claim for allocation {alloc_id}"))?;
        if claim.progress.published {
            // Published before an agent restart: the plugin need not even be back.
            return Ok(());
        }
        let node = self
            .side(&record.plugin_id, PluginKind::Node)
            .ok_or_else(|| format!("CSI plugin {} has no node plugin", record.plugin_id))?;
        let controller = self.side(&record.plugin_id, PluginKind::Controller);
        let plugin = PluginSteps {
            controller_publish: controller.as_ref().is_some_and(|c| {
                c.info
                    .controller_info
                    .as_ref()
                    .is_some_and(|i| i.supports_attach_detach)
            }),
            node_stage: node
                .info
                .node_info
                .as_ref()
                .is_some_and(|i| i.requires_node_stage_volume),
        };
        let staged_on_node = record
            .claims
            .iter()
            .any(|c| c.alloc_id != alloc_id && c.mode == claim.mode && c.progress.staged);
        let paths = Self::paths(data_dir, &record, &claim);
        let capability = request::capability(
            &CsiCapability {
                access_mode: claim.access_mode,
                attachment_mode: claim.attachment_mode,
            },
            r.mount_options.as_ref().or(record.mount_options.as_ref()),
        );
        let node_id = node
            .info
            .node_info
            .as_ref()
            .map(|i| i.id.clone())
            .unwrap_or_default();
        let mut publish_context = claim.publish_context.clone();
        let node_client = CsiClient::new(&node.socket_path);
        let stop = [&self.shutdown];
        let t = self.call_timeout;
        for step in mounts::mount_steps(plugin, claim.progress, staged_on_node) {
            let mut context = None;
            let result = match step {
                Step::ControllerPublish => {
                    let c = controller.as_ref().expect("a controller publishes");
                    let req = proto::ControllerPublishVolumeRequest {
                        volume_id: record.external_id.clone(),
                        node_id: node_id.clone(),
                        volume_capability: Some(capability.clone()),
                        readonly: r.read_only,
                        secrets: record.secrets.clone(),
                        volume_context: record.context.clone(),
                    };
                    CsiClient::new(&c.socket_path)
                        .controller_publish_volume(&req, t, &stop)
                        .map(|answer| {
                            publish_context = answer.publish_context.clone();
                            context = Some(answer.publish_context);
                        })
                }
                Step::NodeStage => node_client
                    .node_stage_volume(
                        &proto::NodeStageVolumeRequest {
                            volume_id: record.external_id.clone(),
                            publish_context: publish_context.clone(),
                            staging_target_path: paths.staging.display().to_string(),
                            volume_capability: Some(capability.clone()),
                            secrets: record.secrets.clone(),
                            volume_context: record.context.clone(),
                        },
                        t,
                        &stop,
                    )
                    .map(|_| ()),
                Step::NodePublish => {
                    // The target's parent is the caller's to make (CSI v1); the target the
                    // plugin's.
                    if let Some(parent) = paths.target.parent() {
                        std::fs::create_dir_all(parent)
                            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
                    }
                    node_client
                        .node_publish_volume(
                            &proto::NodePublishVolumeRequest {
                                volume_id: record.external_id.clone(),
                                publish_context: publish_context.clone(),
                                staging_target_path: if plugin.node_stage {
                                    paths.staging.display().to_string()
                                } else {
                                    String::new()
                                },
                                target_path: paths.target.display().to_string(),
                                volume_capability: Some(capability.clone()),
                                readonly: r.read_only,
                                secrets: record.secrets.clone(),
                                volume_context: record.context.clone(),
                            },
                            t,
                            &stop,
                        )
                        .map(|_| ())
                }
                _ => unreachable!("mount_steps plans mount calls only"),
            };
            result.map_err(|e| e.to_string())?;
            self.record_step(id, alloc_id, step, context)
                .map_err(|e| e.to_string())?;
            log::info!("CSI volume {id}: {step:?} for allocation {alloc_id} done");
        }
        Ok(())
    }

    /// Makes the reverse calls still due for one claim and releases it once all succeeded.
    fn unmount_one(&self, data_dir: &Path, id: &str, alloc_id: &str) -> Result<(), String> {
        let Some((record, claim)) = self.claim_of(id, alloc_id) else {
            return Ok(());
        };
        let same_usage = |c: &&CsiClaimRecord| c.alloc_id != alloc_id && c.mode == claim.mode;
        let others_same: Vec<&CsiClaimRecord> = record.claims.iter().filter(same_usage).collect();
        let others_any = record.claims.iter().any(|c| c.alloc_id != alloc_id);
        let node_staged = claim.progress.staged || others_same.iter().any(|c| c.progress.staged);
        let mut steps = mounts::unmount_steps(claim.progress, node_staged, !others_same.is_empty());
        if others_any {
            steps.retain(|s| *s != Step::ControllerUnpublish);
        }
        if steps.contains(&Step::NodeUnpublish) {
            // The binds of raw_exec tasks at their destinations go first: the tasks are all dead
            // (the unmounter waits for that), and a bind left behind would keep the volume's
            // data reachable from the allocation directory after the plugin unpublished it.
            let alloc_dir = crate::util::allocdir::alloc_dir(data_dir, alloc_id);
            crate::util::mounts::unmount_beneath(&alloc_dir)
                .map_err(|e| format!("cannot take down the task binds of volume {id:?}: {e}"))?;
        }
        let paths = Self::paths(data_dir, &record, &claim);
        let stop = [&self.shutdown];
        let t = self.call_timeout;
        for step in steps {
            let side = match step {
                Step::ControllerUnpublish => PluginKind::Controller,
                _ => PluginKind::Node,
            };
            let plugin = self.side(&record.plugin_id, side).ok_or_else(|| {
                format!(
                    "CSI plugin {} has no {side:?} plugin on this node",
                    record.plugin_id
                )
            })?;
            let client = CsiClient::new(&plugin.socket_path);
            let result = match step {
                Step::NodeUnpublish => client
                    .node_unpublish_volume(
                        &proto::NodeUnpublishVolumeRequest {
                            volume_id: record.external_id.clone(),
                            target_path: paths.target.display().to_string(),
                        },
                        t,
                        &stop,
                    )
                    .map(|_| ()),
                Step::NodeUnstage => client
                    .node_unstage_volume(
                        &proto::NodeUnstageVolumeRequest {
                            volume_id: record.external_id.clone(),
                            staging_target_path: paths.staging.display().to_string(),
                        },
                        t,
                        &stop,
                    )
                    .map(|_| ()),
                Step::ControllerUnpublish => client
                    .controller_unpublish_volume(
                        &proto::ControllerUnpublishVolumeRequest {
                            volume_id: record.external_id.clone(),
                            node_id: plugin
                                .info
                                .node_info
                                .as_ref()
                                .map(|i| i.id.clone())
                                .unwrap_or_default(),
                            secrets: record.secrets.clone(),
                        },
                        t,
                        &stop,
                    )
                    .map(|_| ()),
                _ => unreachable!("unmount_steps plans reverse calls only"),
            };
            result.map_err(|e| format!("{step:?} of volume {id:?}: {e}"))?;
            // The shared stage is the node's: recorded on this claim whichever claim staged it.
            self.record_step(id, alloc_id, step, None)
                .map_err(|e| e.to_string())?;
            log::info!("CSI volume {id}: {step:?} for allocation {alloc_id} done");
        }
        // The per-allocation directories are the agent's: gone with the last volume.
        let _ = std::fs::remove_dir(paths.target.parent().unwrap_or(&paths.target));
        let _ = std::fs::remove_dir(mounts::publish_dir(data_dir, alloc_id, "", ""));
        self.release(id, alloc_id);
        log::info!("CSI volume {id}: claim of allocation {alloc_id} released");
        Ok(())
    }

    /// The volumes `alloc_id` holds a claim on.
    fn claimed_by(&self, alloc_id: &str) -> Vec<String> {
        self.registry
            .lock()
            .records()
            .into_iter()
            .filter(|r| r.claims.iter().any(|c| c.alloc_id == alloc_id))
            .map(|r| r.id)
            .collect()
    }

    /// Every allocation holding a claim on any volume.
    pub fn claiming_allocs(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .registry
            .lock()
            .records()
            .into_iter()
            .flat_map(|r| r.claims.into_iter().map(|c| c.alloc_id))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// Queues the allocation's volumes to be unpublished, unstaged and released once `ready`
    /// says its tasks are dead. Queuing an allocation twice keeps the first entry.
    pub fn unmount_alloc(&self, alloc_id: &str, ready: Box<dyn Fn() -> bool + Send>) {
        if self.claimed_by(alloc_id).is_empty() {
            return;
        }
        self.unmounts
            .lock()
            .entry(alloc_id.to_string())
            .or_insert(PendingUnmount {
                ready,
                failures: 0,
                next: Instant::now(),
            });
        let _ = self.unmount_wake.0.try_send(());
    }

    /// True while the allocation's volumes are queued to be taken down.
    pub fn unmount_pending(&self, alloc_id: &str) -> bool {
        self.unmounts.lock().contains_key(alloc_id)
    }

    /// Starts the `csi-unmount` thread; it ends when the agent shuts down (its owner joins it).
    pub fn start_unmounter(self: &Arc<Self>, data_dir: PathBuf) -> std::io::Result<Worker<()>> {
        let me = self.clone();
        crate::thread::spawn("csi-unmount", move || me.run_unmounts(&data_dir))
    }

    fn run_unmounts(&self, data_dir: &Path) {
        let wake: Receiver<()> = self.unmount_wake.1.clone();
        let shutdown: Receiver<Never> = self.shutdown.clone();
        loop {
            let now = Instant::now();
            // Taken out to be asked: `ready` locks task states, which the queue's lock must not
            // be held across.
            let queued = std::mem::take(&mut *self.unmounts.lock());
            let due: Vec<String> = queued
                .iter()
                .filter(|(_, p)| p.next <= now && (p.ready)())
                .map(|(id, _)| id.clone())
                .collect();
            {
                let mut queue = self.unmounts.lock();
                for (id, p) in queued {
                    queue.entry(id).or_insert(p);
                }
            }
            for alloc_id in due {
                let failed = self
                    .claimed_by(&alloc_id)
                    .iter()
                    .filter_map(|id| self.unmount_one(data_dir, id, &alloc_id).err())
                    .collect::<Vec<_>>();
                let mut queue = self.unmounts.lock();
                if failed.is_empty() {
                    queue.remove(&alloc_id);
                    continue;
                }
                if let Some(p) = queue.get_mut(&alloc_id) {
                    let backoff = (FIRST_RETRY * 2u32.saturating_pow(p.failures)).min(LAST_RETRY);
                    p.failures = p.failures.saturating_add(1);
                    p.next = Instant::now() + backoff;
                    log::warn!(
                        "taking down the CSI volumes of allocation {alloc_id} failed (retry in {backoff:?}): {}",
                        failed.join("; ")
                    );
                }
            }
            let idle = self.unmounts.lock().is_empty();
            let wait = if idle { LAST_RETRY } else { READY_POLL };
            select! {
                recv(wake) -> _ => {},
                recv(shutdown) -> _ => return,
                recv(after(wait)) -> _ => {},
            }
        }
    }
}

/// The task's side: the path the manager published the allocation's claim at.
impl crate::task::mounts::CsiMountPaths for CsiVolumeManager {
    fn published(
        &self,
        task: &crate::task::hooks::TaskContext,
        request: &VolumeRequest,
    ) -> Option<PathBuf> {
        // `per_alloc` names `source[index]`; the claim of this allocation says which.
        let per_alloc = format!("{}[", request.source);
        let records = self.registry.lock().records();
        records
            .into_iter()
            .filter(|r| {
                r.id == request.source || (request.per_alloc && r.id.starts_with(&per_alloc))
            })
            .find_map(|r| {
                let claim = r.claims.iter().find(|c| c.alloc_id == task.alloc_id)?;
                claim
                    .progress
                    .published
                    .then(|| Self::paths(&task.data_dir, &r, claim).target)
            })
    }
}
