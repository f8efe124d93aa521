//! `job plan`: what registering a jobspec would change, registering nothing, in Nomad's words
//! (`nomad job plan`): the diff of the job against the one registered, the scheduler's dry run,
//! and the job modify index to give `job run -check-index`. Exit status as Nomad's: 0 when no
//! allocation would be created or destroyed, 1 when some would, 255 on an error.

use serde_json::{json, Value};

use super::client::enc;
use super::flags::{bool_flag, value_flag, Parsed};
use super::format::{self, s};
use super::job_file::JobFile;
use super::{CmdError, CmdResult, Ctx, Spec};

pub(super) const COMMANDS: &[&Spec] = &[&PLAN];

const PLAN: Spec = Spec {
    words: &["job", "plan"],
    flags: &[
        bool_flag("diff"),
        bool_flag("json"),
        value_flag("var"),
        value_flag("var-file"),
    ],
    args: (1, 1),
    usage: "Usage: nodeward job plan [-diff=true] [-json] [-var name=value]... [-var-file file]... <jobspec file | ->

  Shows what `job run` of the jobspec would change on this node, registering nothing: the
  job's changes against the job registered (its fields, groups and tasks, and what each forces),
  whether this node can place it all, and the job modify index to give `job run -check-index`,
  which registers only if the job did not change in between. Exits 0 when no allocation would
  be created or destroyed, 1 when some would, 255 on an error, as Nomad's `job plan`.

  -diff=false      Leave out the job's changes.
  -json            The jobspec is JSON, whatever its name.
  -var name=value  Sets a variable of the jobspec (repeatable; the last one wins).
  -var-file file   Reads variable values from an HCL file (repeatable, in order); NOMAD_VAR_<name>
                   environment variables set variables too, as for `job run`.",
    run: plan,
};

/// Nomad's paragraph after the `-check-index` hint.
const INDEX_HELP: &str =
    "When running the job with the check-index flag, the job will only be run if the
job modify index given matches the server-side version. If the index has
changed, another user has modified the job and the plan's results are
potentially invalid.";

fn plan(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let fail = |e: CmdError| match e {
        CmdError::Failed(m) => CmdError::FailedWith(255, m),
        other => other,
    };
    let JobFile { job, mut warnings } = JobFile::load(p, "parsing job file").map_err(fail)?;
    let id = match s(&job, "ID") {
        "" => s(&job, "Name").to_string(),
        id => id.to_string(),
    };
    let answer = ctx
        .client
        .put(
            &format!("/v1/job/{}/plan", enc(&id)),
            &json!({"Job": job, "Diff": true}),
        )
        .map_err(|e| CmdError::FailedWith(255, format!("Error during plan: {e}")))?;
    super::job_file::merge_warnings(&mut warnings, &answer);
    if p.flag_or("diff", true) {
        ctx.println(&format!("{}\n", job_diff(&answer["Diff"]).trim()));
    }
    ctx.println("Scheduler dry-run:");
    ctx.println(&dry_run(&answer, s(&job, "Type")));
    ctx.println("");
    if !warnings.is_empty() {
        ctx.println(&format!("Job Warnings:\n{}\n", warnings.join("\n")));
    }
    let index = answer["JobModifyIndex"].as_u64().unwrap_or(0);
    // The hint repeats the variables given, as Nomad's does.
    let vars: String = (p.values("var").iter().map(|v| format!("-var={v:?} ")))
        .chain(
            p.values("var-file")
                .iter()
                .map(|f| format!("-var-file={f:?} ")),
        )
        .collect();
    ctx.println(&format!(
        "Job Modify Index: {index}\nTo submit the job with version verification run:\n\n\
         nodeward job run -check-index {index} {vars}{}\n\n{INDEX_HELP}",
        p.args[0]
    ));
    match exit_code(&answer) {
        0 => Ok(()),
        code => Err(CmdError::Exit(code)),
    }
}

/// Nomad's rule: 1 when the job changes and some group's allocations would be placed, stopped
/// or replaced; else 0.
fn exit_code(answer: &Value) -> i32 {
    if matches!(s(&answer["Diff"], "Type"), "" | "None") {
        return 0;
    }
    let changes = answer["Annotations"]["DesiredTGUpdates"]
        .as_object()
        .into_iter()
        .flatten()
        .any(|(_, u)| {
            ["Stop", "Place", "Migrate", "DestructiveUpdate", "Canary"]
                .iter()
                .any(|k| u[*k].as_u64().unwrap_or(0) > 0)
        });
    i32::from(changes)
}

/// The scheduler's dry run: all placed, or Nomad's placement-failure lines.
fn dry_run(answer: &Value, job_type: &str) -> String {
    let failed = match answer["FailedTGAllocs"].as_object() {
        Some(f) if !f.is_empty() => f,
        _ => return "- All tasks successfully allocated.".to_string(),
    };
    let mut out = vec![if job_type == "system" {
        "- WARNING: Failed to place allocations on all nodes.".to_string()
    } else {
        "- WARNING: Failed to place all allocations.".to_string()
    }];
    for (group, metric) in failed {
        out.extend(format::group_failure(group, metric, "  "));
        out.push(String::new());
    }
    out.join("\n").trim_end().to_string()
}

/// A diff type's marker, as Nomad prints it (with its space).
fn marker(diff: &Value) -> &'static str {
    match s(diff, "Type") {
        "Added" => "+ ",
        "Deleted" => "- ",
        "Edited" => "+/- ",
        _ => "",
    }
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map_or(&[][..], Vec::as_slice)
}

/// Nomad's `formatJobDiff`, without colours and not verbose.
pub(super) fn job_diff(job: &Value) -> String {
    let mut out = format!("{}Job: {:?}\n", marker(job), s(job, "ID"));
    let groups = items(&job["TaskGroups"]);
    let (longest_field, mut longest_marker) = longest(job);
    for g in groups {
        longest_marker = longest_marker.max(marker(g).len());
    }
    if s(job, "Type") == "Edited" {
        let fo = aligned(job, 0, longest_field, longest_marker);
        if !fo.is_empty() {
            out += &fo;
            out += "\n";
        }
    }
    for g in groups {
        out += &group_diff(g, longest_marker - marker(g).len());
        out += "\n";
    }
    out
}

fn group_diff(g: &Value, prefix: usize) -> String {
    let mut out = format!(
        "{}{}Task Group: {:?}",
        marker(g),
        " ".repeat(prefix),
        s(g, "Name")
    );
    let updates: Vec<String> = g["Updates"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect();
    if updates.is_empty() {
        out += "\n";
    } else {
        out += &format!(" ({})\n", updates.join(", "));
    }
    let tasks = items(&g["Tasks"]);
    let (longest_field, mut longest_marker) = longest(g);
    for t in tasks {
        longest_marker = longest_marker.max(marker(t).len());
    }
    if s(g, "Type") == "Edited" {
        let fo = aligned(g, prefix + 2, longest_field, longest_marker);
        if !fo.is_empty() {
            out += &fo;
            out += "\n";
        }
    }
    for t in tasks {
        out += &task_diff(t, prefix + 2, longest_marker - marker(t).len());
        out += "\n";
    }
    out
}

fn task_diff(t: &Value, start: usize, prefix: usize) -> String {
    let mut out = format!(
        "{}{}{}Task: {:?}",
        " ".repeat(start),
        marker(t),
        " ".repeat(prefix),
        s(t, "Name")
    );
    let notes: Vec<&str> = items(&t["Annotations"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if !notes.is_empty() {
        out += &format!(" ({})", notes.join(", "));
    }
    if s(t, "Type") != "Edited" {
        return out;
    }
    out += "\n";
    let (longest_field, longest_marker) = longest(t);
    out + &aligned(t, start + 2, longest_field, longest_marker)
}

/// The longest field name and diff marker of a diff's fields and objects.
fn longest(diff: &Value) -> (usize, usize) {
    let fields = items(&diff["Fields"]);
    let field = fields.iter().map(|f| s(f, "Name").len()).max().unwrap_or(0);
    let markers = fields.iter().chain(items(&diff["Objects"]));
    (field, markers.map(|d| marker(d).len()).max().unwrap_or(0))
}

/// Nomad's `alignedFieldAndObjects`: a diff's fields, then its objects, aligned.
fn aligned(diff: &Value, start: usize, longest_field: usize, longest_marker: usize) -> String {
    let mut lines = Vec::new();
    for f in items(&diff["Fields"]) {
        let name = s(f, "Name");
        let value = match s(f, "Type") {
            "Added" => format!("{:?}", s(f, "New")),
            "Deleted" => format!("{:?}", s(f, "Old")),
            "Edited" => format!("{:?} => {:?}", s(f, "Old"), s(f, "New")),
            _ => format!("{:?}", s(f, "New")),
        };
        lines.push(format!(
            "{}{}{}{name}: {}{value}",
            " ".repeat(start),
            marker(f),
            " ".repeat(longest_marker - marker(f).len()),
            " ".repeat(longest_field - name.len()),
        ));
    }
    for o in items(&diff["Objects"]) {
        let key_prefix = longest_marker - marker(o).len();
        let (lf, lm) = longest(o);
        let inner = aligned(o, start + key_prefix + 2, lf, lm);
        lines.push(format!(
            "{}{}{}{} {{\n{inner}\n{}}}",
            " ".repeat(start),
            marker(o),
            " ".repeat(key_prefix),
            s(o, "Name"),
            " ".repeat(start + marker(o).len() + key_prefix),
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fields are aligned on the longest name, edits shown old => new, tasks under their group.
    #[test]
    fn a_diff_prints_as_nomads() {
        let diff = json!({
            "Type": "Edited", "ID": "web", "Fields": [], "Objects": [],
            "TaskGroups": [{
                "Type": "Edited", "Name": "g", "Fields": [], "Objects": [],
                "Updates": {"create/destroy update": 1},
                "Tasks": [{
                    "Type": "Edited", "Name": "t",
                    "Annotations": ["forces create/destroy update"],
                    "Fields": [
                        {"Type": "Edited", "Name": "Env[MARK]", "Old": "a", "New": "b"},
                        {"Type": "Added", "Name": "Env[X]", "Old": "", "New": "1"},
                    ],
                    "Objects": [],
                }],
            }],
        });
        assert_eq!(
            job_diff(&diff),
            "+/- Job: \"web\"\n\
             +/- Task Group: \"g\" (1 create/destroy update)\n  \
             +/- Task: \"t\" (forces create/destroy update)\n    \
             +/- Env[MARK]: \"a\" => \"b\"\n    \
             +   Env[X]:    \"1\"\n\n"
        );
    }
}
