//! Jobspecs in Nomad's API JSON shape: `{"Job": {...}}` or the bare job object, PascalCase field
//! names, durations in integer nanoseconds.
//!
//! The input is deserialized into the raw job (`raw`), whose conversion applies the
//! defaults and validates, as for HCL. JSON written by Nomad carries many fields nodeward does not
//! implement (`Datacenters`, `Networks`, `Services`...): they are ignored and named in
//! [`Parsed::warnings`], except when their value is empty (`null`, `""`, `0`, `false`, `[]`, `{}`),
//! which is how Go writes "not set". What the domain types serialize to is accepted back
//! unchanged.

use serde_json::Value;

use super::invalid;
use super::raw::RawJob;
use super::shared::warn_extra;
use super::{Job, JobspecError, Parsed};

/// The fields of a request beside its `Job` that the API reads itself: not warned as ignored.
const HONOURED: &[&str] = &["EnforceIndex", "JobModifyIndex", "Diff"];

/// Parses a job in Nomad's API JSON shape, applies defaults and validates it.
pub fn parse_job(bytes: &[u8]) -> Result<Parsed, JobspecError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| JobspecError::Syntax(format!("invalid JSON: {e}")))?;
    let mut warnings = Vec::new();
    let job = match value {
        Value::Object(mut outer) if outer.contains_key("Job") => {
            let job = outer.remove("Job").unwrap_or(Value::Null);
            // A registration request carries `EnforceIndex`, `PolicyOverride`... next to the job.
            // The API reads those it honours (`EnforceIndex`, `JobModifyIndex`, a plan's `Diff`).
            for honoured in HONOURED {
                outer.remove(*honoured);
            }
            warn_extra(&mut warnings, "", &outer.into_iter().collect());
            job
        }
        bare => bare,
    };
    if !job.is_object() {
        return Err(invalid("the job must be a JSON object".to_string()));
    }
    super::schema::check_json(&job)?;
    let mut raw: RawJob = serde_path_to_error::deserialize(job)
        .map_err(|e| invalid(format!("invalid field \"{}\": {}", e.path(), e.inner())))?;
    keep_json(&mut raw, &mut warnings);
    warnings.extend(raw.ignored_fields());
    let job = Job::try_from(raw)?;
    super::settings::check(&job)?;
    super::devices::warn(&job, &mut warnings);
    super::settings::warn(&job, &mut warnings);
    Ok(Parsed { job, warnings })
}

/// The JSON half for a whole raw job ([`take_json`] at each level): the no-effect fields leave
/// each level's unread fields, so that they are kept instead of warned as ignored, and each name
/// is warned once with its reason, as the HCL front-end warns it.
fn keep_json(raw: &mut RawJob, warnings: &mut Vec<String>) {
    let mut names = Vec::new();
    raw.kept = super::kept::take_json(super::shared::Level::Job, &mut raw.extra, &mut names);
    for group in raw.task_groups.iter_mut().flatten() {
        group.kept =
            super::kept::take_json(super::shared::Level::Group, &mut group.extra, &mut names);
        for name in group
            .ephemeral_disk
            .iter()
            .flat_map(super::ephemeral_disk::no_effect_set)
        {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        for task in group.tasks.iter_mut().flatten() {
            task.kept =
                super::kept::take_json(super::shared::Level::Task, &mut task.extra, &mut names);
        }
    }
    warnings.extend(names.into_iter().map(super::schema::no_effect_warning));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobspec::hcl::tests::{example_job, EXAMPLE};
    use crate::jobspec::{
        CsiPluginConfig, CsiPluginType, JobType, LogConfig, Resources, RestartMode, RestartPolicy,
        DEFAULT_CSI_HEALTH_TIMEOUT, DEFAULT_CSI_MOUNT_DIR, DEFAULT_CSI_STAGE_PUBLISH_BASE_DIR,
        DEFAULT_KILL_SIGNAL, DEFAULT_KILL_TIMEOUT,
    };
    use serde_json::json;

    fn parse(value: &Value) -> Result<Parsed, JobspecError> {
        parse_job(value.to_string().as_bytes())
    }

    fn invalid(msg: &str) -> JobspecError {
        JobspecError::Invalid(msg.to_string())
    }

    /// The smallest job: everything else comes from defaults.
    fn minimal() -> Value {
        json!({
            "ID": "j",
            "TaskGroups": [{
                "Name": "g",
                "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "true"}}]
            }]
        })
    }

    #[test]
    fn round_trips_what_the_domain_types_serialize_to() {
        let job = example_job();
        let bytes = serde_json::to_vec(&job).unwrap();
        let parsed = parse_job(&bytes).unwrap();
        assert_eq!(parsed.job, job);
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);

        let wrapped = serde_json::to_vec(&json!({ "Job": job })).unwrap();
        assert_eq!(parse_job(&wrapped).unwrap().job, job);

        // And with a user, no CSI plugin and a task-level restart override.
        let mut job = example_job();
        let task = &mut job.task_groups[0].tasks[0];
        task.user = Some("nobody".to_string());
        task.csi_plugin = None;
        task.restart_policy.mode = RestartMode::Delay;
        task.kill_signal = "SIGTERM".parse().unwrap();
        job.job_type = JobType::Batch;
        let bytes = serde_json::to_vec(&job).unwrap();
        assert_eq!(parse_job(&bytes).unwrap().job, job);
    }

    /// The job's JSON is what the state file stores and what `POST /v1/jobs/parse` and
    /// `job inspect` answer: its bytes must not change when the types behind it do.
    #[test]
    fn the_job_json_is_byte_for_byte_stable() {
        let policy = r#"{"Attempts":2,"Interval":1800000000000,"Delay":15000000000,"Mode":"fail"}"#;
        let want = [
            r#"{"ID":"example","Name":"example","Type":"service","TaskGroups":[{"Name":"group","#,
            r#""Count":1,"RestartPolicy":"#,
            policy,
            r#","Volumes":{"data":{"Name":"data","Type":"host","Source":"test","ReadOnly":false}},"#,
            r#""Tasks":[{"Name":"task","Driver":"raw_exec","Config":{"command":"busybox","#,
            r#""args":["httpd","-f","-p","8001","-h","${NOMAD_TASK_DIR}"]},"#,
            r#""Env":{"GREETING":"hello"},"KillSignal":"SIGINT","KillTimeout":5000000000,"#,
            r#""RestartPolicy":"#,
            policy,
            r#","LogConfig":{"MaxFiles":10,"MaxFileSizeMB":10},"#,
            r#""VolumeMounts":[{"Volume":"data","Destination":"data","ReadOnly":false}],"#,
            r#""CSIPluginConfig":{"ID":"whatever","Type":"monolith","MountDir":"/csi","#,
            r#""StagePublishBaseDir":"/local/csi","HealthTimeout":5000000000},"#,
            r#""Resources":{"CPU":100,"MemoryMB":100}}]}]}"#,
        ]
        .concat();
        let job = example_job();
        assert_eq!(serde_json::to_string(&job).unwrap(), want);
        assert_eq!(serde_json::from_str::<Job>(&want).unwrap(), job);
        assert_eq!(parse_job(want.as_bytes()).unwrap().job, job);

        // A user and another signal, as a registered job carries them.
        let mut job = example_job();
        let task = &mut job.task_groups[0].tasks[0];
        task.user = Some("nobody".to_string());
        task.kill_signal = parse_job(
            br#"{"ID":"j","TaskGroups":[{"Name":"g","Tasks":[{"Name":"t","Driver":"raw_exec","Config":{"command":"x"},"KillSignal":"term"}]}]}"#,
        )
        .unwrap()
        .job
        .task_groups[0]
            .tasks[0]
            .kill_signal;
        let text = serde_json::to_string(&job).unwrap();
        assert!(
            text.contains(r#""Env":{"GREETING":"hello"},"User":"nobody","KillSignal":"SIGTERM","#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Job>(&text).unwrap(), job);
    }

    #[test]
    fn hcl_and_json_of_the_same_job_are_equal() {
        let from_hcl = crate::jobspec::hcl::parse_job(EXAMPLE).unwrap().job;
        // What Nomad's API would carry for the same job, durations in ns, with fields nodeward
        // does not know left empty.
        let nomad = json!({
            "Job": {
                "ID": "example",
                "Name": "example",
                "Type": "service",
                "Region": null,
                "Datacenters": [],
                "Meta": null,
                "TaskGroups": [{
                    "Name": "group",
                    "Count": 1,
                    "RestartPolicy": {
                        "Attempts": 2,
                        "Interval": 1_800_000_000_000u64,
                        "Delay": 15_000_000_000u64,
                        "Mode": "fail",
                        "RenderTemplates": false
                    },
                    "Volumes": {
                        "data": {"Name": "data", "Type": "host", "Source": "test", "ReadOnly": false}
                    },
                    "Networks": null,
                    "Tasks": [{
                        "Name": "task",
                        "Driver": "raw_exec",
                        "Config": {
                            "command": "busybox",
                            "args": ["httpd", "-f", "-p", "8001", "-h", "${NOMAD_TASK_DIR}"]
                        },
                        "Env": {"GREETING": "hello"},
                        "User": "",
                        "KillSignal": "SIGINT",
                        "KillTimeout": 5_000_000_000u64,
                        "LogConfig": {"MaxFiles": 10, "MaxFileSizeMB": 10, "Disabled": false},
                        "VolumeMounts": [
                            {"Volume": "data", "Destination": "data", "ReadOnly": false}
                        ],
                        "CSIPluginConfig": {
                            "ID": "whatever",
                            "Type": "monolith",
                            "MountDir": "",
                            "HealthTimeout": 5_000_000_000u64
                        },
                        "Resources": {"CPU": 100, "MemoryMB": 100, "Networks": null},
                        "Services": null,
                        "Leader": false
                    }]
                }]
            }
        });
        let parsed = parse(&nomad).unwrap();
        assert_eq!(parsed.job, from_hcl);
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    }

    #[test]
    fn unsupported_fields_are_listed_as_warnings() {
        let mut job = minimal();
        job["TaskGroups"][0]["Networks"] = json!([{"Mode": "host", "MBits": 10}]);
        job["TaskGroups"][0]["Tasks"][0]["Config"]["pid_mode"] = json!("host");
        job["TaskGroups"][0]["Tasks"][0]["Resources"] =
            json!({"CPU": 200, "MemoryMaxMB": 512, "IOPS": 1});
        job["TaskGroups"][0]["Tasks"][0]["Templates"] = json!(null);
        job["TaskGroups"][0]["Tasks"][0]["Bogus"] = json!(1);
        let parsed =
            parse(&json!({"Job": job, "EnforceIndex": true, "PolicyOverride": true})).unwrap();
        let field = |f: &str| format!("field \"{f}\" is not supported by nodeward and was ignored");
        assert_eq!(
            parsed.warnings,
            vec![
                field("PolicyOverride"),
                field("TaskGroups[0].Tasks[0].Bogus"),
                field("TaskGroups[0].Tasks[0].Config.pid_mode"),
                field("TaskGroups[0].Tasks[0].Resources.IOPS"),
                // Nomad's, with no effect here (`jobspec::settings`).
                "\"network.mbits\" has no effect on one node: deprecated in Nomad; bandwidth is not reserved".to_string(),
            ]
        );
        assert_eq!(parsed.job.task_groups[0].tasks[0].resources.cpu, 200);
        assert_eq!(
            parsed.job.task_groups[0].tasks[0].resources.memory_max_mb,
            512
        );
        // What nodeward does not know is not kept.
        let encoded = serde_json::to_value(&parsed.job).unwrap();
        assert!(encoded["TaskGroups"][0]["Tasks"][0].get("Bogus").is_none());
    }

    #[test]
    fn no_effect_fields_are_kept_as_given_and_warned_once_with_their_reason() {
        let mut job = minimal();
        let affinities =
            json!([{"LTarget": "${node.class}", "RTarget": "x", "Operand": "=", "Weight": 50}]);
        let update = json!({"MaxParallel": 2, "MinHealthyTime": 10_000_000_000u64});
        let services = json!([{"Name": "web", "PortLabel": "http"}]);
        job["Affinities"] = affinities.clone();
        job["Update"] = update.clone();
        job["TaskGroups"][0]["ReschedulePolicy"] = json!({"Attempts": 3});
        job["TaskGroups"][0]["Services"] = services.clone();
        job["TaskGroups"][0]["Tasks"][0]["Services"] = services.clone();
        job["TaskGroups"][0]["Tasks"][0]["Affinities"] = json!(null);
        let parsed = parse(&job).unwrap();
        let reason = |name: &str| crate::jobspec::schema::no_effect_warning(name);
        assert_eq!(
            parsed.warnings,
            [
                reason("affinity"),
                reason("update"),
                reason("reschedule"),
                reason("service")
            ]
        );
        let j = &parsed.job;
        assert_eq!(j.kept["Affinities"], affinities);
        assert_eq!(j.kept["Update"], update);
        assert_eq!(
            j.task_groups[0].kept["ReschedulePolicy"],
            json!({"Attempts": 3})
        );
        assert_eq!(j.task_groups[0].kept["Services"], services);
        let task = &j.task_groups[0].tasks[0];
        assert_eq!(task.kept.keys().collect::<Vec<_>>(), ["Services"]);
        // Written back where Nomad writes them, and read back the same.
        let encoded = serde_json::to_value(j).unwrap();
        assert_eq!(encoded["Update"], update);
        assert_eq!(encoded["TaskGroups"][0]["Tasks"][0]["Services"], services);
        let again = parse(&encoded).unwrap();
        assert_eq!(&again.job, j);
        let stored: Job = serde_json::from_value(encoded).unwrap();
        assert_eq!(&stored, j);
    }

    #[test]
    fn cores_are_read_from_json_as_from_hcl() {
        let mut job = minimal();
        job["TaskGroups"][0]["Tasks"][0]["Resources"] = json!({"Cores": 1, "MemoryMB": 64});
        let parsed = parse(&job).unwrap();
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let r = &parsed.job.task_groups[0].tasks[0].resources;
        assert_eq!((r.cores, r.cpu), (1, 0));
        job["TaskGroups"][0]["Tasks"][0]["Resources"] = json!({"Cores": 1, "CPU": 100});
        assert!(parse(&job)
            .unwrap_err()
            .to_string()
            .contains("Task can only ask for 'cpu' or 'cores' resource, not both."));
    }

    #[test]
    fn missing_and_null_fields_get_defaults() {
        let parsed = parse(&minimal()).unwrap();
        let job = &parsed.job;
        assert_eq!((job.id.as_str(), job.name.as_str()), ("j", "j"));
        assert_eq!(job.job_type, JobType::Service);
        let group = &job.task_groups[0];
        assert_eq!(group.count, 1);
        assert_eq!(
            group.restart_policy,
            JobType::Service.default_restart_policy()
        );
        let task = &group.tasks[0];
        assert_eq!(task.kill_signal, DEFAULT_KILL_SIGNAL);
        assert_eq!(task.kill_timeout, DEFAULT_KILL_TIMEOUT);
        assert_eq!(task.log_config, LogConfig::default());
        assert_eq!(task.resources, Resources::default());
        assert_eq!(task.restart_policy, group.restart_policy);

        let mut nulls = minimal();
        nulls["Name"] = Value::Null;
        nulls["Type"] = Value::Null;
        nulls["TaskGroups"][0]["Count"] = Value::Null;
        nulls["TaskGroups"][0]["RestartPolicy"] = Value::Null;
        nulls["TaskGroups"][0]["Volumes"] = Value::Null;
        nulls["TaskGroups"][0]["Tasks"][0]["KillTimeout"] = Value::Null;
        nulls["TaskGroups"][0]["Tasks"][0]["Env"] = Value::Null;
        nulls["TaskGroups"][0]["Tasks"][0]["LogConfig"] = json!({"MaxFiles": null});
        assert_eq!(parse(&nulls).unwrap(), parsed);

        let mut named = minimal();
        named.as_object_mut().unwrap().remove("ID");
        named["Name"] = json!("by-name");
        assert_eq!(parse(&named).unwrap().job.id, "by-name");

        // A batch job's group override keeps the batch defaults for what it does not set; a task's
        // override starts from its group's policy.
        let mut batch = minimal();
        batch["Type"] = json!("batch");
        batch["TaskGroups"][0]["RestartPolicy"] = json!({"Attempts": 1});
        batch["TaskGroups"][0]["Tasks"][0]["RestartPolicy"] = json!({"Mode": "delay"});
        let job = parse(&batch).unwrap().job;
        let want = RestartPolicy {
            attempts: 1,
            ..JobType::Batch.default_restart_policy()
        };
        assert_eq!(job.task_groups[0].restart_policy, want);
        assert_eq!(
            job.task_groups[0].tasks[0].restart_policy,
            RestartPolicy {
                mode: RestartMode::Delay,
                ..want
            }
        );

        let mut csi = minimal();
        csi["TaskGroups"][0]["Tasks"][0]["CSIPluginConfig"] =
            json!({"ID": "p", "Type": "node", "HealthTimeout": 0, "StagePublishBaseDir": null});
        let plugin = parse(&csi).unwrap().job.task_groups[0].tasks[0]
            .csi_plugin
            .clone()
            .unwrap();
        assert_eq!(
            plugin,
            CsiPluginConfig {
                id: "p".to_string(),
                plugin_type: CsiPluginType::Node,
                mount_dir: DEFAULT_CSI_MOUNT_DIR.to_string(),
                stage_publish_base_dir: DEFAULT_CSI_STAGE_PUBLISH_BASE_DIR.to_string(),
                health_timeout: DEFAULT_CSI_HEALTH_TIMEOUT,
            }
        );
    }

    #[test]
    fn refuses_malformed_input() {
        let e = parse_job(b"{\"Job\": {").unwrap_err();
        assert!(
            matches!(&e, JobspecError::Syntax(m) if m.starts_with("invalid JSON: ") && m.contains("line 1")),
            "{e:?}"
        );
        assert_eq!(
            parse_job(b"[1]").unwrap_err(),
            invalid("the job must be a JSON object")
        );
        assert_eq!(
            parse(&json!({"Job": null})).unwrap_err(),
            invalid("the job must be a JSON object")
        );
        assert_eq!(
            parse(&json!({"Type": "service"})).unwrap_err(),
            invalid("the job has no ID")
        );

        let mut job = minimal();
        job["TaskGroups"][0]["Count"] = json!("two");
        assert_eq!(
            parse(&job).unwrap_err(),
            invalid(
                "invalid field \"TaskGroups[0].Count\": invalid type: string \"two\", expected i64"
            )
        );
        let mut job = minimal();
        job["TaskGroups"][0]["Tasks"][0]["RestartPolicy"] = json!(5);
        assert_eq!(
            parse(&job).unwrap_err(),
            invalid("invalid field \"TaskGroups[0].Tasks[0].RestartPolicy\": invalid type: integer `5`, expected a RestartPolicy object")
        );
        let mut job = minimal();
        job["TaskGroups"][0]["Count"] = json!(-1);
        assert_eq!(
            parse(&job).unwrap_err(),
            invalid("\"TaskGroups[0].Count\" must be a whole number from 0 to 4294967295, got: -1")
        );
        let mut job = minimal();
        job["TaskGroups"][0]["Count"] = json!(20000);
        assert_eq!(
            parse(&job).unwrap_err(),
            invalid("group \"g\": count 20000 is more than the maximum of 10000")
        );
    }

    #[test]
    fn bad_durations_name_the_field() {
        let mut job = minimal();
        job["TaskGroups"][0]["Tasks"][0]["KillTimeout"] = json!(-5);
        assert_eq!(
            parse(&job).unwrap_err(),
            invalid("invalid duration for \"TaskGroups[0].Tasks[0].KillTimeout\": negative duration -5 is not allowed")
        );
        let mut job = minimal();
        job["TaskGroups"][0]["RestartPolicy"] = json!({"Interval": -1});
        assert_eq!(
            parse(&job).unwrap_err(),
            invalid("invalid duration for \"TaskGroups[0].RestartPolicy.Interval\": negative duration -1 is not allowed")
        );
        let mut job = minimal();
        job["TaskGroups"][0]["RestartPolicy"] = json!({"Delay": "15s"});
        assert_eq!(
            parse(&job).unwrap_err(),
            invalid("invalid field \"TaskGroups[0].RestartPolicy.Delay\": invalid type: string \"15s\", expected i64")
        );
    }

    #[test]
    fn checks_raw_strings_and_validates() {
        let with = |f: &dyn Fn(&mut Value)| {
            let mut job = minimal();
            f(&mut job);
            parse(&job).unwrap_err()
        };
        assert_eq!(
            with(&|j| j["TaskGroups"][0]["RestartPolicy"] = json!({"Mode": "sometimes"})),
            invalid("Unsupported restart mode: \"sometimes\"")
        );
        assert_eq!(
            with(&|j| j["Type"] = json!("cron")),
            invalid("job type must be \"service\", \"batch\", \"system\" or \"sysbatch\", got: \"cron\"")
        );
        assert_eq!(
            with(&|j| j["TaskGroups"][0]["Tasks"][0]["CSIPluginConfig"] = json!({"Type": "node"})),
            invalid("csi_plugin must have a non-empty id")
        );
        assert_eq!(
            with(&|j| j["TaskGroups"][0]["Tasks"][0]["CSIPluginConfig"] =
                json!({"ID": "p", "Type": "storage"})),
            invalid("csi_plugin type must be one of 'node', 'controller', or 'monolith', got: \"storage\"")
        );
        assert_eq!(
            with(&|j| j["TaskGroups"][0]["Tasks"][0]["KillSignal"] = json!("SIGNOPE")),
            invalid("task \"t\": unknown kill_signal \"SIGNOPE\"")
        );
        assert_eq!(
            with(&|j| j["TaskGroups"][0]["Tasks"][0]["Name"] = json!("../x")),
            invalid(
                "invalid task name \"../x\": may only contain the characters A-Z a-z 0-9 _ . -"
            )
        );
        assert_eq!(
            with(&|j| j["TaskGroups"][0]["Tasks"][0]["Driver"] = json!("docker")),
            invalid("task \"t\": docker config must set a non-empty image")
        );
        assert_eq!(
            with(&|j| {
                j["TaskGroups"][0]["Tasks"][0]["Driver"] = json!("docker");
                j["TaskGroups"][0]["Tasks"][0]["Config"]["image"] = json!("busybox:1");
                j["TaskGroups"][0]["Tasks"][0]["Config"]["bogus"] = json!(1);
            }),
            invalid("task \"t\": unknown docker config key \"bogus\"")
        );
        assert_eq!(
            with(&|j| j["TaskGroups"] = json!([])),
            invalid("job \"j\" must have at least one group")
        );
        // A read-only group volume mounted without `ReadOnly` is accepted, as in Nomad.
        let mut ro = minimal();
        ro["TaskGroups"][0]["Volumes"] =
            json!({"v": {"Type": "host", "Source": "s", "ReadOnly": true}});
        ro["TaskGroups"][0]["Tasks"][0]["VolumeMounts"] =
            json!([{"Volume": "v", "Destination": "v"}]);
        assert!(parse(&ro).is_ok());
        let mut ok = minimal();
        ok["TaskGroups"][0]["Tasks"][0]["KillSignal"] = json!("TERM");
        assert_eq!(
            parse(&ok).unwrap().job.task_groups[0].tasks[0].kill_signal,
            "SIGTERM"
        );
    }
}
