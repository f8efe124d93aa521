//! Test helpers: an allocation manager on a fresh data dir whose allocations never find their host
//! volumes, so they wait at their gates and start no process. Used by this module's tests and by
//! the API's.

use crossbeam_channel::{Receiver, Sender};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::placement::{Node, NodeSource};
use super::{AllocManager, Engine};
use crate::driver;
use crate::jobspec::Job;
use crate::records::DesiredStatus;
use crate::state::StateStore;
use crate::task::hooks::{HookFactory, TaskContext, TaskHook};
use crate::task::mounts::{HostVolume, VolumeLookup};
use crate::task::runner::RunnerDeps;
use crate::thread::Never;

/// No host volume is ever ready: allocations wait at their gate and start no process.
struct NoVolumes;

impl VolumeLookup for NoVolumes {
    fn lookup(&self, _name: &str) -> Option<HostVolume> {
        None
    }
    fn changes(&self) -> Receiver<()> {
        crossbeam_channel::never()
    }
}

/// A `dc1` node in the `default` pool with the `raw_exec` driver.
pub(crate) struct TestNode;

impl TestNode {
    pub(crate) fn node() -> Node {
        Node {
            id: "node".into(),
            name: "node".into(),
            datacenter: "dc1".into(),
            node_pool: "default".into(),
            attributes: [("driver.raw_exec".to_string(), "1".to_string())].into(),
            ..Node::default()
        }
    }
}

impl NodeSource for TestNode {
    fn node(&self) -> Node {
        TestNode::node()
    }
}

/// A node a test changes (its fingerprints), starting as [`TestNode`]'s.
pub(crate) struct ChangingNode(pub parking_lot::Mutex<Node>);

impl NodeSource for ChangingNode {
    fn node(&self) -> Node {
        self.0.lock().clone()
    }
}

struct NoHooks;

impl HookFactory for NoHooks {
    fn hooks_for(&self, _task: &TaskContext) -> Vec<Arc<dyn TaskHook>> {
        Vec::new()
    }
}

/// A manager on a fresh data dir whose allocations never find their host volumes; node ID and
/// name are `node`. Dropping the sender is the agent's shutdown.
pub(crate) fn manager(tag: &str) -> (Arc<AllocManager>, PathBuf, Sender<Never>) {
    manager_on(tag, Arc::new(TestNode))
}

/// [`manager`] on a node of the caller's.
pub(crate) fn manager_on(
    tag: &str,
    node: Arc<dyn NodeSource>,
) -> (Arc<AllocManager>, PathBuf, Sender<Never>) {
    let dir = std::env::temp_dir().join(format!("nw-alloc-{tag}-{}", uuid::Uuid::new_v4()));
    let (store, _) = StateStore::open(&dir, false).unwrap();
    let (shutdown_tx, shutdown) = crossbeam_channel::bounded::<Never>(0);
    let keeper = driver::KeeperClient::open(&dir, driver::KeeperClient::locate()).unwrap();
    let engine = Engine {
        data_dir: dir.clone(),
        node_id: "node".to_string(),
        node_name: "node".to_string(),
        deps: RunnerDeps {
            drivers: driver::Drivers::new(vec![Arc::new(driver::RawExec::new(keeper.clone()))]),
            store: store.clone(),
            shutdown,
            stop_tasks_on_shutdown: true,
            task_env: Default::default(),
            changed: None,
        },
        hooks: Arc::new(NoHooks),
        volumes: Arc::new(NoVolumes),
        csi_volumes: None,
        keeper,
        max_kill_timeout: crate::config::DEFAULT_MAX_KILL_TIMEOUT,
        max_allocs: crate::config::DEFAULT_MAX_ALLOCS,
        job_gc_children: crate::config::DEFAULT_JOB_GC_CHILDREN,
        network: Default::default(),
        node,
    };
    (AllocManager::new(engine, store), dir, shutdown_tx)
}

/// A job `id` of `count` allocations of tasks `a` and `b`, which mount the missing volume.
pub(crate) fn gated_job(id: &str, count: u32) -> Job {
    let hcl = format!(
        "job \"{id}\" {{\n group \"g\" {{\n  count = {count}\n  volume \"v\" {{\n   \
         type = \"host\"\n   source = \"missing\"\n  }}\n  task \"a\" {{\n   \
         driver = \"raw_exec\"\n   config {{\n    command = \"true\"\n   }}\n  }}\n  \
         task \"b\" {{\n   driver = \"raw_exec\"\n   config {{\n    command = \"true\"\n   \
         }}\n  }}\n }}\n}}\n"
    );
    crate::jobspec::hcl::parse_job(&hcl).unwrap().job
}

/// What the registry holds: each allocation's ID and desired status.
pub(crate) fn desired(allocs: &AllocManager) -> BTreeMap<String, DesiredStatus> {
    allocs
        .allocations()
        .iter()
        .map(|a| (a.id.clone(), a.desired()))
        .collect()
}
