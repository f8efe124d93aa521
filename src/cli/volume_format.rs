//! The CLI's text for host and CSI volumes, as Nomad prints it. Pure functions of the API's JSON
//! answer and the time to show, so the output is tested exactly.

use chrono::{DateTime, FixedOffset, SecondsFormat};
use serde_json::Value;

use super::format::{key_values, s, short_id, table};
use crate::volume::spec::humanize_bytes;

/// `nodeward volume create <file>`: `answer` is the API's `{"Volume": {...}, "Warnings": ""}`.
pub fn create_output(answer: &Value, now: &DateTime<FixedOffset>) -> String {
    output("Created", answer, now)
}

/// `nodeward volume register <file>`.
pub fn register_output(answer: &Value, now: &DateTime<FixedOffset>) -> String {
    output("Registered", answer, now)
}

fn output(verb: &str, answer: &Value, now: &DateTime<FixedOffset>) -> String {
    let volume = answer.get("Volume").unwrap_or(answer);
    let id = s(volume, "ID");
    let state = s(volume, "State");
    let mut out = format!(
        "==> {verb} host volume {} with ID {id}\n",
        s(volume, "Name")
    );
    if state == "ready" {
        out.push_str(&format!("  ✓ Host volume {:?} ready\n", short_id(id)));
    } else {
        out.push_str(&format!(
            "  ! Host volume {:?} is {state:?}\n",
            short_id(id)
        ));
    }
    out.push('\n');
    // RFC 3339 as Go prints it: `Z` for a zero offset.
    let now = now.to_rfc3339_opts(SecondsFormat::Secs, true);
    out.push_str(&format!("    {now}\n"));
    for line in volume_block(volume).lines() {
        out.push_str(&format!("    {line}\n"));
    }
    let warnings = s(answer, "Warnings");
    if !warnings.is_empty() {
        out.push_str(&format!("\nVolume Warnings:\n{warnings}\n"));
    }
    out
}

/// The key/value block of one volume (`volume status <id>`, and indented in [`create_output`]).
/// No trailing newline.
pub fn volume_block(volume: &Value) -> String {
    let capacity = volume
        .get("CapacityBytes")
        .and_then(Value::as_u64)
        .map(humanize_bytes)
        .unwrap_or_else(|| "<none>".into());
    key_values(&[
        ("ID", s(volume, "ID").into()),
        ("Name", s(volume, "Name").into()),
        ("Namespace", s(volume, "Namespace").into()),
        ("Plugin ID", s(volume, "PluginID").into()),
        ("Node ID", s(volume, "NodeID").into()),
        ("Node Pool", s(volume, "NodePool").into()),
        ("Capacity", capacity),
        ("State", s(volume, "State").into()),
        ("Host Path", s(volume, "HostPath").into()),
    ])
}

// ---- CSI volumes ----

/// The banner of the CSI part of `volume status`.
pub const CSI_BANNER: &str = "Container Storage Interface";

/// `nodeward volume create <file>` of a CSI volume: one line per volume of the answer
/// `{"Volumes": [...]}`, as Nomad prints it.
pub fn csi_create_output(answer: &Value) -> String {
    let mut out = String::new();
    for v in answer
        .get("Volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.push_str(&format!(
            "Created external volume {} with ID {}\n",
            s(v, "ExternalID"),
            s(v, "ID")
        ));
    }
    let warnings = s(answer, "Warnings");
    if !warnings.is_empty() {
        out.push_str(&format!("\nVolume Warnings:\n{warnings}\n"));
    }
    out
}

/// The table of `volume status -type csi`: Nomad's columns, sorted by ID (the API's order). No
/// trailing newline.
pub fn csi_table(stubs: &[Value]) -> String {
    let mut rows = vec![vec![
        "ID".to_string(),
        "Name".into(),
        "Plugin ID".into(),
        "Schedulable".into(),
        "Access Mode".into(),
    ]];
    for v in stubs {
        rows.push(vec![
            s(v, "ID").into(),
            s(v, "Name").into(),
            s(v, "PluginID").into(),
            v.get("Schedulable")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string(),
            s(v, "AccessMode").into(),
        ]);
    }
    table(&rows)
}

/// `volume status <id>` of a CSI volume: Nomad's key/value block, then its allocations. Ends with
/// a newline.
pub fn csi_volume_text(v: &Value) -> String {
    let num = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0).to_string();
    let capacity = match v.get("Capacity").and_then(Value::as_u64) {
        Some(0) | None => "<none>".to_string(),
        Some(b) => humanize_bytes(b),
    };
    let options = v.get("MountOptions").filter(|o| !o.is_null());
    let mount_options = match options {
        None => "<none>".to_string(),
        Some(o) => {
            let mut text = String::new();
            if !s(o, "FSType").is_empty() {
                text = format!("fs_type: {}", s(o, "FSType"));
            }
            let flags: Vec<&str> = o
                .get("MountFlags")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !flags.is_empty() {
                // Mount flags may hold credentials.
                text = format!("{text} flags: [REDACTED]").trim_start().to_string();
            }
            text
        }
    };
    let mut out = key_values(&[
        ("ID", s(v, "ID").into()),
        ("Name", s(v, "Name").into()),
        ("External ID", s(v, "ExternalID").into()),
        ("Plugin ID", s(v, "PluginID").into()),
        ("Provider", s(v, "Provider").into()),
        ("Version", s(v, "ProviderVersion").into()),
        ("Capacity", capacity),
        (
            "Schedulable",
            v.get("Schedulable")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string(),
        ),
        ("Controllers Healthy", num("ControllersHealthy")),
        ("Controllers Expected", num("ControllersExpected")),
        ("Nodes Healthy", num("NodesHealthy")),
        ("Nodes Expected", num("NodesExpected")),
        ("Access Mode", s(v, "AccessMode").into()),
        ("Attachment Mode", s(v, "AttachmentMode").into()),
        ("Mount Options", mount_options),
        ("Namespace", s(v, "Namespace").into()),
    ]);
    out.push_str("\n\nAllocations\n");
    let allocs = v
        .get("Allocations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if allocs.is_empty() {
        out.push_str("No allocations placed\n");
    } else {
        let mut rows = vec![vec![
            "ID".to_string(),
            "Job ID".into(),
            "Task Group".into(),
            "Access".into(),
        ]];
        let writers = v.get("WriteAllocs");
        for a in &allocs {
            let id = s(a, "ID");
            let access = if writers.and_then(|w| w.get(id)).is_some() {
                "write"
            } else {
                "read"
            };
            rows.push(vec![
                short_id(id).into(),
                s(a, "JobID").into(),
                s(a, "TaskGroup").into(),
                access.into(),
            ]);
        }
        out.push_str(&table(&rows));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_output_matches_nomad() {
        let answer = serde_json::json!({
            "Volume": {
                "ID": "1e1d4540-14f9-2515-8502-24d46291717d",
                "Name": "test",
                "Namespace": "default",
                "PluginID": "mkdir",
                "NodeID": "ae118273-5416-3ed7-01dd-10fe8bf49e81",
                "NodePool": "default",
                "CapacityBytes": 47u64 << 20,
                "State": "ready",
                "HostPath": "/var/lib/nodeward/host_volumes/1e1d4540-14f9-2515-8502-24d46291717d",
            },
            "Warnings": "",
        });
        let now = DateTime::parse_from_rfc3339("2024-12-05T17:06:46-05:00").unwrap();
        let want = "\
==> Created host volume test with ID 1e1d4540-14f9-2515-8502-24d46291717d
  ✓ Host volume \"1e1d4540\" ready

    2024-12-05T17:06:46-05:00
    ID        = 1e1d4540-14f9-2515-8502-24d46291717d
    Name      = test
    Namespace = default
    Plugin ID = mkdir
    Node ID   = ae118273-5416-3ed7-01dd-10fe8bf49e81
    Node Pool = default
    Capacity  = 47 MiB
    State     = ready
    Host Path = /var/lib/nodeward/host_volumes/1e1d4540-14f9-2515-8502-24d46291717d
";
        assert_eq!(create_output(&answer, &now), want);
    }

    #[test]
    fn register_output_shows_state_and_warnings() {
        let answer = serde_json::json!({
            "Volume": {"ID": "7c1f0a2b-0000-0000-0000-000000000000", "Name": "existing",
                       "Namespace": "default", "State": "pending", "HostPath": "/srv/existing"},
            "Warnings": "field \"Topology\" is not supported by nodeward and was ignored",
        });
        let now = DateTime::parse_from_rfc3339("2024-12-05T22:06:46+00:00").unwrap();
        let want = "\
==> Registered host volume existing with ID 7c1f0a2b-0000-0000-0000-000000000000
  ! Host volume \"7c1f0a2b\" is \"pending\"

    2024-12-05T22:06:46Z
    ID        = 7c1f0a2b-0000-0000-0000-000000000000
    Name      = existing
    Namespace = default
    Plugin ID =
    Node ID   =
    Node Pool =
    Capacity  = <none>
    State     = pending
    Host Path = /srv/existing

Volume Warnings:
field \"Topology\" is not supported by nodeward and was ignored
";
        assert_eq!(register_output(&answer, &now), want);
    }

    #[test]
    fn csi_outputs_match_nomad() {
        let answer = serde_json::json!({
            "Volumes": [{"ID": "data", "ExternalID": "hp-data"}],
            "Warnings": "",
        });
        assert_eq!(
            csi_create_output(&answer),
            "Created external volume hp-data with ID data\n"
        );
        let stub = serde_json::json!({"ID": "data", "Name": "data", "PluginID": "hostpath",
                                      "Schedulable": true, "AccessMode": ""});
        assert_eq!(
            csi_table(&[stub]),
            "ID    Name  Plugin ID  Schedulable  Access Mode\ndata  data  hostpath   true"
        );
        let volume = serde_json::json!({
            "ID": "data", "Name": "data", "ExternalID": "hp-data", "PluginID": "hostpath",
            "Provider": "nodeward.test.csi", "ProviderVersion": "1.2.3", "Capacity": 1048576,
            "Schedulable": true, "ControllersHealthy": 1, "ControllersExpected": 1,
            "NodesHealthy": 1, "NodesExpected": 1, "AccessMode": "", "AttachmentMode": "",
            "MountOptions": {"FSType": "ext4", "MountFlags": ["password=x"]},
            "Namespace": "default", "Allocations": [],
        });
        let want = "\
ID                   = data
Name                 = data
External ID          = hp-data
Plugin ID            = hostpath
Provider             = nodeward.test.csi
Version              = 1.2.3
Capacity             = 1.0 MiB
Schedulable          = true
Controllers Healthy  = 1
Controllers Expected = 1
Nodes Healthy        = 1
Nodes Expected       = 1
Access Mode          =
Attachment Mode      =
Mount Options        = fs_type: ext4 flags: [REDACTED]
Namespace            = default

Allocations
No allocations placed
";
        assert_eq!(csi_volume_text(&volume), want);
        let mut claimed = volume.clone();
        claimed["Allocations"] =
            serde_json::json!([{"ID": "0b6c8f3e-aaaa", "JobID": "web", "TaskGroup": "g"}]);
        claimed["WriteAllocs"] = serde_json::json!({"0b6c8f3e-aaaa": {}});
        let text = csi_volume_text(&claimed);
        assert!(
            text.ends_with(
                "ID        Job ID  Task Group  Access\n0b6c8f3e  web     g           write\n"
            ),
            "{text}"
        );
    }
}
