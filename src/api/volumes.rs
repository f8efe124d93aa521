//! Host volume routes (host-volumes.md "API and CLI").

use std::sync::Arc;

use super::router::Router;
use crate::agent::Agent;

pub fn routes(_r: &mut Router, _agent: Arc<Agent>) {}
