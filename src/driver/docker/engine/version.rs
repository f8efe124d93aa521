//! Engine API versions and their negotiation: which `/v<version>` prefix the client speaks.

use std::fmt;

/// The oldest Engine API version nodeward speaks: Docker 1.13 (2017), the first with
/// `HostConfig.Mounts` and `Init`.
pub const OLDEST_API: ApiVersion = ApiVersion::new(1, 25);
/// The newest Engine API version nodeward asks for: Docker 20.10's, what its tests run against.
pub const NEWEST_API: ApiVersion = ApiVersion::new(1, 41);
/// Wait conditions (`condition=not-running`) exist from this version on; before it a wait has
/// that meaning anyway.
pub(super) const WAIT_CONDITION_API: ApiVersion = ApiVersion::new(1, 30);

/// An Engine API version, `1.41`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion {
    pub major: u32,
    pub minor: u32,
}

impl ApiVersion {
    pub const fn new(major: u32, minor: u32) -> ApiVersion {
        ApiVersion { major, minor }
    }

    pub fn parse(text: &str) -> Option<ApiVersion> {
        let (major, minor) = text.trim().split_once('.')?;
        Some(ApiVersion::new(major.parse().ok()?, minor.parse().ok()?))
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The version to speak: the engine's newest capped at [`NEWEST_API`], but never below what the
/// engine accepts. `None`: the engine is older than [`OLDEST_API`].
pub fn negotiate(
    engine_newest: ApiVersion,
    engine_oldest: Option<ApiVersion>,
) -> Option<ApiVersion> {
    if engine_newest < OLDEST_API {
        return None;
    }
    let chosen = engine_newest.min(NEWEST_API);
    Some(match engine_oldest {
        Some(oldest) if oldest > chosen => oldest.min(engine_newest),
        _ => chosen,
    })
}

/// `GET /_ping`: the engine answers, with its newest API version and OS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ping {
    pub api_version: Option<ApiVersion>,
    pub os_type: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_capped_and_never_below_the_engines_minimum() {
        let v = ApiVersion::new;
        assert_eq!(negotiate(v(1, 41), Some(v(1, 12))), Some(v(1, 41)));
        assert_eq!(negotiate(v(1, 50), Some(v(1, 24))), Some(v(1, 41)));
        assert_eq!(negotiate(v(1, 30), None), Some(v(1, 30)));
        // Docker 29 accepts nothing older than 1.44.
        assert_eq!(negotiate(v(1, 52), Some(v(1, 44))), Some(v(1, 44)));
        assert_eq!(negotiate(v(1, 24), Some(v(1, 12))), None);
        assert_eq!(ApiVersion::parse("1.41"), Some(v(1, 41)));
        assert_eq!(ApiVersion::parse("1.x"), None);
        assert!(v(1, 9) < v(1, 10));
    }
}
