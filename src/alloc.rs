//! Allocations: one per group instance, each running its tasks.

use serde::{Deserialize, Serialize};

/// An allocation as the state file keeps it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AllocRecord {
    #[serde(rename = "ID")]
    pub id: String,
}
