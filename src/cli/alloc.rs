//! `alloc status`, `alloc restart`, `alloc signal`, `alloc stop`, `alloc logs`.

use serde_json::{json, Value};
use std::io::Read;

use super::client::enc;
use super::flags::{bool_flag, value_flag, Parsed};
use super::format::{self, key_values, s, short_id};
use super::{failed, CmdError, CmdResult, Ctx, Spec};

pub(super) const COMMANDS: &[&Spec] = &[&STATUS, &RESTART, &SIGNAL, &STOP, &LOGS];

const STATUS: Spec = Spec {
    words: &["alloc", "status"],
    flags: &[bool_flag("json"), bool_flag("stats")],
    args: (1, 1),
    usage: "Usage: nodeward alloc status [-json] [-stats] <alloc id>

  Shows the allocation (a unique ID prefix is enough), its tasks and their recent events.

  -json     Print the API's JSON.
  -stats    Show each task's resource usage (Nomad's Task Resources).",
    run: status,
};

const RESTART: Spec = Spec {
    words: &["alloc", "restart"],
    flags: &[],
    args: (1, 2),
    usage: "Usage: nodeward alloc restart <alloc id> [<task>]

  Restarts the allocation's task, or all its tasks. The restart does not count against the
  restart policy.",
    run: restart,
};

const SIGNAL: Spec = Spec {
    words: &["alloc", "signal"],
    flags: &[value_flag("s")],
    args: (1, 2),
    usage: "Usage: nodeward alloc signal [-s <signal>] <alloc id> [<task>]

  Sends a signal to the allocation's task, or to all its tasks.

  -s SIG    The signal (default SIGKILL), e.g. SIGHUP or HUP.",
    run: signal,
};

const STOP: Spec = Spec {
    words: &["alloc", "stop"],
    flags: &[bool_flag("detach")],
    args: (1, 1),
    usage: "Usage: nodeward alloc stop <alloc id>

  Stops the allocation, killing its tasks.",
    run: stop,
};

const LOGS: Spec = Spec {
    words: &["alloc", "logs"],
    flags: &[
        bool_flag("stderr"),
        bool_flag("f"),
        bool_flag("tail"),
        value_flag("n"),
        value_flag("c"),
    ],
    args: (1, 2),
    usage: "Usage: nodeward alloc logs [-stderr] [-f] [-tail] [-n <lines>] [-c <bytes>] <alloc id> [<task>]

  Prints a task's stdout (or stderr). The task may be left out when the allocation has one.

  -stderr   Print stderr instead of stdout.
  -f        Follow: keep printing as the task writes, until it is dead (or Ctrl-C).
  -tail     Start from the end: the last 10 lines unless -n or -c says otherwise.
  -n N      With -tail, the last N lines.
  -c N      With -tail, the last N bytes.",
    run: logs,
};

fn get_alloc(ctx: &mut Ctx, id: &str) -> Result<Value, CmdError> {
    ctx.client
        .get(&format!("/v1/allocation/{}", enc(id)))
        .map_err(|e| failed("querying allocation", e))
}

fn status(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let alloc = get_alloc(ctx, &p.args[0])?;
    if p.flag("json") {
        ctx.print_json(&alloc);
        return Ok(());
    }
    let stats = if p.flag("stats") {
        let path = format!("/v1/client/allocation/{}/stats", enc(s(&alloc, "ID")));
        let stats = ctx.client.get(&path);
        Some(stats.map_err(|e| failed("querying allocation stats", e))?)
    } else {
        None
    };
    ctx.print(&alloc_status_with(&alloc, stats.as_ref(), &chrono::Local));
    Ok(())
}

/// `alloc status` without `-stats`.
#[cfg(test)]
pub(super) fn alloc_status_text<Tz>(alloc: &Value, tz: &Tz) -> String
where
    Tz: chrono::TimeZone,
    Tz::Offset: std::fmt::Display,
{
    alloc_status_with(alloc, None, tz)
}

/// The whole `alloc status` output for an allocation's JSON, with each task's `Task Resources`
/// when the allocation's stats are given (`-stats`).
pub(super) fn alloc_status_with<Tz>(alloc: &Value, stats: Option<&Value>, tz: &Tz) -> String
where
    Tz: chrono::TimeZone,
    Tz::Offset: std::fmt::Display,
{
    let time = |key: &str| {
        alloc
            .get(key)
            .and_then(Value::as_i64)
            .map(|t| format::rfc3339(t, tz))
            .unwrap_or_default()
    };
    let mut rows = vec![
        ("ID", s(alloc, "ID").to_string()),
        ("Name", s(alloc, "Name").to_string()),
        ("Node ID", short_id(s(alloc, "NodeID")).to_string()),
        ("Job ID", s(alloc, "JobID").to_string()),
        ("Task Group", s(alloc, "TaskGroup").to_string()),
        ("Client Status", s(alloc, "ClientStatus").to_string()),
    ];
    if !s(alloc, "ClientDescription").is_empty() {
        rows.push(("Client Description", s(alloc, "ClientDescription").into()));
    }
    rows.push(("Desired Status", s(alloc, "DesiredStatus").to_string()));
    rows.push(("Created", time("CreateTime")));
    rows.push(("Modified", time("ModifyTime")));
    rows.retain(|(k, v)| !v.is_empty() || matches!(*k, "ID" | "Client Status"));
    let mut out = key_values(&rows);
    out.push('\n');
    if let Some(addresses) = addresses_text(alloc) {
        out.push('\n');
        out.push_str(&addresses);
        out.push('\n');
    }
    let empty = serde_json::Map::new();
    let states = alloc
        .get("TaskStates")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut names: Vec<&String> = states.keys().collect();
    names.sort();
    for name in names {
        let state = &states[name];
        out.push_str(&format!("\nTask {name:?} is {:?}\n", s(state, "State")));
        if let Some(stats) = stats {
            out.push_str(&super::resources_format::task_resources(alloc, stats, name));
            out.push('\n');
        }
        // The API gives these as RFC 3339 in UTC; shown in the local offset like event times.
        let or_na = |key: &str| match s(state, key) {
            "" => "N/A".to_string(),
            v => chrono::DateTime::parse_from_rfc3339(v)
                .map(|t| {
                    t.with_timezone(tz)
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                })
                .unwrap_or_else(|_| v.to_string()),
        };
        out.push_str("Task Events:\n");
        out.push_str(&key_values(&[
            ("Started At", or_na("StartedAt")),
            ("Finished At", or_na("FinishedAt")),
            ("Total Restarts", format::text(state, "Restarts")),
            ("Last Restart", or_na("LastRestart")),
        ]));
        out.push_str("\n\n");
        let events = state
            .get("Events")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        out.push_str(&format::events_table(&events, tz));
        out.push('\n');
    }
    out
}

/// Nomad's `Allocation Addresses` table of an allocation with ports: each port as
/// `*<label>  yes  <host ip>:<host port>[ -> <to>]`.
fn addresses_text(alloc: &Value) -> Option<String> {
    let shared = alloc.get("AllocatedResources")?.get("Shared")?;
    let ports = shared.get("Ports")?.as_array().filter(|p| !p.is_empty())?;
    let mode = shared
        .get("Networks")
        .and_then(|n| n.get(0))
        .map(|n| s(n, "Mode"))
        .filter(|m| !m.is_empty())
        .map(|m| format!(" (mode = {m:?})"))
        .unwrap_or_default();
    let mut rows = vec![vec![
        "Label".to_string(),
        "Dynamic".to_string(),
        "Address".to_string(),
    ]];
    for p in ports {
        let to = p.get("To").and_then(Value::as_u64).unwrap_or(0);
        let mut address = format!("{}:{}", s(p, "HostIP"), format::text(p, "Value"));
        if to > 0 {
            address.push_str(&format!(" -> {to}"));
        }
        rows.push(vec![
            format!("*{}", s(p, "Label")),
            "yes".to_string(),
            address,
        ]);
    }
    Some(format!(
        "Allocation Addresses{mode}:\n{}",
        format::table(&rows)
    ))
}

fn restart(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let task = p.args.get(1).cloned().unwrap_or_default();
    let body = json!({"TaskName": task, "AllTasks": task.is_empty()});
    ctx.client
        .post(
            &format!("/v1/client/allocation/{}/restart", enc(&p.args[0])),
            &body,
        )
        .map_err(|e| failed("restarting allocation", e))?;
    Ok(())
}

fn signal(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let task = p.args.get(1).cloned().unwrap_or_default();
    let sig = p.value("s").unwrap_or("SIGKILL");
    if sig.is_empty() {
        return Err(CmdError::Usage("-s needs a signal name".into()));
    }
    let body = json!({"Signal": sig, "Task": task});
    ctx.client
        .post(
            &format!("/v1/client/allocation/{}/signal", enc(&p.args[0])),
            &body,
        )
        .map_err(|e| failed("signalling allocation", e))?;
    Ok(())
}

fn stop(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let id = &p.args[0];
    let answer = ctx
        .client
        .post(&format!("/v1/allocation/{}/stop", enc(id)), &json!({}))
        .map_err(|e| failed("stopping allocation", e))?;
    let eval = s(&answer, "EvalID");
    if p.flag("detach") {
        ctx.println(eval);
        return Ok(());
    }
    ctx.println(&format!("==> Allocation {id:?} stopped"));
    if !eval.is_empty() {
        ctx.println(&format!("    Evaluation ID: {eval}"));
    }
    Ok(())
}

/// How much of the end of a log `-tail -n` fetches to find its lines.
const TAIL_WINDOW: u64 = 64 * 1024;

fn logs(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let number = |flag: &str| -> Result<Option<u64>, CmdError> {
        p.value(flag)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| CmdError::Usage(format!("-{flag} must be a number, got {v:?}")))
            })
            .transpose()
    };
    let lines = number("n")?;
    let bytes = number("c")?;
    if (lines.is_some() || bytes.is_some()) && !p.flag("tail") {
        return Err(CmdError::Usage("-n and -c need -tail".into()));
    }
    let alloc = get_alloc(ctx, &p.args[0])?;
    let id = s(&alloc, "ID").to_string();
    let task = match p.args.get(1) {
        Some(t) => t.clone(),
        None => only_task(&alloc)?,
    };
    let kind = if p.flag("stderr") { "stderr" } else { "stdout" };
    let base = format!(
        "/v1/client/fs/logs/{}?task={}&type={kind}&plain=true",
        enc(&id),
        enc(&task)
    );
    let (origin, offset) = if !p.flag("tail") {
        ("start", 0)
    } else if let Some(c) = bytes {
        ("end", c)
    } else {
        // Lines are counted on the end of the log, then the exact byte offset is asked for, so
        // that following starts right there.
        let wanted = lines.unwrap_or(10);
        let mut tail = String::new();
        ctx.client
            .stream(&format!(
                "{base}&origin=end&offset={TAIL_WINDOW}&follow=false"
            ))
            .map_err(|e| failed("reading logs", e))?
            .read_to_string(&mut tail)
            .map_err(|e| failed("reading logs", e))?;
        ("end", tail_offset(&tail, wanted))
    };
    let follow = p.flag("f");
    let mut body = ctx
        .client
        .stream(&format!(
            "{base}&origin={origin}&offset={offset}&follow={follow}"
        ))
        .map_err(|e| failed("reading logs", e))?;
    let mut buf = [0u8; 16 * 1024];
    loop {
        match body.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                if ctx.out.write_all(&buf[..n]).is_err() || ctx.out.flush().is_err() {
                    // The reader of our stdout went away (`| head`): done.
                    return Ok(());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(failed("reading logs", e)),
        }
    }
}

/// The task name when the allocation has exactly one task.
fn only_task(alloc: &Value) -> Result<String, CmdError> {
    let names: Vec<String> = alloc
        .get("TaskStates")
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    match names.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(CmdError::Failed(format!(
            "Error: allocation {:?} has no tasks",
            short_id(s(alloc, "ID"))
        ))),
        many => {
            let list: Vec<String> = many.iter().map(|n| format!("  * {n}")).collect();
            Err(CmdError::Usage(format!(
                "Allocation {:?} is running the following tasks:\n{}\n\nPlease specify the task.",
                short_id(s(alloc, "ID")),
                list.join("\n")
            )))
        }
    }
}

/// Bytes from the end of `text` (the end of a log) that hold its last `lines` lines.
fn tail_offset(text: &str, lines: u64) -> u64 {
    if lines == 0 {
        return 0;
    }
    let bytes = text.as_bytes();
    // A trailing newline ends the last line rather than starting an empty one.
    let end = if bytes.last() == Some(&b'\n') {
        bytes.len() - 1
    } else {
        bytes.len()
    };
    let mut seen = 0;
    for i in (0..end).rev() {
        if bytes[i] == b'\n' {
            seen += 1;
            if seen == lines {
                return (bytes.len() - i - 1) as u64;
            }
        }
    }
    bytes.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::FixedOffset;

    #[test]
    fn tail_offsets_count_lines_from_the_end() {
        assert_eq!(tail_offset("a\nb\nc\n", 2), 4);
        assert_eq!(tail_offset("a\nb\nc", 2), 3);
        assert_eq!(tail_offset("a\nb\nc\n", 10), 6);
        assert_eq!(tail_offset("a\nb\nc\n", 0), 0);
        assert_eq!(tail_offset("", 3), 0);
    }

    /// Nomad's table: every port starred, `-> <to>` where the port is mapped.
    #[test]
    fn alloc_status_shows_the_allocation_addresses() {
        let alloc = json!({
            "ID": "1e1d4540", "ClientStatus": "running", "TaskStates": {},
            "AllocatedResources": {"Shared": {
                "Networks": [{"Mode": "host", "IP": "127.0.0.1"}],
                "Ports": [
                    {"Label": "http", "Value": 8080, "To": 0, "HostIP": "127.0.0.1"},
                    {"Label": "admin-ui", "Value": 23456, "To": 80, "HostIP": "127.0.0.1"}
                ]
            }}
        });
        let text = alloc_status_text(&alloc, &FixedOffset::east_opt(0).unwrap());
        assert!(
            text.contains(
                "\n\nAllocation Addresses (mode = \"host\"):\n\
                 Label      Dynamic  Address\n\
                 *http      yes      127.0.0.1:8080\n\
                 *admin-ui  yes      127.0.0.1:23456 -> 80\n"
            ),
            "{text}"
        );
        let none = json!({"ID": "1e1d4540", "ClientStatus": "running", "TaskStates": {}});
        assert!(
            !alloc_status_text(&none, &FixedOffset::east_opt(0).unwrap())
                .contains("Allocation Addresses")
        );
    }

    #[test]
    fn alloc_status_shows_summary_and_events_per_task() {
        let t = 1_772_832_677_000_000_000i64;
        let alloc = json!({
            "ID": "1e1d4540-14f9-2515-8502-24d46291717d",
            "Name": "example.group[0]",
            "NodeID": "ae118273-5416-3ed7-01dd-10fe8bf49e81",
            "JobID": "example",
            "TaskGroup": "group",
            "ClientStatus": "running",
            "DesiredStatus": "run",
            "CreateTime": t - 60_000_000_000i64,
            "TaskStates": {"task": {
                "State": "running", "Failed": false, "Restarts": 1,
                "StartedAt": "2026-03-06T21:31:33Z",
                "LastRestart": "2026-03-06T21:31:17Z",
                "Events": [
                    {"Type": "Started", "Time": t - 40_000_000_000i64, "DisplayMessage": "Task started by client"},
                    {"Type": "Terminated", "Time": t, "DisplayMessage": "Exit Code: 137, Signal: 9"},
                    {"Type": "Restarting", "Time": t + 1, "DisplayMessage": "Task restarting in 16.104906834s"}
                ]
            }}
        });
        let est = FixedOffset::west_opt(5 * 3600).unwrap();
        let expected = "\
ID             = 1e1d4540-14f9-2515-8502-24d46291717d
Name           = example.group[0]
Node ID        = ae118273
Job ID         = example
Task Group     = group
Client Status  = running
Desired Status = run
Created        = 2026-03-06T16:30:17-05:00

Task \"task\" is \"running\"
Task Events:
Started At     = 2026-03-06T16:31:33-05:00
Finished At    = N/A
Total Restarts = 1
Last Restart   = 2026-03-06T16:31:17-05:00

Recent Events:
Time                       Type        Description
2026-03-06T16:31:17-05:00  Restarting  Task restarting in 16.104906834s
2026-03-06T16:31:17-05:00  Terminated  Exit Code: 137, Signal: 9
2026-03-06T16:30:37-05:00  Started     Task started by client
";
        assert_eq!(alloc_status_text(&alloc, &est), expected);
    }
}
