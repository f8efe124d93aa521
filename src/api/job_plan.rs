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

use serde_json::{json, Map, Value};
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
        let updates: Map<String, Value> = plan
            .groups
            .iter()
            .map(|(g, u)| (g.clone(), desired_updates(u)))
            .collect();
        Response::json(json!({
            "Annotations": {"DesiredTGUpdates": updates, "PreemptedAllocs": null},
            "FailedTGAllocs": super::evaluations::failed_tg_allocs(&plan.failures, &a.config.datacenter),
            "JobModifyIndex": plan.modify_index,
            "CreatedEvals": null,
            "Diff": job_diff(old.as_ref(), stopped, &new, &plan.groups),
            "NextPeriodicLaunch": null,
            "Warnings": parsed.warnings.join("\n"),
        }))
    });
    let post = plan.clone();
    r.put("/v1/job/:id/plan", move |req| plan(req));
    r.post("/v1/job/:id/plan", move |req| post(req));
}

/// Nomad's `DesiredUpdates` of one group.
fn desired_updates(u: &GroupUpdates) -> Value {
    json!({
        "Ignore": u.ignore,
        "Place": u.place,
        "Migrate": 0,
        "Stop": u.stop,
        "InPlaceUpdate": u.in_place,
        "DestructiveUpdate": u.destructive,
        "Canary": 0,
        "Preemptions": 0,
    })
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
            let tasks: Vec<Value> = pair(named(o.as_ref(), "Tasks"), named(n.as_ref(), "Tasks"))
                .into_iter()
                .map(|(name, o, n)| task_diff(&name, o.as_ref(), n.as_ref(), &updates))
                .collect();
            json!({
                "Type": gt,
                "Name": name,
                "Fields": fields,
                "Objects": objects,
                "Tasks": tasks,
                "Updates": update_names(&updates),
            })
        })
        .collect::<Vec<_>>();
    json!({
        "Type": t,
        "ID": new["ID"],
        "Fields": fields,
        "Objects": objects,
        "TaskGroups": groups,
    })
}

fn task_diff(name: &str, old: Option<&Value>, new: Option<&Value>, u: &GroupUpdates) -> Value {
    let t = kind(old, new);
    let annotation = match t {
        ADDED => Some("forces create"),
        DELETED => Some("forces destroy"),
        EDITED if u.destructive > 0 || u.place > 0 => Some("forces create/destroy update"),
        EDITED => Some("forces in-place update"),
        _ => None,
    };
    let (fields, objects) = object_diff(old, new, &[]);
    json!({
        "Type": t,
        "Name": name,
        "Fields": fields,
        "Objects": objects,
        "Annotations": annotation.map(|a| vec![a]),
    })
}

/// The diff's `Updates` of a group: Nomad's update type → allocations.
fn update_names(u: &GroupUpdates) -> Map<String, Value> {
    [
        ("create", u.place),
        ("destroy", u.stop),
        ("in-place update", u.in_place),
        ("create/destroy update", u.destructive),
        ("ignore", u.ignore),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(k, n)| (k.to_string(), json!(n)))
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

fn field(t: &str, name: &str, old: Option<&str>, new: Option<&str>) -> Value {
    json!({
        "Type": t,
        "Name": name,
        "Old": old.unwrap_or(""),
        "New": new.unwrap_or(""),
        "Annotations": null,
    })
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
) -> (Vec<Value>, Vec<Value>) {
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
                let (f, ob) = object_diff(ov, nv, &[]);
                objects.push(json!({
                    "Type": kind(ov, nv),
                    "Name": key,
                    "Fields": f,
                    "Objects": ob,
                }));
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
fn entries_diff(key: &str, old: Option<&Value>, new: Option<&Value>, fields: &mut Vec<Value>) {
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
    fields: &mut Vec<Value>,
    objects: &mut Vec<Value>,
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
            let (f, ob) = object_diff(ov, nv, &[]);
            objects.push(json!({"Type": kind(ov, nv), "Name": name, "Fields": f, "Objects": ob}));
        } else {
            let (os, ns) = (ov.map(scalar), nv.map(scalar));
            fields.push(field(kind(ov, nv), &name, os.as_deref(), ns.as_deref()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
