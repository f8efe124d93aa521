//! Jobspecs that use HCL2's variables, locals and functions ([`crate::hcl::eval`]) through the
//! jobspec's walker: the values land in the job, and the walker's errors keep their lines.

use super::hcl::{parse_job, parse_job_with};
use super::JobspecError;
use crate::hcl::eval::Inputs;
use crate::hcl::funcs::Files;

const SPEC: &str = r#"
variable "count" {
  type    = number
  default = 2
}

variable "args" {
  type    = list(string)
  default = ["-f", "-p", "8001"]
}

locals {
  name = "web-${var.count}"
}

job "vars" {
  group "g" {
    count = var.count
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/${upper("sh")}"
        args    = concat(var.args, ["-h", "${NOMAD_TASK_DIR}"])
      }
      env {
        NAME   = local.name
        KERNEL = "${attr.kernel.name}"
        PORT   = 8000 + 1
      }
      kill_timeout = "${var.count * 5}s"
    }
  }
}
"#;

#[test]
fn values_land_in_the_job() {
    let job = parse_job(SPEC).unwrap().job;
    let group = &job.task_groups[0];
    assert_eq!(group.count, 2);
    let task = &group.tasks[0];
    assert_eq!(task.config.command, "/bin/SH");
    assert_eq!(
        task.config.args,
        ["-f", "-p", "8001", "-h", "${NOMAD_TASK_DIR}"]
    );
    assert_eq!(task.env["NAME"], "web-2");
    assert_eq!(task.env["KERNEL"], "${attr.kernel.name}");
    assert_eq!(task.env["PORT"], "8001");
    assert_eq!(task.kill_timeout, std::time::Duration::from_secs(10));
    let inputs = Inputs {
        args: vec![("count".into(), "3".into())],
        ..Inputs::default()
    };
    let job = parse_job_with(SPEC, &inputs).unwrap().job;
    assert_eq!(job.task_groups[0].count, 3);
    assert_eq!(job.task_groups[0].tasks[0].env["NAME"], "web-3");
}

#[test]
fn the_walker_still_names_the_line() {
    let bad = SPEC.replace("count = var.count\n", "count = \"${var.count}x\"\n");
    assert_eq!(
        parse_job(&bad).unwrap_err(),
        JobspecError::Invalid(
            "attribute \"count\" in group \"g\" at line 18 must be a whole number from 0 to 4294967295"
                .into()
        )
    );
    let bad = SPEC.replace("NAME   = local.name", "NAME   = local.nme");
    assert_eq!(
        parse_job(&bad).unwrap_err(),
        JobspecError::Invalid("attribute \"NAME\" in env block of task \"t\" at line 26: reference to undeclared local value \"nme\" (local.nme): the jobspec has no locals block that defines it".into())
    );
    let unset = SPEC.replace("  default = 2\n", "");
    assert_eq!(
        parse_job(&unset).unwrap_err(),
        JobspecError::Invalid("Unset variable \"count\" (declared at line 2): a used variable must be set or have a default value".into())
    );
}

#[test]
fn file_reads_beside_the_jobspec_only_when_allowed() {
    let src = "job \"f\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config {\n        command = trimspace(file(\"cmd.txt\"))\n      }\n    }\n  }\n}\n";
    let e = parse_job(src).unwrap_err().to_string();
    assert!(
        e.starts_with("attribute \"command\" in config block of task \"t\" at line 6: file(): filesystem functions are disabled"),
        "{e}"
    );
    let dir = std::env::temp_dir().join(format!("nw-vars-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cmd.txt"), "/bin/true\n").unwrap();
    let inputs = Inputs {
        files: Files::Dir(dir.clone()),
        ..Inputs::default()
    };
    let job = parse_job_with(src, &inputs).unwrap().job;
    assert_eq!(job.task_groups[0].tasks[0].config.command, "/bin/true");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn template_directives_are_evaluated() {
    let src = r#"
variable "debug" {
  type    = bool
  default = true
}
job "d" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/echo"
        args    = ["%{ if var.debug }-v%{ else }-q%{ endif }", "%{ for s in ["a", "b"] }${s}%{ endfor }"]
      }
    }
  }
}
"#;
    let job = parse_job(src).unwrap().job;
    assert_eq!(job.task_groups[0].tasks[0].config.args, ["-v", "ab"]);
}

#[test]
fn dynamic_blocks_and_lazy_functions_make_a_job() {
    let src = r#"
variable "ports" {
  default = { http = 8080, metrics = 9100 }
}
variable "tasks" {
  default = ["web", "worker"]
}
locals {
  settings = { web = { cmd = "/bin/web" } }
}
job "dyn" {
  group "g" {
    network {
      dynamic "port" {
        for_each = var.ports
        labels   = [port.key]
        content {
          static = port.value
        }
      }
    }
    dynamic "constraint" {
      for_each = ["linux"]
      content {
        attribute = "$${attr.kernel.name}"
        value     = constraint.value
      }
    }
    dynamic "task" {
      for_each = var.tasks
      iterator = t
      labels   = [t.value]
      content {
        driver = "raw_exec"
        config {
          command = try(local.settings[t.value].cmd, "/bin/sleep")
          args    = convert([t.key, cidrhost("10.0.0.0/24", t.key + 1)], list(string))
        }
      }
    }
  }
}
"#;
    let job = parse_job(src).unwrap().job;
    let group = &job.task_groups[0];
    let ports: Vec<(&str, u16)> = group.networks[0]
        .reserved_ports
        .iter()
        .map(|p| (p.label.as_str(), p.value))
        .collect();
    assert_eq!(ports, [("http", 8080), ("metrics", 9100)]);
    assert_eq!(group.constraints[0].l_target, "${attr.kernel.name}");
    assert_eq!(group.constraints[0].r_target, "linux");
    let tasks: Vec<(&str, &str, &[String])> = group
        .tasks
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.config.command.as_str(),
                t.config.args.as_slice(),
            )
        })
        .collect();
    assert_eq!(
        tasks,
        [
            (
                "web",
                "/bin/web",
                &["0".to_string(), "10.0.0.1".to_string()][..]
            ),
            (
                "worker",
                "/bin/sleep",
                &["1".to_string(), "10.0.0.2".to_string()][..]
            ),
        ]
    );
    let bad = src.replace("for_each = [\"linux\"]", "for_each = \"linux\"");
    assert_eq!(
        parse_job(&bad).unwrap_err(),
        JobspecError::Invalid("attribute \"for_each\" in dynamic \"constraint\" at line 23: cannot make blocks for each element of a string: for_each must be a list, set or map".into())
    );
    // A made block is read like a written one: the schema's errors name its line.
    let bad = src.replace("static = port.value", "statik = port.value");
    let e = parse_job(&bad).unwrap_err().to_string();
    assert!(e.contains("\"statik\"") && e.contains("line 18"), "{e}");
}
