//! CSI volumes (csi-volumes.md) against the real hostpath test plugin
//! (`nodeward-csi-test-plugin --root <dir>`, a real gRPC server on a real unix socket):
//!
//! - the client's volume calls, each against the plugin process: what the plugin makes on disk,
//!   the answers, and its errors as the caller reads them;
//! - bind mounts really made and removed by publish and unpublish (as root: those tests are
//!   `#[ignore]`d, and scripts/test.sh selects them as root);
//! - CSI volumes through the real agent, its API and its CLI, with the plugin run as a CSI plugin
//!   task of a job: create, status, delete, register, deregister, the refusals, and an agent
//!   killed and started again.

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
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn publish_bind_mounts_the_volume_and_unpublish_removes_it() {
    require_root();
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
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn without_staging_publish_mounts_the_volume_directory() {
    require_root();
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

// ---- through the agent ------------------------------------------------------------------------

/// An agent running the hostpath plugin as a monolith plugin task (its volumes under
/// `<dir>/vols`), once the plugin is healthy and registered on both sides.
pub(crate) struct PluginAgent {
    pub(crate) agent: TestAgent,
    pub(crate) root: PathBuf,
    pub(crate) alloc: String,
    _dir: TempDir,
}

impl PluginAgent {
    /// `restart` is the group's restart block; `extra` more plugin arguments.
    pub(crate) fn start(tag: &str, restart: &str, extra: &str) -> PluginAgent {
        PluginAgent::start_with_config(tag, restart, extra, "")
    }

    /// As [`PluginAgent::start`], with `config` as the agent's configuration.
    pub(crate) fn start_with_config(
        tag: &str,
        restart: &str,
        extra: &str,
        config: &str,
    ) -> PluginAgent {
        let dir = TempDir::new(tag);
        let root = dir.path().join("vols");
        let agent = TestAgent::start_in(dir.path(), config);
        let job = agent.run_hcl(&format!(
            r#"
job "hostpath" {{
  group "plugin" {{
    {restart}
    task "plugin" {{
      driver = "raw_exec"
      config {{
        command = "{PLUGIN}"
        args    = ["--endpoint", "${{CSI_ENDPOINT}}", "--root", "{root}"{extra}]
      }}
      csi_plugin {{ id = "hostpath"  type = "monolith"  health_timeout = "30s" }}
    }}
  }}
}}"#,
            root = root.display()
        ));
        let alloc = agent.alloc_id(&job);
        wait_for(WAIT, "the plugin healthy on both sides", || {
            // 404 until the plugin registers.
            let (_, body) = agent.request("GET", "/v1/plugin/csi/hostpath", None);
            let p: serde_json::Value = serde_json::from_str(&body).ok()?;
            (p["ControllersHealthy"] == 1 && p["NodesHealthy"] == 1).then_some(())
        });
        PluginAgent {
            agent,
            root,
            alloc,
            _dir: dir,
        }
    }

    pub(crate) fn spec(&self, name: &str, body: &str) -> PathBuf {
        let path = self.agent.dir.join(name);
        std::fs::write(&path, body).unwrap();
        path
    }

    /// Runs the CLI: (exit status, stdout, stderr).
    pub(crate) fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.agent.cli(args);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

const CAPABILITY: &str = r#"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}"#;

pub(crate) fn csi_spec(id: &str, extra: &str) -> String {
    format!("type = \"csi\"\nid = \"{id}\"\nplugin_id = \"hostpath\"\n{extra}\n{CAPABILITY}\n")
}

/// The whole life of a created volume through the CLI and the API: the plugin makes its
/// directory, status shows it beside the host volumes, a second create of the ID is refused,
/// delete has the plugin remove it, and then it is unknown.
#[test]
fn create_status_and_delete_through_the_agent() {
    let p = PluginAgent::start("csi-life", "", "");
    let file = p.spec(
        "data.hcl",
        &csi_spec("data", "capacity_min = \"1MiB\"\ncapacity_max = \"4MiB\""),
    );
    let (code, out, err) = p.cli(&["volume", "create", file.to_str().unwrap()]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert_eq!(out, "Created external volume hp-data with ID data\n");
    let dir = p.root.join("hp-data");
    assert!(dir.is_dir(), "{}", dir.display());

    let v = p.agent.get("/v1/volume/csi/data");
    assert_eq!(v["ID"], "data");
    assert_eq!(v["ExternalID"], "hp-data");
    assert_eq!(v["PluginID"], "hostpath");
    assert_eq!(v["Capacity"], 1 << 20, "the capacity the plugin answered");
    assert_eq!(v["RequestedCapacityMax"], 4 << 20);
    assert_eq!(v["Schedulable"], true);
    assert_eq!(v["Provider"], "nodeward.test.csi");
    assert_eq!(v["ProviderVersion"], "1.2.3");
    assert_eq!(
        (v["ControllersHealthy"].clone(), v["NodesHealthy"].clone()),
        (1.into(), 1.into())
    );
    assert_eq!(v["Context"]["path"], dir.display().to_string());
    assert_eq!(
        v["Topologies"][0]["Segments"]["topology.nodeward.test/node"],
        "test-node-1"
    );
    let list = p.agent.get("/v1/volumes?type=csi");
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["ExternalID"], "hp-data");
    // A prefix is enough.
    assert_eq!(p.agent.get("/v1/volume/csi/da")["ID"], "data");

    let (code, out, _) = p.cli(&["volume", "status"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Container Storage Interface\nID    Name  Plugin ID  Schedulable  Access Mode\ndata  data  hostpath   true\n"),
        "{out}"
    );
    let (code, out, _) = p.cli(&["volume", "status", "data"]);
    assert_eq!(code, 0);
    assert!(out.contains("External ID          = hp-data\n"), "{out}");
    assert!(out.contains("Capacity             = 1.0 MiB\n"), "{out}");

    // The ID is taken: nothing changes, and the plugin is not called.
    let (code, _, err) = p.cli(&["volume", "create", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "Error creating volume: Unexpected response code: 400 (CSI volume \"data\" already exists)\n"
    );

    let (code, out, err) = p.cli(&["volume", "delete", "data"]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, "Successfully deleted volume \"data\"!\n");
    assert!(!dir.exists(), "the plugin removed the directory");
    let (status, body) = p.agent.request("GET", "/v1/volume/csi/data", None);
    assert_eq!((status, body.as_str()), (404, "volume not found: data"));
    let state = state_on_disk(&p.agent.data_dir).unwrap();
    assert!(
        state["CSIVolumes"].as_array().unwrap().is_empty(),
        "{state}"
    );
}

/// Storage that exists is registered by its plugin's ID (the plugin confirms the capabilities
/// first) and deregistered without touching it; unknown IDs and unknown storage are refused.
#[test]
fn register_deregister_and_unknown_ids() {
    let p = PluginAgent::start("csi-reg", "", "");
    // What the plugin holds already, made outside nodeward.
    std::fs::create_dir_all(p.root.join("hp-old")).unwrap();
    std::fs::write(p.root.join("hp-old/kept"), "data").unwrap();
    let file = p.spec(
        "old.hcl",
        &csi_spec(
            "old",
            "external_id = \"hp-old\"\ncontext { path = \"/somewhere\" }",
        ),
    );
    let (code, out, err) = p.cli(&["volume", "register", file.to_str().unwrap()]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, "Volume registration successful\n");
    let v = p.agent.get("/v1/volume/csi/old");
    assert_eq!(v["ExternalID"], "hp-old");
    assert_eq!(v["Context"]["path"], "/somewhere");
    assert_eq!(v["Schedulable"], true);

    // Storage the plugin does not have: its own words, and nothing recorded.
    let ghost = p.spec(
        "ghost.hcl",
        &csi_spec("ghost", "external_id = \"hp-ghost\""),
    );
    let (code, _, err) = p.cli(&["volume", "register", ghost.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "Error registering volume: Unexpected response code: 400 (error validating volume \"ghost\" with plugin \"hostpath\": rpc error: code = NotFound desc = volume hp-ghost not found)\n"
    );
    let (status, _) = p.agent.request("GET", "/v1/volume/csi/ghost", None);
    assert_eq!(status, 404);
    // Create takes no external_id.
    let (code, _, err) = p.cli(&["volume", "create", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("external_id is only for volume register"),
        "{err}"
    );

    // Unknown IDs, through the CLI and the API.
    let (code, _, err) = p.cli(&["volume", "delete", "-type", "csi", "nope"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "Error deleting volume: Unexpected response code: 404 (volume not found: nope)\n"
    );
    let (status, body) = p
        .agent
        .request("DELETE", "/v1/volume/csi/nope/delete", None);
    assert_eq!((status, body.as_str()), (404, "volume not found: nope"));
    let (status, _) = p.agent.request("DELETE", "/v1/volume/csi/nope", None);
    assert_eq!(status, 404);

    let (code, out, _) = p.cli(&["volume", "deregister", "old"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "Successfully deregistered volume \"old\"!\n")
    );
    assert_eq!(
        std::fs::read_to_string(p.root.join("hp-old/kept")).unwrap(),
        "data",
        "deregister leaves the storage"
    );
    let (status, _) = p.agent.request("GET", "/v1/volume/csi/old", None);
    assert_eq!(status, 404);
}

/// A create needs a healthy controller: an unknown plugin and a plugin whose task stopped are
/// refused with what is wrong, and nothing is recorded or made.
#[test]
fn create_against_a_plugin_that_is_not_healthy() {
    let restart = r#"restart { attempts = 1  interval = "1h"  delay = "1h"  mode = "fail" }"#;
    let p = PluginAgent::start("csi-sick", restart, "");
    let (status, body) = p.agent.put_json(
        "/v1/volume/csi/data/create",
        &serde_json::json!({"Volumes": [{"ID": "data", "PluginID": "elsewhere",
            "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}]}]}),
    );
    assert_eq!(
        (status, body.as_str()),
        (400, "no CSI plugin named: elsewhere could be found")
    );

    // The plugin process dies; its task waits an hour to restart.
    let pid = p.agent.task_state(&p.alloc, "plugin")["PID"]
        .as_i64()
        .unwrap() as i32;
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_for(WAIT, "the plugin unhealthy", || {
        (p.agent.get("/v1/plugin/csi/hostpath")["ControllersHealthy"] == 0).then_some(())
    });
    let file = p.spec("data.hcl", &csi_spec("data", ""));
    let (code, _, err) = p.cli(&["volume", "create", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "Error creating volume: Unexpected response code: 400 (CSI plugin \"hostpath\" has no healthy controller on this node: plugin task is not running)\n"
    );
    let (status, _) = p.agent.request("GET", "/v1/volume/csi/data", None);
    assert_eq!(status, 404);
    assert!(!p.root.join("hp-data").exists());
    let list = p.agent.get("/v1/volumes?type=csi");
    assert!(list.as_array().unwrap().is_empty(), "{list}");
}

/// A volume is in the state file before its create is answered: an agent killed with SIGKILL and
/// started again has it, as it was, and can delete it through the plugin, which kept running.
#[test]
fn a_volume_survives_an_agent_kill_and_restart() {
    let mut p = PluginAgent::start("csi-kill", "", "");
    let file = p.spec("data.hcl", &csi_spec("data", "capacity_min = \"2MiB\""));
    let (code, _, err) = p.cli(&["volume", "create", file.to_str().unwrap()]);
    assert_eq!((code, err.as_str()), (0, ""));
    let before = p.agent.get("/v1/volume/csi/data");
    p.agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    p.agent.restart();
    let after = p.agent.get("/v1/volume/csi/data");
    for key in [
        "ID",
        "ExternalID",
        "Capacity",
        "Context",
        "CreateTime",
        "RequestedCapabilities",
    ] {
        assert_eq!(after[key], before[key], "{key}");
    }
    assert_eq!(after["Capacity"], 2 << 20);
    // The plugin task was re-attached and is registered again.
    wait_for(WAIT, "the plugin healthy again", || {
        let v = p.agent.get("/v1/volume/csi/data");
        (v["Schedulable"] == true).then_some(())
    });
    let (code, out, _) = p.cli(&["volume", "delete", "data"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "Successfully deleted volume \"data\"!\n")
    );
    assert!(!p.root.join("hp-data").exists());
    // And the deletion is what the next agent finds.
    p.agent.stop_with(libc::SIGKILL, Duration::from_secs(10));
    p.agent.restart();
    let (status, _) = p.agent.request("GET", "/v1/volume/csi/data", None);
    assert_eq!(status, 404);
}

/// The volume calls against a plugin of another gRPC stack (Python's grpcio, encoding by hand
/// from the spec's field numbers): what it reads of the request, what the client reads of its
/// answer, and its refusal in its own words.
#[test]
fn volume_calls_interoperate_with_python_grpc() {
    let has_grpc = Command::new("python3")
        .args(["-c", "import grpc"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_grpc {
        println!(
            "SKIPPED volume_calls_interoperate_with_python_grpc: python3 cannot import grpc (install it with: python3 -m pip install grpcio)"
        );
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/py_csi_plugin.py");
    let dir = TempDir::new("csi-py");
    let socket = dir.path().join("csi.sock");
    let _child = Stopped(
        Command::new("python3")
            .arg(&script)
            .arg(&socket)
            .arg("healthy")
            .stdin(Stdio::null())
            .spawn()
            .expect("start python3"),
    );
    let client = CsiClient::new(&socket);
    // grpcio creates the socket file a moment before it serves.
    wait_for(WAIT, "the python plugin serves", || {
        client.probe(Duration::from_secs(5), &[]).ok()
    });
    let created = client
        .create_volume(&create_request("data", 1 << 20, 0), T, &[])
        .unwrap()
        .volume
        .unwrap();
    assert_eq!(created.volume_id, "py-data", "the plugin read the name");
    assert_eq!(created.capacity_bytes, 4096);
    assert_eq!(created.volume_context["made-by"], "python");
    assert_eq!(created.accessible_topology[0].segments["zone"], "z1");
    client
        .delete_volume(
            &proto::DeleteVolumeRequest {
                volume_id: created.volume_id.clone(),
                ..Default::default()
            },
            T,
            &[],
        )
        .unwrap();
    let err = client
        .node_publish_volume(
            &proto::NodePublishVolumeRequest {
                volume_id: created.volume_id,
                target_path: dir.path().join("t").display().to_string(),
                volume_capability: Some(writer()),
                ..Default::default()
            },
            T,
            &[],
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "rpc error: code = FailedPrecondition desc = py plugin refuses to publish"
    );
}

/// A child process stopped (SIGTERM) and reaped on drop, also when a test fails.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}
