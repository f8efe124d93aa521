//! The docker driver's settings, as the agent configuration's `plugin "docker" { config { ... } }`
//! gives them (`crate::config`, docs/configuration.md "Task drivers").

/// The docker driver's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerSettings {
    /// `unix:///path` of the engine: the config's `endpoint`, else `DOCKER_HOST`, else
    /// [`DEFAULT_DOCKER_ENDPOINT`].
    pub endpoint: String,
    /// `allow_privileged`: a task may ask for `privileged = true`.
    pub allow_privileged: bool,
    /// `allow_caps`: the capabilities a task's `cap_add` may name (lower case, no `CAP_`);
    /// `["all"]` allows every one.
    pub allow_caps: Vec<String>,
    /// `volumes { enabled = true }`: a task's `volumes` and bind mounts may name host paths
    /// outside its task directory.
    pub volumes_enabled: bool,
}

/// Where the engine listens when nothing says otherwise.
pub const DEFAULT_DOCKER_ENDPOINT: &str = "unix:///var/run/docker.sock";

/// Nomad's default `allow_caps` (Docker's default capability set).
pub const DEFAULT_ALLOW_CAPS: &[&str] = &crate::util::caps::NOMAD_DEFAULT_CAPS;

impl Default for DockerSettings {
    fn default() -> Self {
        DockerSettings {
            endpoint: std::env::var("DOCKER_HOST")
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| DEFAULT_DOCKER_ENDPOINT.to_string()),
            allow_privileged: false,
            allow_caps: DEFAULT_ALLOW_CAPS.iter().map(|c| c.to_string()).collect(),
            volumes_enabled: false,
        }
    }
}

impl DockerSettings {
    /// Whether `cap` (as a task writes it: `NET_ADMIN`, `CAP_NET_ADMIN`, `net_admin`) may be added.
    pub fn cap_allowed(&self, cap: &str) -> bool {
        let cap = cap.to_ascii_lowercase();
        let cap = cap.strip_prefix("cap_").unwrap_or(&cap);
        self.allow_caps.iter().any(|c| c == "all" || c == cap)
    }
}
