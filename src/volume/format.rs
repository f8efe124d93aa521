//! The CLI's text for host volumes, as Nomad prints it. Pure functions of the API's JSON answer
//! and the time to show, so the output is tested exactly.

use chrono::{DateTime, FixedOffset};
use serde_json::Value;

use super::spec::humanize_bytes;

/// `nodeward volume create <file>`: `answer` is the API's `{"Volume": {...}, "Warnings": ""}`.
pub fn create_output(answer: &Value, now: &DateTime<FixedOffset>) -> String {
    output("Created", answer, now)
}

/// `nodeward volume register <file>`.
pub fn register_output(answer: &Value, now: &DateTime<FixedOffset>) -> String {
    output("Registered", answer, now)
}

fn output(verb: &str, answer: &Value, now: &DateTime<FixedOffset>) -> String {
    let v = answer.get("Volume").unwrap_or(answer);
    let s = |key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let id = s("ID");
    let short: String = id.chars().take(8).collect();
    let state = s("State");
    let mut out = format!("==> {verb} host volume {} with ID {id}\n", s("Name"));
    if state == "ready" {
        out.push_str(&format!("  ✓ Host volume {short:?} ready\n"));
    } else {
        out.push_str(&format!("  ! Host volume {short:?} is {state}\n"));
    }
    if let Some(w) = answer.get("Warnings").and_then(Value::as_str) {
        for line in w.lines().filter(|l| !l.is_empty()) {
            out.push_str(&format!("  ! Warning: {line}\n"));
        }
    }
    out.push('\n');
    out.push_str(&format!("    {}\n", now.format("%Y-%m-%dT%H:%M:%S%:z")));
    let capacity = humanize_bytes(v.get("CapacityBytes").and_then(Value::as_u64).unwrap_or(0));
    let rows = [
        ("ID", id.clone()),
        ("Name", s("Name")),
        ("Namespace", s("Namespace")),
        ("Plugin ID", s("PluginID")),
        ("Node ID", s("NodeID")),
        ("Node Pool", s("NodePool")),
        ("Capacity", capacity),
        ("State", state.clone()),
        ("Host Path", s("HostPath")),
    ];
    out.push_str(&key_value_table(&rows, "    "));
    out
}

/// `Key = value` lines with the `=` aligned, each prefixed by `indent`.
pub fn key_value_table(rows: &[(&str, String)], indent: &str) -> String {
    let width = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{indent}{k:<width$} = {v}\n"))
        .collect()
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
}
