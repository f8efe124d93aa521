//! The rules a job must satisfy before nodeward accepts it.
//!
//! The raw job's conversion (`raw`), the one way from either parser to a [`Job`], ends
//! with [`validate_job`], so a [`Job`] that left a parser is valid. The readers of names the input
//! spells as strings (a job type, a restart mode, a CSI plugin type, a signal name) are here too:
//! [`job_type`], [`restart_mode`], [`csi_plugin_type`], [`kill_signal`], so both parsers give the
//! same messages.
//!
//! Names become path components (`<alloc dir>/<task>/`, state file keys), hence the strict
//! [`validate_name`].

use std::path::{Component, Path};
use std::time::Duration;

use super::invalid;
use super::{
    CsiPluginConfig, CsiPluginType, Job, JobType, JobspecError, RestartMode, RestartPolicy, Signal,
    Task, TaskGroup, MAX_GROUP_COUNT,
};
use crate::util::duration::format;

/// The shortest restart interval accepted (tasks.md).
pub const MIN_RESTART_INTERVAL: Duration = Duration::from_secs(5);

/// The longest name accepted for a job, group, task or volume.
pub const MAX_NAME_LEN: usize = 128;

/// Checks every rule of tasks.md, csi.md and host-volumes.md on a job; the first broken one is
/// the error.
pub fn validate_job(job: &Job) -> Result<(), JobspecError> {
    validate_name("job", &job.name)?;
    validate_name("job ID", &job.id)?;
    if !super::fields::PRIORITY_RANGE.contains(&job.fields.priority) {
        return Err(super::fields::priority_error(job.fields.priority));
    }
    let system = matches!(job.job_type, JobType::System | JobType::SysBatch);
    if let Some(g) = job.task_groups.iter().find(|g| system && g.count > 1) {
        // Nomad's text: a system job runs one allocation of each group per node.
        return Err(invalid(format!(
            "Job task group {} has count {}. Count cannot exceed 1 with {} scheduler",
            g.name,
            g.count,
            job.job_type.as_str()
        )));
    }
    if job.task_groups.is_empty() {
        return Err(invalid(format!(
            "job {:?} must have at least one group",
            job.id
        )));
    }
    // Nomad's `Job.Validate`: only batch and sysbatch jobs are templates of children.
    if job.periodic.as_ref().is_some_and(|p| p.enabled) && !job.job_type.runs_to_completion() {
        return Err(invalid(format!(
            "job {:?}: Periodic can only be used with \"batch\" or \"sysbatch\" scheduler",
            job.id
        )));
    }
    if job.parameterized_job.is_some() && !job.job_type.runs_to_completion() {
        return Err(invalid(format!(
            "job {:?}: Parameterized job can only be used with \"batch\" or \"sysbatch\" scheduler",
            job.id
        )));
    }
    for (i, group) in job.task_groups.iter().enumerate() {
        if job.task_groups[..i].iter().any(|g| g.name == group.name) {
            return Err(invalid(format!(
                "job {:?} has more than one group named {:?}",
                job.id, group.name
            )));
        }
        validate_group(group, job.job_type)?;
    }
    Ok(())
}

fn validate_group(group: &TaskGroup, job_type: JobType) -> Result<(), JobspecError> {
    validate_name("group", &group.name)?;
    let ctx = format!("group {:?}", group.name);
    if group.count > MAX_GROUP_COUNT {
        return Err(invalid(format!(
            "{ctx}: count {} is more than the maximum of {MAX_GROUP_COUNT}",
            group.count
        )));
    }
    validate_restart_policy(&format!("{ctx} restart policy"), &group.restart_policy)?;
    for (label, volume) in &group.volumes {
        validate_name("volume", label)?;
        let vctx = format!("volume {label:?} in {ctx}");
        if volume.name != *label {
            return Err(invalid(format!(
                "{vctx}: name {:?} differs from its label",
                volume.name
            )));
        }
        super::volume::validate(&vctx, volume, group.count, job_type)?;
    }
    if group.tasks.is_empty() {
        return Err(invalid(format!("{ctx} must have at least one task")));
    }
    for (i, task) in group.tasks.iter().enumerate() {
        if group.tasks[..i].iter().any(|t| t.name == task.name) {
            return Err(invalid(format!(
                "{ctx} has more than one task named {:?}",
                task.name
            )));
        }
        validate_task(group, task)?;
    }
    let leaders = group.tasks.iter().filter(|t| t.leader);
    super::lifecycle::check_leaders(&group.name, leaders.map(|t| t.name.as_str()))?;
    Ok(())
}

/// The drivers a task may name, for messages.
const DRIVERS: &str = "\"raw_exec\", \"exec\" and \"docker\"";

fn validate_task(group: &TaskGroup, task: &Task) -> Result<(), JobspecError> {
    validate_name("task", &task.name)?;
    // A task's directory is `<alloc_dir>/<task>`, beside the shared `<alloc_dir>/alloc`: a task
    // of that name would be given the shared directory, the group's logs included.
    if task.name == "alloc" {
        return Err(invalid(
            "invalid task name \"alloc\": it is the name of the allocation's shared directory",
        ));
    }
    let ctx = format!("task {:?}", task.name);
    match task.driver.as_str() {
        "" => {
            return Err(invalid(format!(
                "{ctx} must set a driver: one of {DRIVERS}"
            )))
        }
        "raw_exec" | "exec" if task.config.command.is_empty() => {
            return Err(invalid(format!(
                "{ctx}: config must set a non-empty command"
            )));
        }
        super::docker::NAME => super::docker::validate(&ctx, &task.config.docker)?,
        // A driver this node does not have: its config is its own; the task is not placed here
        // (`missing drivers`, as Nomad's scheduler says of a node without it).
        _ => {}
    }
    if task.user.as_deref() == Some("") {
        return Err(invalid(format!("{ctx}: user must not be empty")));
    }
    validate_restart_policy(&format!("{ctx} restart policy"), &task.restart_policy)?;
    if task.log_config.max_files < 1 {
        return Err(invalid(format!(
            "{ctx}: logs max_files must be at least 1, got: {}",
            task.log_config.max_files
        )));
    }
    if task.log_config.max_file_size_mb < 1 {
        return Err(invalid(format!(
            "{ctx}: logs max_file_size must be at least 1 (MiB), got: {}",
            task.log_config.max_file_size_mb
        )));
    }
    for mount in &task.volume_mounts {
        if !group.volumes.contains_key(&mount.volume) {
            return Err(invalid(format!(
                "{ctx}: volume_mount names volume {:?}, which group {:?} does not define",
                mount.volume, group.name
            )));
        }
        // One with `${...}` is checked by the mount hook once interpolated with the task's
        // environment (`${NOMAD_ALLOC_DIR}/volume0`, as Nomad's jobspecs write it).
        if !mount.destination.contains("${") {
            check_mount_destination(&task.driver, &mount.destination, &mount.destination)
                .map_err(|e| invalid(format!("{ctx}: {e}")))?;
        }
        // A read-only group volume with a `volume_mount` that does not say `read_only` is
        // accepted, as in Nomad: the mount is read-only when either is (the mount hook).
    }
    if let Some(csi) = &task.csi_plugin {
        validate_csi_plugin(&ctx, csi)?;
    }
    Ok(())
}

/// Checks a `volume_mount` destination of a task of `driver`: a docker task's is an absolute path
/// in the container (docker.md), an exec task's an absolute path in its root or a relative one,
/// any other's a relative path inside the task directory; none has `..`. `written` is the
/// destination as the jobspec has it, `destination` what it is after interpolation; the message
/// shows both when they differ.
pub fn check_mount_destination(
    driver: &str,
    written: &str,
    destination: &str,
) -> Result<(), String> {
    let absolute_clean = destination.starts_with('/') && !destination.split('/').any(|c| c == "..");
    let shown = if written == destination {
        format!("{written:?}")
    } else {
        format!("{written:?} (interpolated: {destination:?})")
    };
    // An exec task's absolute destination is a path in its root, which is its task directory.
    let allowed = match driver {
        super::docker::NAME => absolute_clean,
        "exec" => absolute_clean || is_relative_inside(destination),
        _ => is_relative_inside(destination),
    };
    match (allowed, driver) {
        (true, _) => Ok(()),
        (false, super::docker::NAME) => Err(format!(
            "volume_mount destination {shown} of a docker task must be an absolute path in the container, without \"..\""
        )),
        (false, _) => Err(format!(
            "volume_mount destination {shown} must be a relative path inside the task directory, without \"..\""
        )),
    }
}

/// A destination `d` ends up at `<task dir>/<d>`: it must name something strictly below the task
/// directory, so no root, no `..`, and not the task directory itself.
fn is_relative_inside(destination: &str) -> bool {
    let mut normal = 0;
    for component in Path::new(destination).components() {
        match component {
            Component::Normal(_) => normal += 1,
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    normal > 0
}

fn validate_csi_plugin(ctx: &str, csi: &CsiPluginConfig) -> Result<(), JobspecError> {
    csi_plugin_id(&csi.id)?;
    if csi.mount_dir.is_empty() || csi.stage_publish_base_dir.is_empty() {
        return Err(invalid(format!(
            "{ctx}: csi_plugin mount_dir and stage_publish_base_dir must not be empty"
        )));
    }
    if is_same_or_below(&csi.stage_publish_base_dir, &csi.mount_dir) {
        return Err(invalid(format!(
            "csi_plugin stage_publish_base_dir must not be a subdirectory of mount_dir, got: stage_publish_base_dir=\"{}\" mount_dir=\"{}\"",
            csi.stage_publish_base_dir, csi.mount_dir
        )));
    }
    if csi.health_timeout.is_zero() {
        return Err(invalid(format!(
            "{ctx}: csi_plugin health_timeout must be greater than 0"
        )));
    }
    Ok(())
}

/// Compares path components, not string prefixes: `/csi2` is not below `/csi` (Nomad's
/// `strings.HasPrefix` check says it is).
fn is_same_or_below(path: &str, dir: &str) -> bool {
    let path: Vec<Component> = Path::new(path).components().collect();
    let dir: Vec<Component> = Path::new(dir).components().collect();
    path.starts_with(&dir)
}

fn validate_restart_policy(ctx: &str, policy: &RestartPolicy) -> Result<(), JobspecError> {
    if policy.attempts == 0 && policy.mode != RestartMode::Fail {
        return Err(invalid(format!(
            "{ctx}: mode {:?} with 0 attempts is ambiguous; 0 attempts is only allowed with mode \"fail\"",
            policy.mode.as_str()
        )));
    }
    if policy.interval < MIN_RESTART_INTERVAL {
        return Err(invalid(format!(
            "{ctx}: interval can not be less than {} (got {})",
            format(MIN_RESTART_INTERVAL),
            format(policy.interval)
        )));
    }
    let total = u128::from(policy.attempts) * policy.delay.as_nanos();
    if total > policy.interval.as_nanos() {
        return Err(invalid(format!(
            "{ctx}: can't restart {} times in an interval of {} with a delay of {} (attempts * delay must not exceed interval)",
            policy.attempts,
            format(policy.interval),
            format(policy.delay)
        )));
    }
    Ok(())
}

/// A job, group, task or volume name: 1–128 characters of `[A-Za-z0-9_.-]`, not `.` or `..`.
/// `kind` names what the name is for in the message (`"task"`, `"job ID"`).
pub fn validate_name(kind: &str, name: &str) -> Result<(), JobspecError> {
    match name_problem(name) {
        None => Ok(()),
        Some(reason) => Err(invalid(format!("invalid {kind} name {name:?}: {reason}"))),
    }
}

/// What makes `name` unfit to be a path component, if anything.
fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("must not be empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("must be at most 128 characters long")
    } else if name == "." || name == ".." {
        Some("must not be \".\" or \"..\"")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        Some("may only contain the characters A-Z a-z 0-9 _ . -")
    } else {
        None
    }
}

/// The job `type` spelled in a jobspec.
pub fn job_type(raw: &str) -> Result<JobType, JobspecError> {
    match raw {
        "service" => Ok(JobType::Service),
        "batch" => Ok(JobType::Batch),
        "system" => Ok(JobType::System),
        "sysbatch" => Ok(JobType::SysBatch),
        _ => Err(invalid(format!(
            "job type must be \"service\", \"batch\", \"system\" or \"sysbatch\", got: {raw:?}"
        ))),
    }
}

/// The restart mode spelled in a jobspec.
pub fn restart_mode(raw: &str) -> Result<RestartMode, JobspecError> {
    match raw {
        "fail" => Ok(RestartMode::Fail),
        "delay" => Ok(RestartMode::Delay),
        _ => Err(invalid(format!("Unsupported restart mode: \"{raw}\""))),
    }
}

/// The `csi_plugin` id; csi.md checks it before the type. It is a path component (the staging
/// directory is `<data_dir>/client/csi/<type>/<id>`), so it follows the rules of names: an id such
/// as `/etc` or `../../usr` would have the agent create and chmod a directory anywhere.
pub fn csi_plugin_id(id: &str) -> Result<(), JobspecError> {
    if id.is_empty() {
        return Err(invalid("csi_plugin must have a non-empty id"));
    }
    match name_problem(id) {
        None => Ok(()),
        Some(reason) => Err(invalid(format!("invalid csi_plugin id {id:?}: {reason}"))),
    }
}

/// The `csi_plugin` type spelled in a jobspec.
pub fn csi_plugin_type(raw: &str) -> Result<CsiPluginType, JobspecError> {
    match raw {
        "node" => Ok(CsiPluginType::Node),
        "controller" => Ok(CsiPluginType::Controller),
        "monolith" => Ok(CsiPluginType::Monolith),
        _ => Err(invalid(format!(
            "csi_plugin type must be one of 'node', 'controller', or 'monolith', got: \"{raw}\""
        ))),
    }
}

/// The `kill_signal` as written (`"SIGTERM"`, `"TERM"`, `"term"`). `task` names the task for the
/// message.
pub fn kill_signal(task: &str, raw: &str) -> Result<Signal, JobspecError> {
    Signal::from_name(raw)
        .ok_or_else(|| invalid(format!("task {task:?}: unknown kill_signal {raw:?}")))
}

/// The number of a signal named `SIGTERM` or `TERM` (any case), for `alloc signal`.
pub fn signal_number(name: &str) -> Option<i32> {
    Signal::from_name(name).map(Signal::number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobspec::{
        DriverConfig, JobType, LogConfig, Resources, VolumeMount, VolumeRequest,
        DEFAULT_CSI_HEALTH_TIMEOUT, DEFAULT_CSI_MOUNT_DIR, DEFAULT_CSI_STAGE_PUBLISH_BASE_DIR,
        DEFAULT_KILL_SIGNAL, DEFAULT_KILL_TIMEOUT,
    };
    use std::collections::BTreeMap;

    fn task(name: &str) -> Task {
        Task {
            shutdown_delay: Duration::ZERO,
            meta: Default::default(),
            name: name.to_string(),
            driver: "raw_exec".to_string(),
            config: DriverConfig {
                command: "busybox".to_string(),
                args: vec!["true".to_string()],
                oom_score_adj: None,
                pid_mode: None,
                ipc_mode: None,
                docker: Default::default(),
                opaque: Default::default(),
            },
            env: BTreeMap::new(),
            user: None,
            kill_signal: DEFAULT_KILL_SIGNAL,
            kill_timeout: DEFAULT_KILL_TIMEOUT,
            restart_policy: JobType::Service.default_restart_policy(),
            log_config: LogConfig::default(),
            volume_mounts: Vec::new(),
            csi_plugin: None,
            resources: Resources::default(),
            lifecycle: None,
            leader: false,
            constraints: Vec::new(),
            dispatch_payload: None,
            kept: Default::default(),
        }
    }

    fn job() -> Job {
        let mut volumes = BTreeMap::new();
        volumes.insert(
            "data".to_string(),
            VolumeRequest {
                name: "data".to_string(),
                volume_type: "host".to_string(),
                source: "test".to_string(),
                read_only: false,
                access_mode: None,
                attachment_mode: None,
                per_alloc: false,
                mount_options: None,
                sticky: false,
            },
        );
        Job {
            fields: Default::default(),
            meta: Default::default(),
            id: "example".to_string(),
            name: "example".to_string(),
            job_type: JobType::Service,
            datacenters: vec!["*".to_string()],
            node_pool: "default".to_string(),
            constraints: Vec::new(),
            periodic: None,
            parameterized_job: None,
            parent_id: String::new(),
            payload: String::new(),
            kept: Default::default(),
            task_groups: vec![TaskGroup {
                shutdown_delay: Duration::ZERO,
                meta: Default::default(),
                ephemeral_disk: Default::default(),
                kept: Default::default(),
                name: "group".to_string(),
                count: 1,
                restart_policy: JobType::Service.default_restart_policy(),
                volumes,
                networks: Vec::new(),
                constraints: Vec::new(),
                tasks: vec![task("task")],
            }],
        }
    }

    fn csi() -> CsiPluginConfig {
        CsiPluginConfig {
            id: "hostpath".to_string(),
            plugin_type: CsiPluginType::Monolith,
            mount_dir: DEFAULT_CSI_MOUNT_DIR.to_string(),
            stage_publish_base_dir: DEFAULT_CSI_STAGE_PUBLISH_BASE_DIR.to_string(),
            health_timeout: DEFAULT_CSI_HEALTH_TIMEOUT,
        }
    }

    fn err(job: &Job) -> String {
        match validate_job(job) {
            Err(JobspecError::Invalid(msg)) => msg,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn accepts_a_valid_job() {
        let mut j = job();
        j.task_groups[0].tasks[0].csi_plugin = Some(csi());
        j.task_groups[0].tasks[0].volume_mounts.push(VolumeMount {
            volume: "data".to_string(),
            destination: "data/sub".to_string(),
            read_only: true,
            propagation_mode: String::new(),
            selinux_label: String::new(),
        });
        validate_job(&j).unwrap();
    }

    #[test]
    fn names() {
        let long = "a".repeat(129);
        for (bad, reason) in [
            ("../x", "may only contain the characters A-Z a-z 0-9 _ . -"),
            ("", "must not be empty"),
            (".", "must not be \".\" or \"..\""),
            ("..", "must not be \".\" or \"..\""),
            (long.as_str(), "must be at most 128 characters long"),
            ("a b", "may only contain the characters A-Z a-z 0-9 _ . -"),
            ("é", "may only contain the characters A-Z a-z 0-9 _ . -"),
        ] {
            assert_eq!(
                validate_name("task", bad),
                Err(JobspecError::Invalid(format!(
                    "invalid task name {bad:?}: {reason}"
                )))
            );
        }
        for good in ["a", "web-1", "x.y_z", "...", &"a".repeat(128)] {
            validate_name("task", good).unwrap();
        }

        let mut j = job();
        j.task_groups[0].tasks[0].name = "../x".to_string();
        assert_eq!(
            err(&j),
            "invalid task name \"../x\": may only contain the characters A-Z a-z 0-9 _ . -"
        );
        let mut j = job();
        j.task_groups[0].tasks[0].name = "alloc".to_string();
        assert_eq!(
            err(&j),
            "invalid task name \"alloc\": it is the name of the allocation's shared directory"
        );
        let mut j = job();
        j.task_groups[0].name = ".".to_string();
        assert_eq!(
            err(&j),
            "invalid group name \".\": must not be \".\" or \"..\""
        );
        let mut j = job();
        j.name = String::new();
        assert_eq!(err(&j), "invalid job name \"\": must not be empty");
        let mut j = job();
        let v = j.task_groups[0].volumes.remove("data").unwrap();
        j.task_groups[0].volumes.insert("a/b".to_string(), v);
        assert_eq!(
            err(&j),
            "invalid volume name \"a/b\": may only contain the characters A-Z a-z 0-9 _ . -"
        );
    }

    #[test]
    fn structure() {
        let mut j = job();
        j.task_groups.clear();
        assert_eq!(err(&j), "job \"example\" must have at least one group");
        let mut j = job();
        j.task_groups[0].tasks.clear();
        assert_eq!(err(&j), "group \"group\" must have at least one task");
        let mut j = job();
        let g = j.task_groups[0].clone();
        j.task_groups.push(g);
        assert_eq!(
            err(&j),
            "job \"example\" has more than one group named \"group\""
        );
        let mut j = job();
        j.task_groups[0].tasks.push(task("task"));
        assert_eq!(
            err(&j),
            "group \"group\" has more than one task named \"task\""
        );
        let mut j = job();
        j.task_groups[0].count = MAX_GROUP_COUNT;
        validate_job(&j).unwrap();
        j.task_groups[0].count = MAX_GROUP_COUNT + 1;
        assert_eq!(
            err(&j),
            "group \"group\": count 10001 is more than the maximum of 10000"
        );
        let mut j = job();
        j.task_groups[0].count = 0;
        validate_job(&j).unwrap();
    }

    #[test]
    fn task_fields() {
        let mut j = job();
        // A driver this node does not have is not a jobspec error: it fails placement.
        j.task_groups[0].tasks[0].driver = "java".to_string();
        j.task_groups[0].tasks[0].config.command = String::new();
        validate_job(&j).unwrap();
        let mut j = job();
        j.task_groups[0].tasks[0].driver = "docker".to_string();
        assert_eq!(
            err(&j),
            "task \"task\": docker config must set a non-empty image"
        );
        j.task_groups[0].tasks[0].driver = String::new();
        assert_eq!(
            err(&j),
            "task \"task\" must set a driver: one of \"raw_exec\", \"exec\" and \"docker\""
        );
        let mut j = job();
        j.task_groups[0].tasks[0].config.command = String::new();
        assert_eq!(
            err(&j),
            "task \"task\": config must set a non-empty command"
        );
        let mut j = job();
        j.task_groups[0].tasks[0].user = Some(String::new());
        assert_eq!(err(&j), "task \"task\": user must not be empty");
        let mut j = job();
        j.task_groups[0].tasks[0].log_config.max_files = 0;
        assert_eq!(
            err(&j),
            "task \"task\": logs max_files must be at least 1, got: 0"
        );
        let mut j = job();
        j.task_groups[0].tasks[0].log_config.max_file_size_mb = 0;
        assert_eq!(
            err(&j),
            "task \"task\": logs max_file_size must be at least 1 (MiB), got: 0"
        );
    }

    #[test]
    fn restart_policies() {
        let set = |attempts, interval: u64, delay: u64, mode| {
            let mut j = job();
            j.task_groups[0].restart_policy = RestartPolicy {
                render_templates: false,
                attempts,
                interval: Duration::from_secs(interval),
                delay: Duration::from_secs(delay),
                mode,
            };
            j
        };
        assert_eq!(
            restart_mode("sometimes"),
            Err(JobspecError::Invalid(
                "Unsupported restart mode: \"sometimes\"".to_string()
            ))
        );
        assert_eq!(restart_mode("delay"), Ok(RestartMode::Delay));
        assert_eq!(
            err(&set(0, 60, 1, RestartMode::Delay)),
            "group \"group\" restart policy: mode \"delay\" with 0 attempts is ambiguous; 0 attempts is only allowed with mode \"fail\""
        );
        validate_job(&set(0, 60, 1, RestartMode::Fail)).unwrap();
        assert_eq!(
            err(&set(1, 4, 1, RestartMode::Fail)),
            "group \"group\" restart policy: interval can not be less than 5s (got 4s)"
        );
        validate_job(&set(1, 5, 5, RestartMode::Fail)).unwrap();
        assert_eq!(
            err(&set(3, 60, 21, RestartMode::Delay)),
            "group \"group\" restart policy: can't restart 3 times in an interval of 1m0s with a delay of 21s (attempts * delay must not exceed interval)"
        );
        validate_job(&set(3, 60, 20, RestartMode::Delay)).unwrap();

        let mut j = job();
        j.task_groups[0].tasks[0].restart_policy.interval = Duration::from_secs(1);
        assert_eq!(
            err(&j),
            "task \"task\" restart policy: interval can not be less than 5s (got 1s)"
        );
    }

    #[test]
    fn volumes() {
        let mut j = job();
        j.task_groups[0]
            .volumes
            .get_mut("data")
            .unwrap()
            .volume_type = "csi".to_string();
        assert_eq!(
            err(&j),
            "volume \"data\" in group \"group\": CSI volumes must have an attachment mode"
        );
        let mut j = job();
        j.task_groups[0].volumes.get_mut("data").unwrap().source = String::new();
        assert_eq!(
            err(&j),
            "volume \"data\" in group \"group\": volume has an empty source"
        );

        let mount = |volume: &str, destination: &str, read_only| {
            let mut j = job();
            j.task_groups[0].tasks[0].volume_mounts.push(VolumeMount {
                volume: volume.to_string(),
                destination: destination.to_string(),
                read_only,
                propagation_mode: String::new(),
                selinux_label: String::new(),
            });
            j
        };
        validate_job(&mount("data", "data", false)).unwrap();
        validate_job(&mount("data", "./a/b/", false)).unwrap();
        assert_eq!(
            err(&mount("other", "data", false)),
            "task \"task\": volume_mount names volume \"other\", which group \"group\" does not define"
        );
        for bad in ["/data", "../data", "a/../../b", "", ".", "./"] {
            assert_eq!(
                err(&mount("data", bad, false)),
                format!("task \"task\": volume_mount destination {bad:?} must be a relative path inside the task directory, without \"..\"")
            );
        }
        // `${...}` waits for the mount hook, which checks it once interpolated.
        validate_job(&mount("data", "${NOMAD_ALLOC_DIR}/volume0", false)).unwrap();
        validate_job(&mount("data", "/${X}/../..", false)).unwrap();
        let mut docker = mount("data", "${NOMAD_ALLOC_DIR}/volume0", false);
        docker.task_groups[0].tasks[0].driver = "docker".to_string();
        docker.task_groups[0].tasks[0].config.docker.image = "busybox:1".to_string();
        validate_job(&docker).unwrap();
        docker.task_groups[0].tasks[0].volume_mounts[0].destination = "alloc/volume0".into();
        assert_eq!(
            err(&docker),
            "task \"task\": volume_mount destination \"alloc/volume0\" of a docker task must be an absolute path in the container, without \"..\""
        );
        // Read-only when either says so, as in Nomad: not a refusal.
        let mut j = mount("data", "data", false);
        j.task_groups[0].volumes.get_mut("data").unwrap().read_only = true;
        validate_job(&j).unwrap();
        j.task_groups[0].tasks[0].volume_mounts[0].read_only = true;
        validate_job(&j).unwrap();
    }

    #[test]
    fn interpolated_destinations_are_checked_with_both_forms() {
        let check = check_mount_destination;
        assert_eq!(
            check("docker", "${NOMAD_ALLOC_DIR}/volume0", "/alloc/volume0"),
            Ok(())
        );
        assert_eq!(
            check("docker", "${NOMAD_ALLOC_DIR}/../x", "/alloc/../x").unwrap_err(),
            "volume_mount destination \"${NOMAD_ALLOC_DIR}/../x\" (interpolated: \"/alloc/../x\") of a docker task must be an absolute path in the container, without \"..\""
        );
        // An unknown name stays as written, which is not an absolute path.
        assert_eq!(
            check("docker", "${NOPE}/v", "${NOPE}/v").unwrap_err(),
            "volume_mount destination \"${NOPE}/v\" of a docker task must be an absolute path in the container, without \"..\""
        );
        assert_eq!(check("exec", "${NOMAD_ALLOC_DIR}/v", "/alloc/v"), Ok(()));
        assert_eq!(check("exec", "${D}", "data"), Ok(()));
        // raw_exec's NOMAD_ALLOC_DIR is a host path: not inside the task directory.
        assert_eq!(
            check("raw_exec", "${NOMAD_ALLOC_DIR}/v", "/data/alloc/1/alloc/v").unwrap_err(),
            "volume_mount destination \"${NOMAD_ALLOC_DIR}/v\" (interpolated: \"/data/alloc/1/alloc/v\") must be a relative path inside the task directory, without \"..\""
        );
        assert_eq!(check("raw_exec", "${D}/v", "local/v"), Ok(()));
    }

    #[test]
    fn csi_plugins() {
        let with = |f: &dyn Fn(&mut CsiPluginConfig)| {
            let mut j = job();
            let mut c = csi();
            f(&mut c);
            j.task_groups[0].tasks[0].csi_plugin = Some(c);
            j
        };
        assert_eq!(
            err(&with(&|c| c.id = String::new())),
            "csi_plugin must have a non-empty id"
        );
        // Path components: the staging directory is <data_dir>/client/csi/<type>/<id>.
        for bad in ["/etc", "../../../../usr", "a/b", "..", "."] {
            let reason = if bad.len() <= 2 {
                "must not be \".\" or \"..\""
            } else {
                "may only contain the characters A-Z a-z 0-9 _ . -"
            };
            assert_eq!(
                err(&with(&|c| c.id = bad.to_string())),
                format!("invalid csi_plugin id {bad:?}: {reason}")
            );
        }
        validate_job(&with(&|c| c.id = "org.example.csi-1_a".to_string())).unwrap();
        assert_eq!(
            csi_plugin_type("storage"),
            Err(JobspecError::Invalid(
                "csi_plugin type must be one of 'node', 'controller', or 'monolith', got: \"storage\""
                    .to_string()
            ))
        );
        assert_eq!(csi_plugin_type("node"), Ok(CsiPluginType::Node));
        assert_eq!(
            err(&with(&|c| c.stage_publish_base_dir = "/csi/stage".to_string())),
            "csi_plugin stage_publish_base_dir must not be a subdirectory of mount_dir, got: stage_publish_base_dir=\"/csi/stage\" mount_dir=\"/csi\""
        );
        assert_eq!(
            err(&with(&|c| c.stage_publish_base_dir = "/csi/".to_string())),
            "csi_plugin stage_publish_base_dir must not be a subdirectory of mount_dir, got: stage_publish_base_dir=\"/csi/\" mount_dir=\"/csi\""
        );
        validate_job(&with(&|c| c.stage_publish_base_dir = "/csi2".to_string())).unwrap();
        assert_eq!(
            err(&with(&|c| c.health_timeout = Duration::ZERO)),
            "task \"task\": csi_plugin health_timeout must be greater than 0"
        );
        assert_eq!(
            err(&with(&|c| c.mount_dir = String::new())),
            "task \"task\": csi_plugin mount_dir and stage_publish_base_dir must not be empty"
        );
    }

    #[test]
    fn signals() {
        assert_eq!(kill_signal("t", "SIGINT").unwrap(), "SIGINT");
        assert_eq!(kill_signal("t", "INT").unwrap(), "SIGINT");
        assert_eq!(kill_signal("t", "term").unwrap(), "SIGTERM");
        assert_eq!(
            kill_signal("t", "SIGFOO"),
            Err(JobspecError::Invalid(
                "task \"t\": unknown kill_signal \"SIGFOO\"".to_string()
            ))
        );
        assert!(kill_signal("t", "").is_err());
        assert!(kill_signal("t", "SIG").is_err());
        assert_eq!(signal_number("SIGINT"), Some(libc::SIGINT));
        assert_eq!(signal_number("KILL"), Some(9));
        assert_eq!(signal_number("SIGTERM"), Some(15));
        assert_eq!(signal_number("SIGUSR1"), Some(libc::SIGUSR1));
        assert_eq!(signal_number("SIGNOPE"), None);
    }
}
