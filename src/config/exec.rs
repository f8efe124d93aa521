//! The agent configuration's settings for the `exec` driver: `client { chroot_env { } }` and
//! Nomad's `client { options { "driver.denylist" = "exec" } }`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::ConfigError;
use crate::driver::exec::{ExecSettings, NAME};

/// `chroot_env` (host path to path in the task; Nomad's default list when absent) and the
/// `options` map. An option nodeward does not use is named in a warning.
pub(super) fn settings(
    chroot_env: Option<BTreeMap<String, String>>,
    options: Option<BTreeMap<String, String>>,
    warnings: &mut Vec<String>,
) -> Result<ExecSettings, ConfigError> {
    let mut s = ExecSettings::default();
    if let Some(env) = chroot_env {
        s.chroot_env = Vec::new();
        for (src, dst) in env {
            let clean = |p: &str| p.starts_with('/') && !p.split('/').any(|c| c == "..");
            if !clean(&src) || !clean(&dst) {
                return Err(ConfigError::Invalid(format!(
                    "client.chroot_env {src:?} = {dst:?}: both must be absolute paths without \"..\""
                )));
            }
            s.chroot_env.push((PathBuf::from(src), PathBuf::from(dst)));
        }
    }
    for (key, value) in options.unwrap_or_default() {
        match key.as_str() {
            // Nomad's name, and its older one.
            "driver.denylist" | "driver.blacklist" => {
                for driver in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
                    if driver == NAME {
                        s.enabled = false;
                    } else {
                        warnings.push(format!(
                            "client.options {key:?}: only {NAME:?} can be denied, {driver:?} stays"
                        ));
                    }
                }
            }
            _ => warnings.push(format!("client.options {key:?} has no effect")),
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_settings_come_from_chroot_env_and_the_denylist() {
        let mut w = Vec::new();
        let s = settings(None, None, &mut w).unwrap();
        assert_eq!(s, ExecSettings::default());
        assert!(s.enabled && s.chroot_env.len() == 8);
        let env = BTreeMap::from([("/opt/x".to_string(), "/x".to_string())]);
        let opts = BTreeMap::from([
            ("driver.denylist".to_string(), "docker, exec".to_string()),
            ("fingerprint.x".to_string(), "1".to_string()),
        ]);
        let s = settings(Some(env), Some(opts), &mut w).unwrap();
        assert!(!s.enabled);
        assert_eq!(s.chroot_env, [("/opt/x".into(), "/x".into())]);
        assert_eq!(
            w,
            [
                "client.options \"driver.denylist\": only \"exec\" can be denied, \"docker\" stays",
                "client.options \"fingerprint.x\" has no effect"
            ]
        );
        let bad = BTreeMap::from([("/a".to_string(), "../b".to_string())]);
        let e = settings(Some(bad), None, &mut w).unwrap_err();
        assert!(e.to_string().contains("must be absolute paths"), "{e}");
    }
}
