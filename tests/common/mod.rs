//! The test harness: runs the real `nodeward` binary on a temporary data directory and a loopback
//! port chosen by the kernel, and talks to it over HTTP and through its CLI.
#![allow(dead_code)]

pub mod docker;

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_nodeward");

/// A fresh temporary directory, removed when dropped. Its path is short: CSI sockets live under
/// `<data_dir>/client/csi/plugins/<alloc id>/` and a unix socket path has at most 107 bytes.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let short = &uuid::Uuid::new_v4().simple().to_string()[..10];
        let p = std::env::temp_dir().join(format!("nw-{}-{short}", &tag[..tag.len().min(6)]));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct TestAgent {
    pub child: Option<Child>,
    pub dir: PathBuf,
    pub data_dir: PathBuf,
    pub config: PathBuf,
    pub addr: String,
    pub log: Arc<Mutex<Vec<String>>>,
}

fn http_agent() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build(),
    )
}

impl TestAgent {
    /// Starts an agent in `dir` with `extra` appended to its configuration.
    pub fn start_in(dir: &Path, extra: &str) -> TestAgent {
        let (data_dir, config) = Self::write_config(dir, extra);
        Self::launch(dir, data_dir, config, &[])
    }

    /// [`TestAgent::start_in`] with the agent's umask set to `umask`. Only the agent's: the umask
    /// belongs to a process, and this one runs every other test too.
    pub fn start_in_with_umask(dir: &Path, extra: &str, umask: libc::mode_t) -> TestAgent {
        let (data_dir, config) = Self::write_config(dir, extra);
        Self::launch_with(dir, data_dir, config, &[], Some(umask), None, &[])
    }

    /// [`TestAgent::start_in`] with the agent's limit on open files set to `(soft, hard)` (in the
    /// child only, as the umask).
    pub fn start_in_with_nofile(dir: &Path, extra: &str, soft: u64, hard: u64) -> TestAgent {
        let (data_dir, config) = Self::write_config(dir, extra);
        Self::launch_with(dir, data_dir, config, &[], None, Some((soft, hard)), &[])
    }

    /// [`TestAgent::start_in`] with `env` added to the agent's environment (only the agent's:
    /// this process's environment is every test's).
    pub fn start_in_with_env(dir: &Path, extra: &str, env: &[(&str, &str)]) -> TestAgent {
        let (data_dir, config) = Self::write_config(dir, extra);
        Self::launch_with(dir, data_dir, config, &[], None, None, env)
    }

    fn write_config(dir: &Path, extra: &str) -> (PathBuf, PathBuf) {
        let data_dir = dir.join("data");
        let config = dir.join("agent.hcl");
        std::fs::write(
            &config,
            format!(
                "data_dir = \"{}\"\nname = \"test-node\"\nlog_level = \"debug\"\nports {{ http = 0 }}\n{}\n",
                data_dir.display(),
                pin_gc_thresholds(extra)
            ),
        )
        .unwrap();
        (data_dir, config)
    }

    pub fn launch(dir: &Path, data_dir: PathBuf, config: PathBuf, args: &[&str]) -> TestAgent {
        Self::launch_with(dir, data_dir, config, args, None, None, &[])
    }

    fn launch_with(
        dir: &Path,
        data_dir: PathBuf,
        config: PathBuf,
        args: &[&str],
        umask: Option<libc::mode_t>,
        nofile: Option<(u64, u64)>,
        env: &[(&str, &str)],
    ) -> TestAgent {
        let mut cmd = Command::new(BIN);
        if let Some(mask) = umask {
            use std::os::unix::process::CommandExt;
            // SAFETY: umask(2) is async-signal-safe and touches nothing but the child's umask.
            unsafe {
                cmd.pre_exec(move || {
                    libc::umask(mask);
                    Ok(())
                });
            }
        }
        if let Some((soft, hard)) = nofile {
            use std::os::unix::process::CommandExt;
            let lim = libc::rlimit {
                rlim_cur: soft as libc::rlim_t,
                rlim_max: hard as libc::rlim_t,
            };
            // SAFETY: setrlimit(2) is async-signal-safe and changes the child's own limit only.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd
            .arg("agent")
            .arg("-config")
            .arg(&config)
            .args(args)
            .env("RUST_LOG", "nodeward=debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nodeward agent");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(i) = line.find("API on http://") {
                    let _ = tx.send(line[i + "API on http://".len()..].trim().to_string());
                }
                if std::env::var_os("NODEWARD_TEST_LOG").is_some() {
                    eprintln!("agent: {line}");
                }
                log2.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "agent did not start; its log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        TestAgent {
            child: Some(child),
            dir: dir.to_path_buf(),
            data_dir,
            config,
            addr,
            log,
        }
    }

    /// Starts the agent again on the same data directory and configuration.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the agent first");
        // Not dropped: its Drop would stop the keeper that this agent goes on with.
        let mut again = std::mem::ManuallyDrop::new(Self::launch(
            &self.dir,
            self.data_dir.clone(),
            self.config.clone(),
            &[],
        ));
        self.child = again.child.take();
        self.addr = again.addr.clone();
        self.log = again.log.clone();
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let url = self.url(path);
        // A connection per request: tests send refused bodies after which the server closes the
        // connection, and they must not depend on how a client pools.
        let http = http_agent();
        let resp = match (method, body) {
            ("GET", _) => http.get(&url).call(),
            ("DELETE", _) => http.delete(&url).call(),
            ("PUT", b) => http.put(&url).send(b.unwrap_or("")),
            ("POST", b) => http.post(&url).send(b.unwrap_or("")),
            _ => panic!("method {method}"),
        };
        let mut resp = resp.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (status, text)
    }

    pub fn get(&self, path: &str) -> Value {
        let (status, body) = self.request("GET", path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    pub fn put_json(&self, path: &str, body: &Value) -> (u16, String) {
        self.request("PUT", path, Some(&body.to_string()))
    }

    /// Registers a job given as HCL through the API (parse, then register); returns the job ID.
    pub fn run_hcl(&self, hcl: &str) -> String {
        let (status, job) = self.request(
            "POST",
            "/v1/jobs/parse",
            Some(&serde_json::json!({"JobHCL": hcl}).to_string()),
        );
        assert_eq!(status, 200, "parse: {job}");
        let job: Value = serde_json::from_str(&job).unwrap();
        let (status, body) = self.put_json("/v1/jobs", &serde_json::json!({"Job": job}));
        assert_eq!(status, 200, "register: {body}");
        job["ID"].as_str().unwrap().to_string()
    }

    /// The allocations of a job.
    pub fn allocs(&self, job: &str) -> Vec<Value> {
        self.get(&format!("/v1/job/{job}/allocations"))
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The only allocation of a job, waiting for it to exist.
    pub fn alloc_id(&self, job: &str) -> String {
        let allocs = self.allocs(job);
        assert_eq!(allocs.len(), 1, "{allocs:?}");
        allocs[0]["ID"].as_str().unwrap().to_string()
    }

    pub fn task_state(&self, alloc: &str, task: &str) -> Value {
        self.get(&format!("/v1/allocation/{alloc}"))["TaskStates"][task].clone()
    }

    /// `(Type, DisplayMessage)` of a task's events, oldest first.
    pub fn events(&self, alloc: &str, task: &str) -> Vec<(String, String)> {
        self.event_times(alloc, task)
            .into_iter()
            .map(|(t, m, _)| (t, m))
            .collect()
    }

    /// `(Type, DisplayMessage, Time)` of a task's events, oldest first.
    pub fn event_times(&self, alloc: &str, task: &str) -> Vec<(String, String, i64)> {
        self.task_state(alloc, task)["Events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|e| {
                (
                    e["Type"].as_str().unwrap_or("").to_string(),
                    e["DisplayMessage"].as_str().unwrap_or("").to_string(),
                    e["Time"].as_i64().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Runs the CLI against this agent.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .env("NODEWARD_ADDR", format!("http://{}", self.addr))
            .output()
            .expect("run nodeward CLI")
    }

    /// [`TestAgent::cli`] with `input` on its standard input.
    pub fn cli_with_stdin(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = Command::new(BIN)
            .args(args)
            .env("NODEWARD_ADDR", format!("http://{}", self.addr))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run nodeward CLI");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        child.wait_with_output().expect("run nodeward CLI")
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Sends `signal` and waits for the agent to exit; returns its exit code.
    pub fn stop_with(&mut self, signal: i32, timeout: Duration) -> Option<i32> {
        let mut child = self.child.take()?;
        unsafe { libc::kill(child.id() as i32, signal) };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("agent did not exit within {timeout:?} of signal {signal}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The first line of the agent's log that `matches`, waiting for it. A line the agent wrote
    /// before the change a test saw through the API or on disk may still be in the pipe that this
    /// process's reader thread empties.
    pub fn log_line(&self, what: &str, matches: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(line) = self.log.lock().unwrap().iter().find(|l| matches(l)) {
                return line.clone();
            }
            if Instant::now() > deadline {
                panic!("no line of {what} in the agent's log:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A task's events as the state file holds them (the agent may be stopped).
    pub fn task_state_from_file(&self, alloc: &str) -> Vec<Value> {
        let v = state_on_disk(&self.data_dir).unwrap();
        v["Allocations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["ID"] == alloc)
            .unwrap()["TaskStates"]["t"]["Events"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// The PID of the data directory's task keeper, when one has run.
    pub fn keeper_pid(&self) -> Option<i32> {
        keeper_pid(&self.data_dir)
    }
}

/// The PID in `<data_dir>/keeper.pid`, when that keeper still runs. A file left by a keeper killed
/// with SIGKILL may name another process by now (PIDs wrap at 32768 here, and the suite makes
/// many): only a live `nodeward-keeper` counts, so that no other test's process is signalled.
pub fn keeper_pid(data_dir: &Path) -> Option<i32> {
    std::fs::read_to_string(data_dir.join("keeper.pid"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&pid| alive(pid) && is_keeper(pid))
}

/// Whether `pid` runs the keeper program (its command name, which the kernel cuts at 15 bytes:
/// `nodeward-keeper` is 15).
fn is_keeper(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| c.trim() == "nodeward-keeper")
}

/// Stops the keeper of `data_dir` (SIGTERM: it kills every task's group) and waits for it to go.
pub fn stop_keeper(data_dir: &Path) {
    if let Some(pid) = keeper_pid(data_dir) {
        unsafe { libc::kill(pid, libc::SIGTERM) };
        wait_for(Duration::from_secs(30), "the keeper to exit", || {
            (!alive(pid)).then_some(())
        });
    }
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop_with(libc::SIGTERM, Duration::from_secs(30));
        }
        // Tasks outlive the agent: the test's own are stopped with their keeper.
        stop_keeper(&self.data_dir);
    }
}

/// Runs the test `name` (its path in this binary, `volumes::some_test`) alone in a fresh process
/// of this test binary, for a test that measures its whole process (its peak memory): in the one
/// integration-test binary every other test runs in the same process. Answers `true` in that fresh
/// process, where the caller goes on with its body; `false` in the calling test, after checking
/// that the fresh process ran exactly that test and that it passed.
pub fn alone_in_process(name: &str) -> bool {
    const VAR: &str = "NODEWARD_TEST_ALONE";
    if std::env::var_os(VAR).is_some_and(|v| v == name) {
        return true;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(VAR, name)
        .stdin(Stdio::null())
        .output()
        .expect("run this test binary again");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{text}");
    assert!(
        text.contains("running 1 test") && text.contains("test result: ok. 1 passed;"),
        "{name} did not run alone in a process of its own:\n{text}"
    );
    assert!(out.status.success(), "{name} failed in its own process");
    false
}

/// A string no other test's processes carry: a sleep length (`<base + random>.<random>`) that
/// marks a test's processes in `/proc` ([`pids_with`]). Each test module has its own `base`.
pub fn unique_marker(base: u32) -> String {
    format!(
        "{}.{}",
        base + fastrand::u32(0..100_000),
        fastrand::u32(1..999_999)
    )
}

/// A loopback TCP port that was free a moment ago, chosen by the kernel, for a task to listen on.
/// Never a random number: a random port can be one the machine already uses (another test's
/// agent, an outgoing connection's ephemeral port), and the task then fails to bind.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A loopback TCP port that refuses connections for as long as the returned socket lives: bound,
/// so that no other test's listener can take it, and not listening. A port that was merely free
/// a moment ago ([`free_port`]) may be listened on by then, and a connection there answered.
pub fn refused_port() -> (u16, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor this function owns from its creation on.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let fd = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        let bound = libc::bind(raw, &addr as *const _ as *const libc::sockaddr, len);
        assert_eq!(bound, 0, "bind: {}", std::io::Error::last_os_error());
        let mut len = len;
        let named = libc::getsockname(raw, &mut addr as *mut _ as *mut libc::sockaddr, &mut len);
        assert_eq!(named, 0, "getsockname: {}", std::io::Error::last_os_error());
        (u16::from_be(addr.sin_port), fd)
    }
}

/// The configuration of an agent on a [`Tmpfs`] of a few MB: such a disk has no room for the
/// allocations' `ephemeral_disk` (300 MB each by default, a placement dimension), so the test
/// states the disk placement counts, as an operator may (`client { disk_free_mb }`).
pub const FULL_DISK_CONFIG: &str = "client { disk_free_mb = 10000 }\n";

/// A tmpfs mounted for one test (root only), unmounted (lazily: the keeper may still hold a log
/// file) when dropped.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`4m`) on `path`, created if needed, mode 0700.
    pub fn mount(path: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(path).unwrap();
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(path)
            .status()
            .unwrap();
        assert!(mounted.success(), "mount tmpfs on {}", path.display());
        Tmpfs(path.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The state as the agent's files hold it, as JSON: the snapshot `state.json` with its journal
/// `state.journal` replayed, which is what the next agent loads. Safe while the agent runs: a
/// record it is appending is left out until it is whole. `None` when the files cannot be read.
pub fn state_on_disk(data_dir: &Path) -> Option<Value> {
    serde_json::to_value(nodeward::state::read(data_dir).ok()?).ok()
}

/// Replaces the state of a stopped agent with `state` as an agent before the journal left its
/// state: `state.json` alone, with no journal beside it.
pub fn write_state(data_dir: &Path, state: &Value) {
    std::fs::write(
        data_dir.join("state.json"),
        serde_json::to_vec(state).unwrap(),
    )
    .unwrap();
    match std::fs::remove_file(data_dir.join("state.journal")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("remove the journal: {e}"),
        _ => {}
    }
}

/// Fills what is left of the file system of `dir` with a file, and returns its path: remove it
/// to make room again.
pub fn fill_disk(dir: &Path) -> PathBuf {
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while std::io::Write::write_all(&mut f, &chunk).is_ok() {}
    let _ = std::io::Write::write_all(&mut f, &[0]);
    filler
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// The name of the running test (the test harness names each test's thread after it).
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string()
}

/// Fails the test unless this process runs as root. A test that needs root is `#[ignore]`d with
/// that reason, so a run without root counts it as ignored rather than passed; `scripts/test.sh`
/// selects the ignored tests (`--include-ignored`) when it runs as root. One selected without
/// root fails here: it must not pass having checked nothing.
pub fn require_root() {
    assert!(
        is_root(),
        "{} needs root: run it as root (scripts/test.sh does), or leave it ignored",
        test_name()
    );
}

/// `extra` with the garbage collector's disk and inode thresholds at 100 % unless it sets them:
/// a test agent's data directory is on the machine's own disk, which may well be fuller than the
/// default 80 %, and then the collector takes every allocation as soon as it ends, under the
/// test's feet. The tests of those thresholds set their own (on a tmpfs of their own).
fn pin_gc_thresholds(extra: &str) -> String {
    const PIN: &str = "  gc_disk_usage_threshold = 100\n  gc_inode_usage_threshold = 100\n";
    if extra.contains("gc_disk_usage_threshold") || extra.contains("gc_inode_usage_threshold") {
        return extra.to_string();
    }
    match extra.find("client {") {
        Some(at) => {
            let body = at + "client {".len();
            format!("{}\n{PIN}{}", &extra[..body], &extra[body..])
        }
        None => format!("{extra}\nclient {{\n{PIN}}}\n"),
    }
}

/// Polls `f` until it returns `Some` or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What `read` answers once it equals `want`; fails showing the last answer when it never does
/// within `timeout`. For output another process may still be writing: a file created by a shell
/// redirect before its command wrote, a log the keeper drains after it reported the task's exit.
pub fn wait_eq<T: PartialEq + std::fmt::Debug>(
    timeout: Duration,
    what: &str,
    mut read: impl FnMut() -> T,
    want: T,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let got = read();
        if got == want {
            return got;
        }
        if Instant::now() > deadline {
            assert_eq!(got, want, "timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A task's log (`stream` is `stdout` or `stderr`) as the API serves it, once `done` holds for
/// it; fails with the last text when it never does. The keeper reports a task's exit and then
/// drains its pipes into the log files: an allocation can be `complete` while its task's last
/// lines are still on their way, so a test waits for what it expects instead of reading once.
pub fn wait_log(
    agent: &TestAgent,
    alloc: &str,
    task: &str,
    stream: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let path = format!("/v1/client/fs/logs/{alloc}?task={task}&type={stream}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, text) = agent.request("GET", &path, None);
        if status == 200 && done(&text) {
            return text;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for the {stream} of {task} in {alloc} ({status}): {text:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`wait_log`] until the log has `n` complete lines.
pub fn wait_log_lines(
    agent: &TestAgent,
    alloc: &str,
    task: &str,
    stream: &str,
    n: usize,
) -> String {
    wait_log(agent, alloc, task, stream, |t| {
        t.ends_with('\n') && t.lines().count() >= n
    })
}

/// Whether `pid` is a live process (a zombie counts as dead).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            let state = s
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start().chars().next());
            !matches!(state, Some(Some('Z')) | Some(Some('X')))
        }
        Err(_) => false,
    }
}

/// Whether `pid` runs `sleep` by now. A task `trap '' INT; exec sleep <marker>` has set its trap
/// once it is `sleep` (the PID stays across the exec); before, it is the shell whose command line
/// also carries the marker, and which a stop signal still kills.
pub fn is_sleep(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        c.split(|&b| b == 0)
            .next()
            .is_some_and(|arg0| arg0 == b"sleep" || arg0.ends_with(b"/sleep"))
    })
}

/// PIDs of live processes whose command line contains `needle`.
pub fn pids_with(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) && alive(pid) {
                out.push(pid);
            }
        }
    }
    out
}

/// Writes an executable `/bin/sh` script `<dir>/<id>` (a host-volume plugin in most tests).
pub fn plugin(dir: &Path, id: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(id);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An agent whose host-volume plugins live in `<dir>/plugins`.
pub fn start_with_plugins(dir: &TempDir) -> TestAgent {
    TestAgent::start_in(
        dir.path(),
        &format!(
            "client {{ host_volume_plugin_dir = \"{}\" }}",
            dir.path().join("plugins").display()
        ),
    )
}

/// Seed 1's events (csi.md) for the plugin task `task` that never becomes healthy, with `restart
/// { attempts = 1  delay = "1s" }` and `health_timeout = "5s"`, from its first `Started` on;
/// `terminated` is the text of its `Terminated` events. Answers every event with its time.
pub fn assert_seed_events(
    agent: &TestAgent,
    alloc: &str,
    task: &str,
    terminated: &str,
) -> Vec<(String, String, i64)> {
    let events = agent.event_times(alloc, task);
    let socket = agent
        .data_dir
        .join(format!("client/csi/plugins/{alloc}/csi.sock"));
    let unhealthy = format!(
        "Error: CSI plugin failed probe: timeout while connecting to gRPC socket: failed to stat socket: stat {}: no such file or directory",
        socket.display()
    );
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|(t, m, _)| (t.as_str(), m.as_str()))
        .collect();
    let start = seen
        .iter()
        .position(|(t, _)| *t == "Started")
        .expect("a Started event");
    let delay = seen.get(start + 4).map_or("", |e| e.1);
    assert!(delay.starts_with("Task restarting in 1"), "{seen:#?}");
    let health = "CSI plugin did not become healthy before configured 5s health timeout";
    assert_eq!(
        seen[start..],
        [
            ("Started", "Task started by client"),
            ("Plugin became unhealthy", unhealthy.as_str()),
            ("Restarting", health),
            ("Terminated", terminated),
            ("Restarting", delay),
            ("Started", "Task started by client"),
            ("Plugin became unhealthy", unhealthy.as_str()),
            ("Restarting", health),
            ("Terminated", terminated),
            (
                "Not Restarting",
                "Exceeded allowed attempts 1 in interval 1m0s and mode is \"fail\""
            ),
        ],
        "{seen:#?}"
    );
    events
}
