//! `${name}` substitution in a task's `command`, `args` and `env` values, done when the task starts
//! (tasks.md): the parsers keep `${...}` as written because the names (`NOMAD_TASK_DIR`,
//! `CSI_ENDPOINT`, `node.unique.id`, `env.VAR`) only have values on the node, per allocation.

/// Replaces every `${name}` in `input` with `lookup(name)`. Whitespace around the name is ignored
/// (`${ NOMAD_TASK_DIR }`). A name `lookup` does not know, and a `${` that is never closed, stay
/// exactly as written, so a typo shows up verbatim in the task's arguments instead of vanishing.
pub fn interpolate(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let close = after.find('}');
        let reopen = after.find("${");
        match (close, reopen) {
            // `${a ${b}`: the first `${` is never closed on its own; keep it and retry at the second.
            (Some(c), Some(r)) if r < c => {
                out.push_str(&rest[start..start + 2 + r]);
                rest = &after[r..];
            }
            (Some(c), _) => {
                let name = &after[..c];
                match lookup(name.trim()) {
                    Some(value) => out.push_str(&value),
                    None => out.push_str(&rest[start..start + 3 + c]),
                }
                rest = &after[c + 1..];
            }
            (None, _) => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "NOMAD_TASK_DIR" => Some("/data/alloc/1/web/local".to_string()),
            "node.unique.id" => Some("node-1".to_string()),
            "env.HOME" => Some("/root".to_string()),
            "EMPTY" => Some(String::new()),
            "BRACES" => Some("${NOMAD_TASK_DIR}".to_string()),
            _ => None,
        }
    }

    fn run(input: &str) -> String {
        interpolate(input, &lookup)
    }

    #[test]
    fn replaces_known_names() {
        assert_eq!(run("${NOMAD_TASK_DIR}"), "/data/alloc/1/web/local");
        assert_eq!(
            run("-h ${NOMAD_TASK_DIR}/www on ${node.unique.id}"),
            "-h /data/alloc/1/web/local/www on node-1"
        );
        assert_eq!(run("${env.HOME}${env.HOME}"), "/root/root");
        assert_eq!(run("${ NOMAD_TASK_DIR }"), "/data/alloc/1/web/local");
        assert_eq!(run("a${EMPTY}b"), "ab");
        assert_eq!(run("ünï ${node.unique.id} ☃"), "ünï node-1 ☃");
    }

    #[test]
    fn values_are_not_interpolated_again() {
        assert_eq!(run("${BRACES}"), "${NOMAD_TASK_DIR}");
    }

    #[test]
    fn leaves_unknown_and_malformed_as_written() {
        for s in [
            "",
            "plain",
            "${UNKNOWN}",
            "${ UNKNOWN }",
            "${}",
            "${",
            "x ${NOMAD_TASK_DIR",
            "$NOMAD_TASK_DIR",
            "$ {NOMAD_TASK_DIR}",
            "}${",
            "$",
        ] {
            assert_eq!(run(s), s);
        }
        assert_eq!(run("${a ${node.unique.id}"), "${a node-1");
        assert_eq!(run("${UNKNOWN}-${node.unique.id}"), "${UNKNOWN}-node-1");
        assert_eq!(run("$${node.unique.id}"), "$node-1");
    }
}
