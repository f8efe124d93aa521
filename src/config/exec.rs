//! The agent configuration's settings for the drivers: the `exec` driver's `client { chroot_env
//! { } }`, and Nomad's `client { options { "driver.denylist" = "exec,docker" } }`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::ConfigError;
use crate::driver::exec::{ExecSettings, NAME};

/// What `client { chroot_env options }` sets for the drivers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DriverSettings {
    pub exec: ExecSettings,
    /// The drivers `driver.denylist` names, as Nomad's client takes it: not fingerprinted, so a
    /// job that needs one gets the `missing drivers` placement failure. Any name is taken (one
    /// this node does not have changes nothing); tasks of a denied driver that already run are
    /// still taken over after a restart, only new ones are not placed.
    pub denied: BTreeSet<String>,
}

/// `chroot_env` (host path to path in the task; Nomad's default list when absent) and the
/// `options` map. An option nodeward does not use is named in a warning.
pub(super) fn settings(
    chroot_env: Option<BTreeMap<String, String>>,
    options: Option<BTreeMap<String, String>>,
    warnings: &mut Vec<String>,
) -> Result<DriverSettings, ConfigError> {
    let mut s = DriverSettings::default();
    if let Some(env) = chroot_env {
        s.exec.chroot_env = Vec::new();
        for (src, dst) in env {
            let clean = |p: &str| p.starts_with('/') && !p.split('/').any(|c| c == "..");
            if !clean(&src) || !clean(&dst) {
                return Err(ConfigError::Invalid(format!(
                    "client.chroot_env {src:?} = {dst:?}: both must be absolute paths without \"..\""
                )));
            }
            s.exec
                .chroot_env
                .push((PathBuf::from(src), PathBuf::from(dst)));
        }
    }
    for (key, value) in options.unwrap_or_default() {
        match key.as_str() {
            // Nomad's name, and its older one.
            "driver.denylist" | "driver.blacklist" => {
                for driver in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
                    if driver == NAME {
                        s.exec.enabled = false;
                    }
                    s.denied.insert(driver.to_string());
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
        assert_eq!(s, DriverSettings::default());
        assert!(s.exec.enabled && s.exec.chroot_env.len() == 8 && s.denied.is_empty());
        let env = BTreeMap::from([("/opt/x".to_string(), "/x".to_string())]);
        let opts = BTreeMap::from([
            ("driver.denylist".to_string(), "docker, exec".to_string()),
            ("fingerprint.x".to_string(), "1".to_string()),
        ]);
        let s = settings(Some(env), Some(opts), &mut w).unwrap();
        assert!(!s.exec.enabled);
        assert_eq!(s.denied, BTreeSet::from(["docker".into(), "exec".into()]));
        assert_eq!(s.exec.chroot_env, [("/opt/x".into(), "/x".into())]);
        assert_eq!(w, ["client.options \"fingerprint.x\" has no effect"]);
        let bad = BTreeMap::from([("/a".to_string(), "../b".to_string())]);
        let e = settings(Some(bad), None, &mut w).unwrap_err();
        assert!(e.to_string().contains("must be absolute paths"), "{e}");
    }
}
