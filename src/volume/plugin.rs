//! Dynamic host volume plugins: finding them, running them, reading their answers.
//!
//! A plugin is an executable file in the plugin directory, named by its id, speaking Nomad's DHV
//! protocol (host-volumes.md): it runs as `<dir>/<id> <operation>` with an environment of exactly
//! the `DHV_*` variables, answers JSON on stdout and logs on stderr. The built-in `mkdir`
//! ([`super::mkdir`]) answers to its id before any file in the directory is considered.
//!
//! Lookup is confined to the plugin directory: an id that is a path, `.`/`..`, or a name whose file
//! resolves (through symlinks) outside the directory is `no such plugin`, so a `plugin_id` can never
//! run an arbitrary file on the node (CVE-2026-7474).
//!
//! Protocol of one run ([`run`]): the plugin is spawned in a process group of its own. Three
//! helper threads serve it: a waiter (`wait()` → its exit status on a channel), a stdout reader
//! (keeps the first [`OUTPUT_LIMIT`] bytes, reads and discards the rest, sends the bytes at EOF) and
//! a stderr reader (logs lines, capped). The caller selects over the waiter, the shutdown channel and
//! the deadline; on shutdown or deadline it SIGKILLs the whole group and reaps the plugin. After a
//! exit 0 it waits for stdout's EOF under the same deadline (a background child still holding the
//! pipe is killed with the group at the deadline); after any other exit it kills the rest of the
//! group first, so what the plugin printed is read at once. The reader threads end by themselves when the
//! last holder of the pipe dies.

use crossbeam_channel::{after, bounded, select, Receiver};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::mkdir;
use crate::thread::Never;

/// stdout beyond this is read and discarded.
pub const OUTPUT_LIMIT: usize = 1 << 20;
/// stderr logged per run at most.
const STDERR_LIMIT: usize = 64 << 10;
/// The built-in plugin's id; it shadows a file of the same name in the plugin directory.
pub const MKDIR: &str = "mkdir";
/// The built-in plugin's version attribute.
pub const MKDIR_VERSION: &str = "0.0.1";
/// At most this many plugins run at once while fingerprinting.
const FINGERPRINT_PARALLELISM: usize = 8;

/// How long each operation may run before its process group is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub fingerprint: Duration,
    pub create: Duration,
    pub delete: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            fingerprint: Duration::from_secs(5),
            create: Duration::from_secs(60),
            delete: Duration::from_secs(60),
        }
    }
}

/// Why a plugin lookup or run failed. Messages follow host-volumes.md exactly.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("no such plugin: {0:?}")]
    NoSuchPlugin(String),
    #[error("plugin not executable: {0:?}")]
    NotExecutable(String),
    /// The built-in plugin refused its parameters (the user's mistake).
    #[error(transparent)]
    MkdirParameters(mkdir::MkdirError),
    #[error("error creating volume {volume_id:?} with plugin {plugin:?}: {failure}")]
    Create {
        volume_id: String,
        plugin: String,
        failure: Failure,
    },
    #[error("error deleting volume {volume_id:?} with plugin {plugin:?}: {failure}")]
    Delete {
        volume_id: String,
        plugin: String,
        failure: Failure,
    },
    #[error("error fingerprinting plugin {plugin:?}: {failure}")]
    Fingerprint { plugin: String, failure: Failure },
}

impl PluginError {
    /// True when the request was at fault (unknown plugin, bad parameters), not the plugin or node.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            PluginError::NoSuchPlugin(_)
                | PluginError::NotExecutable(_)
                | PluginError::MkdirParameters(_)
        )
    }
}

/// What went wrong in one plugin run.
#[derive(Debug)]
pub enum Failure {
    /// Non-zero exit or death by a signal; `error` is the plugin's `{"error": ...}`, if it said so.
    Exit {
        status: ExitStatus,
        error: Option<String>,
    },
    TimedOut(Duration),
    Cancelled,
    Spawn(io::Error),
    /// Exit 0, but the answer is unusable.
    BadOutput(String),
    /// The built-in plugin failed on the node.
    Builtin(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Exit { status, error } => {
                // Go's spelling, which Nomad's messages carry.
                match (status.code(), status.signal()) {
                    (Some(code), _) => write!(f, "exit status {code}")?,
                    (None, Some(sig)) => write!(f, "signal: {}", signal_name(sig))?,
                    (None, None) => write!(f, "{status}")?,
                }
                if let Some(e) = error {
                    write!(f, ": {e}")?;
                }
                Ok(())
            }
            Failure::TimedOut(d) => write!(
                f,
                "timed out after {}; the plugin was killed",
                crate::util::duration::format(*d)
            ),
            Failure::Cancelled => write!(f, "cancelled: the agent is shutting down"),
            Failure::Spawn(e) => write!(f, "cannot start plugin: {e}"),
            Failure::BadOutput(why) => write!(f, "invalid plugin output: {why}"),
            Failure::Builtin(why) => write!(f, "{why}"),
        }
    }
}

fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGKILL => "killed".to_string(),
        libc::SIGTERM => "terminated".to_string(),
        libc::SIGINT => "interrupt".to_string(),
        libc::SIGSEGV => "segmentation fault".to_string(),
        libc::SIGABRT => "aborted".to_string(),
        other => format!("signal {other}"),
    }
}

/// A plugin that lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plugin {
    Mkdir,
    /// An executable in the plugin directory; `path` is where it resolved (inside the directory).
    External {
        id: String,
        path: PathBuf,
    },
}

impl Plugin {
    pub fn id(&self) -> &str {
        match self {
            Plugin::Mkdir => MKDIR,
            Plugin::External { id, .. } => id,
        }
    }
}

/// What a create or delete is about: the volume and what the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRequest {
    pub volume_id: String,
    pub name: String,
    pub namespace: String,
    pub capacity_min: u64,
    pub capacity_max: u64,
    pub parameters: BTreeMap<String, String>,
}

/// A successful create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub path: String,
    pub bytes: u64,
}

/// The plugin directory and what every run needs to know about the node.
#[derive(Debug, Clone)]
pub struct Plugins {
    pub plugin_dir: PathBuf,
    pub volumes_dir: PathBuf,
    pub node_id: String,
    pub node_pool: String,
    pub timeouts: Timeouts,
}

impl Plugins {
    /// Finds plugin `id`, confined to the plugin directory.
    pub fn lookup(&self, id: &str) -> Result<Plugin, PluginError> {
        if id == MKDIR {
            return Ok(Plugin::Mkdir);
        }
        let none = || PluginError::NoSuchPlugin(id.to_string());
        if id.is_empty() || id == "." || id == ".." || id.contains('/') || id.contains('\0') {
            return Err(none());
        }
        let dir = fs::canonicalize(&self.plugin_dir).map_err(|_| none())?;
        let path = fs::canonicalize(dir.join(id)).map_err(|_| none())?;
        if !path.starts_with(&dir) || path == dir {
            return Err(none());
        }
        let meta = fs::metadata(&path).map_err(|_| none())?;
        if !meta.is_file() {
            return Err(none());
        }
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(PluginError::NotExecutable(id.to_string()));
        }
        Ok(Plugin::External {
            id: id.to_string(),
            path,
        })
    }

    /// Runs `create`. Parameters for the built-in plugin are checked before anything is made.
    pub fn create(
        &self,
        plugin: &Plugin,
        req: &VolumeRequest,
        shutdown: &Receiver<Never>,
    ) -> Result<Created, PluginError> {
        self.create_with_timeout(plugin, req, self.timeouts.create, shutdown)
    }

    /// [`Plugins::create`] with a shorter timeout (restores share an overall deadline).
    pub fn create_with_timeout(
        &self,
        plugin: &Plugin,
        req: &VolumeRequest,
        timeout: Duration,
        shutdown: &Receiver<Never>,
    ) -> Result<Created, PluginError> {
        let err = |failure| PluginError::Create {
            volume_id: req.volume_id.clone(),
            plugin: plugin.id().to_string(),
            failure,
        };
        match plugin {
            Plugin::Mkdir => {
                let params =
                    mkdir::Params::parse(&req.parameters).map_err(PluginError::MkdirParameters)?;
                let path = mkdir::create(&self.volumes_dir, &req.volume_id, &params)
                    .map_err(|e| err(Failure::Builtin(e.to_string())))?;
                Ok(Created {
                    path: path.display().to_string(),
                    bytes: 0,
                })
            }
            Plugin::External { id, path } => {
                let mut env = self.volume_env("create", req);
                env.push((
                    "DHV_CAPACITY_MIN_BYTES".into(),
                    req.capacity_min.to_string(),
                ));
                env.push((
                    "DHV_CAPACITY_MAX_BYTES".into(),
                    req.capacity_max.to_string(),
                ));
                let out = run(path, id, "create", &env, timeout, shutdown).map_err(err)?;
                parse_created(&out).map_err(err)
            }
        }
    }

    /// Checks what can be checked before a create runs (the built-in plugin's parameters).
    pub fn precheck(
        &self,
        plugin: &Plugin,
        parameters: &BTreeMap<String, String>,
    ) -> Result<(), PluginError> {
        match plugin {
            Plugin::Mkdir => mkdir::Params::parse(parameters)
                .map(|_| ())
                .map_err(PluginError::MkdirParameters),
            Plugin::External { .. } => Ok(()),
        }
    }

    /// Runs `delete` for a volume that `create` put at `created_path`.
    pub fn delete(
        &self,
        plugin: &Plugin,
        req: &VolumeRequest,
        created_path: &str,
        shutdown: &Receiver<Never>,
    ) -> Result<(), PluginError> {
        let err = |failure| PluginError::Delete {
            volume_id: req.volume_id.clone(),
            plugin: plugin.id().to_string(),
            failure,
        };
        match plugin {
            Plugin::Mkdir => mkdir::delete(&self.volumes_dir, &req.volume_id)
                .map_err(|e| err(Failure::Builtin(e.to_string()))),
            Plugin::External { id, path } => {
                let mut env = self.volume_env("delete", req);
                env.push(("DHV_CREATED_PATH".into(), created_path.to_string()));
                let out = run(path, id, "delete", &env, self.timeouts.delete, shutdown);
                out.map(|_| ()).map_err(err)
            }
        }
    }

    /// Runs `fingerprint` on one external plugin; returns its version.
    pub fn fingerprint(
        &self,
        plugin: &Plugin,
        shutdown: &Receiver<Never>,
    ) -> Result<String, PluginError> {
        let (id, path) = match plugin {
            Plugin::Mkdir => return Ok(MKDIR_VERSION.to_string()),
            Plugin::External { id, path } => (id, path),
        };
        let err = |failure| PluginError::Fingerprint {
            plugin: id.clone(),
            failure,
        };
        let env = [("DHV_OPERATION".to_string(), "fingerprint".to_string())];
        let out = run(
            path,
            id,
            "fingerprint",
            &env,
            self.timeouts.fingerprint,
            shutdown,
        )
        .map_err(err)?;
        parse_version(&out).map_err(err)
    }

    /// Fingerprints every executable in the plugin directory (at most a few at once) and answers
    /// the node attributes `plugins.host_volume.<id>.version`, the built-in `mkdir` included.
    /// Plugins that fail are logged and left out.
    pub fn fingerprint_all(&self, shutdown: &Receiver<Never>) -> BTreeMap<String, String> {
        let mut plugins = Vec::new();
        if let Ok(entries) = fs::read_dir(&self.plugin_dir) {
            for entry in entries.flatten() {
                let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                if name == MKDIR {
                    continue;
                }
                match self.lookup(&name) {
                    Ok(p) => plugins.push(p),
                    Err(PluginError::NotExecutable(_)) => {}
                    Err(e) => log::warn!("host volume plugin directory: skipping {name:?}: {e}"),
                }
            }
        }
        let versions = parallel_map(plugins, FINGERPRINT_PARALLELISM, |p| {
            let result = self.fingerprint(&p, shutdown);
            (p.id().to_string(), result)
        });
        let mut attrs = BTreeMap::new();
        attrs.insert(version_attribute(MKDIR), MKDIR_VERSION.to_string());
        for (id, result) in versions {
            match result {
                Ok(v) => {
                    attrs.insert(version_attribute(&id), v);
                }
                Err(e) => log::warn!("{e}"),
            }
        }
        attrs
    }

    fn volume_env(&self, operation: &str, req: &VolumeRequest) -> Vec<(String, String)> {
        let params = if req.parameters.is_empty() {
            "null".to_string()
        } else {
            serde_json::to_string(&req.parameters).unwrap_or_else(|_| "null".to_string())
        };
        [
            ("DHV_OPERATION", operation.to_string()),
            ("DHV_VOLUMES_DIR", self.volumes_dir.display().to_string()),
            ("DHV_PLUGIN_DIR", self.plugin_dir.display().to_string()),
            ("DHV_NODE_POOL", self.node_pool.clone()),
            ("DHV_NAMESPACE", req.namespace.clone()),
            ("DHV_VOLUME_NAME", req.name.clone()),
            ("DHV_VOLUME_ID", req.volume_id.clone()),
            ("DHV_NODE_ID", self.node_id.clone()),
            ("DHV_PARAMETERS", params),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// The node attribute that carries a plugin's version.
pub fn version_attribute(id: &str) -> String {
    format!("plugins.host_volume.{id}.version")
}

/// Runs `f` over `items` on at most `bound` scoped threads; answers in no particular order.
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
        for _ in 0..workers {
            let (rx, out_tx, f) = (rx.clone(), out_tx.clone(), &f);
            s.spawn(move || {
                for item in rx.iter() {
                    let _ = out_tx.send(f(item));
                }
            });
        }
    });
    drop(out_tx);
    out_rx.into_iter().collect()
}

/// What a plugin printed, and how it ended (exit 0 only; other endings are a [`Failure`]).
#[derive(Debug)]
pub struct Output {
    pub stdout: Vec<u8>,
    /// stdout was longer than [`OUTPUT_LIMIT`]; `stdout` holds the first part.
    pub truncated: bool,
}

/// Runs `<path> <operation>` with exactly `env`, in its own process group, for at most `timeout`;
/// a disconnect of `shutdown` kills it at once. See the module docs for the protocol.
pub fn run(
    path: &Path,
    id: &str,
    operation: &str,
    env: &[(String, String)],
    timeout: Duration,
    shutdown: &Receiver<Never>,
) -> Result<Output, Failure> {
    if matches!(
        shutdown.try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    ) {
        return Err(Failure::Cancelled);
    }
    let deadline = after(timeout);
    let started = Instant::now();
    let mut command = Command::new(path);
    command
        .arg(operation)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(path.parent().unwrap_or(Path::new("/")))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut attempts = 0;
    let mut child = loop {
        match command.spawn() {
            Ok(child) => break child,
            // ETXTBSY: the file is still open for writing somewhere (a plugin being copied in, or
            // a descriptor briefly inherited by another fork); it clears within moments.
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempts < 5 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(Failure::Spawn(e)),
        }
    };
    let pgid = child.id() as libc::pid_t;
    let kill_group = || {
        // SAFETY: kill(2) with a negative pid signals the plugin's own process group, which we
        // created with process_group(0); no memory is involved.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    };
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");

    let (out_tx, out_rx) = bounded(1);
    let (exit_tx, exit_rx) = bounded(1);
    let spawned = (|| -> io::Result<()> {
        crate::thread::spawn(format!("dhv-{id}-out"), move || {
            let _ = out_tx.send(read_capped(stdout, OUTPUT_LIMIT));
        })?;
        let log_name = format!("host volume plugin {id:?} {operation}");
        crate::thread::spawn(format!("dhv-{id}-err"), move || {
            log_stderr(stderr, &log_name)
        })?;
        crate::thread::spawn(format!("dhv-{id}-wait"), move || {
            let _ = exit_tx.send(child.wait());
        })?;
        Ok(())
    })();
    if let Err(e) = spawned {
        kill_group();
        return Err(Failure::Spawn(e));
    }
    // Kill, then reap: the waiter ends once the plugin is dead. Bounded so a process stuck in the
    // kernel cannot wedge the caller.
    let kill_and_reap = |failure: Failure| {
        kill_group();
        let _ = exit_rx.recv_timeout(Duration::from_secs(10));
        Err(failure)
    };
    let status = select! {
        recv(exit_rx) -> r => match r {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => return kill_and_reap(Failure::Spawn(e)),
            Err(_) => return kill_and_reap(Failure::Spawn(io::Error::other("waiter thread died"))),
        },
        recv(shutdown) -> _ => return kill_and_reap(Failure::Cancelled),
        recv(deadline) -> _ => return kill_and_reap(Failure::TimedOut(timeout)),
    };
    if !status.success() {
        // The run failed: nothing it started is wanted, and a child holding stdout must not keep
        // the caller waiting until the deadline for an answer that is already decided.
        kill_group();
    }
    let (stdout, truncated) = select! {
        recv(out_rx) -> r => r.unwrap_or_default(),
        recv(shutdown) -> _ => {
            kill_group();
            return Err(Failure::Cancelled);
        }
        recv(deadline) -> _ => {
            // The plugin exited but something it started still holds stdout.
            kill_group();
            return Err(Failure::TimedOut(timeout));
        }
    };
    log::debug!(
        "host volume plugin {id:?} {operation} ended with {status} after {:?}",
        started.elapsed()
    );
    if !status.success() {
        return Err(Failure::Exit {
            status,
            error: plugin_error(&stdout),
        });
    }
    Ok(Output { stdout, truncated })
}

/// Reads everything, keeping the first `cap` bytes: a plugin that prints without end cannot make
/// the agent buffer without end.
fn read_capped(mut r: impl Read, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                let room = cap - kept.len();
                if n > room {
                    truncated = true;
                }
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    (kept, truncated)
}

fn log_stderr(stderr: impl Read, name: &str) {
    let mut reader = BufReader::new(stderr);
    let mut logged = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        // Lines are bounded by what is left of the budget; the rest is discarded below.
        let budget = (STDERR_LIMIT - logged) as u64;
        match (&mut reader).take(budget).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                logged += n;
                let text = String::from_utf8_lossy(&line);
                log::info!("{name}: {}", text.trim_end());
                if logged >= STDERR_LIMIT {
                    log::info!("{name}: further stderr is discarded");
                    let _ = io::copy(&mut reader, &mut io::sink());
                    break;
                }
            }
        }
    }
}

/// The `{"error": "..."}` a failing plugin may print.
fn plugin_error(stdout: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct ErrorAnswer {
        error: String,
    }
    serde_json::from_slice::<ErrorAnswer>(stdout)
        .ok()
        .map(|a| a.error)
}

fn parse_created(out: &Output) -> Result<Created, Failure> {
    #[derive(Deserialize)]
    struct CreateAnswer {
        path: Option<String>,
        #[serde(default)]
        bytes: u64,
    }
    if out.truncated {
        return Err(Failure::BadOutput(format!(
            "stdout is longer than {OUTPUT_LIMIT} bytes"
        )));
    }
    let answer: CreateAnswer = serde_json::from_slice(&out.stdout).map_err(|e| {
        Failure::BadOutput(format!(
            "expected JSON like {{\"path\": \"/abs/path\", \"bytes\": 0}}: {e}; stdout was {:?}",
            excerpt(&out.stdout)
        ))
    })?;
    match answer.path {
        None => Err(Failure::BadOutput("no \"path\" in the answer".to_string())),
        Some(p) if p.is_empty() => Err(Failure::BadOutput("\"path\" is empty".to_string())),
        Some(p) if !p.starts_with('/') => Err(Failure::BadOutput(format!(
            "\"path\" {p:?} is not an absolute path"
        ))),
        Some(path) => Ok(Created {
            path,
            bytes: answer.bytes,
        }),
    }
}

fn parse_version(out: &Output) -> Result<String, Failure> {
    #[derive(Deserialize)]
    struct FingerprintAnswer {
        version: Option<String>,
    }
    if out.truncated {
        return Err(Failure::BadOutput(format!(
            "stdout is longer than {OUTPUT_LIMIT} bytes"
        )));
    }
    let answer: FingerprintAnswer = serde_json::from_slice(&out.stdout).map_err(|e| {
        Failure::BadOutput(format!(
            "expected JSON like {{\"version\": \"0.0.1\"}}: {e}; stdout was {:?}",
            excerpt(&out.stdout)
        ))
    })?;
    match answer.version {
        Some(v) if !v.trim().is_empty() => Ok(v),
        _ => Err(Failure::BadOutput(
            "no \"version\" in the answer".to_string(),
        )),
    }
}

fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]);
    text.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::mkdir::testing::{tempdir, Cleanup};

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn plugins(timeout: Duration) -> Plugins {
        let root = tempdir("plugin");
        let plugin_dir = root.join("plugins");
        fs::create_dir_all(&plugin_dir).unwrap();
        Plugins {
            plugin_dir,
            volumes_dir: root.join("volumes"),
            node_id: "node-1".to_string(),
            node_pool: "default".to_string(),
            timeouts: Timeouts {
                fingerprint: timeout,
                create: timeout,
                delete: timeout,
            },
        }
    }

    fn req() -> VolumeRequest {
        VolumeRequest {
            volume_id: "vol-1".to_string(),
            name: "data".to_string(),
            namespace: "default".to_string(),
            capacity_min: 10,
            capacity_max: 20,
            parameters: BTreeMap::new(),
        }
    }

    #[test]
    fn lookup_is_confined() {
        let p = plugins(Duration::from_secs(5));
        let _clean = Cleanup(p.plugin_dir.parent().unwrap().to_path_buf());
        script(&p.plugin_dir, "ok", "echo");
        let outside = tempdir("outside");
        let _clean_outside = Cleanup(outside.clone());
        script(&outside, "evil", "echo");
        std::os::unix::fs::symlink(outside.join("evil"), p.plugin_dir.join("link")).unwrap();
        std::os::unix::fs::symlink(p.plugin_dir.join("ok"), p.plugin_dir.join("inside")).unwrap();
        fs::write(p.plugin_dir.join("plain"), "x").unwrap();
        fs::create_dir(p.plugin_dir.join("sub")).unwrap();
        assert_eq!(p.lookup("mkdir").unwrap(), Plugin::Mkdir);
        assert!(matches!(p.lookup("ok").unwrap(), Plugin::External { .. }));
        assert!(matches!(
            p.lookup("inside").unwrap(),
            Plugin::External { .. }
        ));
        for bad in [
            "../x",
            "/bin/sh",
            "..",
            ".",
            "",
            "link",
            "sub",
            "missing",
            "sub/../ok",
        ] {
            let err = p.lookup(bad).unwrap_err();
            assert_eq!(err.to_string(), format!("no such plugin: {bad:?}"));
        }
        assert_eq!(
            p.lookup("plain").unwrap_err().to_string(),
            "plugin not executable: \"plain\""
        );
    }

    #[test]
    fn exit_status_and_error_messages() {
        let p = plugins(Duration::from_secs(10));
        let _clean = Cleanup(p.plugin_dir.parent().unwrap().to_path_buf());
        let (_tx, shutdown) = bounded::<Never>(0);
        script(
            &p.plugin_dir,
            "fails",
            "echo '{\"error\": \"disk full\"}'; exit 1",
        );
        script(&p.plugin_dir, "mute", "echo oops; exit 1");
        let fails = p.lookup("fails").unwrap();
        let err = p.create(&fails, &req(), &shutdown).unwrap_err();
        assert_eq!(
            err.to_string(),
            "error creating volume \"vol-1\" with plugin \"fails\": exit status 1: disk full"
        );
        let err = p.delete(&fails, &req(), "/x", &shutdown).unwrap_err();
        assert_eq!(
            err.to_string(),
            "error deleting volume \"vol-1\" with plugin \"fails\": exit status 1: disk full"
        );
        let mute = p.lookup("mute").unwrap();
        let err = p.create(&mute, &req(), &shutdown).unwrap_err();
        assert_eq!(
            err.to_string(),
            "error creating volume \"vol-1\" with plugin \"mute\": exit status 1"
        );
        let err = p.fingerprint(&mute, &shutdown).unwrap_err();
        assert_eq!(
            err.to_string(),
            "error fingerprinting plugin \"mute\": exit status 1"
        );
    }

    #[test]
    fn bad_answers_say_what_was_wrong() {
        let p = plugins(Duration::from_secs(10));
        let _clean = Cleanup(p.plugin_dir.parent().unwrap().to_path_buf());
        let (_tx, shutdown) = bounded::<Never>(0);
        let cases = [
            ("garbage", "echo hello", "expected JSON"),
            ("nopath", "echo '{\"bytes\": 1}'", "no \"path\""),
            ("empty", "echo '{\"path\": \"\"}'", "\"path\" is empty"),
            (
                "rel",
                "echo '{\"path\": \"rel\"}'",
                "is not an absolute path",
            ),
        ];
        for (name, body, want) in cases {
            script(&p.plugin_dir, name, body);
            let plugin = p.lookup(name).unwrap();
            let err = p
                .create(&plugin, &req(), &shutdown)
                .unwrap_err()
                .to_string();
            let prefix = format!(
                "error creating volume \"vol-1\" with plugin \"{name}\": invalid plugin output: "
            );
            assert!(err.starts_with(&prefix), "{err}");
            assert!(err.contains(want), "{err}");
        }
        script(
            &p.plugin_dir,
            "good",
            "echo '{\"path\": \"/srv/v\", \"bytes\": 5}'",
        );
        let good = p.lookup("good").unwrap();
        assert_eq!(
            p.create(&good, &req(), &shutdown).unwrap(),
            Created {
                path: "/srv/v".to_string(),
                bytes: 5
            }
        );
    }

    #[test]
    fn fingerprint_all_lists_versions() {
        let p = plugins(Duration::from_secs(10));
        let _clean = Cleanup(p.plugin_dir.parent().unwrap().to_path_buf());
        let (_tx, shutdown) = bounded::<Never>(0);
        script(&p.plugin_dir, "a", "echo '{\"version\": \"1.2.3\"}'");
        script(&p.plugin_dir, "b", "exit 1");
        script(&p.plugin_dir, "mkdir", "echo '{\"version\": \"9.9.9\"}'");
        fs::write(p.plugin_dir.join("notes.txt"), "x").unwrap();
        let attrs = p.fingerprint_all(&shutdown);
        let want: BTreeMap<String, String> = [
            ("plugins.host_volume.a.version", "1.2.3"),
            ("plugins.host_volume.mkdir.version", "0.0.1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(attrs, want);
    }

    #[test]
    fn read_capped_keeps_the_head() {
        let data = vec![b'y'; OUTPUT_LIMIT * 3 + 17];
        let (kept, truncated) = read_capped(&data[..], OUTPUT_LIMIT);
        assert_eq!(kept.len(), OUTPUT_LIMIT);
        assert!(truncated);
        let (kept, truncated) = read_capped(&b"abc"[..], OUTPUT_LIMIT);
        assert_eq!((kept.as_slice(), truncated), (&b"abc"[..], false));
    }
}
