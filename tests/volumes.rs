//! Host volumes at the library level: the volume manager with real shell-script plugins, a real
//! state file in a temp data directory, and real process groups.

use crossbeam_channel::{bounded, Receiver, Sender};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodeward::api::volumes;
use nodeward::config::StaticVolume;
use nodeward::state::{StateFile, StateStore};
use nodeward::task::mounts::VolumeLookup;
use nodeward::thread::Never;
use nodeward::volume::plugin::Timeouts;
use nodeward::volume::{ManagerConfig, VolumeManager, VolumeState};

struct Node {
    data: PathBuf,
    store: Arc<StateStore>,
    mgr: Arc<VolumeManager>,
    state: StateFile,
    stop: Option<Sender<Never>>,
}

impl Node {
    fn plugin_dir(&self) -> PathBuf {
        self.data.join("host_volume_plugins")
    }
    fn volumes_dir(&self) -> PathBuf {
        self.data.join("host_volumes")
    }
    fn script(&self, name: &str, body: &str) {
        script(&self.plugin_dir(), name, body);
    }
    /// What the state files hold: the snapshot with its journal replayed.
    fn on_disk(&self) -> StateFile {
        nodeward::state::read(&self.data).unwrap()
    }
    fn create(&self, body: Value) -> Result<Value, (u16, String)> {
        let body = serde_json::to_vec(&json!({ "Volume": body })).unwrap();
        volumes::create(&self.mgr, &body).map_err(|e| (e.status(), e.to_string()))
    }
}

/// A test's temporary directories, removed when the test passes (kept for a look when it fails).
struct TempRoot(PathBuf);

impl TempRoot {
    fn new() -> TempRoot {
        let d = std::env::temp_dir().join(format!("nodeward-volumes-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&d).unwrap();
        TempRoot(d)
    }

    fn dir(&self, tag: &str) -> PathBuf {
        let d = self.0.join(format!("{tag}-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&d).unwrap();
        d
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

fn script(dir: &Path, name: &str, body: &str) {
    fs::create_dir_all(dir).unwrap();
    let tmp = dir.join(format!(".{name}.tmp"));
    fs::write(&tmp, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(&tmp, dir.join(name)).unwrap();
}

fn node(data: &Path, timeout: Duration, statics: BTreeMap<String, StaticVolume>) -> Node {
    let (store, state) = StateStore::open(data, false).unwrap();
    let (stop, shutdown): (Sender<Never>, Receiver<Never>) = bounded(0);
    let mut config = ManagerConfig::new(data, store.node_id(), "default");
    config.timeouts = Timeouts {
        fingerprint: timeout,
        create: timeout,
        delete: timeout,
    };
    config.restore_deadline = Duration::from_secs(30);
    let mgr = VolumeManager::new(config, store.clone(), &statics, shutdown).unwrap();
    Node {
        data: data.to_path_buf(),
        store,
        mgr,
        state,
        stop: Some(stop),
    }
}

fn fresh(t: &TempRoot, timeout: Duration) -> Node {
    node(&t.dir("vol").join("data"), timeout, BTreeMap::new())
}

/// A plugin that answers a volume under the volumes directory and records its arguments and its
/// environment (as the kernel handed it over, before the shell adds anything) in the plugin dir.
const RECORDER: &str = r#"
out="${0%/*}"
echo "$@" > "$out/args-$DHV_OPERATION"
/bin/cat /proc/$$/environ > "$out/env-$DHV_OPERATION"
case "$1" in
  create) echo "{\"path\": \"$DHV_VOLUMES_DIR/$DHV_VOLUME_ID\", \"bytes\": $DHV_CAPACITY_MIN_BYTES}" ;;
  fingerprint) echo '{"version": "1.0.0"}' ;;
esac
"#;

fn env_file(path: &Path) -> BTreeMap<String, String> {
    let raw = fs::read(path).unwrap();
    raw.split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| {
            let s = String::from_utf8_lossy(v);
            let (k, val) = s.split_once('=').unwrap();
            (k.to_string(), val.to_string())
        })
        .collect()
}

#[test]
fn plugin_sees_exactly_the_dhv_environment() {
    let t = TempRoot::new();
    assert!(
        std::env::var_os("PATH").is_some(),
        "the agent itself has a PATH"
    );
    let n = fresh(&t, Duration::from_secs(30));
    n.script("rec", RECORDER);
    let answer = n
        .create(
            json!({"Name": "data", "PluginID": "rec", "RequestedCapacityMinBytes": 4096,
                       "RequestedCapacityMaxBytes": 8192, "Parameters": {"a": "b"}}),
        )
        .unwrap();
    let v = &answer["Volume"];
    let id = v["ID"].as_str().unwrap().to_string();
    assert_eq!(answer["Warnings"], "");
    assert_eq!(v["State"], "ready");
    assert_eq!(v["CapacityBytes"], 4096);
    let vols = n.volumes_dir().display().to_string();
    assert_eq!(v["HostPath"], format!("{vols}/{id}"));
    assert_eq!(
        fs::read_to_string(n.plugin_dir().join("args-create")).unwrap(),
        "create\n"
    );
    let env = env_file(&n.plugin_dir().join("env-create"));
    let want: BTreeMap<String, String> = [
        ("DHV_OPERATION", "create".to_string()),
        ("DHV_VOLUMES_DIR", vols.clone()),
        ("DHV_PLUGIN_DIR", n.plugin_dir().display().to_string()),
        ("DHV_NODE_POOL", "default".to_string()),
        ("DHV_NAMESPACE", "default".to_string()),
        ("DHV_VOLUME_NAME", "data".to_string()),
        ("DHV_VOLUME_ID", id.clone()),
        ("DHV_CAPACITY_MIN_BYTES", "4096".to_string()),
        ("DHV_CAPACITY_MAX_BYTES", "8192".to_string()),
        ("DHV_NODE_ID", n.store.node_id().to_string()),
        ("DHV_PARAMETERS", "{\"a\":\"b\"}".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(env, want);

    n.mgr.delete(&id, false).unwrap();
    let env = env_file(&n.plugin_dir().join("env-delete"));
    let mut want_delete = want.clone();
    want_delete.remove("DHV_CAPACITY_MIN_BYTES");
    want_delete.remove("DHV_CAPACITY_MAX_BYTES");
    want_delete.insert("DHV_OPERATION".into(), "delete".into());
    want_delete.insert("DHV_CREATED_PATH".into(), format!("{vols}/{id}"));
    assert_eq!(env, want_delete);
    assert_eq!(
        fs::read_to_string(n.plugin_dir().join("args-delete")).unwrap(),
        "delete\n"
    );

    let attrs = n.mgr.fingerprint();
    assert_eq!(attrs["plugins.host_volume.rec.version"], "1.0.0");
    assert_eq!(attrs["plugins.host_volume.mkdir.version"], "0.0.1");
    assert_eq!(n.mgr.attributes(), attrs);
    let env = env_file(&n.plugin_dir().join("env-fingerprint"));
    assert_eq!(
        env,
        BTreeMap::from([("DHV_OPERATION".to_string(), "fingerprint".to_string())])
    );

    // No parameters: the literal null.
    n.create(json!({"Name": "plain", "PluginID": "rec"}))
        .unwrap();
    let env = env_file(&n.plugin_dir().join("env-create"));
    assert_eq!(env["DHV_PARAMETERS"], "null");
    assert_eq!(env["DHV_CAPACITY_MIN_BYTES"], "0");
}

#[test]
fn failing_plugins_give_exact_errors_and_record_nothing() {
    let t = TempRoot::new();
    let n = fresh(&t, Duration::from_secs(30));
    n.script("says", r#"echo '{"error": "no space left"}'; exit 1"#);
    n.script("mute", "echo 'not json'; exit 1");
    n.script("garbage", "echo hello");
    n.script("nopath", r#"echo '{"bytes": 3}'"#);
    n.script("relpath", r#"echo '{"path": "x/y"}'"#);

    let (status, msg) = n
        .create(json!({"Name": "a", "PluginID": "says"}))
        .unwrap_err();
    assert_eq!(status, 500);
    let re = regex_like_create("says", &msg);
    assert_eq!(re, "exit status 1: no space left", "{msg}");
    let (_, msg) = n
        .create(json!({"Name": "a", "PluginID": "mute"}))
        .unwrap_err();
    assert_eq!(regex_like_create("mute", &msg), "exit status 1", "{msg}");
    let (_, msg) = n
        .create(json!({"Name": "a", "PluginID": "garbage"}))
        .unwrap_err();
    assert!(
        regex_like_create("garbage", &msg).starts_with("invalid plugin output: expected JSON"),
        "{msg}"
    );
    let (_, msg) = n
        .create(json!({"Name": "a", "PluginID": "nopath"}))
        .unwrap_err();
    assert_eq!(
        regex_like_create("nopath", &msg),
        "invalid plugin output: no \"path\" in the answer"
    );
    let (_, msg) = n
        .create(json!({"Name": "a", "PluginID": "relpath"}))
        .unwrap_err();
    assert_eq!(
        regex_like_create("relpath", &msg),
        "invalid plugin output: \"path\" \"x/y\" is not an absolute path"
    );
    // Nothing was recorded and the name is free.
    assert!(n.mgr.volumes().is_empty());
    assert!(n.mgr.host_volumes().is_empty());
    n.create(json!({"Name": "a", "PluginID": "mkdir"})).unwrap();
    assert_eq!(n.on_disk().host_volumes.len(), 1);
}

/// Checks the fixed part of `error creating volume "<uuid>" with plugin "<p>": <rest>` and
/// returns `<rest>`.
fn regex_like_create(plugin: &str, msg: &str) -> String {
    let rest = msg
        .strip_prefix("error creating volume \"")
        .unwrap_or_else(|| panic!("{msg}"));
    let (id, rest) = rest.split_once('"').unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{msg}");
    rest.strip_prefix(&format!(" with plugin \"{plugin}\": "))
        .unwrap_or_else(|| panic!("{msg}"))
        .to_string()
}

#[test]
fn lookup_refuses_anything_outside_the_plugin_dir() {
    let t = TempRoot::new();
    let n = fresh(&t, Duration::from_secs(30));
    let outside = t.dir("outside");
    script(&outside, "evil", "echo '{\"path\": \"/tmp\"}'");
    std::os::unix::fs::symlink(outside.join("evil"), n.plugin_dir().join("escape")).unwrap();
    fs::write(n.plugin_dir().join("noexec"), "#!/bin/sh\n").unwrap();
    for id in ["../x", "/bin/sh", "escape", "..", "nothere", "a/b"] {
        let (status, msg) = n.create(json!({"Name": "a", "PluginID": id})).unwrap_err();
        assert_eq!(
            (status, msg.as_str()),
            (400, format!("no such plugin: {id:?}").as_str())
        );
    }
    let (status, msg) = n
        .create(json!({"Name": "a", "PluginID": "noexec"}))
        .unwrap_err();
    assert_eq!(
        (status, msg.as_str()),
        (400, "plugin not executable: \"noexec\"")
    );
    // The built-in shadows a file of the same name.
    n.script("mkdir", "exit 1");
    n.create(json!({"Name": "a", "PluginID": "mkdir"})).unwrap();
    assert!(n.mgr.volumes().len() == 1);
}

fn process_gone(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie waiting for its (re)parent to reap it is dead too.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_hanging_plugin_and_its_children_are_killed_at_the_timeout() {
    let t = TempRoot::new();
    // Long enough for a busy machine's shell to start its child and write its PID first.
    let n = fresh(&t, Duration::from_secs(5));
    n.script(
        "hang",
        r#"/bin/sleep 1000 &
echo $! > "$DHV_VOLUMES_DIR/child-$DHV_OPERATION.pid"
/bin/sleep 1000"#,
    );
    let (status, msg) = n
        .create(json!({"Name": "h", "PluginID": "hang"}))
        .unwrap_err();
    assert_eq!(status, 500);
    assert_eq!(
        regex_like_create("hang", &msg),
        "timed out after 5s; the plugin was killed"
    );
    let pid: i32 = fs::read_to_string(n.volumes_dir().join("child-create.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until("the background child to die", || process_gone(pid));
    assert!(n.mgr.volumes().is_empty());
}

#[test]
fn shutdown_cancels_a_plugin_in_flight() {
    let t = TempRoot::new();
    let mut n = fresh(&t, Duration::from_secs(300));
    n.script(
        "slow",
        r#"/bin/sleep 1000 &
echo $! > "$DHV_VOLUMES_DIR/child.pid"
/bin/sleep 1000"#,
    );
    let mgr = n.mgr.clone();
    let started = Instant::now();
    let create = std::thread::spawn(move || {
        let body = serde_json::to_vec(&json!({"Volume": {"Name": "s", "PluginID": "slow"}}));
        volumes::create(&mgr, &body.unwrap()).map_err(|e| e.to_string())
    });
    let pidfile = n.volumes_dir().join("child.pid");
    wait_until("the plugin to start", || {
        fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    drop(n.stop.take());
    let msg = create.join().unwrap().unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(
        regex_like_create("slow", &msg),
        "cancelled: the agent is shutting down"
    );
    let pid: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until("the background child to die", || process_gone(pid));
}

fn peak_rss_kib() -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_plugin_printing_without_end_does_not_exhaust_memory() {
    // The peak RSS is the whole process's: measured in a process of its own, so that other tests'
    // memory neither fails this one nor hides what the plugin output cost.
    if !crate::common::alone_in_process(
        "volumes::a_plugin_printing_without_end_does_not_exhaust_memory",
    ) {
        return;
    }
    let t = TempRoot::new();
    let n = fresh(&t, Duration::from_secs(3));
    // A gigabyte, then exit 0: cut at the cap and refused.
    n.script("gig", "/usr/bin/head -c 1073741824 /dev/zero");
    // Endless: cut at the cap, killed at the timeout.
    n.script("yes", "/usr/bin/yes");
    let before = peak_rss_kib();
    let (_, msg) = n
        .create(json!({"Name": "g", "PluginID": "gig"}))
        .unwrap_err();
    let rest = regex_like_create("gig", &msg);
    assert!(
        rest == "invalid plugin output: stdout is longer than 1048576 bytes"
            || rest == "timed out after 3s; the plugin was killed",
        "{msg}"
    );
    let (_, msg) = n
        .create(json!({"Name": "y", "PluginID": "yes"}))
        .unwrap_err();
    assert_eq!(
        regex_like_create("yes", &msg),
        "timed out after 3s; the plugin was killed"
    );
    let grown_mib = (peak_rss_kib().saturating_sub(before)) / 1024;
    println!("peak RSS grew by {grown_mib} MiB");
    assert!(grown_mib < 256, "peak RSS grew by {grown_mib} MiB");
}

#[test]
fn mkdir_parameters_and_lifecycle() {
    let t = TempRoot::new();
    let n = fresh(&t, Duration::from_secs(30));
    for (params, want) in [
        (json!({"mode": "0999"}), "invalid value for \"mode\""),
        (json!({"uid": "root"}), "invalid value for \"uid\""),
        (json!({"gid": "-4"}), "invalid value for \"gid\""),
        (json!({"size": "1"}), "unknown mkdir parameter: \"size\""),
    ] {
        let (status, msg) = n
            .create(json!({"Name": "m", "PluginID": "mkdir", "Parameters": params}))
            .unwrap_err();
        assert_eq!(status, 400);
        assert!(msg.starts_with(want), "{msg}");
    }
    assert!(n.mgr.volumes().is_empty());
    let answer = n
        .create(json!({"Name": "m", "PluginID": "mkdir", "Parameters": {"mode": "0750"}}))
        .unwrap();
    let v = &answer["Volume"];
    let id = v["ID"].as_str().unwrap();
    let path = n.volumes_dir().join(id);
    assert_eq!(v["HostPath"], path.display().to_string());
    assert_eq!(v["CapacityBytes"], 0);
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o750);
    assert_eq!(n.on_disk().host_volumes[0].id, id);
    let hv = n.mgr.host_volumes();
    assert_eq!(hv["m"].id, id);
    assert_eq!(hv["m"].path, path.display().to_string());
    assert!(!hv["m"].read_only);
    // The same name under a new ID is refused; the same ID re-runs the plugin.
    let (status, msg) = n
        .create(json!({"Name": "m", "PluginID": "mkdir"}))
        .unwrap_err();
    assert_eq!(
        (status, msg.as_str()),
        (400, "volume name already exists on this node")
    );
    n.create(json!({"ID": id, "Name": "m", "PluginID": "mkdir", "Parameters": {"mode": "0700"}}))
        .unwrap();
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700);
    // Prefix lookups.
    let got = volumes::get(&n.mgr, &id[..8]).unwrap();
    assert_eq!(got["ID"], id);
    assert_eq!(volumes::get(&n.mgr, "zzz").unwrap_err().status(), 404);
    let deleted = volumes::delete(&n.mgr, &id[..8], false).unwrap();
    assert_eq!(deleted["VolumeID"], id);
    assert!(!path.exists());
    assert!(n.on_disk().host_volumes.is_empty());
    assert!(n.mgr.host_volumes().is_empty());
}

#[test]
fn recreate_with_the_same_id_updates_capacity() {
    let t = TempRoot::new();
    let n = fresh(&t, Duration::from_secs(30));
    n.script("rec", RECORDER);
    let first = n
        .create(json!({"Name": "c", "PluginID": "rec", "RequestedCapacityMinBytes": 100}))
        .unwrap();
    let id = first["Volume"]["ID"].as_str().unwrap();
    let again = n
        .create(json!({"ID": id, "Name": "c", "PluginID": "rec", "RequestedCapacityMinBytes": 200}))
        .unwrap();
    assert_eq!(again["Volume"]["ID"], id);
    assert_eq!(again["Volume"]["CapacityBytes"], 200);
    assert_eq!(n.on_disk().host_volumes[0].capacity_bytes, 200);
    let (status, _) = n
        .create(json!({"ID": id, "Name": "other", "PluginID": "rec"}))
        .unwrap_err();
    assert_eq!(status, 400);
}

#[test]
fn delete_with_a_failing_plugin_keeps_the_volume_unless_forced() {
    let t = TempRoot::new();
    let n = fresh(&t, Duration::from_secs(30));
    n.script(
        "nodel",
        r#"case "$1" in
  create) echo "{\"path\": \"$DHV_VOLUMES_DIR/x\"}" ;;
  delete) echo '{"error": "busy device"}'; exit 1 ;;
esac"#,
    );
    let answer = n.create(json!({"Name": "d", "PluginID": "nodel"})).unwrap();
    let id = answer["Volume"]["ID"].as_str().unwrap().to_string();
    let err = n.mgr.delete(&id, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("error deleting volume \"{id}\" with plugin \"nodel\": exit status 1: busy device")
    );
    assert_eq!(n.on_disk().host_volumes.len(), 1);
    assert!(n.mgr.host_volumes().contains_key("d"));
    n.mgr.delete(&id, true).unwrap();
    assert!(n.on_disk().host_volumes.is_empty());
    assert!(n.mgr.host_volumes().is_empty());
}

#[test]
fn a_failed_state_write_undoes_a_first_create() {
    let t = TempRoot::new();
    let n = fresh(&t, Duration::from_secs(30));
    // A non-empty directory where the state file goes: the rename over it fails.
    fs::create_dir_all(n.store.path().join("blocker")).unwrap();
    let (status, msg) = n
        .create(json!({"Name": "p", "PluginID": "mkdir"}))
        .unwrap_err();
    assert_eq!(status, 500);
    assert!(
        msg.contains("but the state file could not be written"),
        "{msg}"
    );
    assert!(n.mgr.volumes().is_empty());
    // The plugin's delete cleaned up.
    let left: Vec<_> = fs::read_dir(n.volumes_dir()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    fs::remove_dir_all(n.store.path()).unwrap();
    n.create(json!({"Name": "p", "PluginID": "mkdir"})).unwrap();
}

#[test]
fn register_checks_the_host_path() {
    let t = TempRoot::new();
    let n = fresh(&t, Duration::from_secs(30));
    let body = serde_json::to_vec(&json!({"Volume": {"Name": "r", "HostPath": "/nonexistent/x"}}));
    let err = volumes::register(&n.mgr, &body.unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "could not verify host path for \"r\": No such file or directory (os error 2)"
    );
    let dir = t.dir("reg");
    let body = serde_json::to_vec(&json!({"Volume": {"Name": "r", "HostPath": dir}}));
    let answer = volumes::register(&n.mgr, &body.unwrap()).unwrap();
    assert_eq!(answer["Volume"]["State"], "ready");
    assert_eq!(n.mgr.lookup("r").unwrap().path, dir);
    assert!(n.on_disk().host_volumes[0].registered);
}

#[test]
fn dynamic_volume_overrides_a_static_one_and_wakes_subscribers() {
    let t = TempRoot::new();
    let data = t.dir("vol").join("data");
    let statics = BTreeMap::from([(
        "shared".to_string(),
        StaticVolume {
            path: "/srv/shared".into(),
            read_only: true,
        },
    )]);
    let n = node(&data, Duration::from_secs(30), statics);
    let hv = n.mgr.host_volumes();
    assert_eq!(
        serde_json::to_value(&hv["shared"]).unwrap(),
        json!({"Name": "shared", "Path": "/srv/shared", "ReadOnly": true, "ID": ""})
    );
    let woken = n.mgr.changes();
    assert!(n.mgr.lookup("fresh").is_none());
    let answer = n
        .create(json!({"Name": "fresh", "PluginID": "mkdir"}))
        .unwrap();
    woken.recv_timeout(Duration::from_secs(60)).unwrap();
    let info = n.mgr.lookup("fresh").unwrap();
    assert_eq!(info.id.as_deref(), answer["Volume"]["ID"].as_str());
    n.create(json!({"Name": "shared", "PluginID": "mkdir"}))
        .unwrap();
    let hv = n.mgr.host_volumes();
    assert!(!hv["shared"].read_only);
    assert!(!hv["shared"].id.is_empty());
    n.mgr.claim("shared", "alloc-1");
    let got = volumes::get(&n.mgr, &hv["shared"].id).unwrap();
    assert_eq!(got["Allocations"], json!([{"ID": "alloc-1"}]));
    n.mgr.release("alloc-1");
    n.mgr.delete(&hv["shared"].id, false).unwrap();
    assert!(n.mgr.host_volumes()["shared"].read_only);
}

#[test]
fn restore_is_partial_and_retries_bring_volumes_back() {
    let t = TempRoot::new();
    let data = t.dir("vol").join("data");
    let plugins = data.join("host_volume_plugins");
    let answer = r#"echo "{\"path\": \"$DHV_VOLUMES_DIR/$DHV_VOLUME_ID\", \"bytes\": 7}""#;
    script(&plugins, "one", answer);
    script(&plugins, "two", answer);
    let registered = t.dir("regpath");
    let ids = {
        let n = node(&data, Duration::from_secs(30), BTreeMap::new());
        let a = n.create(json!({"Name": "a", "PluginID": "one"})).unwrap();
        let b = n.create(json!({"Name": "b", "PluginID": "two"})).unwrap();
        let c = n.create(json!({"Name": "c", "PluginID": "mkdir"})).unwrap();
        let body = serde_json::to_vec(&json!({"Volume": {"Name": "r", "HostPath": registered}}));
        let r = volumes::register(&n.mgr, &body.unwrap()).unwrap();
        [a, b, c, r].map(|v| v["Volume"]["ID"].as_str().unwrap().to_string())
    };
    let two = plugins.join("two");
    fs::rename(&two, data.join("two.away")).unwrap();
    fs::remove_dir(&registered).unwrap();

    let n = node(&data, Duration::from_secs(30), BTreeMap::new());
    assert_eq!(n.state.host_volumes.len(), 4);
    let report = n.mgr.restore(n.state.host_volumes.clone());
    let mut want_ready = vec![ids[0].clone(), ids[2].clone()];
    want_ready.sort();
    assert_eq!(report.ready, want_ready);
    let unavailable: BTreeMap<_, _> = report.unavailable.into_iter().collect();
    assert_eq!(unavailable[&ids[1]], "no such plugin: \"two\"");
    assert!(unavailable[&ids[3]].starts_with("could not verify host path for \"r\""));
    let got = volumes::get(&n.mgr, &ids[1]).unwrap();
    assert_eq!(got["State"], "unavailable");
    assert_eq!(got["StatusDescription"], "no such plugin: \"two\"");
    let names: BTreeSet<String> = n.mgr.host_volumes().into_keys().collect();
    assert_eq!(names, BTreeSet::from(["a".to_string(), "c".to_string()]));
    // Nothing leaves the state file; the name stays taken.
    n.store.save().unwrap();
    assert_eq!(n.on_disk().host_volumes.len(), 4);
    let (status, _) = n
        .create(json!({"Name": "b", "PluginID": "one"}))
        .unwrap_err();
    assert_eq!(status, 400);

    fs::rename(data.join("two.away"), &two).unwrap();
    fs::create_dir(&registered).unwrap();
    let report = n.mgr.retry_unavailable();
    assert_eq!(report.unavailable, vec![]);
    assert_eq!(report.ready.len(), 2);
    let names: BTreeSet<String> = n.mgr.host_volumes().into_keys().collect();
    assert_eq!(names.len(), 4);
    assert_eq!(n.on_disk().host_volumes.len(), 4);
}

#[test]
fn parallel_creates_and_deletes_keep_names_unique_and_state_consistent() {
    let t = TempRoot::new();
    let n = fresh(&t, Duration::from_secs(60));
    n.script(
        "ext",
        r#"/bin/mkdir -p "$DHV_VOLUMES_DIR/$DHV_VOLUME_ID"
echo "{\"path\": \"$DHV_VOLUMES_DIR/$DHV_VOLUME_ID\"}""#,
    );
    let threads: Vec<_> = (0..50)
        .map(|i| {
            let mgr = n.mgr.clone();
            std::thread::spawn(move || {
                let name = format!("vol-{}", i % 7);
                let plugin = if i % 2 == 0 { "mkdir" } else { "ext" };
                let body =
                    serde_json::to_vec(&json!({"Volume": {"Name": name, "PluginID": plugin}}));
                let created = volumes::create(&mgr, &body.unwrap());
                if let Ok(v) = &created {
                    if i % 3 == 0 {
                        let id = v["Volume"]["ID"].as_str().unwrap();
                        mgr.delete(id, false).unwrap();
                    }
                }
                created.is_ok()
            })
        })
        .collect();
    let ok = threads
        .into_iter()
        .filter(|_| true)
        .map(|t| t.join().unwrap())
        .filter(|ok| *ok)
        .count();
    println!("{ok} of 50 creates succeeded");
    let ready: Vec<_> = n.mgr.volumes();
    let names: BTreeSet<&str> = ready.iter().map(|(r, _, _)| r.name.as_str()).collect();
    assert_eq!(names.len(), ready.len(), "duplicate names: {ready:?}");
    assert!(ready.iter().all(|(_, s, _)| *s == VolumeState::Ready));
    let mem: BTreeSet<String> = ready.iter().map(|(r, _, _)| r.id.clone()).collect();
    let disk: BTreeSet<String> = n.on_disk().host_volumes.into_iter().map(|r| r.id).collect();
    let hv: BTreeSet<String> = n.mgr.host_volumes().into_values().map(|h| h.id).collect();
    assert_eq!(mem, disk);
    assert_eq!(mem, hv);
    assert!(!mem.is_empty());
}

#[test]
fn restore_has_an_overall_deadline() {
    let t = TempRoot::new();
    let data = t.dir("vol").join("data");
    let plugins = data.join("host_volume_plugins");
    script(
        &plugins,
        "flaky",
        r#"if [ -e "${0%/*}/hang" ]; then /bin/sleep 1000; fi
echo "{\"path\": \"$DHV_VOLUMES_DIR/$DHV_VOLUME_ID\"}""#,
    );
    let id = {
        let n = node(&data, Duration::from_secs(30), BTreeMap::new());
        let a = n.create(json!({"Name": "a", "PluginID": "flaky"})).unwrap();
        a["Volume"]["ID"].as_str().unwrap().to_string()
    };
    fs::write(plugins.join("hang"), "").unwrap();
    let (store, state) = StateStore::open(&data, false).unwrap();
    let (_stop, shutdown) = bounded::<Never>(0);
    let mut config = ManagerConfig::new(&data, store.node_id(), "default");
    config.restore_deadline = Duration::from_secs(1);
    let mgr = VolumeManager::new(config, store, &BTreeMap::new(), shutdown).unwrap();
    let report = mgr.restore(state.host_volumes);
    assert_eq!(
        report.unavailable,
        vec![(
            id.clone(),
            format!(
                "error creating volume \"{id}\" with plugin \"flaky\": restore did not finish within 1s; the plugin was killed"
            )
        )]
    );
    fs::remove_file(plugins.join("hang")).unwrap();
    assert_eq!(mgr.retry_unavailable().ready, vec![id]);
}

#[test]
fn start_fingerprints_restores_and_stops_with_shutdown() {
    let t = TempRoot::new();
    let data = t.dir("vol").join("data");
    let id = {
        let n = node(&data, Duration::from_secs(30), BTreeMap::new());
        let a = n.create(json!({"Name": "a", "PluginID": "mkdir"})).unwrap();
        a["Volume"]["ID"].as_str().unwrap().to_string()
    };
    let (store, state) = StateStore::open(&data, false).unwrap();
    let (stop, shutdown) = bounded::<Never>(0);
    let config = ManagerConfig::new(&data, store.node_id(), "default");
    let others = threads_named("volume-retry");
    let mgr = VolumeManager::start(
        config,
        store,
        &BTreeMap::new(),
        state.host_volumes,
        shutdown,
    )
    .unwrap();
    assert_eq!(
        mgr.attributes()["plugins.host_volume.mkdir.version"],
        "0.0.1"
    );
    assert_eq!(mgr.lookup("a").unwrap().id, Some(id));
    let mut mine = BTreeSet::new();
    wait_until("the retry thread to run", || {
        mine = &threads_named("volume-retry") - &others;
        !mine.is_empty()
    });
    drop(stop);
    wait_until("the retry thread to stop", || {
        threads_named("volume-retry").is_disjoint(&mine)
    });
}

/// IDs of this process's threads called `name`. Other tests run in this process too (one
/// integration-test binary): a test watches only the threads that were not there before it
/// started its own.
fn threads_named(name: &str) -> BTreeSet<u64> {
    fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect()
}
