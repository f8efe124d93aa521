//! Image references as a jobspec's `image` writes them: `busybox`, `busybox:1`,
//! `registry.example:5000/team/app:2.1`, `app@sha256:<hex>`, `app:2@sha256:<hex>`. Parsed the way
//! Docker's `distribution/reference` splits them: a digest after `@`; a tag after the last `:`
//! that follows the last `/` (so a registry's port is not a tag); the tag `latest` when there is
//! neither.

use std::fmt;

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// The repository, with its registry and port when given: `registry.example:5000/team/app`.
    pub name: String,
    /// `None` when the reference has no tag (then `latest` is pulled, unless a digest is given).
    pub tag: Option<String>,
    /// `sha256:<hex>`.
    pub digest: Option<String>,
}

/// Why a reference is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid image reference {reference:?}: {reason}")]
pub struct ReferenceError {
    pub reference: String,
    pub reason: &'static str,
}

impl ImageRef {
    pub fn parse(reference: &str) -> Result<ImageRef, ReferenceError> {
        let err = |reason| ReferenceError {
            reference: reference.to_string(),
            reason,
        };
        if reference.is_empty() {
            return Err(err("empty"));
        }
        if reference
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(err("contains white space"));
        }
        let (rest, digest) = match reference.split_once('@') {
            Some((rest, digest)) => {
                let Some((algorithm, hex)) = digest.split_once(':') else {
                    return Err(err("a digest is written algorithm:hex (sha256:...)"));
                };
                let algorithm_ok = !algorithm.is_empty()
                    && algorithm.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || "+._-".contains(c)
                    });
                if !algorithm_ok || hex.len() < 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(err("a digest is written algorithm:hex (sha256:...)"));
                }
                (rest, Some(digest.to_string()))
            }
            None => (reference, None),
        };
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
            None => (rest, None),
        };
        if let Some(tag) = tag {
            let first_ok = tag
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            if !first_ok
                || tag.len() > 128
                || !tag
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
            {
                return Err(err("a tag is up to 128 letters, digits, '_', '.' and '-'"));
            }
        }
        check_name(name).map_err(err)?;
        Ok(ImageRef {
            name: name.to_string(),
            tag: tag.map(str::to_string),
            digest,
        })
    }

    /// The `fromImage` and `tag` parameters of `POST /images/create`: the digest when there is
    /// one (the engine pulls by digest then), else the tag, else `latest`.
    pub fn pull_params(&self) -> (&str, &str) {
        let tag = self
            .digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest");
        (&self.name, tag)
    }
}

/// The name's path components are lowercase (the engine refuses others: "repository name must be
/// lowercase"); the first may be a registry host, with a port, in any case.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("no repository name");
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err("empty path component");
    }
    let first = parts[0];
    // A registry: has a dot or a port, or is localhost (Docker's rule).
    if parts.len() > 1 && (first.contains('.') || first.contains(':') || first == "localhost") {
        let (host, port) = match first.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (first, None),
        };
        let host_ok = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        if !host_ok || port.is_some_and(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()))
        {
            return Err("a registry is host[:port]");
        }
        parts.remove(0);
    }
    for part in parts {
        let ok = part
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return Err(
                "repository name must be lowercase letters, digits and separators (., _, -)",
            );
        }
    }
    Ok(())
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn parts(r: &str) -> (String, Option<String>, Option<String>) {
        let i = ImageRef::parse(r).unwrap();
        (i.name, i.tag, i.digest)
    }

    #[test]
    fn names_tags_registries_and_digests() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(parts("busybox"), ("busybox".into(), None, None));
        assert_eq!(parts("busybox:1"), ("busybox".into(), s("1"), None));
        assert_eq!(
            parts("library/busybox:1.36.1"),
            ("library/busybox".into(), s("1.36.1"), None)
        );
        assert_eq!(
            parts("localhost:5000/app"),
            ("localhost:5000/app".into(), None, None)
        );
        assert_eq!(
            parts("registry.example:5000/team/app:2.1"),
            ("registry.example:5000/team/app".into(), s("2.1"), None)
        );
        assert_eq!(parts(&format!("app@{SHA}")), ("app".into(), None, s(SHA)));
        assert_eq!(
            parts(&format!("r.io:1/app:2@{SHA}")),
            ("r.io:1/app".into(), s("2"), s(SHA))
        );
    }

    #[test]
    fn pulls_the_digest_else_the_tag_else_latest() {
        let p = |r: &str| {
            let i = ImageRef::parse(r).unwrap();
            let (a, b) = i.pull_params();
            (a.to_string(), b.to_string())
        };
        assert_eq!(p("busybox"), ("busybox".into(), "latest".into()));
        assert_eq!(p("busybox:2"), ("busybox".into(), "2".into()));
        assert_eq!(
            p("127.0.0.1:9/x/y:3"),
            ("127.0.0.1:9/x/y".into(), "3".into())
        );
        assert_eq!(p(&format!("app:2@{SHA}")), ("app".into(), SHA.into()));
    }

    #[test]
    fn displays_as_written() {
        for r in [
            "busybox",
            "busybox:1",
            "localhost:5000/app:x",
            &format!("app:2@{SHA}"),
        ] {
            assert_eq!(ImageRef::parse(r).unwrap().to_string(), r);
        }
    }

    #[test]
    fn refuses_what_the_engine_would() {
        for (r, reason) in [
            ("", "empty"),
            ("busy box", "contains white space"),
            (
                "BusyBox:1",
                "repository name must be lowercase letters, digits and separators (., _, -)",
            ),
            (
                "busybox:",
                "a tag is up to 128 letters, digits, '_', '.' and '-'",
            ),
            (
                "busybox:-x",
                "a tag is up to 128 letters, digits, '_', '.' and '-'",
            ),
            (
                "busybox@sha256:xyz",
                "a digest is written algorithm:hex (sha256:...)",
            ),
            ("busybox@", "a digest is written algorithm:hex (sha256:...)"),
            (":1", "no repository name"),
            ("a//b", "empty path component"),
            ("host:port/x", "a registry is host[:port]"),
        ] {
            let err = ImageRef::parse(r).unwrap_err();
            assert_eq!(err.reason, reason, "{r:?}");
            assert_eq!(
                err.to_string(),
                format!("invalid image reference {r:?}: {reason}")
            );
        }
    }
}
