//! Versions and version constraints as Nomad's `version` and `semver` constraint operators read
//! them (docs/jobspec.md "Placement"): HashiCorp's go-version rules, which Nomad users' jobspecs
//! are written against.
//!
//! Written here rather than taken from a crate: the `semver` crate reads Cargo's requirement syntax
//! (`^1.2`, `~1.2` with Cargo's meanings, exactly three parts), where a jobspec writes go-version's
//! (`~> 1.2`, any number of parts, `>= 4.19, < 6`) and a node's attribute is a kernel version such
//! as `6.1.0-28-amd64`. The two flavours differ as in Nomad:
//!
//! - [`Flavor::Version`] (`version`): loose versions (`v1`, `1.2.3.4`, `1.2-beta`), the operators
//!   `=`, `!=`, `>`, `<`, `>=`, `<=`, `~>`, and go-version's pre-release rule: a constraint without
//!   a pre-release never matches a version with one (`>= 5.0` is false for `6.1.0-28-amd64`).
//! - [`Flavor::Semver`] (`semver`): the constraint's versions are Semver 2.0 (at most three parts),
//!   no `~>`, and pre-releases simply order before their release (`>= 5.0` is true for
//!   `6.1.0-28-amd64`).

use regex::Regex;
use std::cmp::Ordering;
use std::sync::LazyLock;

/// go-version's `VersionRegexpRaw`: captures 1 (the numbers), 4 and 7 (a pre-release starting
/// with a digit or a letter) and 10 (build metadata).
const LOOSE: &str = r"v?([0-9]+(\.[0-9]+)*?)(-([0-9]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)|(-?([A-Za-z\-~]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)))?(\+([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))?";
/// go-version's `SemverRegexpRaw`: captures 1 (at most three numbers), 4 (pre-release) and 7.
const SEMVER: &str = r"v?([0-9]+(\.[0-9]+){0,2})(-([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))?(\+([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))?";

static LOOSE_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!("^{LOOSE}$")).expect("go-version's regexp"));
static SEMVER_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!("^{SEMVER}$")).expect("go-version's semver regexp"));
/// One constraint: an operator (longest first, so `>=` is not read as `>`) and a version.
static LOOSE_CONSTRAINT_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(r"^\s*(~>|>=|<=|!=|=|>|<)?\s*({LOOSE})\s*$")).expect("constraint regexp")
});
static SEMVER_CONSTRAINT_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(r"^\s*(>=|<=|!=|=|>|<)?\s*({SEMVER})\s*$")).expect("constraint regexp")
});

/// Why a version or a constraint could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("malformed version: {0:?}")]
    Version(String),
    #[error("malformed constraint: {0:?}")]
    Constraint(String),
}

/// Which rules a constraint follows (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Version,
    Semver,
}

/// A version: its numbers (at least three, missing ones zero), how many the text gave, and its
/// pre-release (empty when none). Build metadata is read and ignored, as go-version compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    segments: Vec<u64>,
    given: usize,
    pre: String,
}

impl Version {
    /// A loose version (go-version's `NewVersion`): what a node attribute is read as.
    pub fn parse(text: &str) -> Result<Version, VersionError> {
        Self::read(text, &LOOSE_RE, &[4, 7])
    }

    /// A Semver 2.0 version (go-version's `NewSemver`).
    pub fn parse_semver(text: &str) -> Result<Version, VersionError> {
        Self::read(text, &SEMVER_RE, &[4])
    }

    fn read(text: &str, re: &Regex, pre_groups: &[usize]) -> Result<Version, VersionError> {
        let bad = || VersionError::Version(text.to_string());
        let caps = re.captures(text).ok_or_else(bad)?;
        let mut segments = caps[1]
            .split('.')
            .map(|s| s.parse::<u64>().map_err(|_| bad()))
            .collect::<Result<Vec<_>, _>>()?;
        let given = segments.len();
        while segments.len() < 3 {
            segments.push(0);
        }
        let pre = pre_groups
            .iter()
            .find_map(|&g| caps.get(g).map(|m| m.as_str().to_string()))
            .unwrap_or_default();
        Ok(Version {
            segments,
            given,
            pre,
        })
    }

    /// go-version's `Compare`: the numbers (a shorter list is padded with zeros), then a version
    /// without a pre-release after one with, then the pre-releases part by part.
    pub fn compare(&self, other: &Version) -> Ordering {
        if self.segments == other.segments {
            return match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => compare_prereleases(&self.pre, &other.pre),
            };
        }
        let len = self.segments.len().max(other.segments.len());
        for i in 0..len {
            let a = self.segments.get(i).copied().unwrap_or(0);
            let b = other.segments.get(i).copied().unwrap_or(0);
            match a.cmp(&b) {
                Ordering::Equal => continue,
                unequal => return unequal,
            }
        }
        Ordering::Equal
    }
}

fn compare_prereleases(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split('.').collect(), b.split('.').collect());
    for i in 0..a.len().max(b.len()) {
        let part = compare_part(
            a.get(i).copied().unwrap_or(""),
            b.get(i).copied().unwrap_or(""),
        );
        if part != Ordering::Equal {
            return part;
        }
    }
    Ordering::Equal
}

/// One dot-separated part of two pre-releases: numbers order before words, numbers by value,
/// words by text; a missing part orders before a number and after a word (go-version's rule).
fn compare_part(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    let (na, nb) = (a.parse::<i64>().ok(), b.parse::<i64>().ok());
    if a.is_empty() {
        return if nb.is_some() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    if b.is_empty() {
        return if na.is_some() {
            Ordering::Greater
        } else {
            Ordering::Less
        };
    }
    match (na, nb) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
    Pessimistic,
}

/// A list of constraints, all of which a version must meet (`>= 1.2, < 2.0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraints {
    flavor: Flavor,
    list: Vec<(Op, Version)>,
}

impl Constraints {
    /// Reads a comma-separated list of constraints of `flavor`.
    pub fn parse(text: &str, flavor: Flavor) -> Result<Constraints, VersionError> {
        let re = match flavor {
            Flavor::Version => &*LOOSE_CONSTRAINT_RE,
            Flavor::Semver => &*SEMVER_CONSTRAINT_RE,
        };
        let list = text
            .split(',')
            .map(|single| {
                let bad = || VersionError::Constraint(single.trim().to_string());
                let caps = re.captures(single).ok_or_else(bad)?;
                let op = match caps.get(1).map_or("", |m| m.as_str()) {
                    "" | "=" => Op::Eq,
                    "!=" => Op::Ne,
                    ">" => Op::Gt,
                    "<" => Op::Lt,
                    ">=" => Op::Ge,
                    "<=" => Op::Le,
                    _ => Op::Pessimistic,
                };
                let version = match flavor {
                    Flavor::Version => Version::parse(&caps[2]),
                    Flavor::Semver => Version::parse_semver(&caps[2]),
                }
                .map_err(|_| bad())?;
                Ok((op, version))
            })
            .collect::<Result<_, _>>()?;
        Ok(Constraints { flavor, list })
    }

    /// Whether `v` meets every constraint.
    pub fn check(&self, v: &Version) -> bool {
        self.list.iter().all(|(op, c)| match self.flavor {
            Flavor::Version => check_loose(*op, v, c),
            Flavor::Semver => check_semver(*op, v, c),
        })
    }
}

/// go-version's pre-release rule for the ordering operators: a constraint with a pre-release only
/// matches pre-releases of the same numbers; one without never matches a pre-release.
fn prerelease_ok(v: &Version, c: &Version) -> bool {
    match (v.pre.is_empty(), c.pre.is_empty()) {
        (false, false) => v.segments == c.segments,
        (false, true) => false,
        _ => true,
    }
}

fn check_loose(op: Op, v: &Version, c: &Version) -> bool {
    let order = v.compare(c);
    match op {
        Op::Eq => order == Ordering::Equal,
        Op::Ne => order != Ordering::Equal,
        Op::Gt => prerelease_ok(v, c) && order == Ordering::Greater,
        Op::Lt => prerelease_ok(v, c) && order == Ordering::Less,
        Op::Ge => prerelease_ok(v, c) && order != Ordering::Less,
        Op::Le => prerelease_ok(v, c) && order != Ordering::Greater,
        Op::Pessimistic => pessimistic(v, c),
    }
}

/// `~> 1.2` is `>= 1.2, < 2.0`; `~> 1.2.3` is `>= 1.2.3, < 1.3`: every number the constraint
/// gave but its last is fixed, the last is a minimum.
fn pessimistic(v: &Version, c: &Version) -> bool {
    if !prerelease_ok(v, c) || (!c.pre.is_empty() && v.pre.is_empty()) {
        return false;
    }
    if v.compare(c) == Ordering::Less {
        return false;
    }
    let given = c.given;
    if given > v.segments.len() {
        return false;
    }
    if (0..given.saturating_sub(1)).any(|i| v.segments[i] != c.segments[i]) {
        return false;
    }
    c.segments[given - 1] <= v.segments[given - 1]
}

fn check_semver(op: Op, v: &Version, c: &Version) -> bool {
    let order = v.compare(c);
    match op {
        Op::Eq => order == Ordering::Equal,
        Op::Ne => order != Ordering::Equal,
        Op::Gt => order == Ordering::Greater,
        Op::Lt => order == Ordering::Less,
        Op::Ge => order != Ordering::Less,
        Op::Le => order != Ordering::Greater,
        // Not in the semver constraint syntax: the parser never makes one.
        Op::Pessimistic => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(flavor: Flavor, constraint: &str, version: &str) -> bool {
        Constraints::parse(constraint, flavor)
            .unwrap()
            .check(&Version::parse(version).unwrap())
    }

    #[test]
    fn versions_compare_as_go_version_does() {
        let v = |s| Version::parse(s).unwrap();
        assert_eq!(v("1.2").compare(&v("1.2.0")), Ordering::Equal);
        assert_eq!(v("v1.10").compare(&v("1.9.9")), Ordering::Greater);
        assert_eq!(v("1.2.3-beta").compare(&v("1.2.3")), Ordering::Less);
        assert_eq!(
            v("1.2.3-beta.2").compare(&v("1.2.3-beta.10")),
            Ordering::Less
        );
        assert_eq!(v("1.2.3-alpha").compare(&v("1.2.3-beta")), Ordering::Less);
        assert_eq!(v("1.2.3-1").compare(&v("1.2.3-alpha")), Ordering::Less);
        assert_eq!(v("1.2.3+build").compare(&v("1.2.3")), Ordering::Equal);
        assert_eq!(v("1.2.3.4").compare(&v("1.2.3")), Ordering::Greater);
        assert_eq!(v("6.1.0-28-amd64").pre, "28-amd64");
        assert!(Version::parse("1.x").is_err());
        assert!(Version::parse("").is_err());
        assert!(Version::parse_semver("1.2.3.4").is_err());
    }

    #[test]
    fn version_constraints() {
        let cases = [
            (">= 1.0", "1.0.0", true),
            (">= 1.0, < 1.4", "1.3.9", true),
            (">= 1.0, < 1.4", "1.4", false),
            ("= 1.2", "1.2.0", true),
            ("1.2", "1.2.0", true),
            ("!= 1.2", "1.2.1", true),
            ("> 1.2", "1.2", false),
            ("<= 1.2", "1.2", true),
            ("~> 1.2", "1.9", true),
            ("~> 1.2", "2.0", false),
            ("~> 1.2.3", "1.2.9", true),
            ("~> 1.2.3", "1.3.0", false),
            ("~> 1.2.3", "1.2.2", false),
            // go-version: a constraint without a pre-release never matches one.
            (">= 5.0", "6.1.0-28-amd64", false),
            (">= 6.1.0-1", "6.1.0-28", true),
            (">= 6.1.0-1", "6.2.0-28", false),
        ];
        for (c, v, want) in cases {
            assert_eq!(check(Flavor::Version, c, v), want, "{v} version {c:?}");
        }
    }

    #[test]
    fn semver_constraints() {
        let cases = [
            (">= 5.0", "6.1.0-28-amd64", true),
            (">= 1.3.0-beta1", "1.3.0", true),
            ("< 1.3.0", "1.3.0-beta1", true),
            ("= 1.2.3", "1.2.3", true),
            ("!= 1.2.3", "1.2.4", true),
            (">= 1.0.0, < 2.0.0", "2.0.0", false),
        ];
        for (c, v, want) in cases {
            assert_eq!(check(Flavor::Semver, c, v), want, "{v} semver {c:?}");
        }
        assert_eq!(
            Constraints::parse("~> 1.2", Flavor::Semver).unwrap_err(),
            VersionError::Constraint("~> 1.2".to_string())
        );
        assert!(Constraints::parse(">= 1.2.3.4", Flavor::Semver).is_err());
    }

    #[test]
    fn malformed_constraints_are_named() {
        for bad in ["", ">=", "> 1.x", ">= 1.0,", "=> 1.0"] {
            assert!(
                Constraints::parse(bad, Flavor::Version).is_err(),
                "{bad:?} should not parse"
            );
        }
        assert_eq!(
            Constraints::parse(">= 1.0, soon", Flavor::Version)
                .unwrap_err()
                .to_string(),
            "malformed constraint: \"soon\""
        );
    }
}
