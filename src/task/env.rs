//! A task's environment and start specification (docs/security.md, "What a task gets from the
//! agent"): a clean base, then `NOMAD_*`, then the task's `env` (task wins), with `${...}`
//! interpolated in the command, arguments and `env` values.
//!
//! The base is not the agent's environment: the agent runs with what its service unit exports,
//! `NODEWARD_TOKEN` for its CLI, `NOTIFY_SOCKET` and other secrets, and a task (any job's, a CSI
//! plugin's) must see none of it. It gets only the variables that `client {
//! task_env_passthrough }` lets through ([`DEFAULT_PASSTHROUGH`] when unset), and never those of
//! [`NEVER_PASSED`], listed or not. `${env.X}` in a jobspec reads the same passed-through
//! variables, so a job cannot copy a secret of the agent into its task either.

use std::collections::BTreeMap;
use std::ffi::OsString;

use crate::driver::{Bind, ContainerSpec, StartSpec};
use crate::jobspec::interpolate::interpolate;
use crate::task::hooks::TaskContext;

/// What tasks get of the agent's environment when `task_env_passthrough` is not set: the search
/// path, the locale and the time zone, which a program expects and which say nothing secret.
pub const DEFAULT_PASSTHROUGH: &[&str] = &["PATH", "LANG", "LC_*", "TZ"];

/// Variables of the agent that no task ever gets, even when `task_env_passthrough` lists them or
/// a pattern covers them, and why.
pub const NEVER_PASSED: &[(&str, &str)] = &[
    ("NODEWARD_TOKEN", "it is the agent's API token"),
    (
        "NOTIFY_SOCKET",
        "it is the agent's systemd notification socket",
    ),
    ("LISTEN_FDS", "it belongs to the agent's socket activation"),
    ("LISTEN_PID", "it belongs to the agent's socket activation"),
    (
        "LISTEN_FDNAMES",
        "it belongs to the agent's socket activation",
    ),
    (
        "WATCHDOG_USEC",
        "it belongs to the agent's systemd watchdog",
    ),
    ("WATCHDOG_PID", "it belongs to the agent's systemd watchdog"),
    (
        "CREDENTIALS_DIRECTORY",
        "it holds the agent's systemd credentials",
    ),
];

/// Checks one entry of `task_env_passthrough`: a variable name (`[A-Za-z_][A-Za-z0-9_]*`), or
/// a name prefix followed by `*` (`LC_*`; `*` alone is everything but [`NEVER_PASSED`]). A name
/// of [`NEVER_PASSED`] is refused: listing it would say it is passed, and it never is.
pub fn check_passthrough(entry: &str) -> Result<(), String> {
    let name = entry.strip_suffix('*').unwrap_or(entry);
    let valid = name
        .chars()
        .enumerate()
        .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
    if !valid || (name.is_empty() && entry.is_empty()) {
        return Err(format!(
            "{entry:?} is not a variable name or a name prefix followed by \"*\""
        ));
    }
    if let Some((_, why)) = NEVER_PASSED.iter().find(|(n, _)| *n == entry) {
        return Err(format!("{entry} is never passed to tasks: {why}"));
    }
    Ok(())
}

/// The variables of the agent's environment a task gets: those `patterns` match (checked by
/// [`check_passthrough`]), minus [`NEVER_PASSED`]. A variable whose name or value is not UTF-8
/// is left out.
pub fn passthrough(
    agent_env: impl IntoIterator<Item = (OsString, OsString)>,
    patterns: &[String],
) -> BTreeMap<String, String> {
    let matches = |name: &str| {
        patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == p,
        })
    };
    agent_env
        .into_iter()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| matches(k) && !NEVER_PASSED.iter().any(|(n, _)| n == k))
        .collect()
}

/// The passed-through variables, then `NOMAD_*`, then the task's `env` (task wins).
pub fn base_env(ctx: &TaskContext, passed: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    // A container has its image's PATH and locale, not the host's; its directories are where
    // the docker driver binds them (docker.md), as Nomad sets them.
    // An exec task sees its directories where a container does (Nomad's paths).
    let container = ctx.task.driver == crate::jobspec::docker::NAME
        || ctx.task.driver == crate::driver::exec::NAME;
    let mut env = if container {
        BTreeMap::new()
    } else {
        passed.clone()
    };
    let dir = |host: std::path::PathBuf, inside: &str| {
        if container {
            inside.to_string()
        } else {
            host.display().to_string()
        }
    };
    let nomad = [
        ("NOMAD_ALLOC_ID", ctx.alloc_id.clone()),
        (
            "NOMAD_ALLOC_DIR",
            dir(ctx.shared_dir(), CONTAINER_ALLOC_DIR),
        ),
        ("NOMAD_TASK_DIR", dir(ctx.local_dir(), CONTAINER_TASK_DIR)),
        (
            "NOMAD_SECRETS_DIR",
            dir(ctx.secrets_dir(), CONTAINER_SECRETS_DIR),
        ),
        ("NOMAD_TASK_NAME", ctx.task.name.clone()),
        ("NOMAD_GROUP_NAME", ctx.group.clone()),
        ("NOMAD_JOB_NAME", ctx.job.name.clone()),
        ("NOMAD_JOB_ID", ctx.job.id.clone()),
        ("NOMAD_NODE_ID", ctx.node_id.clone()),
        ("NOMAD_NODE_NAME", ctx.node_name.clone()),
        // Nomad's taskenv sets these too; real jobspecs name their files and peers by them.
        ("NOMAD_ALLOC_INDEX", ctx.alloc_index.to_string()),
        ("NOMAD_ALLOC_NAME", ctx.alloc_name.clone()),
        (
            "NOMAD_SHORT_ALLOC_ID",
            crate::util::short_id(&ctx.alloc_id).to_string(),
        ),
        ("NOMAD_NAMESPACE", ctx.job.fields.namespace.clone()),
        ("NOMAD_REGION", ctx.job.fields.region.clone()),
        ("NOMAD_DC", ctx.node.datacenter.clone()),
    ];
    for (k, v) in nomad {
        env.insert(k.to_string(), v);
    }
    // A periodic launch or a dispatch knows its parent, as in Nomad (set only for children).
    if !ctx.job.parent_id.is_empty() {
        env.insert("NOMAD_JOB_PARENT_ID".into(), ctx.job.parent_id.clone());
    }
    // The limits the task's cgroup enforces (Nomad's taskenv: the max only when set).
    let r = &ctx.task.resources;
    env.insert("NOMAD_MEMORY_LIMIT".into(), r.memory_mb.to_string());
    if r.memory_max_mb > 0 {
        env.insert("NOMAD_MEMORY_MAX_LIMIT".into(), r.memory_max_mb.to_string());
    }
    env.insert("NOMAD_CPU_LIMIT".into(), r.cpu.to_string());
    // The CPUs of its `cores`, in Nomad's cpuset form (`0-1`, `0,2`); only when it holds some.
    if !ctx.cores.is_empty() {
        let cores = crate::resources::format_cpuset(&ctx.cores);
        env.insert("NOMAD_CPU_CORES".into(), cores);
    }
    // `NOMAD_PORT_<label>` and the rest of the family (jobspec::network::port_env).
    env.extend(crate::jobspec::network::port_env(&ctx.ports));
    let meta = crate::jobspec::meta::merged(&ctx.job, &ctx.group, &ctx.task);
    env.extend(crate::jobspec::meta::env(&meta));
    for (k, v) in &ctx.task.env {
        env.insert(k.clone(), v.clone());
    }
    env
}

/// The region `${node.region}` names: a node agent belongs to no other, and Nomad's default
/// region is `global`.
pub const REGION: &str = "global";

/// What `${name}` stands for in a task's jobspec, as Nomad's client fills it in when the task
/// starts: `node.unique.id`, `node.unique.name`, `node.datacenter`, `node.region`, `node.class`,
/// `node.pool`, `attr.<name>` (the node's attributes, as constraints see them), `meta.k` (the
/// merged meta value, held as `NOMAD_META_k`, else the agent's `client { meta }`), `env.X` from
/// `passed` (the agent's variables tasks get), else the variable `name` of `env`. `None`: it
/// stays as written (an attribute this node does not have, as in Nomad).
fn resolve_name(
    ctx: &TaskContext,
    env: &BTreeMap<String, String>,
    passed: &BTreeMap<String, String>,
    name: &str,
) -> Option<String> {
    let node = &ctx.node;
    match name {
        "node.unique.id" => Some(ctx.node_id.clone()),
        "node.unique.name" => Some(ctx.node_name.clone()),
        "node.datacenter" => Some(node.datacenter.clone()),
        "node.region" => Some(REGION.to_string()),
        "node.class" => Some(node.node_class.clone()),
        "node.pool" => Some(node.node_pool.clone()),
        _ if name.starts_with("attr.") => node.attributes.get(&name[5..]).cloned(),
        _ if name.starts_with("meta.") => env
            .get(&crate::jobspec::meta::env_name(&name[5..]))
            .or_else(|| node.meta.get(&name[5..]))
            .cloned(),
        _ => name
            .strip_prefix("env.")
            .and_then(|v| passed.get(v).cloned())
            .or_else(|| env.get(name).cloned()),
    }
}

/// Interpolates `${...}` in the values of the task's own `env` entries, each from `env` as it
/// was before any of them was interpolated.
fn interpolate_env_values(
    ctx: &TaskContext,
    env: &mut BTreeMap<String, String>,
    passed: &BTreeMap<String, String>,
) {
    let snapshot = env.clone();
    for (k, v) in env.iter_mut() {
        if ctx.task.env.contains_key(k) {
            *v = interpolate(v, &|n| resolve_name(ctx, &snapshot, passed, n));
        }
    }
}

/// `input` with `${...}` interpolated from the environment the task starts with ([`base_env`],
/// its `env` values interpolated), as its command is: for a docker or exec task the directories
/// are where it sees them (`NOMAD_ALLOC_DIR` is `/alloc`), for raw_exec their host paths. A
/// volume_mount's destination is interpolated with it (Nomad's volume hook does the same).
pub fn interpolate_for_task(
    ctx: &TaskContext,
    passed: &BTreeMap<String, String>,
    input: &str,
) -> String {
    if !input.contains("${") {
        return input.to_string();
    }
    let mut env = base_env(ctx, passed);
    interpolate_env_values(ctx, &mut env, passed);
    interpolate(input, &|n| resolve_name(ctx, &env, passed, n))
}

/// Interpolates `${...}` in command, args and env values from the final environment; `env.X`
/// reads `passed`, the agent's variables that tasks get.
pub fn start_spec(
    ctx: &TaskContext,
    mut env: BTreeMap<String, String>,
    passed: &BTreeMap<String, String>,
) -> StartSpec {
    interpolate_env_values(ctx, &mut env, passed);
    let lookup = |n: &str| resolve_name(ctx, &env, passed, n);
    let task = &ctx.task;
    let command = interpolate(&task.config.command, &lookup);
    let args = task
        .config
        .args
        .iter()
        .map(|a| interpolate(a, &lookup))
        .collect();
    let container =
        (task.driver == crate::jobspec::docker::NAME).then(|| container_spec(ctx, &lookup));
    StartSpec {
        command,
        args,
        cwd: ctx.task_dir.clone(),
        user: task.user.clone(),
        log_dir: ctx.log_dir(),
        alloc_id: ctx.alloc_id.clone(),
        task_name: task.name.clone(),
        logs: task.log_config,
        oom_score_adj: task.config.oom_score_adj,
        resources: task.resources.clone(),
        cores: ctx.cores.clone(),
        env,
        container,
        binds: Vec::new(),
        cap_add: task.config.docker.cap_add.clone(),
        cap_drop: task.config.docker.cap_drop.clone(),
        progress: None,
        cancel: None,
    }
}

/// Where a container sees the allocation's shared directory, its task's `local` and `secrets`.
pub const CONTAINER_ALLOC_DIR: &str = "/alloc";
pub const CONTAINER_TASK_DIR: &str = "/local";
pub const CONTAINER_SECRETS_DIR: &str = "/secrets";

/// A docker task's container settings: its config and the host directories bound into it.
fn container_spec(ctx: &TaskContext, lookup: &dyn Fn(&str) -> Option<String>) -> ContainerSpec {
    let bind = |host, container: &str| Bind {
        host,
        container: container.to_string(),
        read_only: false,
    };
    let mut binds = vec![
        bind(ctx.shared_dir(), CONTAINER_ALLOC_DIR),
        bind(ctx.local_dir(), CONTAINER_TASK_DIR),
        bind(ctx.secrets_dir(), CONTAINER_SECRETS_DIR),
    ];
    if let Some(csi) = &ctx.task.csi_plugin {
        // The plugin creates its socket in mount_dir; the agent probes the host side (csi.md).
        let data_dir = std::path::absolute(&ctx.data_dir).unwrap_or_else(|_| ctx.data_dir.clone());
        binds.push(bind(
            crate::util::allocdir::csi_socket_dir(&data_dir, &ctx.alloc_id),
            &csi.mount_dir,
        ));
    }
    // The ports the config's `ports` names; the jobspec checked that the group has them.
    let ports = ctx
        .task
        .config
        .docker
        .ports
        .iter()
        .filter_map(|label| ctx.ports.iter().find(|p| p.label == *label).cloned())
        .collect();
    ContainerSpec {
        config: ctx
            .task
            .config
            .docker
            .interpolated(&|text| interpolate(text, lookup)),
        ports,
        job_name: ctx.job.name.clone(),
        task_dir: ctx.task_dir.clone(),
        binds,
        memory_mb: ctx.task.resources.memory_mb,
        memory_max_mb: ctx.task.resources.memory_max_mb,
        cpu: ctx.task.resources.cpu,
        cores: ctx.cores.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        vars.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    fn patterns(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_listed_variables_pass_and_never_the_agents_own() {
        let agent = env(&[
            ("PATH", "/usr/bin:/bin"),
            ("LANG", "C.UTF-8"),
            ("LC_TIME", "en_GB.UTF-8"),
            ("HOME", "/root"),
            ("NODEWARD_TOKEN", "secret"),
            ("NOTIFY_SOCKET", "/run/systemd/notify"),
            ("DB_PASSWORD", "hunter2"),
        ]);
        let defaults = patterns(DEFAULT_PASSTHROUGH);
        let passed = passthrough(agent.clone(), &defaults);
        assert_eq!(
            passed.keys().collect::<Vec<_>>(),
            ["LANG", "LC_TIME", "PATH"]
        );
        let everything = passthrough(agent.clone(), &patterns(&["*"]));
        assert_eq!(
            everything.keys().collect::<Vec<_>>(),
            ["DB_PASSWORD", "HOME", "LANG", "LC_TIME", "PATH"]
        );
        assert!(passthrough(agent, &[]).is_empty());
    }

    #[test]
    fn passthrough_entries_are_names_or_prefixes() {
        for ok in ["PATH", "LC_*", "*", "_X1", "MY_APP_*"] {
            assert_eq!(check_passthrough(ok), Ok(()), "{ok}");
        }
        for bad in ["", "1X", "A-B", "LC_*_X", "A B", "**"] {
            let err = check_passthrough(bad).unwrap_err();
            assert!(err.contains("is not a variable name"), "{bad}: {err}");
        }
        assert_eq!(
            check_passthrough("NODEWARD_TOKEN").unwrap_err(),
            "NODEWARD_TOKEN is never passed to tasks: it is the agent's API token"
        );
        assert!(check_passthrough("NOTIFY_SOCKET").is_err());
    }
}
