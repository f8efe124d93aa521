//! `fileset(path, pattern)`: the regular files under `path` (relative to the jobspec's
//! directory) that a glob pattern matches, relative to `path`, in lexical order, as go-cty-funcs
//! has it with its glob library (doublestar): `*` is any run of characters but `/`, `?` one
//! character but `/`, `[abc]`, `[a-z]` and `[^a]` (or `[!a]`) a class, `{a,b}` alternatives, `**`
//! as a whole path element any number of directories (none included), `\` escapes a character.
//! Dot files match like any other. Disabled where `file()` is ([`super::Files::Disabled`]).

use std::path::{Path, PathBuf};

use hcl::eval::{FuncArgs, FuncDef};
use hcl::Value;

use super::{env, fixed, string, Files};

pub fn funcs() -> Vec<(&'static str, FuncDef)> {
    vec![("fileset", fixed(2, fileset))]
}

/// The most paths one pattern may match (files and the directories walked to them), so that
/// `**` over a large tree ends with an error instead of a long walk.
const MAX_PATHS: usize = 100_000;

fn fileset(args: FuncArgs) -> Result<Value, String> {
    let path = string(&args, 0)?;
    let pattern = string(&args, 1)?;
    let dir = match env().files {
        Files::Dir(dir) => dir,
        Files::Disabled(reason) => return Err(reason),
    };
    let base = clean(&dir.join(&path).to_string_lossy());
    let full = clean(&format!("{base}/{pattern}"));
    let mut found = Vec::new();
    // One bound on the paths walked for the whole call, whatever the alternatives.
    let mut walked = 0;
    for alternative in expand_braces(&full)? {
        let elements: Vec<&str> = alternative.split('/').collect();
        for element in &elements {
            check(element).map_err(|e| format!("failed to glob pattern ({full}): {e}"))?;
        }
        let (start, rest) = if alternative.starts_with('/') {
            (PathBuf::from("/"), &elements[1..])
        } else {
            (PathBuf::from("."), &elements[..])
        };
        walk(&start, Vec::new(), rest, &mut found, &mut walked)?;
    }
    let mut matches: Vec<String> = found
        .into_iter()
        .filter(|(p, _)| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        .map(|(_, elements)| relative(&base, &elements))
        .collect();
    matches.sort();
    matches.dedup();
    Ok(Value::Array(
        matches.into_iter().map(Value::String).collect(),
    ))
}

/// Matches the pattern's `elements` under `at` (whose own elements are `so_far`).
fn walk(
    at: &Path,
    so_far: Vec<String>,
    elements: &[&str],
    found: &mut Vec<(PathBuf, Vec<String>)>,
    walked: &mut usize,
) -> Result<(), String> {
    *walked += 1;
    if *walked > MAX_PATHS {
        return Err(format!(
            "the pattern reaches more than {MAX_PATHS} paths; a narrower one is needed"
        ));
    }
    let Some((element, rest)) = elements.split_first() else {
        found.push((at.to_path_buf(), so_far));
        return Ok(());
    };
    let child = |name: &str| {
        let mut e = so_far.clone();
        e.push(name.to_string());
        (at.join(name), e)
    };
    if *element == "**" {
        walk(at, so_far.clone(), rest, found, walked)?;
        for name in entries(at) {
            let (path, e) = child(&name);
            // `**` goes on into directories, but not through links (a link to a parent would
            // never end): past a link, or a file, only the rest of the pattern is left.
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                walk(&path, e, elements, found, walked)?;
            } else {
                walk(&path, e, rest, found, walked)?;
            }
        }
        return Ok(());
    }
    if !has_meta(element) {
        let name = unescape(element);
        let (path, e) = child(&name);
        if std::fs::symlink_metadata(&path).is_ok() {
            walk(&path, e, rest, found, walked)?;
        }
        return Ok(());
    }
    let pattern: Vec<char> = element.chars().collect();
    for name in entries(at) {
        let chars: Vec<char> = name.chars().collect();
        if matches(&pattern, &chars) {
            let (path, e) = child(&name);
            walk(&path, e, rest, found, walked)?;
        }
    }
    Ok(())
}

/// The names in a directory; none when it cannot be read (as a glob finds nothing there).
fn entries(dir: &Path) -> Vec<String> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = read
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// A match's path relative to `base`, as Go's `filepath.Rel` puts it.
fn relative(base: &str, elements: &[String]) -> String {
    let base: Vec<&str> = base
        .split('/')
        .filter(|e| !e.is_empty() && *e != ".")
        .collect();
    let mine: Vec<&str> = elements
        .iter()
        .map(String::as_str)
        .filter(|e| !e.is_empty() && *e != ".")
        .collect();
    let common = base.iter().zip(&mine).take_while(|(a, b)| a == b).count();
    let mut out: Vec<&str> = std::iter::repeat_n("..", base.len() - common).collect();
    out.extend(&mine[common..]);
    out.join("/")
}

/// Go's `path.Clean`: no `.`, no `a/..`, no repeated `/`.
pub(super) fn clean(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for element in path.split('/') {
        match element {
            "" | "." => {}
            ".." => match out.last() {
                Some(&last) if last != ".." => {
                    out.pop();
                }
                _ if absolute => {}
                _ => out.push(".."),
            },
            e => out.push(e),
        }
    }
    let joined = out.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

fn has_meta(element: &str) -> bool {
    element.contains(['*', '?', '[', '\\'])
}

fn unescape(element: &str) -> String {
    let mut out = String::new();
    let mut chars = element.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The most `{a,b}` alternatives one pattern may expand to: 25 groups of two would be 2^25.
pub const MAX_ALTERNATIVES: usize = 1024;

/// `{a,b}` alternatives expanded into whole patterns (they may hold `/`), at most
/// [`MAX_ALTERNATIVES`].
fn expand_braces(pattern: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    expand_into(pattern, &mut out)?;
    Ok(out)
}

fn expand_into(pattern: &str, out: &mut Vec<String>) -> Result<(), String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut depth = 0;
    let mut open = None;
    let mut commas = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '{' => {
                if depth == 0 {
                    open = Some(i);
                    commas.clear();
                }
                depth += 1;
            }
            ',' if depth == 1 => commas.push(i),
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    let Some(start) = open else { break };
                    let prefix: String = chars[..start].iter().collect();
                    let suffix: String = chars[i + 1..].iter().collect();
                    let mut bounds = vec![start];
                    bounds.extend(&commas);
                    bounds.push(i);
                    for w in bounds.windows(2) {
                        let alt: String = chars[w[0] + 1..w[1]].iter().collect();
                        expand_into(&format!("{prefix}{alt}{suffix}"), out)?;
                    }
                    return Ok(());
                }
            }
            _ => {}
        }
        i += 1;
    }
    if depth > 0 {
        return Err(format!(
            "failed to glob pattern ({pattern}): syntax error in pattern (an unclosed {{)"
        ));
    }
    if out.len() >= MAX_ALTERNATIVES {
        return Err(format!(
            "failed to glob pattern ({pattern}): more than {MAX_ALTERNATIVES} alternatives"
        ));
    }
    out.push(pattern.to_string());
    Ok(())
}

/// Refuses a malformed element (an unclosed `[`, a trailing `\`), as Go's glob does even where
/// nothing would be compared with it.
fn check(element: &str) -> Result<(), String> {
    let chars: Vec<char> = element.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' if i + 1 == chars.len() => return Err("syntax error in pattern".into()),
            '\\' => i += 1,
            '[' => match class_end(&chars, i) {
                Some(end) => i = end,
                None => return Err("syntax error in pattern".into()),
            },
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// The index of the `]` that closes the class opened at `open`.
fn class_end(p: &[char], open: usize) -> Option<usize> {
    let mut i = open + 1;
    if matches!(p.get(i), Some('^') | Some('!')) {
        i += 1;
    }
    let first = i;
    while i < p.len() {
        match p[i] {
            ']' if i > first => return Some(i),
            '\\' => i += 2,
            _ => i += 1,
        }
    }
    None
}

/// Whether one path element matches one pattern element (no `/` in either).
fn matches(p: &[char], name: &[char]) -> bool {
    let Some((&first, rest)) = p.split_first() else {
        return name.is_empty();
    };
    match first {
        '*' => (0..=name.len()).any(|n| matches(rest, &name[n..])),
        '?' => !name.is_empty() && matches(rest, &name[1..]),
        '[' => {
            let Some(end) = class_end(p, 0) else {
                return false;
            };
            let Some((&c, tail)) = name.split_first() else {
                return false;
            };
            in_class(&p[1..end], c) && matches(&p[end + 1..], tail)
        }
        '\\' if !rest.is_empty() => {
            name.first() == Some(&rest[0]) && matches(&rest[1..], &name[1..])
        }
        c => name.first() == Some(&c) && matches(rest, &name[1..]),
    }
}

/// Whether `c` is in a class's body (between its brackets).
fn in_class(body: &[char], c: char) -> bool {
    let (negated, body) = match body.first() {
        Some('^') | Some('!') => (true, &body[1..]),
        _ => (false, body),
    };
    let mut items = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let ch = if body[i] == '\\' && i + 1 < body.len() {
            i += 1;
            body[i]
        } else {
            body[i]
        };
        items.push(ch);
        i += 1;
    }
    let mut hit = false;
    let mut j = 0;
    while j < items.len() {
        if j + 2 < items.len() && items[j + 1] == '-' {
            hit |= items[j] <= c && c <= items[j + 2];
            j += 3;
        } else {
            hit |= items[j] == c;
            j += 1;
        }
    }
    hit != negated
}

#[cfg(test)]
mod tests {
    use super::super::tests::{eval, fails, same};
    use super::super::{with_env, Files, FuncEnv};
    use super::{clean, matches};

    fn m(p: &str, n: &str) -> bool {
        matches(
            &p.chars().collect::<Vec<_>>(),
            &n.chars().collect::<Vec<_>>(),
        )
    }

    #[test]
    fn brace_alternatives_are_bounded() {
        let pattern = "{a,b}".repeat(25);
        let e = super::expand_braces(&pattern).unwrap_err();
        assert!(e.contains("more than 1024 alternatives"), "{e}");
        assert_eq!(super::expand_braces("{a,b}{c,d}").unwrap().len(), 4);
    }

    #[test]
    fn elements_match_as_globs_do() {
        assert!(m("*.txt", "a.txt"));
        assert!(m("*.txt", ".hidden.txt"));
        assert!(!m("*.txt", "a.txt.bak"));
        assert!(m("a?c", "abc"));
        assert!(!m("a?c", "ac"));
        assert!(m("[a-c]x", "bx"));
        assert!(!m("[^a-c]x", "bx"));
        assert!(m("[!a-c]x", "dx"));
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
        assert_eq!(clean("/a/./b/../c//d/"), "/a/c/d");
        assert_eq!(clean("../a/.."), "..");
        assert_eq!(clean("/.."), "/");
    }

    #[test]
    fn files_under_a_path_are_listed() {
        let dir =
            std::env::temp_dir().join(format!("nw-fileset-{}", uuid::Uuid::new_v4().simple()));
        for f in [
            "a.txt",
            "b.hcl",
            "sub/c.txt",
            "sub/deep/d.txt",
            "sub/deep/e.hcl",
            "other/f.txt",
        ] {
            let path = dir.join(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
        std::fs::create_dir_all(dir.join("dir.txt")).unwrap();
        let env = FuncEnv {
            files: Files::Dir(dir.clone()),
            now: chrono::Utc::now(),
        };
        with_env(env, || {
            same("fileset(\".\", \"*.txt\")", "[\"a.txt\"]");
            same("fileset(\"\", \"*\")", "[\"a.txt\", \"b.hcl\"]");
            same(
                "fileset(\".\", \"**/*.txt\")",
                "[\"a.txt\", \"other/f.txt\", \"sub/c.txt\", \"sub/deep/d.txt\"]",
            );
            same(
                "fileset(\"sub\", \"**\")",
                "[\"c.txt\", \"deep/d.txt\", \"deep/e.hcl\"]",
            );
            same(
                "fileset(\"sub\", \"{*.txt,deep/*.hcl}\")",
                "[\"c.txt\", \"deep/e.hcl\"]",
            );
            same("fileset(\"sub/deep\", \"../?.txt\")", "[\"../c.txt\"]");
            same(
                &format!("fileset({:?}, \"sub/*/[d]*\")", dir.display().to_string()),
                "[\"sub/deep/d.txt\"]",
            );
            same("fileset(\"nope\", \"*\")", "[]");
            fails("fileset(\".\", \"[a\")", "syntax error in pattern");
            fails("fileset(\".\", \"{a\")", "syntax error in pattern");
        });
        std::fs::remove_dir_all(&dir).unwrap();
        let e = eval("fileset(\".\", \"*\")").unwrap_err();
        assert!(e.contains("disabled"), "{e}");
    }
}
