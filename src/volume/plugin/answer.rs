//! Reading a plugin's answer: the JSON it prints on stdout, checked once into domain values.

use serde::Deserialize;

use super::exec::Output;
use super::{Created, Failure, OUTPUT_LIMIT};

/// The `{"error": "..."}` a failing plugin may print.
pub(super) fn plugin_error(stdout: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct ErrorAnswer {
        error: String,
    }
    serde_json::from_slice::<ErrorAnswer>(stdout)
        .ok()
        .map(|a| a.error)
}

/// The plugin's stdout as `T`; `example` shows the expected shape in the error.
fn decode<T: serde::de::DeserializeOwned>(out: &Output, example: &str) -> Result<T, Failure> {
    if out.truncated {
        return Err(Failure::BadOutput(format!(
            "stdout is longer than {OUTPUT_LIMIT} bytes"
        )));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        Failure::BadOutput(format!(
            "expected JSON like {example}: {e}; stdout was {:?}",
            excerpt(&out.stdout)
        ))
    })
}

pub(super) fn parse_created(out: &Output) -> Result<Created, Failure> {
    #[derive(Deserialize)]
    struct CreateAnswer {
        path: Option<String>,
        #[serde(default)]
        bytes: u64,
    }
    let answer: CreateAnswer = decode(out, r#"{"path": "/abs/path", "bytes": 0}"#)?;
    match answer.path {
        None => Err(Failure::BadOutput("no \"path\" in the answer".to_string())),
        Some(p) if p.is_empty() => Err(Failure::BadOutput("\"path\" is empty".to_string())),
        Some(p) if !p.starts_with('/') => Err(Failure::BadOutput(format!(
            "\"path\" {p:?} is not an absolute path"
        ))),
        Some(path) => Ok(Created {
            path,
            bytes: answer.bytes,
        }),
    }
}

pub(super) fn parse_version(out: &Output) -> Result<String, Failure> {
    #[derive(Deserialize)]
    struct FingerprintAnswer {
        version: Option<String>,
    }
    let answer: FingerprintAnswer = decode(out, r#"{"version": "0.0.1"}"#)?;
    match answer.version {
        Some(v) if !v.trim().is_empty() => Ok(v),
        _ => Err(Failure::BadOutput(
            "no \"version\" in the answer".to_string(),
        )),
    }
}

fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]);
    text.trim().to_string()
}
