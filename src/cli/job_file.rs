//! Reading a jobspec file for `job run` and `job validate`, and `job validate` itself.
//!
//! HCL is evaluated here, as Nomad's CLI evaluates it (variables from `-var`, `-var-file` and
//! `NOMAD_VAR_*`, `file()` beside the jobspec), and sent to the agent as Nomad's API JSON; JSON
//! (`-json`, or a `.json` file) is sent as it is. `-` reads the jobspec from standard input.

use serde_json::{json, Value};
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::flags::{bool_flag, value_flag, Parsed};
use super::format::s;
use super::{failed, CmdError, CmdResult, Ctx, Spec};
use crate::hcl::eval::{Inputs, VarFile};
use crate::hcl::funcs::Files;
use crate::jobspec;

pub(super) const COMMANDS: &[&Spec] = &[&VALIDATE];

const VALIDATE: Spec = Spec {
    words: &["job", "validate"],
    flags: &[bool_flag("json"), value_flag("var"), value_flag("var-file")],
    args: (1, 1),
    usage: "Usage: nodeward job validate [-json] [-var name=value]... [-var-file file]... <jobspec file | ->

  Checks that the jobspec is valid, as `job run` would read it, without registering it: HCL
  syntax, variables, the blocks and attributes Nomad's jobspec has, and the job's rules. The
  agent checks the job too (its drivers' configuration) when it can be reached. Prints the
  warnings and `Job validation successful`, or `Job validation errors:` and the error (exit 1),
  as Nomad's `job validate`. Whether this node can place the job is not checked: `job run` says.

  -json            The jobspec is JSON, whatever its name.
  -var name=value  Sets a variable of the jobspec (repeatable; the last one wins).
  -var-file file   Reads variable values from an HCL file (repeatable, in order); NOMAD_VAR_<name>
                   environment variables set variables too, as for `job run`.",
    run: validate,
};

/// A jobspec file as the agent is sent it: the job in Nomad's API JSON and what evaluating its
/// HCL warned about.
pub(super) struct JobFile {
    pub job: Value,
    pub warnings: Vec<String>,
}

impl JobFile {
    /// Reads and, for HCL, evaluates the jobspec named by `p`'s argument (`-`: standard input);
    /// a failure is `Error <doing>: <file>: <why>`.
    pub fn load(p: &Parsed, doing: &str) -> Result<JobFile, CmdError> {
        let name = p.args[0].as_str();
        let stdin = name == "-";
        let file = Path::new(name);
        let shown = if stdin { "<stdin>" } else { name };
        let text = if stdin {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map(|_| text)
                .map_err(|e| failed("reading job file", format!("{shown}: {e}")))?
        } else {
            std::fs::read_to_string(file)
                .map_err(|e| failed("reading job file", format!("{shown}: {e}")))?
        };
        let is_json = p.flag("json")
            || (!stdin
                && file
                    .extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("json")));
        if is_json && (!p.values("var").is_empty() || !p.values("var-file").is_empty()) {
            return Err(CmdError::Usage(
                "-var and -var-file set the variables of an HCL jobspec; a JSON job has none"
                    .to_string(),
            ));
        }
        if is_json {
            let v: Value =
                serde_json::from_str(&text).map_err(|e| failed(doing, format!("{shown}: {e}")))?;
            let job = match v {
                Value::Object(mut o) if o.contains_key("Job") => {
                    o.remove("Job").unwrap_or_default()
                }
                other => other,
            };
            return Ok(JobFile {
                job,
                warnings: Vec::new(),
            });
        }
        // Standard input has no directory of its own: file() reads from the working directory.
        let beside = if stdin { Path::new("-") } else { file };
        let inputs = hcl_inputs(p, beside, std::env::vars_os())?;
        let parsed = jobspec::hcl::parse_job_with(&text, &inputs)
            .map_err(|e| failed(doing, format!("{shown}: {e}")))?;
        let job = serde_json::to_value(&parsed.job)
            .map_err(|e| failed(doing, format!("{shown}: {e}")))?;
        Ok(JobFile {
            job,
            warnings: parsed.warnings,
        })
    }
}

/// Adds the lines of an agent's `Warnings` that `warnings` does not hold yet.
pub(super) fn merge_warnings(warnings: &mut Vec<String>, answer: &Value) {
    for line in s(answer, "Warnings").lines() {
        if !line.is_empty() && !warnings.iter().any(|w| w == line) {
            warnings.push(line.to_string());
        }
    }
}

fn validate(ctx: &mut Ctx, p: &Parsed) -> CmdResult {
    let JobFile { job, mut warnings } = JobFile::load(p, "getting job struct")?;
    match ctx.client.put("/v1/validate/job", &json!({ "Job": job })) {
        Ok(answer) => {
            let error = s(&answer, "Error");
            if !error.is_empty() {
                return Err(CmdError::Failed(format!("Job validation errors:\n{error}")));
            }
            merge_warnings(&mut warnings, &answer);
        }
        // HCL was checked here in full, JSON is checked here now; what only the agent checks
        // is said to be unchecked.
        Err(e) if e.is_unreachable() => {
            ctx.println(&format!(
                "Driver configuration not validated since connection to the agent couldn't be \
                 established ({e}).\n"
            ));
            let bytes = serde_json::to_vec(&job).unwrap_or_default();
            match jobspec::json::parse_job(&bytes) {
                Ok(parsed) => merge_warnings(
                    &mut warnings,
                    &json!({"Warnings": parsed.warnings.join("\n")}),
                ),
                Err(e) => {
                    return Err(CmdError::Failed(format!(
                        "Job validation errors:\n1 error occurred:\n\t* {e}\n"
                    )))
                }
            }
        }
        Err(e) => return Err(failed("validating job", e)),
    }
    if !warnings.is_empty() {
        ctx.println(&format!("Job Warnings:\n{}\n", warnings.join("\n")));
    }
    ctx.println("Job validation successful");
    Ok(())
}

/// What an HCL jobspec is evaluated with: `-var`, `-var-file` and the `NOMAD_VAR_<name>`
/// variables of `env`, as Nomad's CLI takes them; `file()` reads beside the jobspec.
fn hcl_inputs(
    p: &Parsed,
    jobspec: &Path,
    env: impl Iterator<Item = (OsString, OsString)>,
) -> Result<Inputs, CmdError> {
    let args = p
        .values("var")
        .iter()
        .map(|arg| match arg.split_once('=') {
            Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
            _ => Err(CmdError::Usage(format!(
                "invalid -var {arg:?}: expected name=value"
            ))),
        })
        .collect::<Result<_, _>>()?;
    let var_files = p
        .values("var-file")
        .iter()
        .map(|path| {
            std::fs::read_to_string(path)
                .map(|text| VarFile {
                    name: format!("-var-file {path}"),
                    text,
                })
                .map_err(|e| failed("reading var file", format!("{path}: {e}")))
        })
        .collect::<Result<_, _>>()?;
    // Names or values that are not UTF-8 cannot be HCL variables; they are someone else's.
    let env = env
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter_map(|(k, v)| Some((k.strip_prefix("NOMAD_VAR_")?.to_string(), v)))
        .collect();
    let dir = match jobspec.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok(Inputs {
        env,
        var_files,
        args,
        files: Files::Dir(dir),
        now: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::flags;

    fn inputs(args: &[&str], env: &[(&str, &str)]) -> Result<Inputs, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let p = flags::parse(VALIDATE.flags, &args).unwrap();
        let env = env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect::<Vec<_>>();
        hcl_inputs(&p, Path::new(&p.args[0]), env.into_iter()).map_err(|e| match e {
            CmdError::Usage(m) | CmdError::Failed(m) | CmdError::FailedWith(_, m) => m,
            CmdError::Exit(code) => format!("exit {code}"),
        })
    }

    #[test]
    fn variables_come_from_flags_and_the_environment() {
        let i = inputs(
            &["-var", "a=1", "-var=b=x=y", "-var", "a=2", "jobs/web.hcl"],
            &[("NOMAD_VAR_c", "3"), ("PATH", "/bin"), ("NOMAD_VAR_", "")],
        )
        .unwrap();
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(i.args, pairs(&[("a", "1"), ("b", "x=y"), ("a", "2")]));
        assert_eq!(i.env, pairs(&[("c", "3"), ("", "")]));
        assert_eq!(i.files, Files::Dir(PathBuf::from("jobs")));
        assert_eq!(
            inputs(&["web.hcl"], &[]).unwrap().files,
            Files::Dir(".".into())
        );
        assert_eq!(
            inputs(&["-var", "novalue", "web.hcl"], &[]).unwrap_err(),
            "invalid -var \"novalue\": expected name=value"
        );
        let e = inputs(&["-var-file", "/nonexistent/v.hcl", "web.hcl"], &[]).unwrap_err();
        assert!(
            e.starts_with("Error reading var file: /nonexistent/v.hcl: "),
            "{e}"
        );
    }
}
