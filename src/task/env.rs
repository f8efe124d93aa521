//! A task's environment and start specification: the agent's environment, then `NOMAD_*`, then
//! the task's `env`, with `${...}` interpolated in the command, arguments and `env` values.

use std::collections::BTreeMap;

use crate::driver::StartSpec;
use crate::jobspec::interpolate::interpolate;
use crate::task::hooks::TaskContext;

/// The agent's environment, then `NOMAD_*`, then the task's `env` (task wins), interpolated.
pub fn base_env(
    ctx: &TaskContext,
    agent_env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = agent_env.clone();
    let nomad = [
        ("NOMAD_ALLOC_ID", ctx.alloc_id.clone()),
        ("NOMAD_ALLOC_DIR", ctx.shared_dir().display().to_string()),
        ("NOMAD_TASK_DIR", ctx.local_dir().display().to_string()),
        ("NOMAD_SECRETS_DIR", ctx.secrets_dir().display().to_string()),
        ("NOMAD_TASK_NAME", ctx.task.name.clone()),
        ("NOMAD_GROUP_NAME", ctx.group.clone()),
        ("NOMAD_JOB_NAME", ctx.job.name.clone()),
        ("NOMAD_JOB_ID", ctx.job.id.clone()),
        ("NOMAD_NODE_ID", ctx.node_id.clone()),
        ("NOMAD_NODE_NAME", ctx.node_name.clone()),
    ];
    for (k, v) in nomad {
        env.insert(k.to_string(), v);
    }
    for (k, v) in &ctx.task.env {
        env.insert(k.clone(), v.clone());
    }
    env
}

/// Interpolates `${...}` in command, args and env values from the final environment.
pub fn start_spec(
    ctx: &TaskContext,
    mut env: BTreeMap<String, String>,
    agent_env: &BTreeMap<String, String>,
) -> StartSpec {
    let lookup_in = |env: &BTreeMap<String, String>, name: &str| -> Option<String> {
        match name {
            "node.unique.id" => Some(ctx.node_id.clone()),
            "node.unique.name" => Some(ctx.node_name.clone()),
            _ => name
                .strip_prefix("env.")
                .and_then(|v| agent_env.get(v).cloned())
                .or_else(|| env.get(name).cloned()),
        }
    };
    let snapshot = env.clone();
    for (k, v) in env.iter_mut() {
        if ctx.task.env.contains_key(k) {
            *v = interpolate(v, &|n| lookup_in(&snapshot, n));
        }
    }
    let lookup = |n: &str| lookup_in(&env, n);
    let task = &ctx.task;
    let command = interpolate(&task.config.command, &lookup);
    let args = task
        .config
        .args
        .iter()
        .map(|a| interpolate(a, &lookup))
        .collect();
    StartSpec {
        command,
        args,
        cwd: ctx.task_dir.clone(),
        user: task.user.clone(),
        log_dir: ctx.log_dir(),
        alloc_id: ctx.alloc_id.clone(),
        task_name: task.name.clone(),
        logs: task.log_config,
        env,
    }
}
