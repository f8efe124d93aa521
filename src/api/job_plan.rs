//! `PUT|POST /v1/job/:id/plan`: Nomad's job plan, a registration computed and not made
//! (`alloc::plan`), answered in Nomad's `JobPlanResponse` shape, with the diff of the job sent
//! against the job registered.
//!
//! The diff is a field-level diff of the jobs' API JSON, in Nomad's `JobDiff` shape: the job's
//! fields and objects, then its groups (matched by name) and their tasks. Scalars are fields
//! named by their key; `Env` and `Meta` entries are fields `Env[KEY]`; list items are named
//! `Key[i]`; any other object (`Config`, `Update`, `Resources`...) is an object of its own.
//! Nomad nests some objects differently (its `Constraint` or `Network` objects, say): the
//! names can differ, what changed is the same.

use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::router::{ApiError, Request, Response, Router};
use crate::agent::Agent;
use crate::alloc::GroupUpdates;
use crate::jobspec;

/// Objects whose entries are shown as fields `Name[key]`, as Nomad shows them.
const FLAT_MAPS: &[&str] = &["Env", "Meta"];

pub(super) fn routes(r: &mut Router, agent: &Arc<Agent>) {
    let a = agent.clone();
    let plan = Arc::new(move |req: &Request| {
        let parsed = jobspec::json::parse_job(req.body())?;
        if parsed.job.id != req.param("id") {
            return Err(ApiError::BadRequest("Job ID does not match".to_string()));
        }
        super::jobs::check_volumes(&a, &parsed.job)?;
        let new =
            serde_json::to_value(&parsed.job).map_err(|e| ApiError::Internal(e.to_string()))?;
        let plan = a.allocs.plan_job(parsed.job)?;
        let old = match &plan.existing {
            Some(r) => {
                Some(serde_json::to_value(&r.job).map_err(|e| ApiError::Internal(e.to_string()))?)
            }
            None => None,
        };
        let stopped = plan.existing.as_ref().is_some_and(|r| r.stop);
        let answer = PlanAnswer {
            annotations: PlanAnnotations {
                desired_tg_updates: plan
                    .groups
                    .iter()
                    .map(|(g, u)| (g.as_str(), DesiredUpdates::of(u)))
                    .collect(),
                preempted_allocs: None,
            },
            failed_tg_allocs: super::evaluations::failed_tg_allocs(
                &plan.failures,
                &a.config.datacenter,
            ),
            job_modify_index: plan.modify_index,
            created_evals: None,
            diff: job_diff(old.as_ref(), stopped, &new, &plan.groups),
            next_periodic_launch: None,
            warnings: parsed.warnings.join("\n"),
        };
        // Every object's keys in name order, as the answer has always had them.
        Response::json(serde_json::to_value(answer).map_err(|e| ApiError::Internal(e.to_string()))?)
    });
    let post = plan.clone();
    r.put("/v1/job/:id/plan", move |req| plan(req));
    r.post("/v1/job/:id/plan", move |req| post(req));
}

/// Nomad's `JobPlanResponse`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct PlanAnswer<'a> {
    annotations: PlanAnnotations<'a>,
    #[serde(rename = "FailedTGAllocs")]
    failed_tg_allocs: Value,
    job_modify_index: u64,
    created_evals: Option<()>,
    diff: Value,
    next_periodic_launch: Option<()>,
    warnings: String,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct PlanAnnotations<'a> {
    #[serde(rename = "DesiredTGUpdates")]
    desired_tg_updates: BTreeMap<&'a str, DesiredUpdates>,
    preempted_allocs: Option<()>,
}

/// Nomad's `DesiredUpdates` of one group.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct DesiredUpdates {
    ignore: u64,
    place: u64,
    migrate: u64,
    stop: u64,
    in_place_update: u64,
    destructive_update: u64,
    canary: u64,
    preemptions: u64,
}

impl DesiredUpdates {
    fn of(u: &GroupUpdates) -> DesiredUpdates {
        DesiredUpdates {
            ignore: u.ignore.into(),
            place: u.place.into(),
            migrate: 0,
            stop: u.stop.into(),
            in_place_update: u.in_place.into(),
            destructive_update: u.destructive.into(),
            canary: 0,
            preemptions: 0,
        }
    }
}

/// One field of Nomad's diff.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct FieldDiff {
    #[serde(rename = "Type")]
    kind: &'static str,
    name: String,
    old: String,
    new: String,
    annotations: Option<()>,
}

/// One object of Nomad's diff, with what changed inside it.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct ObjectDiff {
    #[serde(rename = "Type")]
    kind: &'static str,
    name: String,
    fields: Vec<FieldDiff>,
    objects: Vec<ObjectDiff>,
}

/// A task of a group's diff.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct TaskDiff {
    #[serde(rename = "Type")]
    kind: &'static str,
    name: String,
    fields: Vec<FieldDiff>,
    objects: Vec<ObjectDiff>,
    annotations: Option<[&'static str; 1]>,
}

/// A group of the job's diff.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct GroupDiff {
    #[serde(rename = "Type")]
    kind: &'static str,
    name: String,
    fields: Vec<FieldDiff>,
    objects: Vec<ObjectDiff>,
    tasks: Vec<TaskDiff>,
    updates: BTreeMap<&'static str, u32>,
}

/// Nomad's `JobDiff`.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct JobDiff {
    #[serde(rename = "Type")]
    kind: &'static str,
    #[serde(rename = "ID")]
    id: Value,
    fields: Vec<FieldDiff>,
    objects: Vec<ObjectDiff>,
    task_groups: Vec<GroupDiff>,
}

/// Nomad's diff types.
const ADDED: &str = "Added";
const DELETED: &str = "Deleted";
const EDITED: &str = "Edited";
const NONE: &str = "None";

fn kind(old: Option<&Value>, new: Option<&Value>) -> &'static str {
    match (old, new) {
        (None, Some(_)) => ADDED,
        (Some(_), None) => DELETED,
        (Some(o), Some(n)) if o != n => EDITED,
        _ => NONE,
    }
}

/// The job's diff: `old` is the registered job (`stopped` when it is stopped), `new` the one
/// planned, `plan` what the registration would do to each group.
fn job_diff(
    old: Option<&Value>,
    stopped: bool,
    new: &Value,
    plan: &BTreeMap<String, GroupUpdates>,
) -> Value {
    let mut t = kind(old, Some(new));
    let (mut fields, objects) = object_diff(old, Some(new), &["TaskGroups"]);
    if stopped {
        fields.insert(0, field(EDITED, "Stop", Some("true"), Some("false")));
        t = EDITED;
    }
    let named = |v: Option<&Value>, key: &str| -> Vec<(String, Value)> {
        v.and_then(|v| v[key].as_array())
            .into_iter()
            .flatten()
            .map(|g| (g["Name"].as_str().unwrap_or("").to_string(), g.clone()))
            .collect()
    };
    let groups = pair(named(old, "TaskGroups"), named(Some(new), "TaskGroups"))
        .into_iter()
        .map(|(name, o, n)| {
            let updates = plan.get(&name).copied().unwrap_or_default();
            let gt = kind(o.as_ref(), n.as_ref());
            let (fields, objects) = object_diff(o.as_ref(), n.as_ref(), &["Tasks"]);
            let tasks = pair(named(o.as_ref(), "Tasks"), named(n.as_ref(), "Tasks"))
                .into_iter()
                .map(|(name, o, n)| task_diff(name, o.as_ref(), n.as_ref(), &updates))
                .collect();
            GroupDiff {
                kind: gt,
                name,
                fields,
                objects,
                tasks,
                updates: update_names(&updates),
            }
        })
        .collect::<Vec<_>>();
    let diff = JobDiff {
        kind: t,
        id: new["ID"].clone(),
        fields,
        objects,
        task_groups: groups,
    };
    // Every object's keys in name order, as the answer has always had them.
    serde_json::to_value(diff).unwrap_or_default()
}

fn task_diff(name: String, old: Option<&Value>, new: Option<&Value>, u: &GroupUpdates) -> TaskDiff {
    let t = kind(old, new);
    let annotation = match t {
        ADDED => Some("forces create"),
        DELETED => Some("forces destroy"),
        EDITED if u.destructive > 0 || u.place > 0 => Some("forces create/destroy update"),
        EDITED => Some("forces in-place update"),
        _ => None,
    };
    let (fields, objects) = object_diff(old, new, &[]);
    TaskDiff {
        kind: t,
        name,
        fields,
        objects,
        annotations: annotation.map(|a| [a]),
    }
}

/// The diff's `Updates` of a group: Nomad's update type → allocations.
fn update_names(u: &GroupUpdates) -> BTreeMap<&'static str, u32> {
    [
        ("create", u.place),
        ("destroy", u.stop),
        ("in-place update", u.in_place),
        ("create/destroy update", u.destructive),
        ("ignore", u.ignore),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .collect()
}

/// Items of both sides by name, in the new side's order, then those only the old one has.
fn pair(
    old: Vec<(String, Value)>,
    new: Vec<(String, Value)>,
) -> Vec<(String, Option<Value>, Option<Value>)> {
    let mut out: Vec<(String, Option<Value>, Option<Value>)> = new
        .into_iter()
        .map(|(name, n)| {
            let o = old.iter().find(|(o, _)| *o == name).map(|(_, v)| v.clone());
            (name, o, Some(n))
        })
        .collect();
    for (name, o) in old {
        if !out.iter().any(|(n, _, _)| *n == name) {
            out.push((name, Some(o), None));
        }
    }
    out
}

fn field(kind: &'static str, name: &str, old: Option<&str>, new: Option<&str>) -> FieldDiff {
    FieldDiff {
        kind,
        name: name.to_string(),
        old: old.unwrap_or("").to_string(),
        new: new.unwrap_or("").to_string(),
        annotations: None,
    }
}

/// A scalar as Nomad's diff writes it: a string as it is, anything else as JSON.
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

/// The fields and objects of an object's diff, every key but `skip`, in name order. An added or
/// deleted object shows all it holds; an edited one only what changed.
fn object_diff(
    old: Option<&Value>,
    new: Option<&Value>,
    skip: &[&str],
) -> (Vec<FieldDiff>, Vec<ObjectDiff>) {
    let empty = Map::new();
    let o = old.and_then(Value::as_object).unwrap_or(&empty);
    let n = new.and_then(Value::as_object).unwrap_or(&empty);
    let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    let (mut fields, mut objects) = (Vec::new(), Vec::new());
    for key in keys.into_iter().filter(|k| !skip.contains(&k.as_str())) {
        let (ov, nv) = (present(o.get(key)), present(n.get(key)));
        if ov == nv {
            continue;
        }
        let is_object = |v: Option<&Value>| v.is_some_and(Value::is_object);
        if is_object(ov) || is_object(nv) {
            if FLAT_MAPS.contains(&key.as_str()) {
                entries_diff(key, ov, nv, &mut fields);
            } else {
                let (fields, objects_in) = object_diff(ov, nv, &[]);
                objects.push(ObjectDiff {
                    kind: kind(ov, nv),
                    name: key.clone(),
                    fields,
                    objects: objects_in,
                });
            }
        } else if ov.is_some_and(Value::is_array) || nv.is_some_and(Value::is_array) {
            list_diff(key, ov, nv, &mut fields, &mut objects);
        } else {
            let (os, ns) = (ov.map(scalar), nv.map(scalar));
            fields.push(field(kind(ov, nv), key, os.as_deref(), ns.as_deref()));
        }
    }
    (fields, objects)
}

/// `Env[KEY]`-style fields of a map's entries.
fn entries_diff(key: &str, old: Option<&Value>, new: Option<&Value>, fields: &mut Vec<FieldDiff>) {
    let empty = Map::new();
    let o = old.and_then(Value::as_object).unwrap_or(&empty);
    let n = new.and_then(Value::as_object).unwrap_or(&empty);
    let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    for k in keys {
        let (ov, nv) = (present(o.get(k)), present(n.get(k)));
        if ov != nv {
            let (os, ns) = (ov.map(scalar), nv.map(scalar));
            let name = format!("{key}[{k}]");
            fields.push(field(kind(ov, nv), &name, os.as_deref(), ns.as_deref()));
        }
    }
}

/// `Key[i]` items of a list: scalars as fields, objects as objects.
fn list_diff(
    key: &str,
    old: Option<&Value>,
    new: Option<&Value>,
    fields: &mut Vec<FieldDiff>,
    objects: &mut Vec<ObjectDiff>,
) {
    let none = Vec::new();
    let o = old.and_then(Value::as_array).unwrap_or(&none);
    let n = new.and_then(Value::as_array).unwrap_or(&none);
    for i in 0..o.len().max(n.len()) {
        let (ov, nv) = (present(o.get(i)), present(n.get(i)));
        if ov == nv {
            continue;
        }
        let name = format!("{key}[{i}]");
        if ov.is_some_and(|v| v.is_object() || v.is_array())
            || nv.is_some_and(|v| v.is_object() || v.is_array())
        {
            let (fields, objects_in) = object_diff(ov, nv, &[]);
            objects.push(ObjectDiff {
                kind: kind(ov, nv),
                name,
                fields,
                objects: objects_in,
            });
        } else {
            let (os, ns) = (ov.map(scalar), nv.map(scalar));
            fields.push(field(kind(ov, nv), &name, os.as_deref(), ns.as_deref()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(mark: &str) -> Value {
        json!({
            "ID": "web",
            "Priority": 50,
            "TaskGroups": [{
                "Name": "g",
                "Count": 1,
                "Tasks": [{
                    "Name": "t",
                    "Env": {"MARK": mark},
                    "Config": {"command": "/bin/sh", "args": ["-c", "sleep 1"]},
                }],
            }],
        })
    }

    fn groups(u: GroupUpdates) -> BTreeMap<String, GroupUpdates> {
        [("g".to_string(), u)].into_iter().collect()
    }

    /// A changed env entry is a field `Env[KEY]` of the task, whose annotation says what the
    /// group's update forces; what did not change is not listed.
    #[test]
    fn an_edit_lists_only_what_changed_under_its_task() {
        let u = GroupUpdates {
            destructive: 1,
            ..GroupUpdates::default()
        };
        let mut new = job("b");
        new["TaskGroups"][0]["Tasks"][0]["Config"]["args"][1] = json!("sleep 2");
        let d = job_diff(Some(&job("a")), false, &new, &groups(u));
        assert_eq!(d["Type"], "Edited");
        assert_eq!(d["Fields"], json!([]));
        let g = &d["TaskGroups"][0];
        assert_eq!((&g["Type"], &g["Fields"]), (&json!("Edited"), &json!([])));
        assert_eq!(g["Updates"], json!({"create/destroy update": 1}));
        let t = &g["Tasks"][0];
        assert_eq!(t["Annotations"], json!(["forces create/destroy update"]));
        assert_eq!(
            t["Fields"],
            json!([{"Type": "Edited", "Name": "Env[MARK]", "Old": "a", "New": "b", "Annotations": null}])
        );
        let config = &t["Objects"][0];
        assert_eq!(config["Name"], "Config");
        assert_eq!(config["Fields"][0]["Name"], "args[1]");
        assert_eq!(config["Fields"][0]["New"], "sleep 2");
    }

    /// A new job is added whole; the same job again is `None` throughout; a stopped one run
    /// again is edited by its `Stop`.
    #[test]
    fn added_unchanged_and_stopped_jobs() {
        let place = GroupUpdates {
            place: 1,
            ..GroupUpdates::default()
        };
        let d = job_diff(None, false, &job("a"), &groups(place));
        assert_eq!(d["Type"], "Added");
        assert_eq!(d["TaskGroups"][0]["Type"], "Added");
        assert_eq!(
            d["TaskGroups"][0]["Tasks"][0]["Annotations"],
            json!(["forces create"])
        );
        let d = job_diff(
            Some(&job("a")),
            false,
            &job("a"),
            &groups(GroupUpdates::default()),
        );
        assert_eq!(d["Type"], "None");
        assert_eq!(d["TaskGroups"][0]["Tasks"][0]["Annotations"], Value::Null);
        let d = job_diff(Some(&job("a")), true, &job("a"), &groups(place));
        assert_eq!(d["Type"], "Edited");
        assert_eq!(d["Fields"][0]["Name"], "Stop");
        assert_eq!(d["Fields"][0]["New"], "false");
    }
}
