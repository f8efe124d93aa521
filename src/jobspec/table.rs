//! The jobspec's schema as one table: every block and attribute nodeward knows, where it may be
//! written, how Nomad's API names it, and what nodeward does with it (spec jobspec.md, "The
//! rule": implemented, no effect on one node, or refused).
//!
//! The HCL walker ([`super::hcl`]) takes its lists of accepted names from the implemented rows
//! ([`attrs`], [`blocks`]); the rule ([`super::schema`]) takes the no-effect and refused rows out
//! of the tree before the walk, warned or refused with their line; the kept settings
//! ([`super::kept`]) take the API names of the no-effect rows. JSON is read by the raw types'
//! serde names, which are the API column of the implemented rows. A block moving from "no effect"
//! to "implemented" changes its row's class, and the walker reads it.
//!
//! Blocks read by a module of their own (a network, a periodic, a docker config, an ephemeral
//! disk, a constraint) keep their names there; the table names them where they are written.

use hcl::edit::structure::Block;

use super::shared::Level;
use crate::hcl::{Items, Source};

/// Where a name is written: the body of a job, group or task, or of one of their blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    Job,
    Group,
    Task,
    Restart,
    Volume,
    MountOptions,
    Logs,
    VolumeMount,
    CsiPlugin,
    Resources,
    Lifecycle,
    EphemeralDisk,
    Periodic,
    Parameterized,
    DispatchPayload,
}

impl From<Level> for At {
    fn from(level: Level) -> At {
        match level {
            Level::Job => At::Job,
            Level::Group => At::Group,
            Level::Task => At::Task,
        }
    }
}

/// How a name is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Attr,
    /// One unlabelled block.
    Block,
    /// Blocks with a label, as many as there are labels (`group "web"`).
    Labelled,
    /// An unlabelled block that may be written more than once (`constraint`).
    Repeated,
    /// An attribute holding a map, or a block of the same (`env`, `meta`).
    MapOrBlock,
}

/// The type of an attribute's value (a block's is `Body`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Str,
    Bool,
    Int,
    /// A string in Go's syntax from HCL, integer nanoseconds in the API.
    Duration,
    List,
    Map,
    Body,
}

/// What nodeward does with a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Implemented,
    /// Read and kept in its block, with no effect: warned once where the block is read
    /// ([`super::settings`], [`super::ephemeral_disk`]).
    KeptInBlock,
    /// Accepted, kept as registered and warned once, with this reason.
    NoEffect(&'static str),
    /// Refused with its line: "this node does not support <these things> yet".
    Refused(&'static str),
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub at: At,
    pub hcl: &'static str,
    pub api: &'static str,
    pub shape: Shape,
    pub ty: Type,
    pub class: Class,
}

const DEPLOY: &str =
    "deployments and canaries need a scheduler; a new version replaces the old in place";
const MIGRATE: &str = "there is no other node to migrate allocations to";
const RESCHEDULE: &str = "there is no other node to reschedule allocations on";
const AFFINITY: &str = "there is only one node to choose from";
const SPREAD: &str = "there is only one node to spread over";
const SCALING: &str = "no autoscaler drives this node";
const CONSUL: &str = "this node has no Consul integration";
const DISCONNECT: &str = "a node without servers is never disconnected from them";
const SERVICE: &str = "services are not registered on this node";
const VAULT: &str = "Vault secrets";

/// Every row; for a name with two API names (a task's `identity`: `Identity` unlabelled,
/// `Identities` labelled), the unlabelled row first.
#[rustfmt::skip]
pub const SCHEMA: &[Entry] = {
    use At::*;
    use Class::{Implemented as I, KeptInBlock as K, NoEffect as N, Refused as R};
    use Shape::{Attr as A, Block as B, Labelled as L, MapOrBlock as M, Repeated as P};
    use Type::{Body as O, Bool, Duration as D, Int, List, Map, Str as S};
    const fn e(at: At, hcl: &'static str, api: &'static str, shape: Shape, ty: Type, class: Class) -> Entry {
        Entry { at, hcl, api, shape, ty, class }
    }
    &[
        e(Job, "id", "ID", A, S, I), e(Job, "name", "Name", A, S, I), e(Job, "type", "Type", A, S, I),
        e(Job, "region", "Region", A, S, I), e(Job, "namespace", "Namespace", A, S, I),
        e(Job, "priority", "Priority", A, Int, I), e(Job, "all_at_once", "AllAtOnce", A, Bool, I),
        e(Job, "datacenters", "Datacenters", A, List, I), e(Job, "node_pool", "NodePool", A, S, I),
        e(Job, "meta", "Meta", M, Map, I), e(Job, "group", "TaskGroups", L, O, I),
        e(Job, "constraint", "Constraints", P, O, I), e(Job, "periodic", "Periodic", B, O, I),
        e(Job, "parameterized", "ParameterizedJob", B, O, I),
        e(Job, "update", "Update", B, O, N(DEPLOY)), e(Job, "migrate", "Migrate", B, O, N(MIGRATE)),
        e(Job, "reschedule", "Reschedule", B, O, N(RESCHEDULE)),
        e(Job, "affinity", "Affinities", P, O, N(AFFINITY)), e(Job, "spread", "Spreads", P, O, N(SPREAD)),
        e(Job, "multiregion", "Multiregion", B, O, N("this node is one region")),
        e(Job, "consul", "Consul", B, O, N(CONSUL)), e(Job, "consul_token", "ConsulToken", A, S, N(CONSUL)),
        e(Job, "vault_token", "VaultToken", A, S, N("this node has no Vault integration")),
        e(Job, "ui", "UI", B, O, N("this node has no web UI")), e(Job, "vault", "Vault", B, O, R(VAULT)),

        e(Group, "count", "Count", A, Int, I), e(Group, "shutdown_delay", "ShutdownDelay", A, D, I),
        e(Group, "meta", "Meta", M, Map, I), e(Group, "restart", "RestartPolicy", B, O, I),
        e(Group, "volume", "Volumes", L, O, I), e(Group, "network", "Networks", P, O, I),
        e(Group, "task", "Tasks", L, O, I), e(Group, "constraint", "Constraints", P, O, I),
        e(Group, "ephemeral_disk", "EphemeralDisk", B, O, I),
        e(Group, "update", "Update", B, O, N(DEPLOY)), e(Group, "migrate", "Migrate", B, O, N(MIGRATE)),
        e(Group, "reschedule", "ReschedulePolicy", B, O, N(RESCHEDULE)),
        e(Group, "affinity", "Affinities", P, O, N(AFFINITY)), e(Group, "spread", "Spreads", P, O, N(SPREAD)),
        e(Group, "scaling", "Scaling", B, O, N(SCALING)), e(Group, "consul", "Consul", B, O, N(CONSUL)),
        e(Group, "disconnect", "Disconnect", B, O, N(DISCONNECT)),
        e(Group, "max_client_disconnect", "MaxClientDisconnect", A, D, N(DISCONNECT)),
        e(Group, "stop_after_client_disconnect", "StopAfterClientDisconnect", A, D, N(DISCONNECT)),
        e(Group, "prevent_reschedule_on_lost", "PreventRescheduleOnLost", A, Bool, N(RESCHEDULE)),
        e(Group, "service", "Services", P, O, N(SERVICE)), e(Group, "vault", "Vault", B, O, R(VAULT)),

        e(Task, "driver", "Driver", A, S, I), e(Task, "user", "User", A, S, I),
        e(Task, "kill_signal", "KillSignal", A, S, I), e(Task, "kill_timeout", "KillTimeout", A, D, I),
        e(Task, "leader", "Leader", A, Bool, I), e(Task, "shutdown_delay", "ShutdownDelay", A, D, I),
        e(Task, "env", "Env", M, Map, I), e(Task, "meta", "Meta", M, Map, I),
        e(Task, "config", "Config", B, O, I), e(Task, "lifecycle", "Lifecycle", B, O, I),
        e(Task, "dispatch_payload", "DispatchPayload", B, O, I), e(Task, "logs", "LogConfig", B, O, I),
        e(Task, "volume_mount", "VolumeMounts", P, O, I), e(Task, "csi_plugin", "CSIPluginConfig", B, O, I),
        e(Task, "resources", "Resources", B, O, I), e(Task, "restart", "RestartPolicy", B, O, I),
        e(Task, "constraint", "Constraints", P, O, I),
        e(Task, "affinity", "Affinities", P, O, N(AFFINITY)),
        e(Task, "scaling", "ScalingPolicies", L, O, N(SCALING)), e(Task, "consul", "Consul", B, O, N(CONSUL)),
        e(Task, "identity", "Identity", B, O, N("workload identities are not issued on this node")),
        e(Task, "identity", "Identities", L, O, N("workload identities are not issued on this node")),
        e(Task, "service", "Services", P, O, N(SERVICE)),
        e(Task, "kind", "Kind", A, S, N("Consul Connect is not available on this node")),
        e(Task, "action", "Actions", L, O, N("actions are not run on this node")),
        e(Task, "template", "Templates", P, O, R("templates")), e(Task, "artifact", "Artifacts", P, O, R("artifacts")),
        e(Task, "vault", "Vault", B, O, R(VAULT)),
        // Nomad Enterprise's time-based task execution: run without it, the task would run
        // outside the hours its author gave it.
        e(Task, "schedule", "Schedule", B, O, R("time-based task schedules")),

        e(Restart, "attempts", "Attempts", A, Int, I), e(Restart, "interval", "Interval", A, D, I),
        e(Restart, "delay", "Delay", A, D, I), e(Restart, "mode", "Mode", A, S, I),
        e(Restart, "render_templates", "RenderTemplates", A, Bool, K),
        e(Volume, "type", "Type", A, S, I), e(Volume, "source", "Source", A, S, I),
        e(Volume, "read_only", "ReadOnly", A, Bool, I), e(Volume, "access_mode", "AccessMode", A, S, I),
        e(Volume, "attachment_mode", "AttachmentMode", A, S, I), e(Volume, "per_alloc", "PerAlloc", A, Bool, I),
        e(Volume, "sticky", "Sticky", A, Bool, K), e(Volume, "mount_options", "MountOptions", B, O, I),
        e(MountOptions, "fs_type", "FSType", A, S, I), e(MountOptions, "mount_flags", "MountFlags", A, List, I),
        e(Logs, "max_files", "MaxFiles", A, Int, I), e(Logs, "max_file_size", "MaxFileSizeMB", A, Int, I),
        e(Logs, "disabled", "Disabled", A, Bool, I), e(Logs, "enabled", "Enabled", A, Bool, I),
        e(VolumeMount, "volume", "Volume", A, S, I), e(VolumeMount, "destination", "Destination", A, S, I),
        e(VolumeMount, "read_only", "ReadOnly", A, Bool, I),
        e(VolumeMount, "propagation_mode", "PropagationMode", A, S, I),
        e(VolumeMount, "selinux_label", "SELinuxLabel", A, S, K),
        e(CsiPlugin, "id", "ID", A, S, I), e(CsiPlugin, "type", "Type", A, S, I),
        e(CsiPlugin, "mount_dir", "MountDir", A, S, I),
        e(CsiPlugin, "stage_publish_base_dir", "StagePublishBaseDir", A, S, I),
        e(CsiPlugin, "health_timeout", "HealthTimeout", A, D, I),
        e(Lifecycle, "hook", "Hook", A, S, I), e(Lifecycle, "sidecar", "Sidecar", A, Bool, I),
        e(Resources, "cpu", "CPU", A, Int, I), e(Resources, "memory", "MemoryMB", A, Int, I),
        e(Resources, "memory_max", "MemoryMaxMB", A, Int, I), e(Resources, "cores", "Cores", A, Int, I),
        e(Resources, "secrets", "SecretsMB", A, Int, I), e(Resources, "device", "Devices", L, O, I),
        e(Resources, "numa", "NUMA", B, O, I),
        e(EphemeralDisk, "size", "SizeMB", A, Int, I), e(EphemeralDisk, "sticky", "Sticky", A, Bool, K),
        e(EphemeralDisk, "migrate", "Migrate", A, Bool, K),
        e(Periodic, "cron", "Spec", A, S, I), e(Periodic, "crons", "Specs", A, List, I),
        e(Periodic, "prohibit_overlap", "ProhibitOverlap", A, Bool, I),
        e(Periodic, "time_zone", "TimeZone", A, S, I), e(Periodic, "enabled", "Enabled", A, Bool, I),
        e(Parameterized, "payload", "Payload", A, S, I),
        e(Parameterized, "meta_required", "MetaRequired", A, List, I),
        e(Parameterized, "meta_optional", "MetaOptional", A, List, I),
        e(DispatchPayload, "file", "File", A, S, I),
    ]
};

/// The rows the walker reads at `at`.
fn implemented(at: At) -> impl Iterator<Item = &'static Entry> {
    SCHEMA
        .iter()
        .filter(move |e| e.at == at && matches!(e.class, Class::Implemented | Class::KeptInBlock))
}

/// The attributes the walker reads in the body of `at`.
pub fn attrs(at: At) -> Vec<&'static str> {
    implemented(at)
        .filter(|e| matches!(e.shape, Shape::Attr | Shape::MapOrBlock))
        .map(|e| e.hcl)
        .collect()
}

/// The blocks the walker reads in the body of `at`.
pub fn blocks(at: At) -> Vec<&'static str> {
    implemented(at)
        .filter(|e| e.shape != Shape::Attr)
        .map(|e| e.hcl)
        .collect()
}

/// The body of `block`, refusing a name not read at `at` (`what` names the body in messages).
pub fn items<'b>(
    src: &Source,
    what: &str,
    block: &'b Block,
    at: At,
) -> Result<Items<'b>, crate::hcl::Error> {
    src.items(what, &block.body, &attrs(at), &blocks(at))
}

/// The no-effect rows written at `level`, in the table's order.
pub fn no_effect(level: Level) -> impl Iterator<Item = (&'static Entry, &'static str)> {
    SCHEMA.iter().filter_map(move |e| match e.class {
        Class::NoEffect(reason) if e.at == At::from(level) => Some((e, reason)),
        _ => None,
    })
}

/// The reason a name has no effect at `level`.
pub fn no_effect_reason(level: Level, name: &str) -> Option<&'static str> {
    no_effect(level)
        .find(|(e, _)| e.hcl == name)
        .map(|(_, r)| r)
}

/// The refused rows written at `level`, each with what it is ("templates"): the end of its
/// message.
pub fn refused_rows(level: Level) -> impl Iterator<Item = (&'static Entry, &'static str)> {
    SCHEMA.iter().filter_map(move |e| match e.class {
        Class::Refused(things) if e.at == At::from(level) => Some((e, things)),
        _ => None,
    })
}

/// What a refused name at `level` is.
pub fn refused(level: Level, name: &str) -> Option<&'static str> {
    refused_rows(level)
        .find(|(e, _)| e.hcl == name)
        .map(|(_, t)| t)
}

/// The reason of a no-effect name, whatever level it was met at (its reason is the same at each).
pub fn any_reason(name: &str) -> Option<&'static str> {
    SCHEMA.iter().find_map(|e| match e.class {
        Class::NoEffect(reason) if e.hcl == name => Some(reason),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_written_once_per_body_but_for_two_api_names() {
        for (i, a) in SCHEMA.iter().enumerate() {
            for b in &SCHEMA[i + 1..] {
                let same = a.at == b.at && a.hcl == b.hcl;
                assert!(
                    !same || (a.shape == Shape::Block && b.shape == Shape::Labelled),
                    "{:?} {:?} is in the table twice",
                    a.at,
                    a.hcl
                );
            }
        }
    }

    #[test]
    fn a_no_effect_name_has_one_reason_at_every_level() {
        for (_, name, reason) in SCHEMA.iter().filter_map(|e| match e.class {
            Class::NoEffect(r) => Some((e.at, e.hcl, r)),
            _ => None,
        }) {
            assert_eq!(any_reason(name), Some(reason), "{name}");
        }
    }

    /// The API column is the raw types' own: an implemented name is a field of its raw type,
    /// a no-effect or refused one is not (it is kept or refused from the unread fields).
    #[test]
    fn the_api_names_are_the_raw_types_fields() {
        use crate::jobspec::raw::*;
        use crate::jobspec::shared::Extra;
        use crate::jobspec::{ephemeral_disk, lifecycle, logs, periodic};
        use serde::de::DeserializeOwned;
        fn unread<T: DeserializeOwned>(api: &str, extra: impl Fn(&T) -> &Extra) -> bool {
            let raw: T = serde_json::from_value(serde_json::json!({ api: null })).unwrap();
            extra(&raw).contains_key(api)
        }
        for e in SCHEMA {
            let api = e.api;
            let unread = match e.at {
                At::Job => unread(api, |r: &RawJob| &r.extra),
                At::Group => unread(api, |r: &RawGroup| &r.extra),
                At::Task => unread(api, |r: &RawTask| &r.extra),
                At::Restart => unread(api, |r: &RawRestart| &r.extra),
                At::Volume => unread(api, |r: &RawVolume| &r.extra),
                At::Logs => unread(api, |r: &logs::RawLogConfig| &r.extra),
                At::VolumeMount => unread(api, |r: &RawVolumeMount| &r.extra),
                At::CsiPlugin => unread(api, |r: &RawCsiPlugin| &r.extra),
                At::Resources => unread(api, |r: &RawResources| &r.extra),
                At::Lifecycle => unread(api, |r: &lifecycle::RawLifecycle| &r.extra),
                At::EphemeralDisk => unread(api, |r: &ephemeral_disk::RawEphemeralDisk| &r.extra),
                At::Periodic => unread(api, |r: &periodic::RawPeriodic| &r.extra),
                At::Parameterized => unread(api, |r: &periodic::RawParameterized| &r.extra),
                At::DispatchPayload => unread(api, |r: &periodic::RawDispatchPayload| &r.extra),
                // `CSIMountOptions` has no unread fields to look in.
                At::MountOptions => continue,
            };
            let read = matches!(e.class, Class::Implemented | Class::KeptInBlock);
            assert_eq!(!unread, read, "{:?} {} ({api})", e.at, e.hcl);
        }
    }
}
