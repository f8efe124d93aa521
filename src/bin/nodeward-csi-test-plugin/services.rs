//! The three CSI services over one shared state: Identity (with the selectable misbehaviours),
//! Controller and Node (thin shells over [`super::hostpath`], which does the work and words the
//! errors).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use grpcio::{RpcContext, RpcStatus, UnarySink};
use nodeward::csi::proto::{self, controller_service_capability, node_service_capability};
use nodeward::csi::proto::{plugin_capability, Topology};
use parking_lot::Mutex;

use super::hostpath::{Failure, Stage, Volumes, NODE_ID, TOPOLOGY_KEY};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Healthy,
    ReadyAbsent,
    NotReady,
    SocketAfterDelay,
    NeverSocket,
    WrongService,
    InfoFails,
    EmptyName,
    CrashAfterHealthy,
    Flap,
    Hang,
    PublishFails,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "healthy" => Mode::Healthy,
            "ready-absent" => Mode::ReadyAbsent,
            "not-ready" => Mode::NotReady,
            "socket-after-delay" => Mode::SocketAfterDelay,
            "never-socket" => Mode::NeverSocket,
            "wrong-service" => Mode::WrongService,
            "info-fails" => Mode::InfoFails,
            "empty-name" => Mode::EmptyName,
            "crash-after-healthy" => Mode::CrashAfterHealthy,
            "flap" => Mode::Flap,
            "hang" => Mode::Hang,
            "publish-fails" => Mode::PublishFails,
            _ => return None,
        })
    }
}

/// What every service instance shares.
pub struct Shared {
    mode: Mode,
    delay: Duration,
    name: String,
    started: Instant,
    probes: AtomicU64,
    count_file: Option<PathBuf>,
    /// Signalled once, on the first probe answered `ready = true` (crash-after-healthy).
    healthy: Sender<()>,
    /// Guards the replies `hang` mode holds back forever.
    hung: Mutex<Vec<UnarySink<proto::ProbeResponse>>>,
    volumes: Volumes,
    fail_message: String,
}

impl Shared {
    pub fn new(
        mode: Mode,
        delay: Duration,
        name: String,
        count_file: Option<PathBuf>,
        healthy: Sender<()>,
        volumes: Volumes,
        fail_message: String,
    ) -> Shared {
        Shared {
            mode,
            delay,
            name,
            started: Instant::now(),
            probes: AtomicU64::new(0),
            count_file,
            healthy,
            hung: Mutex::new(Vec::new()),
            volumes,
            fail_message,
        }
    }

    fn count_probe(&self) {
        let n = self.probes.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(path) = &self.count_file {
            // Write and rename so a reader never sees a half-written number.
            let tmp = path.with_extension("tmp");
            if std::fs::write(&tmp, n.to_string()).is_ok() {
                let _ = std::fs::rename(&tmp, path);
            }
        }
    }

    fn ready(&self) -> Option<bool> {
        match self.mode {
            Mode::ReadyAbsent => None,
            Mode::NotReady => Some(false),
            Mode::Flap => {
                let period = self.delay.as_millis().max(1);
                Some((self.started.elapsed().as_millis() / period) % 2 == 0)
            }
            _ => Some(true),
        }
    }
}

#[derive(Clone)]
pub struct Plugin(pub std::sync::Arc<Shared>);

fn reply<T: Send + 'static>(ctx: &RpcContext, sink: UnarySink<T>, msg: T) {
    let f = sink.success(msg);
    ctx.spawn(async move {
        let _ = f.await;
    });
}

fn fail<T: Send + 'static>(ctx: &RpcContext, sink: UnarySink<T>, failure: Failure) {
    eprintln!(
        "csi-test-plugin: answering {:?}: {}",
        failure.code, failure.message
    );
    let f = sink.fail(RpcStatus::with_message(failure.code, failure.message));
    ctx.spawn(async move {
        let _ = f.await;
    });
}

/// Answers `result`: its value, or its failure as a gRPC status.
fn answer<T: Send + 'static>(ctx: &RpcContext, sink: UnarySink<T>, result: Result<T, Failure>) {
    match result {
        Ok(msg) => reply(ctx, sink, msg),
        Err(failure) => fail(ctx, sink, failure),
    }
}

impl proto::Identity for Plugin {
    fn get_plugin_info(
        &mut self,
        ctx: RpcContext,
        _req: proto::GetPluginInfoRequest,
        sink: UnarySink<proto::GetPluginInfoResponse>,
    ) {
        if self.0.mode == Mode::InfoFails {
            let failure = Failure::internal("plugin info unavailable".to_string());
            return fail(&ctx, sink, failure);
        }
        let name = if self.0.mode == Mode::EmptyName {
            String::new()
        } else {
            self.0.name.clone()
        };
        let mut manifest = std::collections::BTreeMap::new();
        manifest.insert("url".to_string(), "https://example.invalid/csi".to_string());
        reply(
            &ctx,
            sink,
            proto::GetPluginInfoResponse {
                name,
                vendor_version: "1.2.3".into(),
                manifest,
            },
        );
    }

    fn get_plugin_capabilities(
        &mut self,
        ctx: RpcContext,
        _req: proto::GetPluginCapabilitiesRequest,
        sink: UnarySink<proto::GetPluginCapabilitiesResponse>,
    ) {
        use plugin_capability::{service, Service, Type};
        let service = |t: service::Type| proto::PluginCapability {
            r#type: Some(Type::Service(Service { r#type: t as i32 })),
        };
        // Volumes are reachable from this node only: the topology says so.
        let capabilities = vec![
            service(service::Type::ControllerService),
            service(service::Type::VolumeAccessibilityConstraints),
        ];
        reply(
            &ctx,
            sink,
            proto::GetPluginCapabilitiesResponse { capabilities },
        );
    }

    fn probe(
        &mut self,
        ctx: RpcContext,
        _req: proto::ProbeRequest,
        sink: UnarySink<proto::ProbeResponse>,
    ) {
        self.0.count_probe();
        if self.0.mode == Mode::Hang {
            // Keep the call open and never answer: the caller's deadline must end it.
            self.0.hung.lock().push(sink);
            return;
        }
        let ready = self.0.ready();
        if ready == Some(true) {
            let _ = self.0.healthy.try_send(());
        }
        reply(&ctx, sink, proto::ProbeResponse { ready });
    }
}

impl proto::Node for Plugin {
    fn node_get_capabilities(
        &mut self,
        ctx: RpcContext,
        _req: proto::NodeGetCapabilitiesRequest,
        sink: UnarySink<proto::NodeGetCapabilitiesResponse>,
    ) {
        use node_service_capability::{rpc, Rpc, Type};
        let mut rpcs = vec![rpc::Type::GetVolumeStats];
        if self.0.volumes.stage() == Stage::Bind {
            rpcs.push(rpc::Type::StageUnstageVolume);
        }
        let capabilities = rpcs
            .into_iter()
            .map(|t| proto::NodeServiceCapability {
                r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
            })
            .collect();
        reply(
            &ctx,
            sink,
            proto::NodeGetCapabilitiesResponse { capabilities },
        );
    }

    fn node_get_info(
        &mut self,
        ctx: RpcContext,
        _req: proto::NodeGetInfoRequest,
        sink: UnarySink<proto::NodeGetInfoResponse>,
    ) {
        let mut segments = std::collections::BTreeMap::new();
        segments.insert(TOPOLOGY_KEY.to_string(), NODE_ID.to_string());
        reply(
            &ctx,
            sink,
            proto::NodeGetInfoResponse {
                node_id: NODE_ID.into(),
                max_volumes_per_node: 16,
                accessible_topology: Some(Topology { segments }),
            },
        );
    }

    fn node_stage_volume(
        &mut self,
        ctx: RpcContext,
        req: proto::NodeStageVolumeRequest,
        sink: UnarySink<proto::NodeStageVolumeResponse>,
    ) {
        answer(&ctx, sink, self.0.volumes.stage_volume(&req));
    }

    fn node_unstage_volume(
        &mut self,
        ctx: RpcContext,
        req: proto::NodeUnstageVolumeRequest,
        sink: UnarySink<proto::NodeUnstageVolumeResponse>,
    ) {
        answer(&ctx, sink, self.0.volumes.unstage_volume(&req));
    }

    fn node_publish_volume(
        &mut self,
        ctx: RpcContext,
        req: proto::NodePublishVolumeRequest,
        sink: UnarySink<proto::NodePublishVolumeResponse>,
    ) {
        if self.0.mode == Mode::PublishFails {
            return fail(&ctx, sink, Failure::internal(self.0.fail_message.clone()));
        }
        answer(&ctx, sink, self.0.volumes.publish_volume(&req));
    }

    fn node_unpublish_volume(
        &mut self,
        ctx: RpcContext,
        req: proto::NodeUnpublishVolumeRequest,
        sink: UnarySink<proto::NodeUnpublishVolumeResponse>,
    ) {
        answer(&ctx, sink, self.0.volumes.unpublish_volume(&req));
    }

    fn node_get_volume_stats(
        &mut self,
        ctx: RpcContext,
        req: proto::NodeGetVolumeStatsRequest,
        sink: UnarySink<proto::NodeGetVolumeStatsResponse>,
    ) {
        answer(&ctx, sink, self.0.volumes.volume_stats(&req));
    }
}

impl proto::Controller for Plugin {
    fn controller_get_capabilities(
        &mut self,
        ctx: RpcContext,
        _req: proto::ControllerGetCapabilitiesRequest,
        sink: UnarySink<proto::ControllerGetCapabilitiesResponse>,
    ) {
        use controller_service_capability::{rpc, Rpc, Type};
        let capabilities = [
            rpc::Type::CreateDeleteVolume,
            rpc::Type::PublishUnpublishVolume,
        ]
        .into_iter()
        .map(|t| proto::ControllerServiceCapability {
            r#type: Some(Type::Rpc(Rpc { r#type: t as i32 })),
        })
        .collect();
        reply(
            &ctx,
            sink,
            proto::ControllerGetCapabilitiesResponse { capabilities },
        );
    }

    fn create_volume(
        &mut self,
        ctx: RpcContext,
        req: proto::CreateVolumeRequest,
        sink: UnarySink<proto::CreateVolumeResponse>,
    ) {
        answer(&ctx, sink, self.0.volumes.create_volume(&req));
    }

    fn delete_volume(
        &mut self,
        ctx: RpcContext,
        req: proto::DeleteVolumeRequest,
        sink: UnarySink<proto::DeleteVolumeResponse>,
    ) {
        answer(&ctx, sink, self.0.volumes.delete_volume(&req));
    }

    fn controller_publish_volume(
        &mut self,
        ctx: RpcContext,
        req: proto::ControllerPublishVolumeRequest,
        sink: UnarySink<proto::ControllerPublishVolumeResponse>,
    ) {
        answer(&ctx, sink, self.0.volumes.controller_publish(&req));
    }

    fn controller_unpublish_volume(
        &mut self,
        ctx: RpcContext,
        req: proto::ControllerUnpublishVolumeRequest,
        sink: UnarySink<proto::ControllerUnpublishVolumeResponse>,
    ) {
        answer(&ctx, sink, self.0.volumes.controller_unpublish(&req));
    }

    fn validate_volume_capabilities(
        &mut self,
        ctx: RpcContext,
        req: proto::ValidateVolumeCapabilitiesRequest,
        sink: UnarySink<proto::ValidateVolumeCapabilitiesResponse>,
    ) {
        answer(&ctx, sink, self.0.volumes.validate_capabilities(&req));
    }
}
