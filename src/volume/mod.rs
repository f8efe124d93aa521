//! Dynamic and static host volumes (host-volumes.md).

use serde::{Deserialize, Serialize};

/// A dynamic host volume as the state file keeps it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct VolumeRecord {
    #[serde(rename = "ID")]
    pub id: String,
}
