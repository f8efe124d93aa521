//! `rsadecrypt(file("ct.b64"), file("key.pem"))` in a task's `env`, through the real CLI and
//! agent: the task gets the plaintext; a ciphertext for another key stops the jobspec with the
//! attribute's line; and neither the key nor the plaintext reaches the agent's log or the CLI's
//! output. The key and ciphertexts are tests/data/rsa's (its README says how they were made).

use crate::common::*;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

const KEY: &str = include_str!("data/rsa/key.pem");
/// KEY as PKCS#8, which rsadecrypt does not read (nor does Nomad's).
const KEY_PKCS8: &str = include_str!("data/rsa/key-pkcs8.pem");
/// `hunter2 and a café`, for KEY.
const CIPHERTEXT: &str = include_str!("data/rsa/ciphertext.b64");
/// For another key.
const OTHER_CIPHERTEXT: &str = include_str!("data/rsa/other-key-ciphertext.b64");
const PLAINTEXT: &str = "hunter2 and a café";

/// The task prints a digest of what it got, so that the plaintext is in no log, its own included.
const JOBSPEC: &str = r#"job "secret" {
  type = "batch"

  group "g" {
    task "t" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "printf '%s' \"$SECRET\" | sha256sum"]
      }

      env {
        SECRET = rsadecrypt(file("ct.b64"), file("key.pem"))
      }
    }
  }
}
"#;

/// Writes the jobspec, the key and `ciphertext` (in lines of 64 with a final newline, as
/// `openssl base64` writes it) into `dir`; returns the jobspec's path.
fn write_files(dir: &Path, ciphertext: &str) -> String {
    let lines: Vec<&str> = ciphertext
        .trim()
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    std::fs::write(dir.join("ct.b64"), lines.join("\n") + "\n").unwrap();
    std::fs::write(dir.join("key.pem"), KEY).unwrap();
    std::fs::write(dir.join("secret.nomad.hcl"), JOBSPEC).unwrap();
    dir.join("secret.nomad.hcl").display().to_string()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Fails if `what` holds the plaintext or a line of the key's body.
#[track_caller]
fn no_secret(name: &str, what: &str) {
    assert!(
        !what.contains("hunter2"),
        "{name} has the plaintext:\n{what}"
    );
    for line in KEY
        .lines()
        .chain(KEY_PKCS8.lines())
        .filter(|l| !l.starts_with("-----"))
    {
        assert!(!what.contains(line), "{name} has the key:\n{what}");
    }
}

fn output(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

#[test]
fn a_task_gets_what_rsadecrypt_decrypts_and_no_log_has_it() {
    let dir = TempDir::new("rsa");
    let agent = TestAgent::start_in(dir.path(), "");
    let spec = write_files(dir.path(), CIPHERTEXT);
    let out = agent.cli(&["job", "run", &spec]);
    assert!(out.status.success(), "{}", output(&out));
    no_secret("the CLI's output", &output(&out));
    let alloc = agent.alloc_id("secret");
    wait_for(WAIT, "the batch allocation complete", || {
        (agent.get(&format!("/v1/allocation/{alloc}"))["ClientStatus"] == "complete").then_some(())
    });
    // Whole: the keeper drains the task's pipes after it reported the exit.
    let log = wait_log_lines(&agent, &alloc, "t", "stdout", 1);
    let digest: String = Sha256::digest(PLAINTEXT.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(log, format!("{digest}  -\n"));
    // The job holds the plaintext as its author wrote it, as Nomad's does.
    let job = agent.get("/v1/job/secret");
    assert_eq!(job["TaskGroups"][0]["Tasks"][0]["Env"]["SECRET"], PLAINTEXT);
    no_secret("the agent's log (debug level)", &agent.log_text());
}

#[test]
fn a_ciphertext_for_another_key_is_an_error_at_its_line() {
    let dir = TempDir::new("rsa-bad");
    let agent = TestAgent::start_in(dir.path(), "");
    let spec = write_files(dir.path(), OTHER_CIPHERTEXT);
    let out = agent.cli(&["job", "run", &spec]);
    assert_eq!(out.status.code(), Some(1), "{}", output(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("attribute \"SECRET\"") && stderr.contains("line 14"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "rsadecrypt(): decryption error: the cipher text is not one this key encrypted"
        ),
        "{stderr}"
    );
    no_secret("the CLI's error", &output(&out));
    assert_eq!(agent.get("/v1/jobs"), json!([]));
    // A key that is not one: the error says so, and quotes none of it.
    std::fs::write(dir.path().join("key.pem"), KEY_PKCS8).unwrap();
    let out = agent.cli(&["job", "run", &spec]);
    assert_eq!(out.status.code(), Some(1), "{}", output(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("line 14") && stderr.contains("failed to parse key: the key is PKCS#8"),
        "{stderr}"
    );
    no_secret("the CLI's error", &output(&out));
    // An error of the expression around it would quote the plaintext; it is redacted.
    std::fs::write(dir.path().join("key.pem"), KEY).unwrap();
    std::fs::write(dir.path().join("ct.b64"), CIPHERTEXT).unwrap();
    let call = r#"rsadecrypt(file("ct.b64"), file("key.pem"))"#;
    std::fs::write(&spec, JOBSPEC.replace(call, &format!("{call} + 1"))).unwrap();
    let out = agent.cli(&["job", "run", &spec]);
    assert_eq!(out.status.code(), Some(1), "{}", output(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("line 14")
            && stderr.contains("is not applicable to `\"(sensitive value)\"`"),
        "{stderr}"
    );
    no_secret("the CLI's error", &output(&out));
    no_secret("the agent's log (debug level)", &agent.log_text());
    assert_eq!(agent.get("/v1/jobs"), json!([]));
}
