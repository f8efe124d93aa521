//! ID prefixes (agent.md "HTTP API"): every route that takes an ID takes a unique prefix of one.
//! The one resolver of the API; each kind of ID says how a failed lookup is worded ([`IdKind`]),
//! since the CLI and scripts match those messages.

use super::router::ApiError;

/// What an empty prefix is.
#[derive(Debug, Clone, Copy)]
pub enum EmptyPrefix {
    /// A 400 with this reason.
    BadRequest(&'static str),
    /// Matches nothing: the kind's 404.
    NotFound,
}

/// How a kind of ID words a failed lookup.
#[derive(Debug, Clone, Copy)]
pub struct IdKind {
    pub empty: EmptyPrefix,
    /// The 404 reason when no ID matches the prefix.
    pub not_found: fn(prefix: &str) -> String,
    /// The 400 reason when several IDs match; `matches` is them sorted, joined by `", "`.
    pub ambiguous: fn(prefix: &str, matches: &str) -> String,
}

/// Jobs, allocations and the node.
pub const ID: IdKind = IdKind {
    empty: EmptyPrefix::BadRequest("missing ID"),
    not_found: |prefix| format!("no ID matches prefix {prefix:?}"),
    ambiguous: |prefix, matches| format!("prefix {prefix:?} matches more than one ID: {matches}"),
};

/// Host volumes: the wording of host-volumes.md and of the volume manager's errors.
pub const HOST_VOLUME: IdKind = IdKind {
    empty: EmptyPrefix::NotFound,
    not_found: |id| format!("host volume {id:?} not found"),
    ambiguous: |prefix, matches| format!("prefix {prefix:?} matches several volumes: {matches}"),
};

/// CSI volumes: Nomad's `volume not found: <id>`.
pub const CSI_VOLUME: IdKind = IdKind {
    empty: EmptyPrefix::NotFound,
    not_found: |id| format!("volume not found: {id}"),
    ambiguous: |prefix, matches| format!("prefix {prefix:?} matches several volumes: {matches}"),
};

/// Resolves a unique ID prefix against `ids`: an exact match wins; a prefix of exactly one ID is
/// that ID; a prefix of several is a 400 listing them; no match is a 404.
pub fn resolve<I, S>(prefix: &str, ids: I, kind: &IdKind) -> Result<String, ApiError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    if prefix.is_empty() {
        return Err(match kind.empty {
            EmptyPrefix::BadRequest(reason) => ApiError::BadRequest(reason.into()),
            EmptyPrefix::NotFound => ApiError::NotFound((kind.not_found)(prefix)),
        });
    }
    let mut found: Vec<String> = Vec::new();
    for id in ids {
        let id = id.as_ref();
        if id == prefix {
            return Ok(id.to_string());
        }
        if id.starts_with(prefix) {
            found.push(id.to_string());
        }
    }
    match found.len() {
        0 => Err(ApiError::NotFound((kind.not_found)(prefix))),
        1 => Ok(found.remove(0)),
        _ => {
            found.sort();
            Err(ApiError::BadRequest((kind.ambiguous)(
                prefix,
                &found.join(", "),
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_resolution() {
        let resolve_prefix = |prefix: &str, ids: [&str; 4]| resolve(prefix, ids, &ID);
        let ids = ["1e1d4540-aaaa", "1e1d9999-bbbb", "7f00-cccc", "1e1d"];
        assert_eq!(resolve_prefix("7f", ids).unwrap(), "7f00-cccc");
        // An exact match wins even though it is also a prefix of others.
        assert_eq!(resolve_prefix("1e1d", ids).unwrap(), "1e1d");
        assert_eq!(resolve_prefix("1e1d4", ids).unwrap(), "1e1d4540-aaaa");
        let e = resolve_prefix("1e", ids).unwrap_err();
        assert_eq!(e.status(), 400);
        assert_eq!(
            e.to_string(),
            r#"prefix "1e" matches more than one ID: 1e1d, 1e1d4540-aaaa, 1e1d9999-bbbb"#
        );
        let e = resolve_prefix("ff", ids).unwrap_err();
        assert_eq!(
            (e.status(), e.to_string()),
            (404, r#"no ID matches prefix "ff""#.into())
        );
        assert_eq!(resolve_prefix("", ids).unwrap_err().status(), 400);
    }

    /// The volume manager's resolver, word for word (volume/manager.rs
    /// `ids_resolve_by_unique_prefix`), so that it can call this one.
    #[test]
    fn host_volume_ids_keep_their_wording() {
        let ids = ["abc1", "abc2", "abd"];
        let r = |prefix: &str| resolve(prefix, ids, &HOST_VOLUME);
        assert_eq!(r("abc1").unwrap(), "abc1");
        assert_eq!(r("abd").unwrap(), "abd");
        assert_eq!(r("abc2").unwrap(), "abc2");
        let err = r("abc").unwrap_err();
        assert_eq!(
            err.to_string(),
            "prefix \"abc\" matches several volumes: abc1, abc2"
        );
        assert_eq!(err.status(), 400);
        assert_eq!(r("x").unwrap_err().status(), 404);
        assert_eq!(
            r("x").unwrap_err().to_string(),
            "host volume \"x\" not found"
        );
        assert_eq!(r("").unwrap_err().status(), 404);
    }
}
