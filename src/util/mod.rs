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

/// `name` as an environment variable's name, as Nomad's client makes the names of meta and port
/// variables (`NOMAD_META_my-key` is `NOMAD_META_my_key`): each byte other than an ASCII
/// letter, `_`, `.`, or a digit after the first byte becomes `_`.
pub fn env_var_name(name: &str) -> String {
    clean_env(name, false)
}

/// What follows a prefix of letters in a variable's name (a port label in `NOMAD_PORT_<label>`),
/// cleaned as [`env_var_name`] cleans it there: a digit is allowed first.
pub fn env_var_suffix(part: &str) -> String {
    clean_env(part, true)
}

fn clean_env(s: &str, digit_first: bool) -> String {
    s.bytes()
        .enumerate()
        .map(|(i, b)| match b {
            b'_' | b'.' | b'a'..=b'z' | b'A'..=b'Z' => b as char,
            b'0'..=b'9' if i > 0 || digit_first => b as char,
            _ => '_',
        })
        .collect()
}

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
    use super::{env_var_name, short_id};

    #[test]
    fn env_var_names_are_cleaned_as_nomad_cleans_them() {
        assert_eq!(env_var_name("NOMAD_META_my-key"), "NOMAD_META_my_key");
        assert_eq!(env_var_name("NOMAD_META_a.b_c9"), "NOMAD_META_a.b_c9");
        assert_eq!(env_var_name("NOMAD_META_café"), "NOMAD_META_caf__");
        assert_eq!(env_var_name("9x"), "_x");
        assert_eq!(super::env_var_suffix("9x-y"), "9x_y");
    }

    #[test]
    fn short_ids() {
        assert_eq!(short_id("1e1d4540-14f9-2515"), "1e1d4540");
        assert_eq!(short_id("1e1d4540"), "1e1d4540");
        assert_eq!(short_id("abc"), "abc");
        assert_eq!(short_id("ééééééééé"), "éééééééé");
    }
}
