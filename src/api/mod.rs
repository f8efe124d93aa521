//! The HTTP API (agent.md "HTTP API"): JSON in Nomad's shape over HTTP/1.1 on loopback by default.
//!
//! [`router`] holds the pure part (requests, responses, errors, the route table), [`ids`] the
//! resolution of ID prefixes, and [`server`] the threads that serve a [`Router`]. The agent's endpoints register themselves on a
//! [`Router`] before the server starts.

pub mod ids;
pub mod logs;
mod plugins;
pub mod router;
pub mod routes;
pub mod server;
mod volumes;

pub use ids::{resolve, IdKind};
pub use router::{ApiError, Handler, Method, Request, Response, Router};
pub use routes::serve;
pub use server::{ApiServer, ServerConfig, ServerError, DEFAULT_PORT, MAX_BODY};
