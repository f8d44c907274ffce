//! The Node service: publish and unpublish volumes, answer capabilities, info and stats.
//! Requests are checked in `request`, volumes kept in `volumes`; this only translates.

use std::path::PathBuf;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::error::CsiError;
use super::proto::node_server::Node;
use super::proto::node_service_capability::{Rpc, rpc};
use super::proto::volume_usage::Unit;
use super::proto::{
    NodeGetCapabilitiesRequest, NodeGetCapabilitiesResponse, NodeGetInfoRequest,
    NodeGetInfoResponse, NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse,
    NodePublishVolumeRequest, NodePublishVolumeResponse, NodeServiceCapability,
    NodeUnpublishVolumeRequest, NodeUnpublishVolumeResponse, VolumeCondition, VolumeUsage,
    node_service_capability,
};
use super::request::{check_target, check_volume_id, publish_args};
use super::volumes::Volumes;

pub struct NodeService {
    pub node_id: String,
    pub max_volumes: i64,
    /// `<kubelet dir>/pods`: every target lies below it.
    pub pods_dir: PathBuf,
    pub volumes: Arc<Volumes>,
}

fn capability(kind: rpc::Type) -> NodeServiceCapability {
    NodeServiceCapability {
        r#type: Some(node_service_capability::Type::Rpc(Rpc {
            r#type: kind as i32,
        })),
    }
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn node_publish_volume(
        &self,
        request: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        let request = request.into_inner();
        let args = publish_args(&request, &self.pods_dir).inspect_err(|e| {
            tracing::warn!(volume_id = %request.volume_id, error = %e, "NodePublishVolume refused");
        })?;
        self.volumes
            .publish(args, &request.secrets, &request.volume_context)
            .await
            .inspect_err(|e| {
                tracing::warn!(volume_id = %request.volume_id, error = %e,
                    "NodePublishVolume failed");
            })?;
        Ok(Response::new(NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        let request = request.into_inner();
        check_volume_id(&request.volume_id)?;
        let target = check_target("target_path", &request.target_path, &self.pods_dir)?;
        self.volumes.unpublish(&request.volume_id, &target).await?;
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_capabilities(
        &self,
        _request: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        Ok(Response::new(NodeGetCapabilitiesResponse {
            capabilities: vec![
                capability(rpc::Type::GetVolumeStats),
                capability(rpc::Type::VolumeCondition),
                capability(rpc::Type::VolumeMountGroup),
                // SINGLE_NODE_SINGLE_WRITER and SINGLE_NODE_MULTI_WRITER are understood.
                capability(rpc::Type::SingleNodeMultiWriter),
            ],
        }))
    }

    async fn node_get_info(
        &self,
        _request: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        Ok(Response::new(NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: self.max_volumes,
            accessible_topology: None,
        }))
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        let request = request.into_inner();
        check_volume_id(&request.volume_id)?;
        if request.volume_path.is_empty() {
            return Err(CsiError::invalid("volume_path", "required").into());
        }
        let path = PathBuf::from(&request.volume_path);
        if !self.volumes.is_published(&request.volume_id, &path) {
            return Err(CsiError::NotFound(format!(
                "volume {} is not published at {} on this node",
                request.volume_id,
                path.display()
            ))
            .into());
        }
        let stats = tokio::task::spawn_blocking(move || statvfs(&path))
            .await
            .map_err(|e| Status::internal(format!("stats task: {e}")))?;
        let response = match stats {
            Ok(s) => NodeGetVolumeStatsResponse {
                usage: vec![
                    VolumeUsage {
                        available: s.bytes_available,
                        total: s.bytes_total,
                        used: s.bytes_total - s.bytes_available,
                        unit: Unit::Bytes as i32,
                    },
                    VolumeUsage {
                        available: s.inodes_available,
                        total: s.inodes_total,
                        used: s.inodes_total - s.inodes_available,
                        unit: Unit::Inodes as i32,
                    },
                ],
                volume_condition: Some(VolumeCondition {
                    abnormal: false,
                    message: "mounted".into(),
                }),
            },
            Err(e) => NodeGetVolumeStatsResponse {
                usage: Vec::new(),
                volume_condition: Some(VolumeCondition {
                    abnormal: true,
                    message: format!("the mount does not answer: {e}"),
                }),
            },
        };
        Ok(Response::new(response))
    }
}

struct Stats {
    bytes_total: i64,
    bytes_available: i64,
    inodes_total: i64,
    inodes_available: i64,
}

fn statvfs(path: &std::path::Path) -> std::io::Result<Stats> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: statvfs is plain old data; zeroed is a valid value that the call overwrites.
    let mut out: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is NUL-terminated and `out` is a valid, writable statvfs.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut out) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let frsize = out.f_frsize;
    Ok(Stats {
        bytes_total: clamp(out.f_blocks.saturating_mul(frsize)),
        bytes_available: clamp(out.f_bavail.saturating_mul(frsize)),
        inodes_total: clamp(out.f_files),
        inodes_available: clamp(out.f_favail),
    })
}
