//! CSI plugin supervision (csi.md).

pub mod client;
pub mod proto;

use serde::{Deserialize, Serialize};

/// A registered CSI plugin as the state file keeps it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PluginRecord {
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
}
