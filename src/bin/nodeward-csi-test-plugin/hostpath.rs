//! The plugin's volumes: directories under a root, published by bind mounts.
//!
//! Layout: a volume named `<name>` is the directory `<root>/hp-<name>` (its CSI volume ID is
//! `hp-<name>`, unlike its name, so that a caller that mixes the two up is caught); the capacity
//! asked for when it was made is kept in `<root>/.meta/hp-<name>`, so that a second
//! `CreateVolume` of the name with another capacity range can be told apart from a retry.
//! Names must be one path component and must not start with a dot.
//!
//! Errors carry the gRPC codes the CSI spec gives each case (`NotFound` for an unknown volume or
//! node, `AlreadyExists` for a name taken with an incompatible capacity, `FailedPrecondition` for
//! a delete of a volume still published or a publish of a volume not staged, `OutOfRange` for an
//! impossible capacity range, `InvalidArgument` for malformed requests) and a message that names
//! the volume and the path.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use grpcio::RpcStatusCode;
use nodeward::csi::proto::{self, volume_capability, Topology};
use parking_lot::Mutex;

/// The node ID `NodeGetInfo` answers, and the only node `ControllerPublishVolume` accepts.
pub const NODE_ID: &str = "test-node-1";
/// The topology segment of this node and of every volume.
pub const TOPOLOGY_KEY: &str = "topology.nodeward.test/node";
const ID_PREFIX: &str = "hp-";
const META_DIR: &str = ".meta";

/// What `NodeStageVolume` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Bind-mounts the volume at the staging path; publish mounts from there. Advertised.
    Bind,
    /// Nothing, and `STAGE_UNSTAGE_VOLUME` is not advertised; publish mounts the volume itself.
    None,
}

/// A call's failure, as the gRPC status it is answered with.
#[derive(Debug)]
pub struct Failure {
    pub code: RpcStatusCode,
    pub message: String,
}

impl Failure {
    fn new(code: RpcStatusCode, message: String) -> Failure {
        Failure { code, message }
    }

    pub fn internal(message: String) -> Failure {
        Failure::new(RpcStatusCode::INTERNAL, message)
    }

    fn invalid(message: String) -> Failure {
        Failure::new(RpcStatusCode::INVALID_ARGUMENT, message)
    }
}

type Result<T> = std::result::Result<T, Failure>;

pub struct Volumes {
    root: Option<PathBuf>,
    stage: Stage,
    /// Guards the volume directories, their capacity files and the mounts this plugin made: one
    /// call at a time changes them, as a real plugin locks per volume, so a create and a delete of
    /// one name never interleave. Held across the file system and mount calls, which are short.
    /// Maps a volume ID to the target paths it is published at.
    published: Mutex<BTreeMap<String, BTreeSet<PathBuf>>>,
}

impl Volumes {
    /// Creates the root (and its metadata directory) when one is given.
    pub fn new(root: Option<PathBuf>, stage: Stage) -> std::result::Result<Volumes, String> {
        if let Some(root) = &root {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(root.join(META_DIR))
                .map_err(|e| format!("cannot create the volume root {}: {e}", root.display()))?;
        }
        Ok(Volumes {
            root,
            stage,
            published: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn stage(&self) -> Stage {
        self.stage
    }

    fn root(&self) -> Result<&Path> {
        self.root.as_deref().ok_or_else(|| {
            Failure::new(
                RpcStatusCode::FAILED_PRECONDITION,
                "this plugin has no volume root: start it with --root or CSI_TEST_ROOT".into(),
            )
        })
    }

    /// The directory of the existing volume `id`.
    fn volume_dir(&self, id: &str) -> Result<PathBuf> {
        let root = self.root()?;
        check_id(id)?;
        let dir = root.join(id);
        if !dir.is_dir() {
            return Err(Failure::new(
                RpcStatusCode::NOT_FOUND,
                format!("volume {id} not found"),
            ));
        }
        Ok(dir)
    }

    // ---- controller ---------------------------------------------------------------------

    pub fn create_volume(
        &self,
        req: &proto::CreateVolumeRequest,
    ) -> Result<proto::CreateVolumeResponse> {
        let root = self.root()?;
        let name = &req.name;
        if name.is_empty()
            || name.len() > 128
            || name.starts_with('.')
            || name.contains(['/', '\0'])
        {
            return Err(Failure::invalid(format!(
                "volume name {name:?} must be one path component of at most 128 bytes, not starting with a dot"
            )));
        }
        if req.volume_capabilities.is_empty() {
            return Err(Failure::invalid("volume_capabilities is required".into()));
        }
        for cap in &req.volume_capabilities {
            check_capability(cap)?;
        }
        let (required, limit) = req
            .capacity_range
            .as_ref()
            .map_or((0, 0), |r| (r.required_bytes, r.limit_bytes));
        if required < 0 || limit < 0 {
            return Err(Failure::invalid(format!(
                "capacity_range must not be negative: required_bytes {required}, limit_bytes {limit}"
            )));
        }
        if limit > 0 && limit < required {
            return Err(Failure::new(
                RpcStatusCode::OUT_OF_RANGE,
                format!("limit_bytes {limit} is less than required_bytes {required}"),
            ));
        }
        let id = format!("{ID_PREFIX}{name}");
        let dir = root.join(&id);
        let meta = root.join(META_DIR).join(&id);
        let _guard = self.published.lock();
        if dir.is_dir() {
            let existing: i64 = fs::read_to_string(&meta)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            if (required > 0 && existing < required) || (limit > 0 && existing > limit) {
                return Err(Failure::new(
                    RpcStatusCode::ALREADY_EXISTS,
                    format!(
                        "volume {name} exists with a capacity of {existing} bytes, outside the requested range ({required} to {limit} bytes)"
                    ),
                ));
            }
            return Ok(created(id, &dir, existing));
        }
        let capacity = if required > 0 { required } else { limit };
        fs::DirBuilder::new()
            .mode(0o755)
            .create(&dir)
            .map_err(|e| Failure::internal(format!("cannot create {}: {e}", dir.display())))?;
        let tmp = meta.with_extension("tmp");
        fs::write(&tmp, capacity.to_string())
            .and_then(|()| fs::rename(&tmp, &meta))
            .map_err(|e| Failure::internal(format!("cannot record {}: {e}", meta.display())))?;
        eprintln!("csi-test-plugin: created volume {id} at {}", dir.display());
        Ok(created(id, &dir, capacity))
    }

    pub fn delete_volume(
        &self,
        req: &proto::DeleteVolumeRequest,
    ) -> Result<proto::DeleteVolumeResponse> {
        let root = self.root()?;
        let id = &req.volume_id;
        check_id(id)?;
        let published = self.published.lock();
        if let Some(targets) = published.get(id.as_str()).filter(|t| !t.is_empty()) {
            return Err(Failure::new(
                RpcStatusCode::FAILED_PRECONDITION,
                format!("volume {id} is still published at {}", join(targets)),
            ));
        }
        // Deleting what does not exist succeeds: the spec makes DeleteVolume idempotent.
        for (path, is_dir) in [(root.join(id), true), (root.join(META_DIR).join(id), false)] {
            let removed = if is_dir {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            match removed {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(Failure::internal(format!(
                        "cannot remove {}: {e}",
                        path.display()
                    )))
                }
                _ => {}
            }
        }
        eprintln!("csi-test-plugin: deleted volume {id}");
        Ok(proto::DeleteVolumeResponse {})
    }

    pub fn controller_publish(
        &self,
        req: &proto::ControllerPublishVolumeRequest,
    ) -> Result<proto::ControllerPublishVolumeResponse> {
        self.volume_dir(&req.volume_id)?;
        if req.node_id != NODE_ID {
            return Err(Failure::new(
                RpcStatusCode::NOT_FOUND,
                format!(
                    "node {:?} not found: this plugin serves {NODE_ID}",
                    req.node_id
                ),
            ));
        }
        let cap = req
            .volume_capability
            .as_ref()
            .ok_or_else(|| Failure::invalid("volume_capability is required".into()))?;
        check_capability(cap)?;
        let mut publish_context = BTreeMap::new();
        publish_context.insert("published-to".to_string(), NODE_ID.to_string());
        Ok(proto::ControllerPublishVolumeResponse { publish_context })
    }

    pub fn controller_unpublish(
        &self,
        req: &proto::ControllerUnpublishVolumeRequest,
    ) -> Result<proto::ControllerUnpublishVolumeResponse> {
        self.root()?;
        check_id(&req.volume_id)?;
        // Nothing is attached anywhere: the volume is a local directory.
        Ok(proto::ControllerUnpublishVolumeResponse {})
    }

    pub fn validate_capabilities(
        &self,
        req: &proto::ValidateVolumeCapabilitiesRequest,
    ) -> Result<proto::ValidateVolumeCapabilitiesResponse> {
        let dir = self.volume_dir(&req.volume_id)?;
        if let Some(err) = req
            .volume_capabilities
            .iter()
            .find_map(|c| check_capability(c).err())
        {
            return Ok(proto::ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message: err.message,
            });
        }
        Ok(proto::ValidateVolumeCapabilitiesResponse {
            confirmed: Some(proto::validate_volume_capabilities_response::Confirmed {
                volume_context: context(&dir),
                volume_capabilities: req.volume_capabilities.clone(),
                parameters: req.parameters.clone(),
            }),
            message: String::new(),
        })
    }

    // ---- node ---------------------------------------------------------------------------

    pub fn stage_volume(
        &self,
        req: &proto::NodeStageVolumeRequest,
    ) -> Result<proto::NodeStageVolumeResponse> {
        let dir = self.volume_dir(&req.volume_id)?;
        check_capability(
            req.volume_capability
                .as_ref()
                .ok_or_else(|| Failure::invalid("volume_capability is required".into()))?,
        )?;
        if self.stage == Stage::None {
            return Ok(proto::NodeStageVolumeResponse {});
        }
        let staging = absolute("staging_target_path", &req.staging_target_path)?;
        let _guard = self.published.lock();
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&staging)
            .map_err(|e| Failure::internal(format!("cannot create {}: {e}", staging.display())))?;
        if !is_mount_point(&staging) {
            bind_mount(&dir, &staging, false)?;
            eprintln!(
                "csi-test-plugin: staged {} at {}",
                req.volume_id,
                staging.display()
            );
        }
        Ok(proto::NodeStageVolumeResponse {})
    }

    pub fn unstage_volume(
        &self,
        req: &proto::NodeUnstageVolumeRequest,
    ) -> Result<proto::NodeUnstageVolumeResponse> {
        self.root()?;
        check_id(&req.volume_id)?;
        if self.stage == Stage::None {
            return Ok(proto::NodeUnstageVolumeResponse {});
        }
        let staging = absolute("staging_target_path", &req.staging_target_path)?;
        let _guard = self.published.lock();
        if is_mount_point(&staging) {
            unmount(&staging)?;
            eprintln!(
                "csi-test-plugin: unstaged {} from {}",
                req.volume_id,
                staging.display()
            );
        }
        Ok(proto::NodeUnstageVolumeResponse {})
    }

    pub fn publish_volume(
        &self,
        req: &proto::NodePublishVolumeRequest,
    ) -> Result<proto::NodePublishVolumeResponse> {
        let dir = self.volume_dir(&req.volume_id)?;
        let cap = req
            .volume_capability
            .as_ref()
            .ok_or_else(|| Failure::invalid("volume_capability is required".into()))?;
        check_capability(cap)?;
        let target = absolute("target_path", &req.target_path)?;
        let mut published = self.published.lock();
        let source = match self.stage {
            Stage::None => dir,
            Stage::Bind => {
                let staging = absolute("staging_target_path", &req.staging_target_path)?;
                if !is_mount_point(&staging) {
                    return Err(Failure::new(
                        RpcStatusCode::FAILED_PRECONDITION,
                        format!(
                            "volume {} is not staged at {}",
                            req.volume_id,
                            staging.display()
                        ),
                    ));
                }
                staging
            }
        };
        use volume_capability::access_mode::Mode;
        let mode = cap.access_mode.as_ref().map(|m| m.mode);
        let read_only = req.readonly
            || mode == Some(Mode::SingleNodeReaderOnly as i32)
            || mode == Some(Mode::MultiNodeReaderOnly as i32);
        // Creating the target is the plugin's part (CSI v1); its parent is the caller's.
        match fs::DirBuilder::new().mode(0o755).create(&target) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(Failure::internal(format!(
                    "cannot create the target path {}: {e}",
                    target.display()
                )))
            }
            _ => {}
        }
        if !is_mount_point(&target) {
            bind_mount(&source, &target, read_only)?;
            eprintln!(
                "csi-test-plugin: published {} at {}{}",
                req.volume_id,
                target.display(),
                if read_only { " (read-only)" } else { "" }
            );
        }
        published
            .entry(req.volume_id.clone())
            .or_default()
            .insert(target);
        Ok(proto::NodePublishVolumeResponse {})
    }

    pub fn unpublish_volume(
        &self,
        req: &proto::NodeUnpublishVolumeRequest,
    ) -> Result<proto::NodeUnpublishVolumeResponse> {
        self.root()?;
        check_id(&req.volume_id)?;
        let target = absolute("target_path", &req.target_path)?;
        let mut published = self.published.lock();
        if is_mount_point(&target) {
            unmount(&target)?;
        }
        match fs::remove_dir(&target) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(Failure::internal(format!(
                    "cannot remove the target path {}: {e}",
                    target.display()
                )))
            }
            _ => {}
        }
        if let Some(targets) = published.get_mut(req.volume_id.as_str()) {
            targets.remove(&target);
        }
        eprintln!(
            "csi-test-plugin: unpublished {} from {}",
            req.volume_id,
            target.display()
        );
        Ok(proto::NodeUnpublishVolumeResponse {})
    }

    pub fn volume_stats(
        &self,
        req: &proto::NodeGetVolumeStatsRequest,
    ) -> Result<proto::NodeGetVolumeStatsResponse> {
        self.volume_dir(&req.volume_id)?;
        let path = absolute("volume_path", &req.volume_path)?;
        let stat = statvfs(&path).map_err(|e| {
            let code = if e.kind() == io::ErrorKind::NotFound {
                RpcStatusCode::NOT_FOUND
            } else {
                RpcStatusCode::INTERNAL
            };
            Failure::new(code, format!("volume path {}: {e}", path.display()))
        })?;
        use proto::volume_usage::Unit;
        let frsize = stat.f_frsize as i64;
        let usage = vec![
            proto::VolumeUsage {
                available: stat.f_bavail as i64 * frsize,
                total: stat.f_blocks as i64 * frsize,
                used: (stat.f_blocks - stat.f_bfree) as i64 * frsize,
                unit: Unit::Bytes as i32,
            },
            proto::VolumeUsage {
                available: stat.f_favail as i64,
                total: stat.f_files as i64,
                used: (stat.f_files - stat.f_ffree) as i64,
                unit: Unit::Inodes as i32,
            },
        ];
        Ok(proto::NodeGetVolumeStatsResponse { usage })
    }
}

fn created(id: String, dir: &Path, capacity: i64) -> proto::CreateVolumeResponse {
    let mut segments = BTreeMap::new();
    segments.insert(TOPOLOGY_KEY.to_string(), NODE_ID.to_string());
    proto::CreateVolumeResponse {
        volume: Some(proto::Volume {
            capacity_bytes: capacity,
            volume_id: id,
            volume_context: context(dir),
            accessible_topology: vec![Topology { segments }],
        }),
    }
}

fn context(dir: &Path) -> BTreeMap<String, String> {
    let mut context = BTreeMap::new();
    context.insert("path".to_string(), dir.display().to_string());
    context
}

/// A volume ID this plugin could have made: `hp-` and one path component.
fn check_id(id: &str) -> Result<()> {
    let name = id.strip_prefix(ID_PREFIX).unwrap_or("");
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\0']) {
        return Err(Failure::new(
            RpcStatusCode::NOT_FOUND,
            format!("volume {id:?} not found: this plugin's volume IDs are {ID_PREFIX}<name>"),
        ));
    }
    Ok(())
}

/// The access type must be a mount (volumes are directories) and the access mode given.
fn check_capability(cap: &proto::VolumeCapability) -> Result<()> {
    use volume_capability::AccessType;
    if cap.access_mode.as_ref().is_none_or(|m| m.mode == 0) {
        return Err(Failure::invalid(
            "volume_capability.access_mode is required".into(),
        ));
    }
    match cap.access_type {
        Some(AccessType::Mount(_)) => Ok(()),
        Some(AccessType::Block(_)) => Err(Failure::invalid(
            "block volumes are not supported: this plugin's volumes are directories".into(),
        )),
        None => Err(Failure::invalid(
            "volume_capability.access_type is required".into(),
        )),
    }
}

fn absolute(field: &str, path: &str) -> Result<PathBuf> {
    if !path.starts_with('/') {
        return Err(Failure::invalid(format!(
            "{field} {path:?} must be an absolute path"
        )));
    }
    Ok(PathBuf::from(path))
}

fn join(paths: &BTreeSet<PathBuf>) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Failure::invalid(format!("path {} contains a NUL byte", path.display())))
}

/// Bind-mounts `source` at `target`, then makes it read-only when asked (a bind mount takes
/// `MS_RDONLY` only on a remount).
fn bind_mount(source: &Path, target: &Path, read_only: bool) -> Result<()> {
    let (src, dst) = (c_path(source)?, c_path(target)?);
    let failed = |what: &str| {
        Failure::internal(format!(
            "cannot {what} {} at {}: {}",
            source.display(),
            target.display(),
            io::Error::last_os_error()
        ))
    };
    // SAFETY: both paths are NUL-terminated strings that outlive the call; no file system type
    // or data is passed for a bind mount.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(failed("bind-mount"));
    }
    if read_only {
        let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
        // SAFETY: as above.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                dst.as_ptr(),
                std::ptr::null(),
                flags,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            let failure = failed("make read-only the bind mount of");
            let _ = unmount(target);
            return Err(failure);
        }
    }
    Ok(())
}

fn unmount(target: &Path) -> Result<()> {
    let dst = c_path(target)?;
    // SAFETY: a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(dst.as_ptr(), 0) } != 0 {
        return Err(Failure::internal(format!(
            "cannot unmount {}: {}",
            target.display(),
            io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Whether `path` is a mount point of this process's mount namespace (`/proc/self/mountinfo`).
fn is_mount_point(path: &Path) -> bool {
    let Ok(path) = fs::canonicalize(path) else {
        return false;
    };
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    info.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|mount_point| Path::new(&unescape(mount_point)) == path)
}

/// Undoes mountinfo's octal escapes (`\040` is a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn statvfs(path: &Path) -> io::Result<libc::statvfs> {
    let p = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: statvfs only writes into the struct it is given; zeroed is a valid statvfs.
    let mut out: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a pointer to a live statvfs.
    if unsafe { libc::statvfs(p.as_ptr(), &mut out) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(out)
}
