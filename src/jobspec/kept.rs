//! The no-effect settings of a job, kept as registered (spec jobspec.md, "The rule": accepted,
//! kept in the job as registered, and warned once).
//!
//! `update`, `reschedule`, `affinity`, `service` and the other no-effect rows of [`super::table`]
//! change nothing on one node, but they are part of the job its author wrote: `GET /v1/job/:id`
//! and `job inspect` show them, the state file keeps them, and the job read back through
//! `POST /v1/jobs` is the same job. They are kept in Nomad's API shape, beside the fields
//! nodeward reads, at the level they were written: [`Kept`] on the job, each group and each task.
//!
//! - From JSON, a field by its Nomad API name (the table's: `Update`, `ReschedulePolicy`,
//!   `Affinities`...) is kept as given ([`take_json`]); one with Go's "not set" value (`null`,
//!   `[]`, `{}`...) is dropped, as nothing is to keep.
//! - From HCL, the block or attribute is turned into what Nomad's API writes for it
//!   ([`from_hcl`]): names in PascalCase (`min_healthy_time` is `MinHealthyTime`, with Nomad's
//!   own names where they differ: an affinity's `attribute` is `LTarget`, a service's `port` is
//!   `PortLabel`), durations in nanoseconds, repeated blocks as lists (`Affinities`, `Checks`),
//!   a block's label as its `Name` (a spread `target`'s as its `Value`). Maps written as
//!   attribute values (`meta = {...}`) and the body of a scaling `policy` keep their keys as
//!   written, as Nomad keeps them.
//!
//! Nothing reads these values: they are stored and shown, never checked beyond HCL's own
//! syntax and a duration's spelling.

use std::collections::BTreeMap;

use hcl::edit::structure::{Block, Body, Structure};
use hcl::edit::Span;
use serde::{Deserialize, Deserializer};
use serde_json::{Number, Value};

use super::invalid;
use super::shared::Level;
use super::table::{Entry, Shape as TableShape};
use super::JobspecError;
use crate::hcl::Source;

/// The no-effect settings of one level of a job, by Nomad API name.
pub type Kept = BTreeMap<String, Value>;

/// How a no-effect name is written in Nomad's API at a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// One object (an unlabeled block) or value (an attribute).
    One,
    /// A list of objects, one per block.
    Many,
}

/// No-effect names that are secrets: warned, never kept (Nomad clears them at registration).
pub const SECRETS: &[&str] = &["consul_token", "vault_token"];

/// The no-effect rows of the schema table ([`super::table`]) kept at `level`: all but the
/// [`SECRETS`]. A task's `identity` is `Identity` unlabeled and `Identities` labeled.
fn kept_rows(level: Level) -> impl Iterator<Item = &'static Entry> {
    super::table::no_effect(level)
        .map(|(e, _)| e)
        .filter(|e| !SECRETS.contains(&e.hcl))
}

/// The API name and shape of `name` written at `level`; `labeled`: the block has a label.
fn api_name(level: Level, name: &str, labeled: bool) -> Option<(&'static str, Shape)> {
    let mut found = kept_rows(level).filter(|e| e.hcl == name);
    let first = found.next()?;
    let pick = match found.next() {
        Some(second) if labeled => second,
        _ => first,
    };
    let shape = match pick.shape {
        TableShape::Repeated | TableShape::Labelled => Shape::Many,
        _ => Shape::One,
    };
    Some((pick.api, shape))
}

/// The HCL name a kept API name is warned by, at `level`.
fn hcl_name(level: Level, api: &str) -> Option<&'static str> {
    kept_rows(level).find(|e| e.api == api).map(|e| e.hcl)
}

/// Attributes whose value is a duration: a string in Go's syntax from HCL, nanoseconds in the API.
const DURATIONS: &[&str] = &[
    "min_healthy_time",
    "healthy_deadline",
    "progress_deadline",
    "stagger",
    "interval",
    "timeout",
    "delay",
    "max_delay",
    "grace",
    "lost_after",
    "stop_on_client_after",
    "max_client_disconnect",
    "stop_after_client_disconnect",
    "success_before_passing",
];

/// Names that Nomad's API spells otherwise than the PascalCase of the HCL name.
const RENAMED: &[(&str, &str)] = &[
    ("attribute", "LTarget"),
    ("value", "RTarget"),
    ("operator", "Operand"),
    ("port", "PortLabel"),
    ("check", "Checks"),
    ("constraint", "Constraints"),
    ("affinity", "Affinities"),
    ("target", "SpreadTarget"),
    ("region", "Regions"),
    ("link", "Links"),
    ("aud", "Audience"),
];

/// Blocks that are lists in Nomad's API even when written once.
const LISTS: &[&str] = &[
    "check",
    "affinity",
    "constraint",
    "target",
    "region",
    "link",
];

/// Blocks whose body Nomad keeps as a free-form map (keys as written).
const FREE_FORM: &[&str] = &["policy", "meta", "header"];

/// `snake_case` as Nomad's API spells it: `MinHealthyTime`, `ID`, `TTL`, `UI`.
fn pascal(name: &str) -> String {
    const UPPER: &[&str] = &[
        "id", "ttl", "ui", "tls", "ip", "url", "cpu", "mb", "grpc", "http",
    ];
    name.split('_')
        .map(|part| {
            if UPPER.contains(&part) {
                part.to_ascii_uppercase()
            } else {
                let mut chars = part.chars();
                chars
                    .next()
                    .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                    .unwrap_or_default()
            }
        })
        .collect()
}

/// The API key of a name inside a kept block: an affinity's `attribute`, `value` and
/// `operator` are `LTarget`, `RTarget` and `Operand`, as a constraint's; elsewhere (a spread's
/// `attribute`) they are spelled as written.
fn key_in(parent: &str, name: &str) -> String {
    if !matches!(parent, "affinity" | "constraint")
        && matches!(name, "attribute" | "value" | "operator")
    {
        return pascal(name);
    }
    RENAMED
        .iter()
        .find(|(n, _)| *n == name)
        .map_or_else(|| pascal(name), |(_, api)| api.to_string())
}

/// A block (a task's `device`) as Nomad's API writes it, as the no-effect blocks are kept: its
/// label as `Name`, its `constraint` and `affinity` blocks as `Constraints` and `Affinities`.
pub(crate) fn block_value(src: &Source, what: &str, block: &Block) -> Result<Value, JobspecError> {
    let collect = Collect::new(src, Level::Task);
    Ok(object(collect.block(what, block.ident.as_str(), block)?))
}

/// One removed structure of `level` as `(api name, value)`, where `what` names its parent in
/// messages. Blocks of a [`Shape::Many`] name are pushed onto one list by [`Collect::add`].
pub(crate) struct Collect<'s> {
    src: &'s Source,
    level: Level,
    pub kept: Kept,
}

impl<'s> Collect<'s> {
    pub fn new(src: &'s Source, level: Level) -> Self {
        Collect {
            src,
            level,
            kept: Kept::new(),
        }
    }

    /// Keeps `structure`, a no-effect name of this level taken out of `what`.
    pub fn add(&mut self, what: &str, structure: &Structure) -> Result<(), JobspecError> {
        match structure {
            Structure::Attribute(attr) => {
                let name = attr.key.as_str();
                let Some((api, _)) = api_name(self.level, name, false) else {
                    return Ok(());
                };
                let value = self.src.attr_value(what, attr)?;
                let value = self.duration(what, name, value, attr.span())?;
                self.kept.insert(api.into(), value);
            }
            Structure::Block(block) => {
                let name = block.ident.as_str();
                let labeled = !block.labels.is_empty();
                let Some((api, shape)) = api_name(self.level, name, labeled) else {
                    return Ok(());
                };
                let mut value = self.block(what, name, block)?;
                if (self.level, name) == (Level::Task, "scaling") {
                    // `scaling "cpu"` is Nomad's policy of type `vertical_cpu`.
                    if let Some(Value::String(label)) = value.remove("Name") {
                        value.insert("Type".into(), Value::String(format!("vertical_{label}")));
                    }
                }
                let value = object(value);
                match shape {
                    Shape::One => {
                        self.kept.insert(api.into(), value);
                    }
                    Shape::Many => push(&mut self.kept, api, value),
                }
            }
        }
        Ok(())
    }

    /// A block as its API object: its label as `Name` (a spread target's as `Value`).
    fn block(&self, what: &str, name: &str, block: &Block) -> Result<Kept, JobspecError> {
        let what = format!("{name} block of {what}");
        let mut out = self.body(&what, name, &block.body)?;
        if let Some(label) = block.labels.first() {
            let key = if name == "target" { "Value" } else { "Name" };
            out.insert(key.into(), Value::String(label.as_str().to_string()));
        }
        Ok(out)
    }

    fn body(&self, what: &str, parent: &str, body: &Body) -> Result<Kept, JobspecError> {
        let mut out = Kept::new();
        for structure in body.iter() {
            match structure {
                Structure::Attribute(attr) => {
                    let name = attr.key.as_str();
                    let value = self.src.attr_value(what, attr)?;
                    let value = self.duration(what, name, value, attr.span())?;
                    // A block's list name (`Affinities`) is not an attribute's: numa's
                    // `affinity = "prefer"` is its `Affinity`.
                    let key = if LISTS.contains(&name) {
                        pascal(name)
                    } else {
                        key_in(parent, name)
                    };
                    out.insert(key, value);
                }
                Structure::Block(inner) => {
                    let name = inner.ident.as_str();
                    if FREE_FORM.contains(&name) {
                        let free =
                            self.free_form(&format!("{name} block of {what}"), &inner.body)?;
                        out.insert(pascal(name), free);
                        continue;
                    }
                    let value = object(self.block(what, name, inner)?);
                    let key = key_in(parent, name);
                    if LISTS.contains(&name) || out.get(&key).is_some_and(Value::is_array) {
                        push(&mut out, &key, value);
                    } else if let Some(first) = out.remove(&key) {
                        // Written twice: a list, as Nomad's decoder makes of a repeated block.
                        out.insert(key, Value::Array(vec![first, value]));
                    } else {
                        out.insert(key, value);
                    }
                }
            }
        }
        Ok(out)
    }

    /// A body Nomad keeps as a map: keys as written; a block is an object under its name, and
    /// under each of its labels in turn (`check "cpu" {..}` is `{"check": {"cpu": {..}}}`, as
    /// HCL's JSON form writes it); a block written twice is a list.
    fn free_form(&self, what: &str, body: &Body) -> Result<Value, JobspecError> {
        let mut out = Kept::new();
        for structure in body.iter() {
            match structure {
                Structure::Attribute(attr) => {
                    out.insert(attr.key.to_string(), self.src.attr_value(what, attr)?);
                }
                Structure::Block(inner) => {
                    let ident = inner.ident.as_str();
                    let mut value =
                        self.free_form(&format!("{ident} block of {what}"), &inner.body)?;
                    for label in inner.labels.iter().rev() {
                        value = object(Kept::from([(label.as_str().to_string(), value)]));
                    }
                    match out.get_mut(ident) {
                        Some(Value::Object(existing)) if !inner.labels.is_empty() => {
                            if let Value::Object(new) = value {
                                existing.extend(new);
                            }
                        }
                        Some(_) => push(&mut out, ident, value),
                        None => {
                            out.insert(ident.to_string(), value);
                        }
                    }
                }
            }
        }
        Ok(object(out))
    }

    /// `value` of attribute `name`: a duration string becomes nanoseconds.
    fn duration(
        &self,
        what: &str,
        name: &str,
        value: Value,
        span: Option<std::ops::Range<usize>>,
    ) -> Result<Value, JobspecError> {
        let Value::String(text) = &value else {
            return Ok(value);
        };
        if !DURATIONS.contains(&name) {
            return Ok(value);
        }
        let d = crate::util::duration::parse(text).map_err(|e| {
            invalid(format!(
                "invalid duration for {name:?} in {what} at line {}: {e}",
                self.src.line(span)
            ))
        })?;
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Ok(Value::Number(Number::from(nanos)))
    }
}

/// Appends `value` to the list at `key`, making one of a value already there.
fn push(map: &mut Kept, key: &str, value: Value) {
    match map.get_mut(key) {
        Some(Value::Array(items)) => items.push(value),
        Some(other) => {
            let first = std::mem::take(other);
            *other = Value::Array(vec![first, value]);
        }
        None => {
            map.insert(key.into(), Value::Array(vec![value]));
        }
    }
}

fn object(map: Kept) -> Value {
    Value::Object(map.into_iter().collect())
}

/// The JSON half: moves the no-effect fields of `level` out of `extra` (the fields the raw job
/// does not read) into the returned [`Kept`]; each one with a value is named by its HCL name in
/// `warned`, in the order met, for one warning per name.
pub(crate) fn take_json(
    level: Level,
    extra: &mut super::shared::Extra,
    warned: &mut Vec<&'static str>,
) -> Kept {
    let mut kept = Kept::new();
    let secrets = super::table::no_effect(level).filter(|(e, _)| SECRETS.contains(&e.hcl));
    for (row, _) in secrets {
        let set = extra
            .remove(row.api)
            .is_some_and(|v| !super::shared::is_empty(&v));
        if set && !warned.contains(&row.hcl) {
            warned.push(row.hcl);
        }
    }
    let names: Vec<String> = extra
        .keys()
        .filter(|k| hcl_name(level, k).is_some())
        .cloned()
        .collect();
    for api in names {
        let value = extra.remove(&api).unwrap_or(Value::Null);
        if super::shared::is_empty(&value) {
            continue;
        }
        if let Some(name) = hcl_name(level, &api) {
            if !warned.contains(&name) {
                warned.push(name);
            }
        }
        kept.insert(api, value);
    }
    kept
}

fn deserialize_level<'de, D: Deserializer<'de>>(d: D, level: Level) -> Result<Kept, D::Error> {
    let mut all = BTreeMap::<String, Value>::deserialize(d)?;
    all.retain(|k, _| hcl_name(level, k).is_some());
    Ok(all)
}

/// The domain types' `kept` fields read only the no-effect names of their level: anything else
/// beside the fields a type reads (a state file written by a later version) is not kept.
pub(crate) fn job_level<'de, D: Deserializer<'de>>(d: D) -> Result<Kept, D::Error> {
    deserialize_level(d, Level::Job)
}

pub(crate) fn group_level<'de, D: Deserializer<'de>>(d: D) -> Result<Kept, D::Error> {
    deserialize_level(d, Level::Group)
}

pub(crate) fn task_level<'de, D: Deserializer<'de>>(d: D) -> Result<Kept, D::Error> {
    deserialize_level(d, Level::Task)
}

impl super::Job {
    /// Whether `self` and `other` are the same job but for their no-effect settings: what
    /// Nomad's scheduler updates in place, the allocations running on.
    pub fn eq_but_kept(&self, other: &super::Job) -> bool {
        fn bare(job: &super::Job) -> super::Job {
            let mut job = job.clone();
            job.kept.clear();
            for group in &mut job.task_groups {
                group.kept.clear();
                group.ephemeral_disk.sticky = false;
                group.ephemeral_disk.migrate = false;
                for task in &mut group.tasks {
                    task.kept.clear();
                }
            }
            job
        }
        self.task_groups.len() == other.task_groups.len() && bare(self) == bare(other)
    }
}

/// What the HCL walk kept, by where it was written: the job's, each group's by name and each
/// task's by group and task name (names are unique; validation refuses a job where they are
/// not).
#[derive(Debug, Default)]
pub struct KeptHcl {
    pub job: Kept,
    pub groups: BTreeMap<String, Kept>,
    pub tasks: BTreeMap<(String, String), Kept>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_spelled_as_the_api_spells_them() {
        assert_eq!(pascal("min_healthy_time"), "MinHealthyTime");
        assert_eq!(pascal("ui"), "UI");
        assert_eq!(pascal("task_id"), "TaskID");
        assert_eq!(key_in("affinity", "attribute"), "LTarget");
        assert_eq!(key_in("spread", "attribute"), "Attribute");
        assert_eq!(key_in("service", "port"), "PortLabel");
        assert_eq!(key_in("check", "value"), "Value");
        assert_eq!(key_in("constraint", "operator"), "Operand");
        assert_eq!(
            api_name(Level::Group, "reschedule", false).unwrap().0,
            "ReschedulePolicy"
        );
        assert_eq!(
            api_name(Level::Job, "reschedule", false).unwrap().0,
            "Reschedule"
        );
        assert_eq!(
            api_name(Level::Task, "identity", false).unwrap().0,
            "Identity"
        );
        assert_eq!(
            api_name(Level::Task, "identity", true).unwrap().0,
            "Identities"
        );
    }

    #[test]
    fn tokens_are_warned_and_never_kept() {
        use crate::jobspec::{hcl, json};
        let src = "job \"j\" {\n  vault_token = \"s.secret\"\n  consul_token = \"c.secret\"\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = \"true\" }\n    }\n  }\n}\n";
        let parsed = hcl::parse_job(src).unwrap();
        assert_eq!(parsed.warnings.len(), 2, "{:?}", parsed.warnings);
        let text = serde_json::to_string(&parsed.job).unwrap();
        assert!(!text.contains("secret"), "{text}");
        let mut v: Value = serde_json::from_str(&text).unwrap();
        v["VaultToken"] = Value::String("s.secret".into());
        let from_json = json::parse_job(v.to_string().as_bytes()).unwrap();
        assert!(!serde_json::to_string(&from_json.job)
            .unwrap()
            .contains("secret"));
        assert_eq!(
            from_json.warnings,
            [super::super::schema::no_effect_warning("vault_token")]
        );
    }

    #[test]
    fn every_no_effect_name_has_an_api_name_at_each_of_its_levels() {
        for level in [Level::Job, Level::Group, Level::Task] {
            for (row, _) in super::super::table::no_effect(level) {
                let name = &row.hcl;
                if SECRETS.contains(name) {
                    assert!(
                        api_name(Level::Job, name, false).is_none(),
                        "{name} is kept"
                    );
                    continue;
                }
                assert!(
                    api_name(level, name, false).is_some(),
                    "{name:?} at {level:?} has no API name"
                );
            }
        }
    }
}
