//! CSI volumes (csi-volumes.md) against the real hostpath test plugin
//! (`nodeward-csi-test-plugin --root <dir>`, a real gRPC server on a real unix socket):
//!
//! - the client's volume calls, each against the plugin process: what the plugin makes on disk,
//!   the answers, and its errors as the caller reads them;
//! - bind mounts really made and removed by publish and unpublish (as root; otherwise each such
//!   test prints a SKIPPED line).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use nodeward::csi::client::{StatusCode, VOLUME_CALL_TIMEOUT};
use nodeward::csi::proto::{self, volume_capability};
use nodeward::csi::CsiClient;

const PLUGIN: &str = env!("CARGO_BIN_EXE_nodeward-csi-test-plugin");
const WAIT: Duration = Duration::from_secs(60);
const T: Duration = VOLUME_CALL_TIMEOUT;

/// A plugin process on `<dir>/csi.sock` with its volumes under `<dir>/root`, stopped (SIGTERM,
/// then SIGKILL) and reaped on drop.
struct Plugin {
    child: Child,
    client: CsiClient,
    root: PathBuf,
}

impl Plugin {
    fn start(dir: &Path, args: &[&str]) -> Plugin {
        let socket = dir.join("csi.sock");
        let root = dir.join("root");
        let child = Command::new(PLUGIN)
            .arg("--endpoint")
            .arg(format!("unix://{}", socket.display()))
            .arg("--root")
            .arg(&root)
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the test plugin");
        let client = CsiClient::new(&socket);
        wait_for(WAIT, "the plugin serves", || {
            client.probe(Duration::from_secs(5), &[]).ok()
        });
        Plugin {
            child,
            client,
            root,
        }
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn capability(mode: volume_capability::access_mode::Mode) -> proto::VolumeCapability {
    use volume_capability::{AccessMode, AccessType, MountVolume};
    proto::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode { mode: mode as i32 }),
    }
}

fn writer() -> proto::VolumeCapability {
    capability(volume_capability::access_mode::Mode::SingleNodeWriter)
}

fn create_request(name: &str, required: i64, limit: i64) -> proto::CreateVolumeRequest {
    proto::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(proto::CapacityRange {
            required_bytes: required,
            limit_bytes: limit,
        }),
        volume_capabilities: vec![writer()],
        ..Default::default()
    }
}

/// Whether `path` is a mount point in this process's mount namespace (the plugin's, too: tasks
/// and the keeper share the host's).
fn mounted(path: &Path) -> bool {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| Path::new(m) == path)
}

/// Create, validate, attach and delete through the client, against the plugin process: the
/// directory it makes, the capacity it answers, idempotent retries, and its refusals in the
/// caller's words.
#[test]
fn controller_calls_against_the_hostpath_plugin() {
    let dir = TempDir::new("csi-ctl");
    let plugin = Plugin::start(dir.path(), &[]);
    let c = &plugin.client;

    let created = c
        .create_volume(&create_request("data", 1 << 20, 4 << 20), T, &[])
        .unwrap();
    let volume = created.volume.unwrap();
    assert_eq!(volume.volume_id, "hp-data");
    assert_eq!(volume.capacity_bytes, 1 << 20, "the requested minimum");
    let path = plugin.root.join("hp-data");
    assert!(path.is_dir(), "{}", path.display());
    assert_eq!(volume.volume_context["path"], path.display().to_string());
    assert_eq!(
        volume.accessible_topology[0].segments["topology.nodeward.test/node"],
        "test-node-1"
    );
    // A retry with a compatible range is the same volume; an incompatible one is refused.
    let again = c
        .create_volume(&create_request("data", 0, 2 << 20), T, &[])
        .unwrap();
    assert_eq!(again.volume.unwrap().volume_id, "hp-data");
    let err = c
        .create_volume(&create_request("data", 8 << 20, 0), T, &[])
        .unwrap_err();
    assert_eq!(err.code(), Some(StatusCode(6)), "{err}"); // AlreadyExists
    assert!(
        err.to_string()
            .starts_with("rpc error: code = AlreadyExists desc = volume data exists with a capacity of 1048576 bytes"),
        "{err}"
    );
    let err = c
        .create_volume(&create_request("small", 4 << 20, 1 << 20), T, &[])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "rpc error: code = OutOfRange desc = limit_bytes 1048576 is less than required_bytes 4194304"
    );
    assert!(!plugin.root.join("hp-small").exists());

    let validate = |caps: Vec<proto::VolumeCapability>| {
        c.validate_volume_capabilities(
            &proto::ValidateVolumeCapabilitiesRequest {
                volume_id: "hp-data".into(),
                volume_capabilities: caps,
                ..Default::default()
            },
            T,
            &[],
        )
        .unwrap()
    };
    assert!(validate(vec![writer()]).confirmed.is_some());
    let block = proto::VolumeCapability {
        access_type: Some(volume_capability::AccessType::Block(Default::default())),
        ..writer()
    };
    let refused = validate(vec![block]);
    assert!(refused.confirmed.is_none());
    assert!(refused.message.contains("block volumes are not supported"));

    let attach = |node: &str| {
        c.controller_publish_volume(
            &proto::ControllerPublishVolumeRequest {
                volume_id: "hp-data".into(),
                node_id: node.into(),
                volume_capability: Some(writer()),
                ..Default::default()
            },
            T,
            &[],
        )
    };
    assert_eq!(
        attach("test-node-1").unwrap().publish_context["published-to"],
        "test-node-1"
    );
    let err = attach("elsewhere").unwrap_err();
    assert_eq!(
        err.to_string(),
        "rpc error: code = NotFound desc = node \"elsewhere\" not found: this plugin serves test-node-1"
    );
    c.controller_unpublish_volume(
        &proto::ControllerUnpublishVolumeRequest {
            volume_id: "hp-data".into(),
            node_id: "test-node-1".into(),
            ..Default::default()
        },
        T,
        &[],
    )
    .unwrap();

    let delete = || {
        c.delete_volume(
            &proto::DeleteVolumeRequest {
                volume_id: "hp-data".into(),
                ..Default::default()
            },
            T,
            &[],
        )
    };
    delete().unwrap();
    assert!(!path.exists());
    // DeleteVolume is idempotent.
    delete().unwrap();
}

/// A plugin that fails `NodePublishVolume` is heard in its own words.
#[test]
fn a_failing_node_publish_reaches_the_caller_with_the_plugin_message() {
    let dir = TempDir::new("csi-pf");
    let plugin = Plugin::start(
        dir.path(),
        &["--mode", "publish-fails", "--fail-message", "disk on fire"],
    );
    let err = plugin
        .client
        .node_publish_volume(
            &proto::NodePublishVolumeRequest {
                volume_id: "hp-data".into(),
                target_path: dir.path().join("target").display().to_string(),
                volume_capability: Some(writer()),
                ..Default::default()
            },
            T,
            &[],
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "rpc error: code = Internal desc = disk on fire"
    );
    assert_eq!(err.code(), Some(StatusCode::INTERNAL));
}

/// Stage and publish make real bind mounts (read-only where asked); unpublish and unstage remove
/// them, and the target directory goes with its mount.
#[test]
fn publish_bind_mounts_the_volume_and_unpublish_removes_it() {
    if !is_root() {
        println!("SKIPPED publish_bind_mounts_the_volume_and_unpublish_removes_it: bind mounts need root");
        return;
    }
    let dir = TempDir::new("csi-mnt");
    let plugin = Plugin::start(dir.path(), &[]);
    let c = &plugin.client;
    let id = c
        .create_volume(&create_request("data", 0, 0), T, &[])
        .unwrap()
        .volume
        .unwrap()
        .volume_id;
    let source = plugin.root.join(&id);
    std::fs::write(source.join("hello"), "from the volume").unwrap();

    let staging = dir.path().join("staging");
    let stage = proto::NodeStageVolumeRequest {
        volume_id: id.clone(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(writer()),
        ..Default::default()
    };
    c.node_stage_volume(&stage, T, &[]).unwrap();
    assert!(mounted(&staging));
    // Staging again is a no-op, not a second mount.
    c.node_stage_volume(&stage, T, &[]).unwrap();

    let publish = |target: &Path, readonly: bool| {
        c.node_publish_volume(
            &proto::NodePublishVolumeRequest {
                volume_id: id.clone(),
                staging_target_path: staging.display().to_string(),
                target_path: target.display().to_string(),
                volume_capability: Some(writer()),
                readonly,
                ..Default::default()
            },
            T,
            &[],
        )
    };
    let unpublish = |target: &Path| {
        c.node_unpublish_volume(
            &proto::NodeUnpublishVolumeRequest {
                volume_id: id.clone(),
                target_path: target.display().to_string(),
            },
            T,
            &[],
        )
    };
    let rw = dir.path().join("rw");
    let ro = dir.path().join("ro");
    publish(&rw, false).unwrap();
    publish(&ro, true).unwrap();
    assert!(mounted(&rw) && mounted(&ro));
    assert_eq!(
        std::fs::read_to_string(rw.join("hello")).unwrap(),
        "from the volume"
    );
    std::fs::write(rw.join("written"), "through the mount").unwrap();
    assert_eq!(
        std::fs::read_to_string(source.join("written")).unwrap(),
        "through the mount"
    );
    let err = std::fs::write(ro.join("nope"), "x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");

    // A published volume cannot be deleted.
    let delete = proto::DeleteVolumeRequest {
        volume_id: id.clone(),
        ..Default::default()
    };
    let err = c.delete_volume(&delete, T, &[]).unwrap_err();
    assert_eq!(err.code(), Some(StatusCode(9)), "{err}"); // FailedPrecondition
    assert!(source.is_dir());

    // Usage is the volume's file system's.
    let stats = c
        .node_get_volume_stats(
            &proto::NodeGetVolumeStatsRequest {
                volume_id: id.clone(),
                volume_path: rw.display().to_string(),
                ..Default::default()
            },
            T,
            &[],
        )
        .unwrap();
    assert!(stats.usage[0].total > 0, "{stats:?}");

    for target in [&rw, &ro] {
        unpublish(target).unwrap();
        assert!(!mounted(target));
        assert!(!target.exists(), "{}", target.display());
        // Unpublishing again is a no-op.
        unpublish(target).unwrap();
    }
    c.node_unstage_volume(
        &proto::NodeUnstageVolumeRequest {
            volume_id: id.clone(),
            staging_target_path: staging.display().to_string(),
        },
        T,
        &[],
    )
    .unwrap();
    assert!(!mounted(&staging));
    // What was written through the mount is in the volume, and the volume can go now.
    assert!(source.join("written").is_file());
    c.delete_volume(&delete, T, &[]).unwrap();
    assert!(!source.exists());
}

/// With `--stage none` the plugin does not advertise staging, and publish mounts the volume
/// directory itself; a publish that expects a staged volume from a staging plugin is refused.
#[test]
fn without_staging_publish_mounts_the_volume_directory() {
    if !is_root() {
        println!(
            "SKIPPED without_staging_publish_mounts_the_volume_directory: bind mounts need root"
        );
        return;
    }
    let dir = TempDir::new("csi-ns");
    let plugin = Plugin::start(dir.path(), &["--stage", "none"]);
    let c = &plugin.client;
    let caps = c.node_get_capabilities(T, &[]).unwrap();
    let info = nodeward::csi::NodeInfo::from_proto(&c.node_get_info(T, &[]).unwrap(), &caps);
    assert!(!info.requires_node_stage_volume);
    assert!(info.supports_stats);
    let id = c
        .create_volume(&create_request("plain", 0, 0), T, &[])
        .unwrap()
        .volume
        .unwrap()
        .volume_id;
    std::fs::write(plugin.root.join(&id).join("f"), "x").unwrap();
    let target = dir.path().join("target");
    let req = proto::NodePublishVolumeRequest {
        volume_id: id.clone(),
        target_path: target.display().to_string(),
        volume_capability: Some(capability(
            volume_capability::access_mode::Mode::SingleNodeReaderOnly,
        )),
        ..Default::default()
    };
    c.node_publish_volume(&req, T, &[]).unwrap();
    assert!(mounted(&target));
    assert_eq!(std::fs::read_to_string(target.join("f")).unwrap(), "x");
    // A reader-only access mode is read-only even without `readonly`.
    let err = std::fs::write(target.join("g"), "y").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    c.node_unpublish_volume(
        &proto::NodeUnpublishVolumeRequest {
            volume_id: id.clone(),
            target_path: target.display().to_string(),
        },
        T,
        &[],
    )
    .unwrap();
    assert!(!mounted(&target) && !target.exists());

    // The staging plugin refuses to publish what it did not stage.
    let dir2 = TempDir::new("csi-st");
    let staging_plugin = Plugin::start(dir2.path(), &[]);
    let id2 = staging_plugin
        .client
        .create_volume(&create_request("plain", 0, 0), T, &[])
        .unwrap()
        .volume
        .unwrap()
        .volume_id;
    let staging = dir2.path().join("staging");
    let err = staging_plugin
        .client
        .node_publish_volume(
            &proto::NodePublishVolumeRequest {
                volume_id: id2,
                staging_target_path: staging.display().to_string(),
                target_path: dir2.path().join("t").display().to_string(),
                volume_capability: Some(writer()),
                ..Default::default()
            },
            T,
            &[],
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "rpc error: code = FailedPrecondition desc = volume hp-plain is not staged at {}",
            staging.display()
        )
    );
}
