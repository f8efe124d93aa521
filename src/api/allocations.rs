//! Allocation routes (agent.md "HTTP API"): `GET /v1/allocations`, `GET /v1/allocation/:id`,
//! `POST|PUT /v1/allocation/:id/stop`, `POST /v1/client/allocation/:id/restart` and `/signal`;
//! and the allocation in Nomad's JSON shape, which `GET /v1/job/:id/allocations` shares.
//!
//! Answers are serialised straight from the live allocation, without a `serde_json::Value` in
//! between: that made `GET /v1/allocation/:id` cost most of its time in the allocator (7.8k →
//! 26k req/s, docs/load.md). The job an allocation answer carries is encoded once per
//! registration ([`JobEncodings`]) and shared by its allocations.

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::answers::{Empty, EvalId};
use super::ids::{self, ID};
use super::router::{optional_json_body, ApiError, Request, Response, Router};
use crate::agent::Agent;
use crate::alloc::{AllocError, Allocation, LockedTasks};
use crate::jobspec::{network, Job};

impl From<AllocError> for ApiError {
    fn from(e: AllocError) -> ApiError {
        match e {
            AllocError::JobNotFound | AllocError::AllocNotFound | AllocError::EvalNotFound => {
                ApiError::NotFound(e.to_string())
            }
            AllocError::UnknownTask(_)
            | AllocError::UnknownSignal(_)
            | AllocError::NotCollectable { .. }
            | AllocError::TooManyAllocs(_)
            | AllocError::ChildRefused(_)
            | AllocError::IndexConflict(_) => ApiError::BadRequest(e.to_string()),
            AllocError::NotSaved { .. } | AllocError::State(_) => ApiError::Internal(e.to_string()),
        }
    }
}

/// The full ID of the allocation a request's `:id` names (a unique prefix works).
pub(super) fn alloc_id(agent: &Agent, req: &Request) -> Result<String, ApiError> {
    ids::resolve(req.param("id"), agent.allocs.alloc_ids(), &ID)
}

/// The body of `POST /v1/client/allocation/:id/restart`.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct RestartRequest {
    #[serde(rename = "TaskName")]
    task_name: String,
    #[serde(rename = "AllTasks")]
    all_tasks: bool,
}

impl RestartRequest {
    /// Parses the request body (none restarts every task): the endpoint's parsing entry point.
    pub fn from_body(body: &[u8]) -> Result<RestartRequest, ApiError> {
        optional_json_body(body)
    }

    /// The task to restart; `None` for every task.
    fn task(&self) -> Option<&str> {
        (!self.all_tasks && !self.task_name.is_empty()).then_some(self.task_name.as_str())
    }
}

/// The body of `POST /v1/client/allocation/:id/signal`.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct SignalRequest {
    #[serde(rename = "Signal")]
    signal: String,
    #[serde(rename = "Task")]
    task: String,
}

impl SignalRequest {
    /// Parses the request body (none sends SIGKILL to every task): the endpoint's parsing entry
    /// point.
    pub fn from_body(body: &[u8]) -> Result<SignalRequest, ApiError> {
        optional_json_body(body)
    }

    /// The task to signal; `None` for every task.
    fn task(&self) -> Option<&str> {
        (!self.task.is_empty()).then_some(self.task.as_str())
    }
}

/// Each job's JSON with its `Version`, encoded on first request and shared by the allocations of
/// its registration: the allocations of one registration share one `Arc<Job>` (see
/// [`Allocation::job`], [`Allocation::job_now`]), so the cache is keyed on that `Arc` and the
/// version. An entry holds the `Arc` itself, so its address cannot be reused by another job
/// while the entry lives; entries whose job no allocation holds any more are dropped at the next
/// miss.
#[derive(Default)]
pub struct JobEncodings {
    /// Guards: the address of each `Arc<Job>` and a version → that `Arc` and its encoding. Held
    /// for a lookup or an insert, never while encoding.
    cache: Mutex<HashMap<(usize, u64), Encoded>>,
}

/// A job (kept so that its address stays its own) and its JSON.
type Encoded = (Arc<Job>, Arc<RawValue>);

impl JobEncodings {
    /// The JSON of `job` at `version` (Nomad's `Job.Version`), shared by every caller with the
    /// same `Arc` and version.
    pub fn get(&self, job: &Arc<Job>, version: u64) -> Arc<RawValue> {
        let key = (Arc::as_ptr(job) as usize, version);
        if let Some((_, json)) = self.cache.lock().get(&key) {
            return json.clone();
        }
        let encoded: Arc<RawValue> = serde_json::to_value(&**job)
            .and_then(|mut v| {
                v["Version"] = Value::from(version);
                serde_json::value::to_raw_value(&v)
            })
            .unwrap_or_else(|e| {
                log::error!("cannot encode job {} as JSON: {e}", job.id);
                RawValue::from_string("null".into()).expect("null is JSON")
            })
            .into();
        let mut cache = self.cache.lock();
        // Only the cache holds these jobs: no allocation can ask for them again.
        cache.retain(|_, (j, _)| Arc::strong_count(j) > 1);
        cache
            .entry(key)
            .or_insert_with(|| (job.clone(), encoded))
            .1
            .clone()
    }
}

/// The node allocations are on, as their answers name it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Here<'a> {
    pub id: &'a str,
    pub name: &'a str,
    /// MHz of one core: a task's `cores` as its `CpuShares`.
    pub mhz_per_core: u64,
}

impl<'a> Here<'a> {
    pub fn of(agent: &'a Agent) -> Here<'a> {
        let r = &agent.node.resources;
        Here {
            id: &agent.node_id,
            name: &agent.config.name,
            mhz_per_core: r.cpu_mhz / u64::from(r.total_cores.max(1)),
        }
    }
}

/// An allocation in Nomad's API shape, serialised from the live state. While it serialises it
/// holds the allocation's task-state locks (every one, in name order, so the states and the
/// client status agree): encode it into memory, never straight into a socket.
struct AllocAnswer<'a> {
    alloc: &'a Allocation,
    node: Here<'a>,
    /// The job, as `GET /v1/allocation/:id` carries it; lists carry none.
    job: Option<&'a RawValue>,
    /// The version of the job the allocation belongs to now (Nomad's `JobVersion`).
    version: u64,
}

/// The `TaskStates` map of an [`AllocAnswer`].
struct TaskStates<'s, 'a>(&'s LockedTasks<'a>);

impl Serialize for TaskStates<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter())
    }
}

impl Serialize for AllocAnswer<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let a = self.alloc;
        let status = a.status();
        let tasks = a.lock_tasks();
        let mut m = s.serialize_struct("Allocation", 16)?;
        if !a.ports.is_empty() || !a.cores.is_empty() {
            let r = AllocatedResources(a, self.node.mhz_per_core);
            m.serialize_field("AllocatedResources", &r)?;
        }
        m.serialize_field(
            "ClientDescription",
            status.pending_reason.as_deref().unwrap_or(""),
        )?;
        m.serialize_field("ClientStatus", tasks.client_status().as_str())?;
        m.serialize_field("CreateTime", &a.create_time)?;
        m.serialize_field("DesiredStatus", &status.desired)?;
        m.serialize_field("ID", &a.id)?;
        if let Some(job) = self.job {
            m.serialize_field("Job", job)?;
        }
        m.serialize_field("JobID", &a.job.id)?;
        m.serialize_field("JobVersion", &self.version)?;
        m.serialize_field("ModifyTime", &status.modify_time)?;
        m.serialize_field("Name", &a.name)?;
        m.serialize_field("Namespace", "default")?;
        m.serialize_field("NodeID", self.node.id)?;
        m.serialize_field("NodeName", self.node.name)?;
        m.serialize_field("TaskGroup", &a.group)?;
        m.serialize_field("TaskStates", &TaskStates(&tasks))?;
        m.end()
    }
}

/// Nomad's `AllocatedResources` of an allocation with ports or cores: `Shared.Ports` (what it
/// got) and `Shared.Networks` (its group's network with the values given and the host IP); with
/// cores, `Tasks.<task>` too: `Cpu.CpuShares` (a task's cores count their MHz) and
/// `Cpu.ReservedCores`, `Memory.MemoryMB` and `MemoryMaxMB`. The `u64` is one core's MHz.
struct AllocatedResources<'a>(&'a Allocation, u64);

impl Serialize for AllocatedResources<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let a = self.0;
        let tasks = (!a.cores.is_empty()).then(|| {
            let tasks = &a.group_spec().tasks;
            tasks
                .iter()
                .map(|t| {
                    let r = &t.resources;
                    let task = TaskResources {
                        cpu: TaskCpu {
                            cpu_shares: crate::alloc::task_cpu_mhz(r, self.1),
                            reserved_cores: a.cores.get(&t.name).cloned().unwrap_or_default(),
                        },
                        memory: TaskMemory {
                            memory_mb: r.memory_mb,
                            memory_max_mb: r.memory_max_mb,
                        },
                    };
                    (t.name.clone(), task)
                })
                .collect()
        });
        let answer = Resources {
            shared: Shared {
                networks: network::allocated_networks(&a.group_spec().networks, &a.ports),
                ports: &a.ports,
            },
            tasks,
        };
        // Every object's keys in name order, the networks' and ports' too, as always.
        serde_json::to_value(answer)
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Resources<'a> {
    shared: Shared<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tasks: Option<BTreeMap<String, TaskResources>>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Shared<'a> {
    networks: Vec<network::NetworkResource>,
    ports: &'a [network::AllocatedPort],
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct TaskResources {
    cpu: TaskCpu,
    memory: TaskMemory,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct TaskCpu {
    cpu_shares: u64,
    reserved_cores: Vec<u32>,
}

#[derive(Serialize)]
struct TaskMemory {
    #[serde(rename = "MemoryMB")]
    memory_mb: u32,
    #[serde(rename = "MemoryMaxMB")]
    memory_max_mb: u32,
}

/// A list of allocations (without their jobs), encoded.
pub(super) fn list(allocs: &[Arc<Allocation>], node: Here<'_>) -> Result<Response, ApiError> {
    let answers: Vec<AllocAnswer<'_>> = allocs
        .iter()
        .map(|alloc| AllocAnswer {
            alloc,
            node,
            job: None,
            version: alloc.job_now().1,
        })
        .collect();
    Response::json(answers)
}

/// One allocation with its job, encoded.
fn one(alloc: &Arc<Allocation>, node: Here<'_>, jobs: &JobEncodings) -> Result<Response, ApiError> {
    let (job, version) = alloc.job_now();
    let job = jobs.get(&job, version);
    Response::json(AllocAnswer {
        alloc,
        node,
        job: Some(&job),
        version,
    })
}

pub(super) fn routes(r: &mut Router, agent: &Arc<Agent>) {
    let a = agent.clone();
    r.get("/v1/allocations", move |_| {
        list(&a.allocs.allocations(), Here::of(&a))
    });
    let a = agent.clone();
    let jobs = JobEncodings::default();
    r.get("/v1/allocation/:id", move |req| {
        let alloc = a.allocs.get(&alloc_id(&a, req)?)?;
        one(&alloc, Here::of(&a), &jobs)
    });
    let a = agent.clone();
    r.post("/v1/client/allocation/:id/restart", move |req| {
        let body = RestartRequest::from_body(req.body())?;
        a.allocs.restart(&alloc_id(&a, req)?, body.task())?;
        Response::json(Empty {})
    });
    let a = agent.clone();
    r.post("/v1/client/allocation/:id/signal", move |req| {
        let body = SignalRequest::from_body(req.body())?;
        a.allocs
            .signal(&alloc_id(&a, req)?, &body.signal, body.task())?;
        Response::json(Empty {})
    });
    let a = agent.clone();
    let stop = Arc::new(move |req: &Request| {
        let eval = a.allocs.stop(&alloc_id(&a, req)?)?;
        Response::json(EvalId { eval_id: eval })
    });
    let post = stop.clone();
    r.post("/v1/allocation/:id/stop", move |req| post(req));
    r.put("/v1/allocation/:id/stop", move |req| stop(req));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::testing::{gated_job, manager};
    use crate::state::{Snapshot, StateFile};
    use crate::task::events::{now_nanos, TaskEvent, TaskStatus};
    use serde_json::json;
    use serde_json::Value;

    const HERE: Here<'static> = Here {
        id: "node",
        name: "node",
        mhz_per_core: 0,
    };

    fn text(r: Result<Response, ApiError>) -> String {
        match r.unwrap() {
            Response::Json(s) => s,
            other => panic!("not JSON: {other:?}"),
        }
    }

    /// The allocation answer is encoded straight from the live state: every field Nomad's shape
    /// has, the job as the job itself encodes, and the task states as they are now.
    #[test]
    fn allocation_answer_carries_the_live_state_and_the_job() {
        let (allocs, dir, _shutdown) = manager("view");
        let jobs = JobEncodings::default();
        let job = gated_job("view", 2);
        allocs.register_job(job.clone()).unwrap();
        let list: Vec<Value> =
            serde_json::from_str(&text(list(&allocs.allocations(), HERE))).unwrap();
        assert_eq!(list.len(), 2);
        assert!(
            list.iter().all(|a| a.get("Job").is_none()),
            "lists carry no job"
        );
        let id = list[0]["ID"].as_str().unwrap().to_string();
        let alloc = allocs.get(&id).unwrap();
        {
            let mut a = alloc.tasks["a"].lock();
            a.state = TaskStatus::Dead;
            a.push(TaskEvent::not_restarting(
                now_nanos(),
                "Exceeded allowed attempts 2 in interval 30m0s",
            ));
        }
        let got: Value = serde_json::from_str(&text(one(&alloc, HERE, &jobs))).unwrap();
        let mut want_job = serde_json::to_value(&job).unwrap();
        want_job["Version"] = json!(0);
        let want = json!({
            "ID": id,
            "Name": alloc.name,
            "Namespace": "default",
            "NodeID": "node",
            "NodeName": "node",
            "JobID": "view",
            "TaskGroup": "g",
            "DesiredStatus": "run",
            "ClientStatus": "failed",
            "ClientDescription": "missing host volume \"missing\"",
            "CreateTime": alloc.create_time,
            "ModifyTime": got["ModifyTime"],
            "TaskStates": {
                "a": serde_json::to_value(&*alloc.tasks["a"].lock()).unwrap(),
                "b": serde_json::to_value(&*alloc.tasks["b"].lock()).unwrap(),
            },
            "JobVersion": 0,
            "Job": want_job,
        });
        assert_eq!(got, want);
        assert_eq!(
            got["TaskStates"]["a"]["Events"][0]["Type"],
            "Not Restarting"
        );
        let other = allocs.get(list[1]["ID"].as_str().unwrap()).unwrap();
        assert!(
            Arc::ptr_eq(&jobs.get(&alloc.job, 0), &jobs.get(&other.job, 0)),
            "the allocations of one registration share the job's encoding"
        );
        let mut state = StateFile::default();
        allocs.fill(&mut state);
        let (restored, dir2, _shutdown2) = manager("view-restored");
        restored.restore(&state);
        let (a, b) = (
            restored.get(&alloc.id).unwrap(),
            restored.get(&other.id).unwrap(),
        );
        assert!(
            Arc::ptr_eq(&a.job, &b.job) && Arc::ptr_eq(&jobs.get(&a.job, 0), &jobs.get(&b.job, 0)),
            "restored allocations of one job version share it"
        );
        let _ = std::fs::remove_dir_all(&dir2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An encoding lives as long as an allocation holds its job: a purged job's goes at the next
    /// miss, so the cache never outgrows the registry.
    #[test]
    fn job_encodings_go_with_their_allocations() {
        let jobs = JobEncodings::default();
        let first = Arc::new(gated_job("first", 1));
        let json = jobs.get(&first, 3);
        let mut want = serde_json::to_value(&*first).unwrap();
        want["Version"] = json!(3);
        assert_eq!(
            serde_json::from_str::<Value>(json.get()).unwrap(),
            want,
            "the job as the job itself encodes, with its version"
        );
        drop(first);
        let second = Arc::new(gated_job("second", 1));
        jobs.get(&second, 0);
        let cache = jobs.cache.lock();
        assert_eq!(cache.len(), 1);
        assert!(cache.values().all(|(j, _)| Arc::ptr_eq(j, &second)));
    }
}
