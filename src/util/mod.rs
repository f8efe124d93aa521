//! Small helpers shared by every module.

pub mod allocdir;
pub mod caps;
pub mod duration;
pub mod logging;
pub mod mounts;
pub mod netif;
#[cfg(test)]
pub mod scratch;
pub mod systemd;
pub mod version;

/// The first 8 characters of an ID, as Nomad shows IDs in lists and nodeward names threads
/// (`task-1e1d4540-web`); the whole ID when it is shorter. Never splits a character.
pub fn short_id(id: &str) -> &str {
    match id.char_indices().nth(8) {
        Some((i, _)) => &id[..i],
        None => id,
    }
}

#[cfg(test)]
mod tests {
    use super::short_id;

    #[test]
    fn short_ids() {
        assert_eq!(short_id("1e1d4540-14f9-2515"), "1e1d4540");
        assert_eq!(short_id("1e1d4540"), "1e1d4540");
        assert_eq!(short_id("abc"), "abc");
        assert_eq!(short_id("ééééééééé"), "éééééééé");
    }
}
