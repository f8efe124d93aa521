//! The compiled patterns of `regexp` constraints, kept between placements.
//!
//! Placement runs under the allocation registry's lock, once per registration and once per
//! re-evaluation of every blocked job: compiling a constraint's pattern there each time held the
//! lock for the compile. A pattern is compiled once here and its `Regex` (a cheap clone) reused.
//! One lock, [`CACHE`]'s, guards only the map; a compile is CPU work on a pattern that already
//! compiled once when its jobspec was parsed, never I/O. No thread of its own.

use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::Mutex;
use regex::Regex;

/// Patterns kept at most; past it the map starts again, so that patterns built from changing
/// node attributes cannot grow it without end.
const MAX: usize = 1024;

/// Pattern text → its compiled form, `None` for one that does not compile.
static CACHE: OnceLock<Mutex<HashMap<String, Option<Regex>>>> = OnceLock::new();

/// `pattern` compiled, from the cache when it has been before; `None` when it does not compile.
pub(crate) fn compiled(pattern: &str) -> Option<Regex> {
    let mut map = CACHE.get_or_init(Default::default).lock();
    if let Some(re) = map.get(pattern) {
        return re.clone();
    }
    if map.len() >= MAX {
        map.clear();
    }
    let re = Regex::new(pattern).ok();
    map.insert(pattern.to_string(), re.clone());
    re
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_is_compiled_once_and_a_bad_one_is_none() {
        let pattern = "^regexps-test-(a|b)$";
        assert!(compiled(pattern).unwrap().is_match("regexps-test-a"));
        assert!(CACHE.get().unwrap().lock().contains_key(pattern));
        assert!(compiled(pattern).unwrap().is_match("regexps-test-b"));
        assert!(compiled("(").is_none());
    }
}
