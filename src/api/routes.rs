//! The agent's route table: every endpoint of agent.md, registered by the file of its resource
//! (one file per resource, each a thin shell that parses the request, calls the engine and
//! encodes the answer), and the server started on it.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use super::router::Router;
use super::server::{ApiServer, ServerConfig, ServerError};
use super::{
    agent, allocations, csi_volumes, dispatch, evaluations, gc, job_plan, jobs, logs, node,
    plugins, stats, volumes,
};
use crate::agent::Agent;
use crate::config::AgentConfig;

// The request bodies' parsing entry points, where the fuzz target finds them.
pub use super::allocations::{RestartRequest, SignalRequest};
pub use super::dispatch::DispatchBody;
pub use super::jobs::ParseRequest;

/// Binds the API's configured address, before the agent starts (see [`serve`]).
pub fn bind(config: &AgentConfig) -> Result<TcpListener, ServerError> {
    super::server::bind(SocketAddr::new(config.bind_addr, config.http_port))
}

/// Starts the API server of `agent` on the listener [`bind`] returned.
pub fn serve(agent: Arc<Agent>, listener: TcpListener) -> Result<ApiServer, ServerError> {
    let c = &agent.config;
    // The names `Host` may carry besides IP addresses and localhost: the node's, the machine's,
    // and the configured ones.
    let mut allowed_hosts = vec![c.name.clone(), crate::config::host_name()];
    allowed_hosts.extend(c.http_allowed_hosts.iter().cloned());
    let config = ServerConfig {
        addr: SocketAddr::new(c.bind_addr, c.http_port),
        token: c.token.clone(),
        acl_reads: c.acl_reads,
        allowed_hosts,
        ..ServerConfig::default()
    };
    if !c.bind_addr.is_loopback() && c.token.is_none() {
        log::warn!(
            "the API on {} can be reached from other machines and no ACL token is set: anyone \
             who can connect to it can run jobs as root; set acl {{ token_file = ... }} or \
             bind_addr = \"127.0.0.1\"",
            config.addr
        );
    }
    ApiServer::start_on(listener, config, router(agent))
}

pub fn router(agent: Arc<Agent>) -> Router {
    let mut r = Router::new();
    agent::routes(&mut r, &agent);
    node::routes(&mut r, &agent);
    jobs::routes(&mut r, &agent);
    job_plan::routes(&mut r, &agent);
    evaluations::routes(&mut r, &agent);
    dispatch::routes(&mut r, &agent);
    allocations::routes(&mut r, &agent);
    gc::routes(&mut r, &agent);
    stats::routes(&mut r, &agent);
    logs::routes(&mut r, &agent);
    volumes::routes(&mut r, agent.clone());
    csi_volumes::routes(&mut r, agent.clone());
    plugins::routes(&mut r, agent);
    r
}
