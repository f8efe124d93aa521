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
//! - this file: lookup and the operations (`create`, `delete`, `fingerprint`) on a [`Plugin`];
//! - [`exec`]: one run of an external plugin, with its protocol (process group, output caps,
//!   timeout, cancellation);
//! - [`answer`]: reading the JSON a plugin prints;
//! - [`error`]: [`PluginError`] and [`Failure`], in the spec's words;

mod answer;
mod error;
mod exec;

use crossbeam_channel::Receiver;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use super::mkdir;
use crate::thread::Never;
use answer::{parse_created, parse_version};
pub use error::{Failure, PluginError};
pub use exec::{run, Output};

/// stdout beyond this is read and discarded.
pub const OUTPUT_LIMIT: usize = 1 << 20;
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
                env.insert(
                    "DHV_CAPACITY_MIN_BYTES".into(),
                    req.capacity_min.to_string(),
                );
                env.insert(
                    "DHV_CAPACITY_MAX_BYTES".into(),
                    req.capacity_max.to_string(),
                );
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
                env.insert("DHV_CREATED_PATH".into(), created_path.to_string());
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
        let env = BTreeMap::from([("DHV_OPERATION".to_string(), "fingerprint".to_string())]);
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
        let versions = crate::thread::parallel_map(plugins, FINGERPRINT_PARALLELISM, |p| {
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

    fn volume_env(&self, operation: &str, req: &VolumeRequest) -> BTreeMap<String, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::mkdir::testing::{tempdir, Cleanup};
    use crossbeam_channel::bounded;
    use std::path::Path;

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
}
