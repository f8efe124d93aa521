//! `job run` (with `-check-index`, after `job plan`), `job status`, `job stop`, `job inspect`.

use serde_json::{json, Value};

use super::client::enc;
use super::flags::{bool_flag, value_flag, Parsed};
use super::format::{self, s, short_id, table};
use super::job_file::JobFile;
use super::{failed, CmdError, CmdResult, Ctx, Spec};

pub(super) const COMMANDS: &[&Spec] = &[&RUN, &STATUS, &STOP, &INSPECT];

const RUN: Spec = Spec {
    words: &["job", "run"],
    flags: &[
        bool_flag("detach"),
        bool_flag("json"),
        value_flag("check-index"),
        value_flag("var"),
        value_flag("var-file"),
    ],
    args: (1, 1),
    usage:
        "Usage: nodeward job run [-detach] [-json] [-check-index N] [-var name=value]... [-var-file file]... <jobspec file | ->

  Registers the job in the file (`-`: standard input): HCL, or, with -json or for a .json file,
  Nomad's API JSON (`{\"Job\": {...}}` or the bare job), sent as it is. HCL is evaluated here, as
  Nomad's CLI does: its variables, locals and functions; file() reads files relative to the
  jobspec (to the working directory for standard input). Exits 2 when the job was registered but
  this node could not place all of it (the reasons are printed), as Nomad's.

  -detach          Print the evaluation ID and return without listing the allocations.
  -check-index N   Registers the job only if its job modify index is still N (0: only if no
                   such job exists), as `job plan` printed it; else prints why and exits 1.
  -json            The jobspec is JSON, whatever its name.
  -var name=value  Sets a variable of the jobspec (repeatable; the last one wins).
  -var-file file   Reads variable values from an HCL file of name = value lines, or a JSON
                   object (repeatable, in order). NOMAD_VAR_<name> environment variables set
                   variables too; -var-file values override them, and -var values override both.",
    run,
};

const STATUS: Spec = Spec {
    words: &["job", "status"],
    flags: &[bool_flag("json")],
    args: (0, 1),
    usage: "Usage: nodeward job status [-json] [<job id>]

  Lists the jobs, or shows one job (a unique ID prefix is enough) and its allocations.

  -json     Print the API's JSON.",
    run: status,
};

const STOP: Spec = Spec {
    words: &["job", "stop"],
    flags: &[bool_flag("purge"), bool_flag("detach")],
    args: (1, 1),
    usage: "Usage: nodeward job stop [-purge] <job id>

  Stops the job's allocations, killing their tasks.

  -purge    Also forget the job.",
    run: stop,
};

const INSPECT: Spec = Spec {
    words: &["job", "inspect"],
    flags: &[bool_flag("json")],
    args: (1, 1),
    usage: "Usage: nodeward job inspect <job id>

  Prints the job as JSON ({\"Job\": ...}), which `job run` accepts back from a .json file.",
    run: inspect,
};

/// How the agent's refusal of a `-check-index` registration begins (Nomad's words).
const ENFORCE_PREFIX: &str = "Enforcing job modify index";

fn run(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    // An HCL jobspec is parsed here, so what the parser warns about is known here first; the job
    // sent keeps its no-effect blocks (`jobspec::kept`), which the agent warns again: each
    // warning is printed once.
    let JobFile { job, mut warnings } = JobFile::load(p, "parsing job file")?;
    let job_id = match s(&job, "ID") {
        "" => s(&job, "Name").to_string(),
        id => id.to_string(),
    };
    let mut request = json!({ "Job": job });
    if let Some(index) = p.value("check-index") {
        let index: u64 = index.parse().map_err(|_| {
            CmdError::Usage(format!(
                "invalid value {index:?} for -check-index: not an index"
            ))
        })?;
        request["EnforceIndex"] = json!(true);
        request["JobModifyIndex"] = json!(index);
    }
    let answer = ctx.client.put("/v1/jobs", &request).map_err(|e| {
        // Nomad's lines for a registration its index check refused.
        let text = e.to_string();
        match text.find(ENFORCE_PREFIX) {
            Some(at) => CmdError::Failed(format!(
                "{}\nJob not updated",
                text[at..].trim_end_matches(')')
            )),
            None => failed("submitting job", e),
        }
    })?;
    let eval = s(&answer, "EvalID").to_string();
    super::job_file::merge_warnings(&mut warnings, &answer);
    if !warnings.is_empty() {
        ctx.println(&format!("Job Warnings:\n{}\n", warnings.join("\n")));
    }
    if p.flag("detach") {
        ctx.println("Job registration successful");
        if !eval.is_empty() {
            ctx.println(&format!("Evaluation ID: {eval}"));
        }
        // Nomad's -detach does not look at the evaluation: its exit status says nothing of it.
        return Ok(());
    }
    ctx.println(&format!("==> Job {job_id:?} registered"));
    if !eval.is_empty() {
        ctx.println(&format!("    Evaluation ID: {eval}"));
    }
    let allocs = ctx
        .client
        .get(&format!("/v1/job/{}/allocations", enc(&job_id)))
        .map_err(|e| failed("listing allocations", e))?;
    for alloc in allocs.as_array().into_iter().flatten() {
        if s(alloc, "DesiredStatus") == "stop" {
            continue;
        }
        ctx.println(&format!(
            "    Allocation {:?} created: group {:?}, status {:?}",
            short_id(s(alloc, "ID")),
            s(alloc, "TaskGroup"),
            s(alloc, "ClientStatus")
        ));
    }
    match answer.get("FailedTGAllocs").and_then(Value::as_object) {
        Some(failed) if !failed.is_empty() => {
            ctx.println(&placement_failures(
                &eval,
                failed,
                s(&answer, "BlockedEval"),
            ));
            Err(CmdError::Exit(2))
        }
        _ => Ok(()),
    }
}

/// Nomad's `job run` lines for an evaluation that could not place everything.
fn placement_failures(
    eval: &str,
    failed: &serde_json::Map<String, Value>,
    blocked: &str,
) -> String {
    let mut out = vec![format!(
        "==> Evaluation {:?} finished with status \"complete\" but failed to place all allocations:",
        short_id(eval)
    )];
    for (group, metric) in failed {
        out.extend(format::group_failure(group, metric, "    "));
    }
    if !blocked.is_empty() {
        out.push(format!(
            "    Evaluation {:?} waiting for additional capacity to place remainder",
            short_id(blocked)
        ));
    }
    out.join("\n")
}

/// `job status`'s `Placement Failure` section: the latest evaluation that could not place
/// everything, while a blocked one waits (Nomad's rule). Empty when there is none.
fn placement_section(evals: &[Value]) -> String {
    if !evals.iter().any(|e| s(e, "Status") == "blocked") {
        return String::new();
    }
    // The API lists the newest first; the first of the latest with failures wins a tie.
    let latest = evals
        .iter()
        .filter_map(|e| {
            let failed = e["FailedTGAllocs"].as_object().filter(|m| !m.is_empty())?;
            Some((e["CreateTime"].as_i64().unwrap_or(0), failed))
        })
        .reduce(|newest, e| if e.0 > newest.0 { e } else { newest });
    let Some((_, failed)) = latest else {
        return String::new();
    };
    let groups: Vec<String> = failed
        .iter()
        .map(|(group, metric)| {
            let mut lines = vec![format!("Task Group {group:?}:")];
            lines.extend(
                format::alloc_metrics(metric)
                    .into_iter()
                    .map(|l| format!("  {l}")),
            );
            lines.join("\n")
        })
        .collect();
    format!("Placement Failure\n{}", groups.join("\n\n"))
}

fn status(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let Some(id) = p.args.first() else {
        let jobs = ctx
            .client
            .get("/v1/jobs")
            .map_err(|e| failed("querying jobs", e))?;
        if p.flag("json") {
            ctx.print_json(&jobs);
            return Ok(());
        }
        let jobs = jobs.as_array().cloned().unwrap_or_default();
        if jobs.is_empty() {
            ctx.println("No running jobs");
            return Ok(());
        }
        let mut rows = vec![vec![
            "ID".to_string(),
            "Type".into(),
            "Status".into(),
            "Submit Date".into(),
        ]];
        for j in &jobs {
            rows.push(vec![
                s(j, "ID").into(),
                s(j, "Type").into(),
                s(j, "Status").into(),
                submit_date(j),
            ]);
        }
        ctx.println(&table(&rows));
        return Ok(());
    };
    let job = ctx
        .client
        .get(&format!("/v1/job/{}", enc(id)))
        .map_err(|e| failed("querying job", e))?;
    let full_id = s(&job, "ID").to_string();
    let allocs = ctx
        .client
        .get(&format!("/v1/job/{}/allocations", enc(&full_id)))
        .map_err(|e| failed("querying job allocations", e))?;
    if p.flag("json") {
        ctx.print_json(&json!({"Job": job, "Allocations": allocs}));
        return Ok(());
    }
    let evals = ctx
        .client
        .get(&format!("/v1/job/{}/evaluations", enc(&full_id)))
        .map_err(|e| failed("querying job evaluations", e))?;
    let mut head = vec![
        ("ID", full_id.clone()),
        ("Name", s(&job, "Name").into()),
        ("Type", s(&job, "Type").into()),
        ("Status", s(&job, "Status").into()),
        ("Submit Date", submit_date(&job)),
    ];
    if !s(&job, "ParentID").is_empty() {
        head.push(("Parent ID", s(&job, "ParentID").into()));
    }
    let (rows, children) = super::job_children::template_status(ctx, &job)?;
    head.extend(rows);
    ctx.println(&format::key_values(&head));
    ctx.println("");
    if let Some(children) = children {
        ctx.println(&children);
        return Ok(());
    }
    let placement = placement_section(evals.as_array().map_or(&[][..], Vec::as_slice));
    if !placement.is_empty() {
        ctx.println(&placement);
        ctx.println("");
    }
    ctx.println("Allocations");
    let allocs = allocs.as_array().cloned().unwrap_or_default();
    if allocs.is_empty() {
        ctx.println("No allocations placed");
        return Ok(());
    }
    ctx.println(&alloc_table(&allocs));
    Ok(())
}

/// `SubmitTime` (Unix nanoseconds) in the local offset; empty when absent.
fn submit_date(job: &Value) -> String {
    job.get("SubmitTime")
        .and_then(Value::as_i64)
        .filter(|t| *t > 0)
        .map(|t| format::rfc3339(t, &chrono::Local))
        .unwrap_or_default()
}

/// The allocations table of `job status <id>`.
pub(super) fn alloc_table(allocs: &[Value]) -> String {
    let mut rows = vec![vec![
        "ID".to_string(),
        "Task Group".into(),
        "Desired".into(),
        "Status".into(),
        "Created".into(),
    ]];
    for a in allocs {
        let created = a
            .get("CreateTime")
            .and_then(Value::as_i64)
            .map(|t| format::rfc3339(t, &chrono::Local))
            .unwrap_or_default();
        rows.push(vec![
            short_id(s(a, "ID")).into(),
            s(a, "TaskGroup").into(),
            s(a, "DesiredStatus").into(),
            s(a, "ClientStatus").into(),
            created,
        ]);
    }
    table(&rows)
}

fn stop(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let id = &p.args[0];
    let purge = p.flag("purge");
    let path = if purge {
        format!("/v1/job/{}?purge=true", enc(id))
    } else {
        format!("/v1/job/{}", enc(id))
    };
    let answer = ctx
        .client
        .delete(&path)
        .map_err(|e| failed("deregistering job", e))?;
    let eval = s(&answer, "EvalID");
    if p.flag("detach") {
        ctx.println(eval);
        return Ok(());
    }
    let what = if purge {
        "stopped and purged"
    } else {
        "stopped"
    };
    ctx.println(&format!("==> Job {id:?} {what}"));
    if !eval.is_empty() {
        ctx.println(&format!("    Evaluation ID: {eval}"));
    }
    Ok(())
}

fn inspect(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let job = ctx
        .client
        .get(&format!("/v1/job/{}", enc(&p.args[0])))
        .map_err(|e| failed("inspecting job", e))?;
    if job.is_null() {
        return Err(CmdError::Failed(format!(
            "Error inspecting job: no job {:?}",
            p.args[0]
        )));
    }
    ctx.print_json(&json!({ "Job": job }));
    Ok(())
}
