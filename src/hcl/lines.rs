//! Accepts one-line blocks with several attributes, as nodeward's and Nomad's documentation write
//! them: `restart { attempts = 2  interval = "30m"  delay = "15s"  mode = "fail" }`.
//!
//! Strict HCL allows at most one attribute in a block written on one line. [`normalize`] puts a line
//! break after every `{`, before every `}`, and before every `name =` that follows something else on
//! its line, outside strings, heredocs, comments, `[...]` and `(...)`. The result means the same as
//! the input. [`LineMap`] turns a line of the result back into the line of the input, so error
//! messages still point at what the user wrote. [`super::read`] tries the input as written first and
//! only falls back to the normalised text when strict parsing fails.

/// Maps lines of the normalised text (1-based) to lines of the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineMap(Vec<usize>);

impl LineMap {
    /// The original line of normalised line `line` (both 1-based).
    pub fn original(&self, line: usize) -> usize {
        self.0.get(line.saturating_sub(1)).copied().unwrap_or(line)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    /// Inside `{ ... }` of a block or object, or at the top level.
    Body,
    /// Inside `[...]` or `(...)`: no line breaks are added.
    Group,
    /// Inside a `${` or `%{` template interpolation within a string.
    Interp,
}

/// Returns the normalised text and its line map.
pub fn normalize(src: &str) -> (String, LineMap) {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len() + 64);
    let mut map = vec![1usize];
    let mut line = 1usize;
    let mut stack = vec![Ctx::Body];
    // Whether the current output line holds anything but blanks and a `{`.
    let mut content = false;
    let mut i = 0;
    let newline = |out: &mut String, map: &mut Vec<usize>, line: usize| {
        out.push('\n');
        map.push(line);
    };
    while i < chars.len() {
        let c = chars[i];
        let top = *stack.last().unwrap_or(&Ctx::Body);
        // Strings, with nested interpolations.
        if c == '"' {
            let start = i;
            i += 1;
            let mut depth = 0usize;
            while i < chars.len() {
                match chars[i] {
                    '\\' => i += 1,
                    '"' if depth == 0 => break,
                    '$' | '%' if chars.get(i + 1) == Some(&'{') && depth == 0 => {
                        depth = 1;
                        i += 1;
                    }
                    '{' if depth > 0 => depth += 1,
                    '}' if depth > 0 => depth -= 1,
                    '\n' => line += 1,
                    _ => {}
                }
                i += 1;
            }
            let end = (i + 1).min(chars.len());
            for ch in &chars[start..end] {
                out.push(*ch);
                if *ch == '\n' {
                    map.push(line);
                }
            }
            content = true;
            i = end;
            continue;
        }
        // Comments run to the end of the line (or `*/`) and are copied as they are.
        if c == '#' || (c == '/' && chars.get(i + 1) == Some(&'/')) {
            while i < chars.len() && chars[i] != '\n' {
                out.push(chars[i]);
                i += 1;
            }
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                if chars[i] == '\n' {
                    line += 1;
                    map.push(line);
                }
                out.push(chars[i]);
                i += 1;
            }
            out.push_str("*/");
            i += 2;
            continue;
        }
        // Heredocs: copied up to and including their terminator line.
        if c == '<' && chars.get(i + 1) == Some(&'<') {
            let mut j = i + 2;
            if chars.get(j) == Some(&'-') {
                j += 1;
            }
            let tag: String = chars[j..]
                .iter()
                .take_while(|ch| ch.is_ascii_alphanumeric() || **ch == '_')
                .collect();
            if !tag.is_empty() {
                let text: String = chars[i..].iter().collect();
                let mut consumed = 0;
                for (n, l) in text.split_inclusive('\n').enumerate() {
                    consumed += l.chars().count();
                    if n > 0 && l.trim() == tag {
                        break;
                    }
                }
                for ch in &chars[i..i + consumed] {
                    out.push(*ch);
                    if *ch == '\n' {
                        line += 1;
                        map.push(line);
                    }
                }
                i += consumed;
                content = false;
                continue;
            }
        }
        match c {
            '\n' => {
                line += 1;
                newline(&mut out, &mut map, line);
                content = false;
                i += 1;
                continue;
            }
            '{' => {
                out.push('{');
                if top == Ctx::Interp {
                    stack.push(Ctx::Interp);
                } else {
                    stack.push(Ctx::Body);
                    if top == Ctx::Body {
                        newline(&mut out, &mut map, line);
                        content = false;
                    }
                }
                i += 1;
                continue;
            }
            '}' => {
                let popped = stack.pop();
                if popped == Some(Ctx::Body) && content {
                    newline(&mut out, &mut map, line);
                }
                out.push('}');
                content = true;
                i += 1;
                continue;
            }
            '[' | '(' => {
                stack.push(Ctx::Group);
                out.push(c);
                content = true;
                i += 1;
                continue;
            }
            ']' | ')' => {
                stack.pop();
                out.push(c);
                content = true;
                i += 1;
                continue;
            }
            _ => {}
        }
        let after_blank = i > 0 && chars[i - 1].is_whitespace();
        if top == Ctx::Body && content && after_blank && (c.is_alphabetic() || c == '_') {
            let prev = out.chars().rev().find(|ch| !ch.is_whitespace());
            if prev != Some(',') && prev != Some('.') && starts_attribute(&chars[i..]) {
                newline(&mut out, &mut map, line);
            }
        }
        if !c.is_whitespace() {
            content = true;
        }
        out.push(c);
        i += 1;
    }
    (out, LineMap(map))
}

/// Whether `s` starts with `name =` (not `==`, and `name` preceded by a break the caller checked).
fn starts_attribute(s: &[char]) -> bool {
    let name = s
        .iter()
        .take_while(|c| c.is_alphanumeric() || **c == '_' || **c == '-')
        .count();
    if name == 0 {
        return false;
    }
    let rest = &s[name..];
    let blanks = rest
        .iter()
        .take_while(|c| **c == ' ' || **c == '\t')
        .count();
    rest.get(blanks) == Some(&'=')
        && rest.get(blanks + 1) != Some(&'=')
        && rest.get(blanks + 1) != Some(&'>')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_one_line_blocks() {
        let (out, map) =
            normalize("restart { attempts = 2  interval = \"30m\"  mode = \"fail\" }\nx = 1\n");
        assert_eq!(
            out,
            "restart {\n attempts = 2  \ninterval = \"30m\"  \nmode = \"fail\" \n}\nx = 1\n"
        );
        assert_eq!(map.original(4), 1);
        assert_eq!(map.original(6), 2);
    }

    #[test]
    fn leaves_strings_lists_and_comments_alone() {
        let src = "config { command = \"sh\"  args = [\"-c\", \"a = b; x { y = z }\", \"${NOMAD_TASK_DIR}\"] } # c = d { }\n";
        let (out, _) = normalize(src);
        assert!(
            out.contains("args = [\"-c\", \"a = b; x { y = z }\", \"${NOMAD_TASK_DIR}\"]"),
            "{out}"
        );
        assert!(out.contains("# c = d { }"), "{out}");
        assert!(out.contains("command = \"sh\"  \nargs"), "{out}");
    }

    #[test]
    fn nested_blocks_on_one_line() {
        let (out, _) = normalize("job \"x\" { group \"g\" { count = 1 } }");
        assert_eq!(out, "job \"x\" {\n group \"g\" {\n count = 1 \n} \n}");
        let (out, _) = normalize("a = x == y\n");
        assert_eq!(out, "a = x == y\n");
    }

    #[test]
    fn heredocs_are_copied() {
        let src = "t {\n  x = <<EOF\n  a = b { c = d }\nEOF\n  y = 1\n}\n";
        let (out, map) = normalize(src);
        assert!(out.contains("  a = b { c = d }\nEOF\n"), "{out}");
        assert_eq!(
            map.original(out.lines().position(|l| l.contains("y = 1")).unwrap() + 1),
            5
        );
    }
}
