//! The HTTP API (agent.md "HTTP API"): JSON in Nomad's shape over HTTP/1.1 on loopback by default.
//!
//! HTTP lives here and only here: the files below parse request bodies, resolve ID prefixes, pick
//! status codes and encode Nomad's JSON from the domain's values and typed errors.
//!
//! - [`router`]: the pure part (requests, responses, errors, the route table);
//! - [`ids`]: ID prefix resolution, with each kind of ID's wording;
//! - one file per resource, each registering its routes: [`agent`] (self, health), [`node`],
//!   [`jobs`], [`evaluations`], [`allocations`], [`gc`], [`logs`], [`volumes`] (host volumes, and
//!   the volume list of both types), [`csi_volumes`], [`plugins`];
//! - [`routes`]: the agent's route table, assembled from those files;
//! - [`admission`]: who may call (`Host`, `Origin`, `Content-Type`, upgrades, the token);
//! - [`server`]: the threads that serve a [`Router`].
//!
//! Imports run one way: `router` ← `ids` ← the resource files ← `routes`, and `router` ←
//! `admission` ← `server` ← `routes`; no file imports one that imports it.

pub mod admission;
pub mod agent;
pub mod allocations;
pub mod answers;
pub mod csi_volumes;
pub mod dispatch;
pub mod evaluations;
pub mod gc;
pub mod ids;
pub mod job_plan;
pub mod jobs;
pub mod logs;
pub mod node;
pub mod plugins;
pub mod router;
pub mod routes;
pub mod server;
pub mod stats;
pub mod volumes;

pub use ids::{resolve, IdKind};
pub use router::{ApiError, Handler, Method, PeerGone, Request, Response, Router};
pub use routes::{bind, serve};
pub use server::{ApiServer, ServerConfig, ServerError, DEFAULT_PORT, MAX_BODY};
