//! The HTTP API (agent.md "HTTP API"): JSON in Nomad's shape over HTTP/1.1 on loopback by default.
//!
//! [`router`] holds the pure part (requests, responses, errors, the route table, ID prefixes) and
//! [`server`] the threads that serve a [`Router`]. The agent's endpoints register themselves on a
//! [`Router`] before the server starts.

pub mod logs;
pub mod plugins;
pub mod router;
pub mod routes;
pub mod server;
pub mod volumes;

pub use router::{resolve_prefix, ApiError, Handler, Method, Request, Response, Router};
pub use routes::serve;
pub use server::{ApiServer, ServerConfig, ServerError, DEFAULT_PORT, MAX_BODY};
