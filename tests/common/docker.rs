//! The test suite's private dockerd: `scripts/test.sh` starts one (`scripts/docker-env.sh`) when
//! it runs as root and exports its endpoint as `NODEWARD_TEST_DOCKER_HOST`; the docker tests are
//! `#[ignore]`d, so a run without it counts them as ignored ([`required_engine`]). The image `busybox:1` is built when the engine starts;
//! `nodeward-csi-test-plugin:1` is built here, once per test process, from the CSI test plugin
//! binary this very build made ([`DockerEnv::csi_plugin_image`]).

use nodeward::driver::docker::engine::{
    ContainerInfo, ContainerState, ContainerSummary, CreateContainer, Endpoint, Engine,
};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use super::wait_for;

/// The label nodeward puts on every container, as Nomad does.
pub const ALLOC_LABEL: &str = "com.hashicorp.nomad.alloc_id";
/// The image with the CSI test plugin at `/bin/nodeward-csi-test-plugin` (and busybox).
pub const CSI_PLUGIN_IMAGE: &str = "nodeward-csi-test-plugin:1";

/// The private engine of this test run.
#[derive(Clone)]
pub struct DockerEnv {
    /// `unix:///.../docker.sock`.
    pub host: String,
    pub engine: Engine,
}

/// The private dockerd, or `None` when there is none.
/// An endpoint that is set but does not answer fails the test: a broken environment must not
/// look like a skipped one.
pub fn engine() -> Option<DockerEnv> {
    let host = std::env::var("NODEWARD_TEST_DOCKER_HOST").ok()?;
    let endpoint = Endpoint::parse(&host).expect("NODEWARD_TEST_DOCKER_HOST");
    // Generous: the engine shares two cores with the build and the rest of the suite.
    let engine = Engine::connect(endpoint, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("NODEWARD_TEST_DOCKER_HOST={host} is set, but: {e}"));
    Some(DockerEnv { host, engine })
}

/// [`engine`], failing the test when there is none. The docker tests are `#[ignore]`d with that
/// reason, so a run without the engine counts them as ignored; `scripts/test.sh` selects them as
/// root, where it starts the engine, and one selected without it fails here.
pub fn required_engine() -> DockerEnv {
    engine().unwrap_or_else(|| {
        panic!(
            "{} needs the private dockerd (NODEWARD_TEST_DOCKER_HOST): scripts/test.sh starts one \
             when it runs as root, and says above why it did not",
            super::test_name()
        )
    })
}

/// A container a test made: removed (forced) when dropped.
pub struct Container {
    pub id: String,
    pub name: String,
    engine: Engine,
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Err(e) = self.engine.remove(&self.id, true) {
            eprintln!("cannot remove test container {}: {e}", self.name);
        }
    }
}

/// A container name no other test uses.
pub fn unique_name(tag: &str) -> String {
    format!(
        "nw-test-{tag}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// A create body for `busybox:1` running `argv`, with stdout and stderr attached.
pub fn busybox(argv: &[&str]) -> CreateContainer {
    CreateContainer {
        image: "busybox:1".into(),
        cmd: Some(argv.iter().map(|s| s.to_string()).collect()),
        attach_stdout: true,
        attach_stderr: true,
        ..CreateContainer::default()
    }
}

impl DockerEnv {
    /// Creates a container that the returned guard removes.
    pub fn create(&self, name: &str, config: &CreateContainer) -> Container {
        let id = self
            .engine
            .create_container(name, config)
            .unwrap_or_else(|e| panic!("{e}"));
        Container {
            id,
            name: name.to_string(),
            engine: self.engine.clone(),
        }
    }

    /// Creates and starts a container.
    pub fn run(&self, name: &str, config: &CreateContainer) -> Container {
        let c = self.create(name, config);
        self.engine.start(&c.id).unwrap_or_else(|e| panic!("{e}"));
        c
    }

    /// Runs the `docker` client against the private engine.
    pub fn docker(&self, args: &[&str]) -> Output {
        Command::new("docker")
            .arg("-H")
            .arg(&self.host)
            .args(args)
            .output()
            .expect("run docker")
    }

    /// Runs the `docker` client and answers its stdout; panics with its stderr if it fails.
    pub fn docker_ok(&self, args: &[&str]) -> String {
        let out = self.docker(args);
        assert!(
            out.status.success(),
            "docker {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The containers nodeward made for an allocation (by Nomad's label).
    pub fn containers_of_alloc(&self, alloc_id: &str) -> Vec<ContainerSummary> {
        self.engine
            .list(&format!("{ALLOC_LABEL}={alloc_id}"))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Polls the engine until the container's state satisfies `ok`, for at most `timeout`.
    pub fn wait_state(
        &self,
        id: &str,
        timeout: Duration,
        what: &str,
        ok: impl Fn(&ContainerState) -> bool,
    ) -> ContainerInfo {
        wait_for(timeout, what, || {
            let info = self.engine.inspect(id).unwrap_or_else(|e| panic!("{e}"))?;
            ok(&info.state).then_some(info)
        })
    }

    /// Polls the engine until the container's status is `status` (`running`, `exited`).
    pub fn wait_status(&self, id: &str, status: &str, timeout: Duration) -> ContainerInfo {
        self.wait_state(id, timeout, &format!("container {id} {status}"), |s| {
            s.status == status
        })
    }

    /// The CSI test plugin's image, built on first use from the plugin binary of this build
    /// (`scripts/docker-env.sh image`), so that it always holds the code under test.
    pub fn csi_plugin_image(&self) -> &'static str {
        static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
        let built = BUILT.get_or_init(|| {
            let socket = self.host.trim_start_matches("unix://");
            let dir = std::path::Path::new(socket)
                .parent()
                .expect("the socket's directory");
            let out = Command::new("bash")
                .arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/scripts/docker-env.sh"
                ))
                .arg("image")
                .arg(dir)
                .arg(CSI_PLUGIN_IMAGE)
                .arg(env!("CARGO_BIN_EXE_nodeward-csi-test-plugin"))
                .env("NODEWARD_TEST_DOCKER_HOST", &self.host)
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&out.stderr).into_owned())
            }
        });
        if let Err(e) = built {
            panic!("cannot build {CSI_PLUGIN_IMAGE}: {e}");
        }
        CSI_PLUGIN_IMAGE
    }
}
