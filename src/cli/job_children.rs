//! `job periodic force` and `job dispatch` (Nomad's `command/job_periodic_force.go` and
//! `command/job_dispatch.go`), and the lines `job status` adds for a periodic or parameterized
//! job: its next launch and its children.

use base64::Engine as _;
use serde_json::{json, Value};
use std::io::Read;

use super::client::enc;
use super::flags::{bool_flag, value_flag, Parsed};
use super::format::{self, s, short_id, table};
use super::{failed, CmdError, CmdResult, Ctx, Spec};
use crate::jobspec::periodic::{PeriodicConfig, DISPATCH_PAYLOAD_SIZE_LIMIT};

pub(super) const COMMANDS: &[&Spec] = &[&PERIODIC_FORCE, &DISPATCH];

const PERIODIC_FORCE: Spec = Spec {
    words: &["job", "periodic", "force"],
    flags: &[bool_flag("detach")],
    args: (1, 1),
    usage: "Usage: nodeward job periodic force [-detach] <job id>

  Launches a child of the periodic job now, whatever its schedule says, as Nomad does (also
  while a child runs under prohibit_overlap).

  -detach   Print only the evaluation ID.",
    run: periodic_force,
};

const DISPATCH: Spec = Spec {
    words: &["job", "dispatch"],
    flags: &[value_flag("meta"), bool_flag("detach")],
    args: (1, 2),
    usage: "Usage: nodeward job dispatch [-meta key=value]... [-detach] <job id> [<payload file>|-]

  Dispatches the parameterized job: registers a child job <job>/dispatch-<time>-<id> whose
  tasks find the payload (a file, or - for stdin; at most 16 KiB) at local/<dispatch_payload
  file> and each meta value as NOMAD_META_<key>.

  -meta key=value  A meta value of the dispatch (repeatable).
  -detach          Print only the dispatched job's ID.",
    run: dispatch,
};

fn periodic_force(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let id = &p.args[0];
    let answer = ctx
        .client
        .post(&format!("/v1/job/{}/periodic/force", enc(id)), &json!({}))
        .map_err(|e| failed("forcing periodic job", e))?;
    let eval = s(&answer, "EvalID");
    if p.flag("detach") {
        ctx.println(eval);
        return Ok(());
    }
    if eval.is_empty() {
        ctx.println(&format!(
            "No child of periodic job {id:?} launched: one was launched this second already"
        ));
        return Ok(());
    }
    ctx.println("Force periodic successful");
    ctx.println(&format!("Evaluation ID: {}", short_id(eval)));
    Ok(())
}

/// A dispatch's payload from `input`, refused with the agent's words when it is larger than a
/// dispatch may carry: no more than that is held however large the input is (the rest is only
/// counted, for the message), so a huge file or stream costs no memory.
fn read_payload(input: impl Read) -> std::io::Result<Vec<u8>> {
    let limit = DISPATCH_PAYLOAD_SIZE_LIMIT as u64;
    let mut input = input;
    let mut buf = Vec::new();
    (&mut input).take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        let rest = std::io::copy(&mut input, &mut std::io::sink())?;
        return Err(std::io::Error::other(format!(
            "Payload exceeds maximum size; {} > {limit}",
            buf.len() as u64 + rest
        )));
    }
    Ok(buf)
}

fn dispatch(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let id = &p.args[0];
    let mut meta = serde_json::Map::new();
    for arg in p.values("meta") {
        match arg.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                meta.insert(k.to_string(), json!(v));
            }
            _ => {
                return Err(CmdError::Usage(format!(
                    "invalid -meta {arg:?}: expected key=value"
                )))
            }
        }
    }
    let payload = match p.args.get(1).map(String::as_str) {
        None => Vec::new(),
        Some("-") => {
            read_payload(std::io::stdin().lock()).map_err(|e| failed("reading stdin", e))?
        }
        Some(path) => std::fs::File::open(path)
            .and_then(read_payload)
            .map_err(|e| failed("reading input data", format!("{path}: {e}")))?,
    };
    let body = json!({
        "JobID": id,
        "Payload": base64::engine::general_purpose::STANDARD.encode(&payload),
        "Meta": meta,
    });
    let answer = ctx
        .client
        .post(&format!("/v1/job/{}/dispatch", enc(id)), &body)
        .map_err(|e| failed("dispatching job", e))?;
    let child = s(&answer, "DispatchedJobID");
    if p.flag("detach") {
        ctx.println(child);
        return Ok(());
    }
    ctx.println(&format::key_values(&[
        ("Dispatched Job ID", child.to_string()),
        ("Evaluation ID", short_id(s(&answer, "EvalID")).to_string()),
    ]));
    Ok(())
}

/// What `job status` adds for a template: the header rows `Periodic`, `Parameterized` and
/// `Next Periodic Launch` (computed here from the job's schedule, as Nomad's CLI does), and the
/// children table. Nothing for other jobs.
#[allow(clippy::type_complexity)]
pub(super) fn template_status(
    ctx: &mut Ctx,
    job: &Value,
) -> Result<(Vec<(&'static str, String)>, Option<String>), CmdError> {
    let periodic = job.get("Periodic").filter(|v| !v.is_null());
    let parameterized = job.get("ParameterizedJob").filter(|v| !v.is_null());
    if periodic.is_none() && parameterized.is_none() {
        return Ok((Vec::new(), None));
    }
    let mut head = vec![
        ("Periodic", periodic.is_some().to_string()),
        ("Parameterized", parameterized.is_some().to_string()),
    ];
    if let Some(p) = periodic {
        let config: Option<PeriodicConfig> = serde_json::from_value(p.clone()).ok();
        let now = chrono::Utc::now();
        let next = config
            .filter(|c| c.enabled && s(job, "Status") != "dead")
            .and_then(|c| c.next_launch(now.timestamp()))
            .map(|t| {
                format!(
                    "{} ({}s from now)",
                    format::rfc3339(t * 1_000_000_000, &chrono::Local),
                    t - now.timestamp()
                )
            })
            .unwrap_or_else(|| "none".to_string());
        head.push(("Next Periodic Launch", next));
    }
    let id = s(job, "ID");
    let jobs = ctx
        .client
        .get("/v1/jobs")
        .map_err(|e| failed("querying jobs", e))?;
    let mut rows = vec![vec!["ID".to_string(), "Status".to_string()]];
    for j in jobs.as_array().into_iter().flatten() {
        if s(j, "ParentID") == id {
            rows.push(vec![s(j, "ID").to_string(), s(j, "Status").to_string()]);
        }
    }
    let title = if periodic.is_some() {
        "Previously Launched Jobs"
    } else {
        "Dispatched Jobs"
    };
    let body = if rows.len() == 1 {
        "No instances of this job found".to_string()
    } else {
        table(&rows)
    };
    Ok((head, Some(format!("{title}\n{body}"))))
}
