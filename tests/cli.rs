//! The real CLI against a fixture HTTP server (tiny_http on loopback answering canned Nomad-shaped
//! JSON): what the CLI sent, what it printed, and its exit status.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use nodeward::cli::{run_with, Env};

/// One request as the fixture saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    url: String,
    body: String,
    token: Option<String>,
}

/// Canned answers by "METHOD /path?query": (status, body).
type Answers = HashMap<String, (u16, String)>;

struct Fixture {
    addr: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

impl Fixture {
    fn start(answers: Answers) -> Fixture {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let addr = format!("http://{}", server.server_addr().to_ip().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, log) = (server.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            while let Ok(mut rq) = s.recv() {
                let mut body = String::new();
                let _ = rq.as_reader().read_to_string(&mut body);
                let token = rq
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("X-Nomad-Token"))
                    .map(|h| h.value.to_string());
                let key = format!("{} {}", rq.method(), rq.url());
                log.lock().unwrap().push(Seen {
                    method: rq.method().to_string(),
                    url: rq.url().to_string(),
                    body,
                    token,
                });
                let (status, text) = answers
                    .get(&key)
                    .cloned()
                    .unwrap_or((404, format!("fixture has no answer for {key}")));
                let _ = rq.respond(tiny_http::Response::from_string(text).with_status_code(status));
            }
        });
        Fixture {
            addr,
            seen,
            server,
            thread: Some(thread),
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Runs the CLI against this fixture: (exit status, stdout, stderr).
    fn cli(&self, args: &str) -> (i32, String, String) {
        self.cli_args(
            &args
                .split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>(),
        )
    }

    fn cli_args(&self, args: &[String]) -> (i32, String, String) {
        let env = Env {
            addr: self.addr.clone(),
            token: Some("tok-123".into()),
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run_with(args, &env, &mut out, &mut err);
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn answers(list: &[(&str, u16, Value)]) -> Answers {
    list.iter()
        .map(|(k, status, v)| {
            let body = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.to_string(), (*status, body))
        })
        .collect()
}

/// A file in a fresh directory that is removed when the value is dropped.
struct TempFile {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
}

impl TempFile {
    fn display(&self) -> std::path::Display<'_> {
        self.path.display()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn temp_file(name: &str, text: &str) -> TempFile {
    let dir = std::env::temp_dir().join(format!("nodeward-cli-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    TempFile { dir, path }
}

const ALLOC_ID: &str = "1e1d4540-14f9-2515-8502-24d46291717d";

/// An HCL jobspec is parsed and evaluated by the CLI itself, as Nomad's CLI does (its variables
/// come from the CLI's flags and environment, `file()` reads beside it): the agent gets the job
/// that `POST /v1/jobs/parse` would have answered.
#[test]
fn job_run_parses_hcl_itself_and_registers_it() {
    let fx = Fixture::start(answers(&[
        (
            "PUT /v1/jobs",
            200,
            json!({"EvalID": "eval-1", "Warnings": ""}),
        ),
        (
            "GET /v1/job/example/allocations",
            200,
            json!([{"ID": ALLOC_ID, "TaskGroup": "group", "ClientStatus": "pending", "DesiredStatus": "run"},
                   {"ID": "old", "TaskGroup": "group", "ClientStatus": "complete", "DesiredStatus": "stop"}]),
        ),
    ]));
    let hcl = "variable \"cmd\" {\n  default = \"true\"\n}\njob \"example\" {\n  group \"group\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { command = var.cmd }\n    }\n  }\n}\n";
    let file = temp_file("example.nomad.hcl", hcl);
    let (code, out, err) = fx.cli_args(&["job".into(), "run".into(), file.display().to_string()]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(
        out,
        "==> Job \"example\" registered\n    Evaluation ID: eval-1\n    Allocation \"1e1d4540\" created: group \"group\", status \"pending\"\n"
    );
    let seen = fx.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        (seen[0].method.as_str(), seen[0].url.as_str()),
        ("PUT", "/v1/jobs")
    );
    let register: Value = serde_json::from_str(&seen[0].body).unwrap();
    let job = nodeward::jobspec::hcl::parse_job(hcl).unwrap().job;
    assert_eq!(register, json!({"Job": job}));
    assert!(seen.iter().all(|s| s.token.as_deref() == Some("tok-123")));
}

#[test]
fn job_run_sends_a_json_job_as_it_is_and_detach_only_prints() {
    let fx = Fixture::start(answers(&[(
        "PUT /v1/jobs",
        200,
        json!({"EvalID": "eval-2", "Warnings": "field \"Meta\" is ignored"}),
    )]));
    let file = temp_file("job.json", r#"{"Job": {"ID": "web", "Type": "batch"}}"#);
    let (code, out, _) = fx.cli_args(&[
        "job".into(),
        "run".into(),
        "-detach".into(),
        file.display().to_string(),
    ]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "Job Warnings:\nfield \"Meta\" is ignored\n\nJob registration successful\nEvaluation ID: eval-2\n"
    );
    let seen = fx.seen();
    assert_eq!(seen.len(), 1);
    let body: Value = serde_json::from_str(&seen[0].body).unwrap();
    assert_eq!(body, json!({"Job": {"ID": "web", "Type": "batch"}}));
}

#[test]
fn alloc_status_prints_the_events_table_and_json() {
    let t = 1_772_832_677_000_000_000i64;
    let alloc = json!({
        "ID": ALLOC_ID, "Name": "example.group[0]", "JobID": "example", "TaskGroup": "group",
        "ClientStatus": "running", "DesiredStatus": "run",
        "TaskStates": {"task": {"State": "running", "Restarts": 0, "Events": [
            {"Type": "Started", "Time": t, "DisplayMessage": "Task started by client"},
            {"Type": "Plugin became healthy", "Time": t + 1_000_000_000, "DisplayMessage": "plugin: hostpath"}
        ]}}
    });
    let fx = Fixture::start(answers(&[("GET /v1/allocation/1e1d", 200, alloc.clone())]));
    let (code, out, err) = fx.cli("alloc status 1e1d");
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(
        out.starts_with(&format!("ID             = {ALLOC_ID}\n")),
        "{out}"
    );
    assert!(out.contains("\nTask \"task\" is \"running\"\n"), "{out}");
    let table: Vec<&str> = out.lines().skip_while(|l| *l != "Recent Events:").collect();
    assert_eq!(table.len(), 4, "{out}");
    // The time column is as wide as the local time (`Z` or `+hh:mm`), which depends on the machine.
    let time = table[2].split("  ").next().unwrap();
    assert!(time.starts_with("2026-03-0") && time.len() >= 20, "{out}");
    let header = format!(
        "{:<w$}  Type                   Description",
        "Time",
        w = time.len()
    );
    assert_eq!(table[1], header);
    assert!(
        table[2].ends_with("  Plugin became healthy  plugin: hostpath"),
        "{out}"
    );
    assert!(
        table[3].ends_with("  Started                Task started by client"),
        "{out}"
    );

    let (code, out, _) = fx.cli("alloc status -json 1e1d");
    assert_eq!(code, 0);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), alloc);
}

#[test]
fn api_errors_exit_1_with_the_reason() {
    let fx = Fixture::start(answers(&[
        (
            "GET /v1/allocation/ffff",
            404,
            json!("no ID matches prefix \"ffff\""),
        ),
        (
            "DELETE /v1/volume/host/abc",
            500,
            json!("error deleting volume \"abc\" with plugin \"mine\": exit status 1: busy"),
        ),
    ]));
    let (code, out, err) = fx.cli("alloc status ffff");
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        "Error querying allocation: Unexpected response code: 404 (no ID matches prefix \"ffff\")\n"
    );
    let (code, _, err) = fx.cli("volume delete abc");
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "Error deleting volume: Unexpected response code: 500 (error deleting volume \"abc\" with plugin \"mine\": exit status 1: busy)\n"
    );
}

#[test]
fn bad_usage_exits_2_with_the_usage_and_help_exits_0() {
    let fx = Fixture::start(Answers::new());
    let (code, out, err) = fx.cli("job run");
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.starts_with("This command takes 1 argument\n\nUsage: nodeward job run"),
        "{err}"
    );
    let (code, _, err) = fx.cli("volume delete -purge abc");
    assert_eq!(code, 2);
    assert!(
        err.starts_with("flag provided but not defined: -purge\n\nUsage: nodeward volume delete"),
        "{err}"
    );
    let (code, _, err) = fx.cli("frobnicate");
    assert_eq!(code, 2);
    assert!(err.starts_with("Unknown command: \"frobnicate\""), "{err}");
    let (code, _, err) = fx.cli("volume");
    assert_eq!(code, 2);
    assert!(err.contains("nodeward volume create"), "{err}");
    let (code, out, err) = fx.cli("alloc logs -h");
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.starts_with("Usage: nodeward alloc logs"), "{out}");
    let (code, out, _) = fx.cli("--help");
    assert_eq!(code, 0);
    assert!(out.contains("volume create"), "{out}");
    let (code, out, _) = fx.cli("version");
    assert_eq!(
        (code, out),
        (0, format!("nodeward v{}\n", env!("CARGO_PKG_VERSION")))
    );
    assert!(fx.seen().is_empty(), "no request for bad usage");
}

#[test]
fn volume_create_converts_the_hcl_spec_and_prints_nomads_block() {
    let volume = json!({
        "ID": "1e1d4540-14f9-2515-8502-24d46291717d", "Name": "test", "Namespace": "default",
        "PluginID": "mkdir", "NodeID": "ae118273-5416-3ed7-01dd-10fe8bf49e81", "NodePool": "default",
        "CapacityBytes": 0, "State": "ready", "HostPath": "/srv/v/1e1d4540"
    });
    let fx = Fixture::start(answers(&[
        (
            "PUT /v1/volume/host/create",
            200,
            json!({"Volume": volume, "Warnings": ""}),
        ),
        ("DELETE /v1/volume/host/1e1d?force=true", 200, json!({})),
        ("GET /v1/volumes?type=host", 200, json!([volume])),
        ("GET /v1/volumes?type=csi", 200, json!([])),
    ]));
    let spec = "type = \"host\"\nname = \"test\"\nplugin_id = \"mkdir\"\ncapacity_min = \"10MiB\"\nparameters {\n  mode = \"0755\"\n}\n";
    let file = temp_file("vol.hcl", spec);
    let (code, out, err) =
        fx.cli_args(&["volume".into(), "create".into(), file.display().to_string()]);
    assert_eq!((code, err.as_str()), (0, ""));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "==> Created host volume test with ID 1e1d4540-14f9-2515-8502-24d46291717d"
    );
    assert_eq!(lines[1], "  ✓ Host volume \"1e1d4540\" ready");
    assert_eq!(lines[2], "");
    assert!(lines[3].starts_with("    20"), "{out}");
    assert_eq!(lines[10], "    Capacity  = 0 B");
    let sent: Value = serde_json::from_str(&fx.seen()[0].body).unwrap();
    assert_eq!(
        sent,
        json!({"Volume": {"Name": "test", "PluginID": "mkdir",
                          "RequestedCapacityMinBytes": 10485760, "Parameters": {"mode": "0755"}}})
    );

    let (code, out, _) = fx.cli("volume delete -force 1e1d");
    assert_eq!(
        (code, out.as_str()),
        (0, "Successfully deleted volume \"1e1d\"!\n")
    );

    let (code, out, _) = fx.cli("volume status");
    assert_eq!(code, 0);
    let host = "ID        Name  Namespace  Plugin ID  Node ID   Node Pool  State\n1e1d4540  test  default    mkdir      ae118273  default    ready\n";
    assert_eq!(
        out,
        format!("{host}\nContainer Storage Interface\nNo CSI volumes\n")
    );
    let (code, out, _) = fx.cli("volume status -type host");
    assert_eq!((code, out.as_str()), (0, host));
}

/// A `type = "csi"` file goes to the CSI volume API under its ID; without `-type`, an ID the
/// host volume API does not know is looked up among CSI volumes; `volume deregister` forgets one.
#[test]
fn csi_volumes_through_the_cli() {
    let volume = json!({
        "ID": "data", "Name": "data", "ExternalID": "hp-data", "PluginID": "hostpath",
        "Provider": "nodeward.test.csi", "ProviderVersion": "1.2.3", "Capacity": 0,
        "Schedulable": false, "AccessMode": "", "AttachmentMode": "", "MountOptions": null,
        "Namespace": "default", "Allocations": [],
    });
    let missing = "host volume \"nope\" not found";
    let fx = Fixture::start(answers(&[
        (
            "PUT /v1/volume/csi/data/create",
            200,
            json!({"Volumes": [volume], "Warnings": ""}),
        ),
        (
            "PUT /v1/volume/csi/data",
            200,
            json!({"Volumes": [volume], "Warnings": ""}),
        ),
        ("GET /v1/volumes?type=csi", 200, json!([volume])),
        (
            "GET /v1/volume/host/data",
            404,
            json!("host volume \"data\" not found"),
        ),
        ("GET /v1/volume/csi/data", 200, volume.clone()),
        (
            "DELETE /v1/volume/host/data",
            404,
            json!("host volume \"data\" not found"),
        ),
        (
            "DELETE /v1/volume/csi/data/delete",
            200,
            json!({"VolumeID": "data"}),
        ),
        ("DELETE /v1/volume/host/nope", 404, json!(missing)),
        (
            "DELETE /v1/volume/csi/nope/delete",
            404,
            json!("volume not found: nope"),
        ),
        (
            "DELETE /v1/volume/csi/data?force=true",
            200,
            json!({"VolumeID": "data"}),
        ),
    ]));
    let spec = "type = \"csi\"\nid = \"data\"\nplugin_id = \"hostpath\"\ncapacity_min = \"1MiB\"\n\
                capability {\n  access_mode = \"single-node-writer\"\n  attachment_mode = \"file-system\"\n}\n";
    let file = temp_file("csi.hcl", spec);
    let (code, out, err) =
        fx.cli_args(&["volume".into(), "create".into(), file.display().to_string()]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, "Created external volume hp-data with ID data\n");
    let sent: Value = serde_json::from_str(&fx.seen()[0].body).unwrap();
    assert_eq!(
        sent,
        json!({"Volumes": [{"ID": "data", "PluginID": "hostpath", "RequestedCapacityMin": 1048576,
            "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}]}]})
    );
    let (code, out, _) = fx.cli_args(&[
        "volume".into(),
        "register".into(),
        file.display().to_string(),
    ]);
    assert_eq!(
        (code, out.as_str()),
        (0, "Volume registration successful\n")
    );

    let (code, out, _) = fx.cli("volume status -type csi");
    assert_eq!(
        (code, out.as_str()),
        (
            0,
            "ID    Name  Plugin ID  Schedulable  Access Mode\ndata  data  hostpath   false\n"
        )
    );
    let (code, out, _) = fx.cli("volume status data");
    assert_eq!(code, 0);
    assert!(out.starts_with("ID                   = data\nName                 = data\nExternal ID          = hp-data\n"), "{out}");
    assert!(
        out.ends_with("\nAllocations\nNo allocations placed\n"),
        "{out}"
    );

    let (code, out, _) = fx.cli("volume delete data");
    assert_eq!(
        (code, out.as_str()),
        (0, "Successfully deleted volume \"data\"!\n")
    );
    let (code, _, err) = fx.cli("volume delete nope");
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!("Error deleting volume: Unexpected response code: 404 ({missing})\n")
    );
    let (code, _, err) = fx.cli("volume delete -type csi -force data");
    assert_eq!(code, 2);
    assert!(err.starts_with("-force is for host volumes"), "{err}");
    let (code, out, _) = fx.cli("volume deregister -force data");
    assert_eq!(
        (code, out.as_str()),
        (0, "Successfully deregistered volume \"data\"!\n")
    );
}

#[test]
fn alloc_logs_picks_the_only_task_and_tails_by_lines() {
    let alloc = json!({"ID": ALLOC_ID, "TaskStates": {"web": {"State": "running"}}});
    let base = format!("/v1/client/fs/logs/{ALLOC_ID}?task=web&type=stderr&plain=true");
    let fx = Fixture::start(answers(&[
        ("GET /v1/allocation/1e1d", 200, alloc),
        (
            &format!("GET {base}&origin=end&offset=65536&follow=false"),
            200,
            json!("one\ntwo\nthree\n"),
        ),
        (
            &format!("GET {base}&origin=end&offset=10&follow=false"),
            200,
            json!("two\nthree\n"),
        ),
    ]));
    let (code, out, err) = fx.cli("alloc logs -stderr -tail -n 2 1e1d");
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, "two\nthree\n");
}

#[test]
fn an_unreachable_agent_is_an_error() {
    let env = Env {
        addr: "http://127.0.0.1:1".into(),
        token: None,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_with(&["job".into(), "status".into()], &env, &mut out, &mut err);
    let err = String::from_utf8(err).unwrap();
    assert_eq!(code, 1);
    assert!(
        err.starts_with("Error querying jobs: cannot reach the agent at http://127.0.0.1:1:"),
        "{err}"
    );
}

/// The CLI against the real API server: chunked log streaming and the token, end to end.
#[test]
fn logs_follow_and_token_against_the_real_api_server() {
    use nodeward::api::{ApiServer, Request, Response, Router, ServerConfig};

    struct Lines(Vec<&'static str>);
    impl Read for Lines {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Ok(0);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            let line = self.0.remove(0).as_bytes();
            buf[..line.len()].copy_from_slice(line);
            Ok(line.len())
        }
    }

    let seen_query = Arc::new(Mutex::new(String::new()));
    let q = seen_query.clone();
    let mut router = Router::new();
    router.get("/v1/allocation/:id", |_req: &Request| {
        Response::json(json!({"ID": ALLOC_ID, "TaskStates": {"web": {"State": "running"}}}))
    });
    router.get("/v1/client/fs/logs/:id", move |req: &Request| {
        *q.lock().unwrap() = format!(
            "{} task={:?} follow={:?}",
            req.param("id"),
            req.query("task"),
            req.query("follow")
        );
        Ok(Response::Stream(Box::new(Lines(vec![
            "line1\n", "line2\n",
        ]))))
    });
    router.post("/v1/allocation/:id/stop", |_req: &Request| {
        Response::json(json!({"EvalID": "eval-9"}))
    });
    let server = ApiServer::start(
        ServerConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            token: Some("tok-123".into()),
            ..ServerConfig::default()
        },
        router,
    )
    .unwrap();
    let env = |token: Option<&str>| Env {
        addr: format!("http://{}", server.local_addr()),
        token: token.map(String::from),
    };
    let run = |env: &Env, args: &str| {
        let args: Vec<String> = args.split_whitespace().map(String::from).collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run_with(&args, env, &mut out, &mut err);
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    };

    let (code, out, err) = run(&env(None), "alloc logs -f 1e1d");
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (0, "line1\nline2\n", "")
    );
    assert_eq!(
        *seen_query.lock().unwrap(),
        format!("{ALLOC_ID} task=Some(\"web\") follow=Some(\"true\")")
    );

    let (code, _, err) = run(&env(None), "alloc stop 1e1d");
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "Error stopping allocation: Unexpected response code: 403 (Permission denied)\n"
    );
    let (code, out, _) = run(&env(Some("tok-123")), "alloc stop 1e1d");
    assert_eq!(
        (code, out.as_str()),
        (
            0,
            "==> Allocation \"1e1d\" stopped\n    Evaluation ID: eval-9\n"
        )
    );
    server.stop();
}

#[test]
fn job_status_lists_jobs_and_shows_one_with_its_allocations() {
    let fx = Fixture::start(answers(&[
        (
            "GET /v1/jobs",
            200,
            json!([{"ID": "example", "Type": "service", "Status": "running"}]),
        ),
        (
            "GET /v1/job/ex",
            200,
            json!({"ID": "example", "Name": "example", "Type": "service", "Status": "running"}),
        ),
        (
            "GET /v1/job/example/allocations",
            200,
            json!([{"ID": ALLOC_ID, "TaskGroup": "group", "DesiredStatus": "run", "ClientStatus": "running"}]),
        ),
        ("GET /v1/job/example/evaluations", 200, json!([])),
        (
            "DELETE /v1/job/example?purge=true",
            200,
            json!({"EvalID": "e3"}),
        ),
    ]));
    let (code, out, _) = fx.cli("job status");
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "ID       Type     Status   Submit Date\nexample  service  running\n"
    );
    let (code, out, _) = fx.cli("job status ex");
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "ID          = example\nName        = example\nType        = service\nStatus      = running\nSubmit Date =\n\nAllocations\nID        Task Group  Desired  Status   Created\n1e1d4540  group       run      running\n"
    );
    let (code, out, _) = fx.cli("job stop -purge example");
    assert_eq!(
        (code, out.as_str()),
        (
            0,
            "==> Job \"example\" stopped and purged\n    Evaluation ID: e3\n"
        )
    );
}
