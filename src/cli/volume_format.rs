//! The CLI's text for host volumes, as Nomad prints it. Pure functions of the API's JSON answer
//! and the time to show, so the output is tested exactly.

use chrono::{DateTime, FixedOffset, SecondsFormat};
use serde_json::Value;

use super::format::{key_values, s, short_id};
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
}
