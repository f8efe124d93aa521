//! How the CLI prints things, as pure functions of the API's JSON (and of a time zone, so tests are
//! exact).
//!
//! Tables look like Nomad's (columnize): left-aligned columns as wide as their widest cell, two
//! spaces between columns, the last column not padded. Key/value blocks pad the keys and join with
//! ` = `. Times are RFC 3339 in the local offset with seconds, as in agent.md.

use chrono::{SecondsFormat, TimeZone};
use serde_json::Value;
use std::fmt::Display;

/// Rows of cells as a table; the first row is the header. No trailing newline.
pub fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let lines: Vec<String> = rows
        .iter()
        .map(|row| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i + 1 < row.len() {
                    line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
                } else {
                    line.push_str(cell);
                }
            }
            line.trim_end().to_string()
        })
        .collect();
    lines.join("\n")
}

/// Nomad's lines for one `AllocMetric` (`formatAllocMetrics`), each starting `* `: why no node
/// (here: this node) took a group's allocations.
pub fn alloc_metrics(metric: &Value) -> Vec<String> {
    let count = |key: &str| metric[key].as_u64().unwrap_or(0);
    let pairs = |key: &str| -> Vec<(String, u64)> {
        metric[key]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    if count("NodesEvaluated") == 0 {
        out.push("* No nodes were eligible for evaluation".to_string());
    }
    for (dc, n) in pairs("NodesAvailable") {
        if n == 0 {
            out.push(format!("* No nodes are available in datacenter {dc:?}"));
        }
    }
    for (class, n) in pairs("ClassFiltered") {
        out.push(format!("* Class {class:?}: {n} nodes excluded by filter"));
    }
    for (c, n) in pairs("ConstraintFiltered") {
        out.push(format!("* Constraint {c:?}: {n} nodes excluded by filter"));
    }
    if count("NodesExhausted") > 0 {
        out.push(format!(
            "* Resources exhausted on {} nodes",
            count("NodesExhausted")
        ));
    }
    for (class, n) in pairs("ClassExhausted") {
        out.push(format!("* Class {class:?} exhausted on {n} nodes"));
    }
    for (dim, n) in pairs("DimensionExhausted") {
        out.push(format!("* Dimension {dim:?} exhausted on {n} nodes"));
    }
    for quota in metric["QuotaExhausted"].as_array().into_iter().flatten() {
        out.push(format!(
            "* Quota limit hit {:?}",
            quota.as_str().unwrap_or("")
        ));
    }
    out
}

/// One task group's lines under `job plan` and `job run` when some of its allocations could not
/// be placed: `Task Group "web" (failed to place 2 allocations):` and its [`alloc_metrics`]
/// below it, two spaces further in, all starting with `indent`.
pub fn group_failure(group: &str, metric: &Value, indent: &str) -> Vec<String> {
    let n = metric["CoalescedFailures"].as_u64().unwrap_or(0) + 1;
    let noun = if n == 1 { "allocation" } else { "allocations" };
    let mut out = vec![format!(
        "{indent}Task Group {group:?} (failed to place {n} {noun}):"
    )];
    out.extend(
        alloc_metrics(metric)
            .into_iter()
            .map(|l| format!("{indent}  {l}")),
    );
    out
}

/// `Key = value` lines with the keys padded to the longest. No trailing newline.
pub fn key_values(rows: &[(&str, String)]) -> String {
    let width = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<width$} = {v}").trim_end().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Unix nanoseconds as RFC 3339 with seconds in `tz` (`Z` for a zero offset, as Go prints it).
pub fn rfc3339<Tz>(nanos: i64, tz: &Tz) -> String
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    tz.timestamp_nanos(nanos)
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub use crate::util::short_id;

/// A string field of a JSON object ("" when absent or not a string).
pub fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A field as text whatever its JSON type ("" when absent or null).
pub fn text(v: &Value, key: &str) -> String {
    match v.get(key) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// `Recent Events:` and the table of a task's events, newest first.
pub fn events_table<Tz>(events: &[Value], tz: &Tz) -> String
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    let mut sorted: Vec<&Value> = events.iter().collect();
    // Stable: events with the same time keep their recorded order, reversed.
    sorted.reverse();
    sorted.sort_by_key(|e| std::cmp::Reverse(e.get("Time").and_then(Value::as_i64).unwrap_or(0)));
    let mut rows = vec![vec!["Time".into(), "Type".into(), "Description".into()]];
    for e in sorted {
        let time = e.get("Time").and_then(Value::as_i64).unwrap_or(0);
        let description = match s(e, "DisplayMessage") {
            "" => s(e, "Message"),
            d => d,
        };
        rows.push(vec![
            rfc3339(time, tz),
            s(e, "Type").to_string(),
            description.to_string(),
        ]);
    }
    format!("Recent Events:\n{}", table(&rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::FixedOffset;
    use serde_json::json;

    #[test]
    fn tables_pad_all_but_the_last_column() {
        let rows = vec![
            vec!["ID".to_string(), "Type".into(), "Status".into()],
            vec!["example".to_string(), "service".into(), "running".into()],
            vec!["b".to_string(), "".into(), "".into()],
        ];
        assert_eq!(
            table(&rows),
            "ID       Type     Status\nexample  service  running\nb"
        );
        assert_eq!(
            key_values(&[
                ("ID", "x".into()),
                ("Node Pool", "default".into()),
                ("E", "".into())
            ]),
            "ID        = x\nNode Pool = default\nE         ="
        );
    }

    #[test]
    fn events_are_newest_first_with_local_offset_times() {
        // 2026-03-06T21:31:17Z and earlier.
        let t = 1_772_832_677_000_000_000i64;
        let events = vec![
            json!({"Type": "Started", "Time": t - 40_000_000_000i64, "DisplayMessage": "Task started by client"}),
            json!({"Type": "Plugin became unhealthy", "Time": t - 20_000_000_000i64,
                   "DisplayMessage": "Error: CSI plugin failed probe: plugin reported not ready"}),
            json!({"Type": "Terminated", "Time": t + 123_456_789, "DisplayMessage": "Exit Code: 137, Signal: 9"}),
            json!({"Type": "Restarting", "Time": t + 500_000_000, "DisplayMessage": "Task restarting in 16.104906834s"}),
        ];
        let est = FixedOffset::west_opt(5 * 3600).unwrap();
        let expected = "\
Recent Events:
Time                       Type                     Description
2026-03-06T16:31:17-05:00  Restarting               Task restarting in 16.104906834s
2026-03-06T16:31:17-05:00  Terminated               Exit Code: 137, Signal: 9
2026-03-06T16:30:57-05:00  Plugin became unhealthy  Error: CSI plugin failed probe: plugin reported not ready
2026-03-06T16:30:37-05:00  Started                  Task started by client";
        assert_eq!(events_table(&events, &est), expected);
        assert_eq!(rfc3339(t, &chrono::Utc), "2026-03-06T21:31:17Z");
    }

    #[test]
    fn a_group_failure_counts_the_allocations_and_indents_its_metrics() {
        let metric = json!({"NodesEvaluated": 1, "NodesExhausted": 1, "CoalescedFailures": 1});
        assert_eq!(
            group_failure("web", &metric, "  "),
            [
                "  Task Group \"web\" (failed to place 2 allocations):",
                "    * Resources exhausted on 1 nodes",
            ]
        );
        assert_eq!(
            group_failure("db", &json!({"NodesEvaluated": 0}), ""),
            [
                "Task Group \"db\" (failed to place 1 allocation):",
                "  * No nodes were eligible for evaluation",
            ]
        );
    }

    #[test]
    fn short_ids() {
        assert_eq!(short_id("1e1d4540-14f9-2515"), "1e1d4540");
        assert_eq!(short_id("abc"), "abc");
    }
}
