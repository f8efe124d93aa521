//! `client { reserved { cpu memory disk cores } }` (Nomad's keys): what the agent keeps for the
//! host, out of placement's reach. Checked against the node's fingerprint when the agent starts
//! (`resources::Capacity::new`), since the file alone does not know the host.

use serde::Deserialize;

use super::ConfigError;
use crate::resources::{parse_cpuset, ReservedResources};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReserved {
    /// MHz.
    cpu: Option<u64>,
    /// MB.
    memory: Option<u64>,
    /// MB.
    disk: Option<u64>,
    /// A cpuset: `"0,2-3"`.
    cores: Option<String>,
}

/// `client { cpu_total_compute memory_total_mb disk_free_mb }`, by key: each more than 0 where
/// it is set.
pub(super) fn totals(
    [cpu, memory, disk]: [(&str, Option<u64>); 3],
) -> Result<crate::resources::Totals, ConfigError> {
    let positive = |(key, v): (&str, Option<u64>)| match v {
        Some(0) => Err(ConfigError::Invalid(format!(
            "client.{key}: must be more than 0"
        ))),
        v => Ok(v),
    };
    Ok(crate::resources::Totals {
        cpu_mhz: positive(cpu)?,
        memory_mb: positive(memory)?,
        disk_free_mb: positive(disk)?,
    })
}

pub(super) fn validate(raw: Option<&RawReserved>) -> Result<ReservedResources, ConfigError> {
    let Some(raw) = raw else {
        return Ok(ReservedResources::default());
    };
    let cores = match &raw.cores {
        Some(c) => parse_cpuset(c)
            .map_err(|e| ConfigError::Invalid(format!("client.reserved.cores: {e}")))?,
        None => Vec::new(),
    };
    Ok(ReservedResources {
        cpu_mhz: raw.cpu.unwrap_or(0),
        memory_mb: raw.memory.unwrap_or(0),
        disk_mb: raw.disk.unwrap_or(0),
        cores,
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    fn load(name: &str, body: &str) -> Result<ReservedResources, String> {
        let dir = std::env::temp_dir().join(format!("nodeward-res-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let p: PathBuf = dir.join(name);
        std::fs::write(&p, body).unwrap();
        let out = super::super::load(&[p], false)
            .map(|c| c.reserved)
            .map_err(|e| e.to_string());
        std::fs::remove_dir_all(&dir).unwrap();
        out
    }

    use super::*;

    #[test]
    fn reserved_reads_from_hcl_and_json_and_refuses_bad_values() {
        let want = ReservedResources {
            cpu_mhz: 500,
            memory_mb: 1024,
            disk_mb: 2048,
            cores: vec![0, 2, 3],
        };
        let hcl = "client {\n  reserved {\n    cpu = 500\n    memory = 1024\n    disk = 2048\n    \
                   cores = \"0,2-3\"\n  }\n}\n";
        assert_eq!(load("a.hcl", hcl).unwrap(), want);
        let json = r#"{"client": {"reserved": {"cpu": 500, "memory": 1024, "disk": 2048, "cores": "0,2-3"}}}"#;
        assert_eq!(load("a.json", json).unwrap(), want);
        assert_eq!(load("none.hcl", "").unwrap(), ReservedResources::default());
        let err = load("bad.hcl", "client {\n reserved { cores = \"x\" }\n}\n").unwrap_err();
        assert!(
            err.ends_with("client.reserved.cores: \"x\" is not a core number or range (\"0,2-3\")"),
            "{err}"
        );
        let err = load("neg.hcl", "client {\n reserved { memory = -5 }\n}\n").unwrap_err();
        assert!(err.contains("memory") || err.contains("invalid"), "{err}");
        let err = load("typo.hcl", "client {\n reserved { mem = 5 }\n}\n").unwrap_err();
        assert!(err.contains("mem"), "{err}");
    }

    #[test]
    fn stated_totals_are_read_and_zero_is_refused() {
        let dir = std::env::temp_dir().join(format!("nodeward-tot-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let load = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            super::super::load(&[p], false)
        };
        let c = load(
            "t.hcl",
            "client {\n  cpu_total_compute = 8000\n  memory_total_mb = 4096\n  disk_free_mb = 20000\n}\n",
        )
        .unwrap();
        assert_eq!(
            c.totals,
            crate::resources::Totals {
                cpu_mhz: Some(8000),
                memory_mb: Some(4096),
                disk_free_mb: Some(20000),
            }
        );
        let err = load("z.hcl", "client {\n  memory_total_mb = 0\n}\n").unwrap_err();
        assert!(
            err.to_string()
                .ends_with("client.memory_total_mb: must be more than 0"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
