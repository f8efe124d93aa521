//! `system gc`: Nomad's `nomad system gc` for this one node, through `PUT /v1/client/gc`.

use serde_json::{json, Value};

use super::flags::Parsed;
use super::{failed, CmdResult, Ctx, Spec};

pub(super) const COMMANDS: &[&Spec] = &[&GC];

const GC: Spec = Spec {
    words: &["system", "gc"],
    flags: &[],
    args: (0, 0),
    usage: "Usage: nodeward system gc

  Destroys every terminal allocation of the node now: its entry in the state file, its
  directory and its logs. An allocation with a task that runs, waits to restart or is being
  stopped is left alone. The agent also collects on its own (client { gc_* } settings).",
    run: gc,
};

fn gc(ctx: &mut Ctx, _p: &Parsed) -> CmdResult {
    let answer = ctx
        .client
        .put("/v1/client/gc", &json!({}))
        .map_err(|e| failed("running garbage collection", e))?;
    ctx.print(&gc_text(&answer));
    Ok(())
}

/// What `system gc` prints for the API's answer.
fn gc_text(answer: &Value) -> String {
    let ids: Vec<&str> = answer
        .get("Collected")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if ids.is_empty() {
        return "==> No terminal allocations to collect\n".to_string();
    }
    let mut out = format!(
        "==> Garbage collected {} terminal allocation{}\n",
        ids.len(),
        if ids.len() == 1 { "" } else { "s" }
    );
    for id in ids {
        out.push_str(&format!("    {id}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gc_prints_what_was_collected() {
        assert_eq!(
            gc_text(&json!({"Collected": []})),
            "==> No terminal allocations to collect\n"
        );
        assert_eq!(
            gc_text(&json!({"Collected": ["a"]})),
            "==> Garbage collected 1 terminal allocation\n    a\n"
        );
        assert_eq!(
            gc_text(&json!({"Collected": ["a", "b"]})),
            "==> Garbage collected 2 terminal allocations\n    a\n    b\n"
        );
    }
}
