//! The agent configuration's `plugin "<driver>" { config { ... } }` blocks, as Nomad writes them
//! (docs/configuration.md "Task drivers"). `plugin "docker"` configures the docker driver;
//! `plugin "raw_exec" { config { enabled = true } }`, which every Nomad client configuration
//! carries, is accepted as it is (raw_exec is always on in nodeward). Nomad docker keys that have
//! no effect on nodeward (`gc`, `extra_labels`, ...) are accepted and named in a warning, so an
//! operator's configuration works unchanged; an unknown key is an error naming it.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

use super::ConfigError;
pub use crate::driver::docker::settings::{
    DockerSettings, DEFAULT_ALLOW_CAPS, DEFAULT_DOCKER_ENDPOINT,
};

/// One `plugin "<name>"` block.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlugin {
    config: Option<Value>,
    /// Nomad's external plugins take `args`; nodeward's drivers are built in.
    args: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDocker {
    endpoint: Option<String>,
    allow_privileged: Option<bool>,
    allow_caps: Option<Vec<String>>,
    volumes: Option<RawDockerVolumes>,
    // Nomad's keys with no effect here (warned about): nodeward collects the logs, removes the
    // containers it ran, labels them with Nomad's labels, and has no pause containers.
    auth: Option<Value>,
    tls: Option<Value>,
    gc: Option<Value>,
    extra_labels: Option<Value>,
    logging: Option<Value>,
    pull_activity_timeout: Option<Value>,
    infra_image: Option<Value>,
    infra_image_pull_timeout: Option<Value>,
    allow_runtimes: Option<Value>,
    disable_log_collection: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDockerVolumes {
    enabled: Option<bool>,
    selinuxlabel: Option<Value>,
}

/// An HCL block that may be written once or, in some files, as a list of one.
fn one(v: Value) -> Value {
    match v {
        Value::Array(mut items) if items.len() == 1 => items.remove(0),
        other => other,
    }
}

/// The docker settings and the warnings about keys that have no effect.
pub(super) fn validate(
    plugins: BTreeMap<String, RawPlugin>,
) -> Result<(DockerSettings, Vec<String>), ConfigError> {
    let mut docker = DockerSettings::default();
    let mut warnings = Vec::new();
    for (name, plugin) in plugins {
        if plugin.args.is_some() {
            warnings.push(format!(
                "plugin {name:?}: args has no effect, nodeward's drivers are built in"
            ));
        }
        let config = plugin.config.map(one).unwrap_or(Value::Null);
        match name.as_str() {
            "raw_exec" => {
                // `enabled = true` is how Nomad turns raw_exec on; it is always on here.
                let ok = match &config {
                    Value::Null => true,
                    Value::Object(o) => o.keys().all(|k| k == "enabled" || k == "no_cgroups"),
                    _ => false,
                };
                if !ok {
                    return Err(ConfigError::Invalid(format!(
                        "plugin \"raw_exec\": config may only hold enabled and no_cgroups, got {config}"
                    )));
                }
            }
            "exec" => {
                // Nomad's exec plugin keys; nodeward keeps Nomad's defaults for them.
                if let Value::Object(o) = &config {
                    for key in o.keys() {
                        warnings.push(format!("plugin \"exec\" config: {key} has no effect"));
                    }
                }
            }
            "docker" => {
                let raw: RawDocker = if config.is_null() {
                    RawDocker::default()
                } else {
                    serde_json::from_value(config).map_err(|e| {
                        ConfigError::Invalid(format!("plugin \"docker\" config: {e}"))
                    })?
                };
                docker = docker_settings(raw, &mut warnings)?;
            }
            other => {
                return Err(ConfigError::Invalid(format!(
                "plugin {other:?}: nodeward has no such driver (it has raw_exec, exec and docker)"
            )))
            }
        }
    }
    Ok((docker, warnings))
}

fn docker_settings(
    raw: RawDocker,
    warnings: &mut Vec<String>,
) -> Result<DockerSettings, ConfigError> {
    let mut s = DockerSettings::default();
    if let Some(endpoint) = raw.endpoint {
        if !endpoint.starts_with("unix:///") {
            return Err(ConfigError::Invalid(format!(
                "plugin \"docker\" config: endpoint must be unix:///<path of the engine's socket>, got {endpoint:?}"
            )));
        }
        s.endpoint = endpoint;
    }
    s.allow_privileged = raw.allow_privileged.unwrap_or(false);
    if let Some(caps) = raw.allow_caps {
        s.allow_caps = caps
            .iter()
            .map(|c| {
                let c = c.to_ascii_lowercase();
                c.strip_prefix("cap_").unwrap_or(&c).to_string()
            })
            .collect();
    }
    if let Some(v) = raw.volumes {
        s.volumes_enabled = v.enabled.unwrap_or(false);
        if v.selinuxlabel.is_some() {
            warnings.push("plugin \"docker\" config: volumes.selinuxlabel has no effect".into());
        }
    }
    let ignored = [
        ("auth", raw.auth.is_some()),
        ("tls", raw.tls.is_some()),
        ("gc", raw.gc.is_some()),
        ("extra_labels", raw.extra_labels.is_some()),
        ("logging", raw.logging.is_some()),
        ("pull_activity_timeout", raw.pull_activity_timeout.is_some()),
        ("infra_image", raw.infra_image.is_some()),
        (
            "infra_image_pull_timeout",
            raw.infra_image_pull_timeout.is_some(),
        ),
        ("allow_runtimes", raw.allow_runtimes.is_some()),
        (
            "disable_log_collection",
            raw.disable_log_collection.is_some(),
        ),
    ];
    for (key, set) in ignored {
        if set {
            warnings.push(format!(
                "plugin \"docker\" config: {key} has no effect on nodeward and was ignored"
            ));
        }
    }
    Ok(s)
}
