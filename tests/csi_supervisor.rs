//! The CSI plugin supervisor against real plugin processes over real unix sockets.
//!
//! Each test plays the task runner: it calls the hook's prestart, starts
//! `nodeward-csi-test-plugin` (a real gRPC server) with the environment prestart built, calls
//! poststart with a [`RunHandle`] whose channels the test owns, and reads the hook's requests.
//! Timings are printed, not asserted, except where a bound is the behaviour under test (a shutdown
//! must not wait out a 5 s probe).

use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodeward::api::plugins;
use nodeward::csi::client::StatusCode;
use nodeward::csi::{
    CsiClient, CsiError, CsiPluginHook, CsiSettings, PluginKind, PluginRecord, PluginRegistry,
};
use nodeward::jobspec::{
    CsiPluginConfig, CsiPluginType, DriverConfig, Job, JobType, LogConfig, Resources, Task,
    TaskGroup,
};
use nodeward::task::events::{TaskEvent, PLUGIN_HEALTHY, PLUGIN_UNHEALTHY, RESTARTING};
use nodeward::task::hooks::{HookRequest, Interrupt, RunHandle, TaskContext, TaskHook};
use nodeward::thread::Never;

const PLUGIN: &str = env!("CARGO_BIN_EXE_nodeward-csi-test-plugin");
/// Generous: the machine running the tests may be busy.
const WAIT: Duration = Duration::from_secs(60);

static DIRS: AtomicU32 = AtomicU32::new(0);

/// A fresh directory, short enough that socket paths stay under the 108-byte limit.
fn temp_dir() -> PathBuf {
    let n = DIRS.fetch_add(1, Ordering::SeqCst);
    let dir = PathBuf::from(format!("/tmp/nwcsi-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Removes a directory when dropped, also when a test fails.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn task_context(
    data_dir: &Path,
    plugin_type: CsiPluginType,
    health_timeout: Duration,
    env: BTreeMap<String, String>,
) -> TaskContext {
    let alloc_id = "0b6c8f3e-5f2a-4c1e-9a7d-2f1e3c4b5a69".to_string();
    let policy = JobType::Service.default_restart_policy();
    let task = Task {
        shutdown_delay: Default::default(),
        meta: Default::default(),
        name: "plugin".into(),
        driver: "raw_exec".into(),
        config: DriverConfig {
            command: PLUGIN.into(),
            args: vec![],
            oom_score_adj: None,
            pid_mode: None,
            ipc_mode: None,
            docker: Default::default(),
            opaque: Default::default(),
        },
        env,
        user: None,
        kill_signal: "SIGINT".parse().unwrap(),
        kill_timeout: Duration::from_secs(5),
        restart_policy: policy,
        log_config: LogConfig::default(),
        volume_mounts: vec![],
        csi_plugin: Some(CsiPluginConfig {
            id: "hostpath".into(),
            plugin_type,
            mount_dir: "/csi".into(),
            stage_publish_base_dir: "/local/csi".into(),
            health_timeout,
        }),
        resources: Resources::default(),
        lifecycle: None,
        leader: false,
        constraints: vec![],
        dispatch_payload: None,
        kept: Default::default(),
    };
    let job = Job {
        fields: Default::default(),
        meta: Default::default(),
        id: "csi".into(),
        name: "csi".into(),
        job_type: JobType::Service,
        datacenters: vec!["*".into()],
        node_pool: "default".into(),
        constraints: vec![],
        periodic: None,
        parameterized_job: None,
        parent_id: String::new(),
        payload: String::new(),
        kept: Default::default(),
        task_groups: vec![TaskGroup {
            shutdown_delay: Default::default(),
            meta: Default::default(),
            ephemeral_disk: Default::default(),
            name: "group".into(),
            count: 1,
            restart_policy: policy,
            volumes: BTreeMap::new(),
            networks: Vec::new(),
            constraints: vec![],
            tasks: vec![task.clone()],
            kept: Default::default(),
        }],
    };
    let alloc_dir = data_dir.join("alloc").join(&alloc_id);
    TaskContext {
        alloc_index: 0,
        alloc_name: "plugin.group[0]".into(),
        task_dir: alloc_dir.join("plugin"),
        alloc_dir,
        alloc_id,
        job: Arc::new(job),
        group: "group".into(),
        task,
        data_dir: data_dir.to_path_buf(),
        node_id: "node-1".into(),
        node_name: "node-1".into(),
        node: Default::default(),
        ports: Vec::new(),
        cores: Vec::new(),
    }
}

/// The test's side of one run: it owns `done` and `shutdown` and reads the hook's requests.
struct Run {
    done: Option<Sender<Never>>,
    shutdown: Option<Sender<Never>>,
    requests: Receiver<HookRequest>,
}

impl Run {
    fn new(run_id: u64) -> (Run, RunHandle) {
        let (done_tx, done_rx) = bounded::<Never>(0);
        let (shutdown_tx, shutdown_rx) = bounded::<Never>(0);
        let (req_tx, req_rx) = unbounded();
        let handle = RunHandle::new(run_id, done_rx, shutdown_rx, req_tx);
        (
            Run {
                done: Some(done_tx),
                shutdown: Some(shutdown_tx),
                requests: req_rx,
            },
            handle,
        )
    }

    fn next(&self) -> HookRequest {
        match self.requests.recv_timeout(WAIT) {
            Ok(r) => r,
            Err(e) => panic!("no request from the supervisor within {WAIT:?}: {e}"),
        }
    }

    /// The next request, which must be an `Emit`; returns its event's type and message.
    fn next_event(&self) -> (String, String) {
        match self.next() {
            HookRequest::Emit { event, .. } => (event.event_type, event.display_message),
            other => panic!("expected an event, got {other:?}"),
        }
    }

    /// The next request, which must be a failure `Restart`; returns its events.
    fn next_failure_restart(&self) -> Vec<TaskEvent> {
        match self.next() {
            HookRequest::Restart {
                events, failure, ..
            } => {
                assert!(failure, "a failure restart: {events:?}");
                events
            }
            other => panic!("expected a restart request, got {other:?}"),
        }
    }

    /// Waits until the supervisor dropped its handle; returns what it sent meanwhile.
    fn rest(&self) -> Vec<HookRequest> {
        let mut out = Vec::new();
        loop {
            match self.requests.recv_timeout(WAIT) {
                Ok(r) => out.push(r),
                Err(RecvTimeoutError::Disconnected) => return out,
                Err(RecvTimeoutError::Timeout) => panic!("the supervisor did not end"),
            }
        }
    }
}

/// A plugin process, stopped (SIGTERM, then SIGKILL) and reaped on drop.
struct PluginProcess(Child);

impl PluginProcess {
    fn start(env: &BTreeMap<String, String>, mode: &str, delay_ms: u64, count: &Path) -> Self {
        let child = Command::new(PLUGIN)
            .env("CSI_ENDPOINT", &env["CSI_ENDPOINT"])
            .args(["--mode", mode, "--delay-ms", &delay_ms.to_string()])
            .arg("--count-file")
            .arg(count)
            .stdin(Stdio::null())
            .spawn()
            .expect("start the test plugin");
        PluginProcess(child)
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(start.elapsed() < WAIT, "the plugin did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_some() {
            return;
        }
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn probes(count: &Path) -> u64 {
    std::fs::read_to_string(count)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

struct Setup {
    dir: PathBuf,
    ctx: TaskContext,
    registry: Arc<PluginRegistry>,
    hook: CsiPluginHook,
}

impl Setup {
    fn new(plugin_type: CsiPluginType, health_timeout: Duration, interval: Duration) -> Setup {
        Setup::with_env(plugin_type, health_timeout, interval, BTreeMap::new())
    }

    fn with_env(
        plugin_type: CsiPluginType,
        health_timeout: Duration,
        interval: Duration,
        env: BTreeMap<String, String>,
    ) -> Setup {
        let dir = temp_dir();
        let ctx = task_context(&dir, plugin_type, health_timeout, env);
        let registry = Arc::new(PluginRegistry::new("node-1"));
        let settings = CsiSettings {
            probe_interval: interval,
        };
        let hook = CsiPluginHook::new(&ctx, registry.clone(), settings).expect("a csi_plugin task");
        Setup {
            dir,
            ctx,
            registry,
            hook,
        }
    }

    fn prestart(&self) -> BTreeMap<String, String> {
        // As the runner does: the agent's environment (here one that has a CSI_ENDPOINT of its
        // own, which must not count), then the task's env.
        let mut env = BTreeMap::new();
        env.insert(
            "CSI_ENDPOINT".to_string(),
            "unix:///agent/inherited.sock".to_string(),
        );
        env.extend(self.ctx.task.env.clone());
        self.hook
            .prestart(&self.ctx, &mut env, &Interrupt::never())
            .expect("prestart");
        env
    }

    fn count_file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// One run as the runner starts it: prestart, the plugin process in `mode` (counting its
    /// probes in `count`), then poststart with a new run's handle.
    fn start_run(
        &self,
        mode: &str,
        delay_ms: u64,
        count: &Path,
        run_id: u64,
    ) -> (PluginProcess, Run) {
        let env = self.prestart();
        let plugin = PluginProcess::start(&env, mode, delay_ms, count);
        let (run, handle) = Run::new(run_id);
        self.hook.poststart(&self.ctx, handle);
        (plugin, run)
    }

    /// The registry's record of this task's plugin.
    fn record(&self, kind: PluginKind) -> Option<PluginRecord> {
        self.registry.get("hostpath", &self.ctx.alloc_id, kind)
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < WAIT, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Expects the failure restart that ends phase 1 and returns the `Plugin became unhealthy`
/// message.
fn expect_health_timeout(run: &Run, timeout_text: &str) -> String {
    let events = run.next_failure_restart();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].event_type, PLUGIN_UNHEALTHY);
    assert_eq!(events[1].event_type, RESTARTING);
    assert_eq!(
        events[1].display_message,
        format!(
            "CSI plugin did not become healthy before configured {timeout_text} health timeout"
        )
    );
    events[0].display_message.clone()
}

fn expect_register_failure(run: &Run) -> String {
    let events = run.next_failure_restart();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].event_type, RESTARTING);
    events[0].display_message.clone()
}

#[test]
fn ready_after_a_delay_becomes_healthy_and_registers() {
    let s = Setup::new(
        CsiPluginType::Monolith,
        Duration::from_secs(20),
        Duration::from_secs(30),
    );
    let env = s.prestart();
    let socket = s.hook.socket_dir().join("csi.sock");
    assert_eq!(env["CSI_ENDPOINT"], format!("unix://{}", socket.display()));
    for dir in [s.hook.socket_dir(), s.hook.staging_dir()] {
        let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
    }
    assert!(s
        .hook
        .staging_dir()
        .ends_with("client/csi/monolith/hostpath"));

    let count = s.count_file("probes");
    let _plugin = PluginProcess::start(&env, "socket-after-delay", 300, &count);
    let (mut run, handle) = Run::new(1);
    let started = Instant::now();
    s.hook.poststart(&s.ctx, handle);
    let (kind, message) = run.next_event();
    println!(
        "healthy {:?} after poststart (socket created at 300ms)",
        started.elapsed()
    );
    assert_eq!(kind, PLUGIN_HEALTHY);
    assert_eq!(message, "plugin: hostpath");

    let alloc = s.ctx.alloc_id.clone();
    wait_until("the plugin is registered", || {
        s.record(PluginKind::Controller).is_some()
    });
    let node = plugins::node_plugins_json(&s.registry);
    let n = &node["CSINodePlugins"]["hostpath"];
    assert_eq!(n["Healthy"], true);
    assert_eq!(n["AllocID"], alloc.as_str());
    assert_eq!(n["Provider"], "nodeward.test.csi");
    assert_eq!(n["ProviderVersion"], "1.2.3");
    assert_eq!(n["RequiresControllerPlugin"], true);
    assert_eq!(n["RequiresTopologies"], true);
    assert_eq!(n["NodeInfo"]["ID"], "test-node-1");
    assert_eq!(n["NodeInfo"]["MaxVolumes"], 16);
    assert_eq!(
        n["NodeInfo"]["AccessibleTopology"]["Segments"]["topology.nodeward.test/node"],
        "test-node-1"
    );
    assert_eq!(n["NodeInfo"]["RequiresNodeStageVolume"], true);
    assert_eq!(n["NodeInfo"]["SupportsStats"], true);
    let c = &node["CSIControllerPlugins"]["hostpath"];
    assert_eq!(c["ControllerInfo"]["SupportsCreateDelete"], true);
    assert_eq!(c["ControllerInfo"]["SupportsAttachDetach"], true);
    assert_eq!(c["ControllerInfo"]["SupportsClone"], false);
    let plugin = plugins::plugin_json(&s.registry, "hostpath").unwrap();
    assert_eq!(plugin["NodesHealthy"], 1);
    assert_eq!(plugin["Allocations"][0]["ID"], alloc.as_str());

    // The task is stopped for good: the supervisor ends, the plugin is deregistered and its
    // socket directory removed.
    drop(run.done.take());
    assert!(run.rest().is_empty());
    s.hook.exited(&s.ctx);
    s.hook.stop(&s.ctx);
    assert_eq!(s.hook.live_supervisors(), 0);
    assert!(s.registry.records().is_empty());
    assert!(!s.hook.socket_dir().exists());
    assert!(
        s.hook.staging_dir().exists(),
        "staging may hold mounts: kept"
    );
}

#[test]
fn a_plugin_that_never_creates_its_socket_is_restarted_at_the_deadline() {
    let s = Setup::new(
        CsiPluginType::Node,
        Duration::from_secs(1),
        Duration::from_secs(30),
    );
    let env = s.prestart();
    let count = s.count_file("probes");
    let _plugin = PluginProcess::start(&env, "never-socket", 0, &count);
    let (run, handle) = Run::new(1);
    let started = Instant::now();
    s.hook.poststart(&s.ctx, handle);
    let unhealthy = expect_health_timeout(&run, "1s");
    let elapsed = started.elapsed();
    println!(
        "restart requested {elapsed:?} after poststart, {:?} after the 1s deadline",
        elapsed.saturating_sub(Duration::from_secs(1))
    );
    assert!(elapsed >= Duration::from_secs(1), "not before the deadline");
    assert_eq!(
        unhealthy,
        format!(
            "Error: CSI plugin failed probe: timeout while connecting to gRPC socket: failed to stat socket: stat {}: no such file or directory",
            s.hook.socket_dir().join("csi.sock").display()
        )
    );
    // The supervisor ends after asking.
    assert!(run.rest().is_empty());
    assert_eq!(s.hook.live_supervisors(), 0);
    assert!(s.registry.records().is_empty());
}

#[test]
fn a_socket_without_csi_services_fails_probe_as_unimplemented() {
    let s = Setup::new(
        CsiPluginType::Node,
        Duration::from_secs(1),
        Duration::from_secs(30),
    );
    let (_plugin, run) = s.start_run("wrong-service", 0, &s.count_file("probes"), 1);
    let unhealthy = expect_health_timeout(&run, "1s");
    println!("{unhealthy}");
    assert!(
        unhealthy.starts_with("Error: CSI plugin failed probe: rpc error: code = Unimplemented"),
        "{unhealthy}"
    );
}

#[test]
fn ready_false_is_not_healthy() {
    let s = Setup::new(
        CsiPluginType::Node,
        Duration::from_secs(1),
        Duration::from_secs(30),
    );
    let count = s.count_file("probes");
    let (_plugin, run) = s.start_run("not-ready", 0, &count, 1);
    let unhealthy = expect_health_timeout(&run, "1s");
    assert_eq!(
        unhealthy,
        "Error: CSI plugin failed probe: plugin reported not ready"
    );
    println!("{} probes within the 1s health timeout", probes(&count));
}

/// Also: a task that sets its own `CSI_ENDPOINT` keeps it, and that socket is probed.
#[test]
fn ready_absent_counts_as_healthy_on_the_tasks_own_endpoint() {
    let dir = temp_dir();
    let _cleanup = Cleanup(dir.clone());
    let own = dir.join("own.sock");
    let mut env = BTreeMap::new();
    env.insert(
        "CSI_ENDPOINT".to_string(),
        format!("unix://{}", own.display()),
    );
    let s = Setup::with_env(
        CsiPluginType::Node,
        Duration::from_secs(20),
        Duration::from_secs(30),
        env,
    );
    let env = s.prestart();
    assert_eq!(env["CSI_ENDPOINT"], format!("unix://{}", own.display()));
    let _plugin = PluginProcess::start(&env, "ready-absent", 0, &s.count_file("probes"));
    let (mut run, handle) = Run::new(1);
    s.hook.poststart(&s.ctx, handle);
    let (kind, _) = run.next_event();
    assert_eq!(kind, PLUGIN_HEALTHY);
    wait_until("registered", || s.record(PluginKind::Node).is_some());
    let record = s.record(PluginKind::Node).unwrap();
    assert_eq!(record.socket_path, own);
    assert!(s.record(PluginKind::Controller).is_none());
    drop(run.done.take());
    s.hook.stop(&s.ctx);
}

#[test]
fn get_plugin_info_failing_is_a_registration_failure() {
    let s = Setup::new(
        CsiPluginType::Node,
        Duration::from_secs(20),
        Duration::from_secs(30),
    );
    let (_plugin, run) = s.start_run("info-fails", 0, &s.count_file("probes"), 1);
    assert_eq!(run.next_event().0, PLUGIN_HEALTHY);
    assert_eq!(
        expect_register_failure(&run),
        "CSI plugin failed to register: GetPluginInfo: rpc error: code = Internal desc = plugin info unavailable"
    );
    assert!(run.rest().is_empty());
    assert!(s.registry.records().is_empty());
}

#[test]
fn an_empty_plugin_name_is_a_registration_failure() {
    let s = Setup::new(
        CsiPluginType::Controller,
        Duration::from_secs(20),
        Duration::from_secs(30),
    );
    let (_plugin, run) = s.start_run("empty-name", 0, &s.count_file("probes"), 1);
    assert_eq!(run.next_event().0, PLUGIN_HEALTHY);
    assert_eq!(
        expect_register_failure(&run),
        "CSI plugin failed to register: plugin returned empty name field"
    );
}

/// A plugin that crashes after becoming healthy, then a new run: still exactly one supervisor,
/// even when the previous run's `done` was never closed (the hook retires the old supervisor).
#[test]
fn a_crash_after_healthy_and_a_new_run_keep_exactly_one_supervisor() {
    let s = Setup::new(
        CsiPluginType::Monolith,
        Duration::from_secs(20),
        Duration::from_millis(100),
    );
    let (mut first, run1) = s.start_run("crash-after-healthy", 300, &s.count_file("p1"), 1);
    assert_eq!(run1.next_event().0, PLUGIN_HEALTHY);
    assert_eq!(s.hook.live_supervisors(), 1);
    let status = first.wait_exit();
    assert_eq!(status.code(), Some(1), "the plugin crashed as asked");
    // Phase 3 notices; no restart is asked for.
    let (kind, message) = run1.next_event();
    assert_eq!(kind, PLUGIN_UNHEALTHY);
    assert!(message.starts_with("Error: "), "{message}");
    println!("after the crash: {message}");
    wait_until("the registry shows it", || {
        s.record(PluginKind::Node).is_some_and(|r| !r.info.healthy)
    });

    // The runner starts the task again. run1's `done` stays open on purpose.
    let count2 = s.count_file("p2");
    let (_second, mut run2) = s.start_run("healthy", 0, &count2, 2);
    assert_eq!(s.hook.live_supervisors(), 1, "exactly one supervisor");
    // The first supervisor is gone: its handle is dropped and it sends nothing more.
    let late: Vec<_> = run1.rest();
    assert!(
        late.is_empty(),
        "the old supervisor spoke after retiring: {late:?}"
    );

    assert_eq!(run2.next_event().0, PLUGIN_HEALTHY);
    wait_until("registered again", || {
        s.record(PluginKind::Node).is_some_and(|r| r.info.healthy)
    });
    let mut max_live = 0;
    let start = Instant::now();
    let p0 = probes(&count2);
    while start.elapsed() < Duration::from_secs(1) {
        max_live = max_live.max(s.hook.live_supervisors());
        std::thread::sleep(Duration::from_millis(5));
    }
    let p1 = probes(&count2);
    println!(
        "one second with a 100ms interval: {} probes on the new plugin, at most {max_live} supervisor(s) alive",
        p1 - p0
    );
    assert_eq!(max_live, 1);
    drop(run2.done.take());
    s.hook.exited(&s.ctx);
    assert_eq!(s.hook.live_supervisors(), 0);
    s.hook.stop(&s.ctx);
}

#[test]
fn a_flapping_plugin_gives_one_event_per_transition() {
    let s = Setup::new(
        CsiPluginType::Node,
        Duration::from_secs(20),
        Duration::from_millis(50),
    );
    let (_plugin, mut run) = s.start_run("flap", 400, &s.count_file("probes"), 1);
    // Phase 1 may catch the plugin in a not-ready half; it ends at the first healthy probe.
    assert_eq!(run.next_event().0, PLUGIN_HEALTHY);
    let mut events = Vec::new();
    while events.len() < 5 {
        events.push(run.next_event());
    }
    println!("{events:?}");
    let mut expected_unhealthy = true;
    for (kind, message) in &events {
        if expected_unhealthy {
            assert_eq!(kind, PLUGIN_UNHEALTHY);
            // The plugin's not-ready half says nothing ("Unknown Reason"); on a loaded machine
            // a probe may also outlive its deadline, which is a transition of its own.
            assert!(
                message == "Unknown Reason"
                    || message
                        == "Error: rpc error: code = DeadlineExceeded desc = Deadline Exceeded",
                "{message}"
            );
        } else {
            assert_eq!(kind, PLUGIN_HEALTHY);
        }
        expected_unhealthy = !expected_unhealthy;
    }
    // The last event was "unhealthy"; the registry follows.
    wait_until("the registry follows", || {
        s.record(PluginKind::Node).is_some()
    });
    drop(run.done.take());
    assert!(run
        .rest()
        .iter()
        .all(|r| matches!(r, HookRequest::Emit { .. })));
    s.hook.stop(&s.ctx);
}

#[test]
fn a_kill_while_waiting_ends_the_supervisor_without_any_request() {
    // A health deadline the kill below comes well before, however busy the machine.
    let s = Setup::new(
        CsiPluginType::Node,
        Duration::from_secs(30),
        Duration::from_secs(30),
    );
    let (_plugin, mut run) = s.start_run("never-socket", 0, &s.count_file("probes"), 1);
    std::thread::sleep(Duration::from_millis(300));
    let killed = Instant::now();
    drop(run.done.take());
    // Disconnects once the supervisor dropped its handle, having sent nothing.
    let requests = run.rest();
    println!("supervisor ended {:?} after done closed", killed.elapsed());
    assert!(requests.is_empty(), "{requests:?}");
    wait_until("no supervisor", || s.hook.live_supervisors() == 0);
}

#[test]
fn shutdown_cancels_a_hanging_probe_at_once() {
    let s = Setup::new(
        CsiPluginType::Node,
        Duration::from_secs(30),
        Duration::from_secs(30),
    );
    let count = s.count_file("probes");
    let (_plugin, mut run) = s.start_run("hang", 0, &count, 1);
    // A probe with a 5s timeout is now in flight and will never be answered.
    wait_until("the plugin received a probe", || probes(&count) >= 1);
    let t = Instant::now();
    drop(run.shutdown.take());
    // On shutdown the runner stops the task's hooks; stop joins the supervisor.
    s.hook.stop(&s.ctx);
    let took = t.elapsed();
    println!("supervisor ended {took:?} after shutdown, with a 5s probe in flight");
    assert_eq!(s.hook.live_supervisors(), 0);
    // Well under the probe's 5 s, with room for a busy machine.
    assert!(
        took < Duration::from_secs(4),
        "shutdown waited for the probe timeout: {took:?}"
    );
    assert!(run.rest().is_empty());
    // On shutdown the socket directory stays for the next agent.
    assert!(s.hook.socket_dir().exists());
}

/// The client against a second, independent gRPC implementation (Python's grpcio), so nodeward's
/// messages are checked against more than its own server.
#[test]
fn interoperates_with_python_grpc() {
    let has_grpc = Command::new("python3")
        .args(["-c", "import grpc"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_grpc {
        println!(
            "SKIPPED interoperates_with_python_grpc: python3 cannot import grpc (install it with: python3 -m pip install grpcio)"
        );
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/py_csi_plugin.py");
    let dir = temp_dir();
    let _cleanup = Cleanup(dir.clone());
    for (mode, expect) in [
        ("healthy", Ok(())),
        ("ready-absent", Ok(())),
        ("not-ready", Err(CsiError::NotReady)),
    ] {
        let socket = dir.join(format!("{mode}.sock"));
        let child = Command::new("python3")
            .arg(&script)
            .arg(&socket)
            .arg(mode)
            .stdin(Stdio::null())
            .spawn()
            .expect("start python3");
        let _plugin = PluginProcess(child);
        let client = CsiClient::new(&socket);
        let timeout = Duration::from_secs(5);
        // Python's grpcio creates the socket file when it binds, a moment before it serves:
        // until then the socket is missing or refuses connections.
        let mut probed = Err(CsiError::NotReady);
        wait_until("the python plugin serves", || {
            probed = client.probe(timeout, &[]);
            !matches!(&probed, Err(CsiError::Socket { .. }))
                && probed.as_ref().err().and_then(CsiError::code) != Some(StatusCode::UNAVAILABLE)
        });
        assert_eq!(probed, expect, "mode {mode}");
        let info = client.get_plugin_info(timeout, &[]).unwrap();
        assert_eq!(info.name, "py.nodeward.test");
        assert_eq!(info.vendor_version, "0.9");
        let node = client.node_get_info(timeout, &[]).unwrap();
        assert_eq!(node.node_id, "py-node");
        assert_eq!(node.max_volumes_per_node, 300);
        let segments = node.accessible_topology.unwrap().segments;
        assert_eq!(segments["zone"], "z1");
        // Not served by the Python plugin: a readable Unimplemented.
        let err = client
            .controller_get_capabilities(timeout, &[])
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("rpc error: code = Unimplemented"),
            "{err}"
        );
    }
}

/// On agent shutdown the registration stays (the state file keeps it for the next agent), while a
/// stop for good removes it.
#[test]
fn shutdown_keeps_the_registration_for_the_next_agent() {
    // A probe interval (and so a probe deadline) a busy machine's plugin answers within: a late
    // answer would be an unhealthy event of its own.
    let s = Setup::new(
        CsiPluginType::Node,
        Duration::from_secs(20),
        Duration::from_secs(1),
    );
    let count = s.count_file("probes");
    let (_plugin, mut run) = s.start_run("healthy", 0, &count, 1);
    assert_eq!(run.next_event().0, PLUGIN_HEALTHY);
    wait_until("registered", || s.record(PluginKind::Node).is_some());
    // Let phase 3 probe a few times (counted, not slept for); a steady plugin produces no events.
    let mut p0 = 0;
    wait_until("the probe count", || {
        p0 = probes(&count);
        p0 > 0
    });
    wait_until("two probes of phase 3", || probes(&count) >= p0 + 2);
    drop(run.shutdown.take());
    s.hook.stop(&s.ctx);
    assert!(
        run.rest().is_empty(),
        "no events while healthy, none at shutdown"
    );
    assert_eq!(s.hook.live_supervisors(), 0);
    assert!(s.record(PluginKind::Node).is_some());
    assert!(s.hook.socket_dir().exists());
}
