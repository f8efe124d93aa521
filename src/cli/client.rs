//! The CLI's HTTP client: JSON calls to the agent's API with the token and timeouts.

use serde_json::Value;
use std::io::Read;
use std::time::Duration;

/// How long one API call may take in all. Volume creation runs a plugin for up to 60 s.
const CALL_TIMEOUT: Duration = Duration::from_secs(90);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Answers above this are refused rather than buffered without bound.
const MAX_ANSWER: u64 = 64 * 1024 * 1024;

/// Why an API call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The agent answered with an error status; `body` is its one-line reason.
    #[error("Unexpected response code: {status} ({body})")]
    Status { status: u16, body: String },
    #[error("cannot reach the agent at {addr}: {source}")]
    Transport { addr: String, source: ureq::Error },
    #[error("invalid answer from the agent: {0}")]
    Decode(String),
}

impl ClientError {
    /// Whether the agent could not be reached at all (nothing answered).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ClientError::Transport { .. })
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A client for one agent address.
pub struct Client {
    base: String,
    token: Option<String>,
    calls: ureq::Agent,
    streams: ureq::Agent,
}

impl Client {
    /// `addr` as in `NODEWARD_ADDR` (`http://127.0.0.1:4656`; a missing scheme means http).
    pub fn new(addr: &str, token: Option<String>) -> Client {
        let addr = addr.trim().trim_end_matches('/');
        let base = if addr.contains("://") {
            addr.to_string()
        } else {
            format!("http://{addr}")
        };
        let calls = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(CALL_TIMEOUT))
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .build()
            .into();
        // A followed log may stay quiet for hours: only connecting and the answer's head are timed.
        let streams = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_recv_response(Some(CALL_TIMEOUT))
            .build()
            .into();
        Client {
            base,
            token: token.filter(|t| !t.is_empty()),
            calls,
            streams,
        }
    }

    pub fn get(&self, path: &str) -> Result<Value, ClientError> {
        let rq = self.calls.get(self.url(path));
        let rq = match &self.token {
            Some(t) => rq.header("X-Nomad-Token", t),
            None => rq,
        };
        self.finish(rq.call())
    }

    pub fn put(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        let rq = self.calls.put(self.url(path));
        let rq = match &self.token {
            Some(t) => rq.header("X-Nomad-Token", t),
            None => rq,
        };
        self.finish(rq.send_json(body))
    }

    pub fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        let rq = self.calls.post(self.url(path));
        let rq = match &self.token {
            Some(t) => rq.header("X-Nomad-Token", t),
            None => rq,
        };
        self.finish(rq.send_json(body))
    }

    pub fn delete(&self, path: &str) -> Result<Value, ClientError> {
        let rq = self.calls.delete(self.url(path));
        let rq = match &self.token {
            Some(t) => rq.header("X-Nomad-Token", t),
            None => rq,
        };
        self.finish(rq.call())
    }

    /// A GET whose body is read as it arrives (followed logs).
    pub fn stream(&self, path: &str) -> Result<Box<dyn Read + Send>, ClientError> {
        let rq = self.streams.get(self.url(path));
        let rq = match &self.token {
            Some(t) => rq.header("X-Nomad-Token", t),
            None => rq,
        };
        let mut response = rq.call().map_err(|e| self.transport(e))?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(error_status(status, &mut response));
        }
        Ok(Box::new(response.into_body().into_reader()))
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn transport(&self, source: ureq::Error) -> ClientError {
        ClientError::Transport {
            addr: self.base.clone(),
            source,
        }
    }

    fn finish(
        &self,
        result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value, ClientError> {
        let mut response = result.map_err(|e| self.transport(e))?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(error_status(status, &mut response));
        }
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER)
            .read_to_string()
            .map_err(|e| self.transport(e))?;
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| ClientError::Decode(e.to_string()))
    }
}

fn error_status(status: u16, response: &mut ureq::http::Response<ureq::Body>) -> ClientError {
    let body = response
        .body_mut()
        .with_config()
        .limit(64 * 1024)
        .read_to_string()
        .unwrap_or_default();
    ClientError::Status {
        status,
        body: body.trim().to_string(),
    }
}

/// Percent-encodes one path segment or query value.
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::enc;

    #[test]
    fn encodes_reserved_characters() {
        assert_eq!(enc("web-1_a.b~"), "web-1_a.b~");
        assert_eq!(enc("a b/c?d&e"), "a%20b%2Fc%3Fd%26e");
    }
}
