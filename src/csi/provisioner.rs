//! The Controller service of `msfs csi --controller`: CreateVolume gives each claim its own
//! prefix, DeleteVolume empties it, ValidateVolumeCapabilities answers for both. Every other
//! controller RPC is UNIMPLEMENTED, as CSI asks of a plugin without their capabilities.
//!
//! The controller keeps no state of its own: a volume's location travels in its id (see
//! `volume_id`) and what it was created with in its record in the bucket (see
//! `volume_store`), so any replica, or the next one after a crash, answers the same.

use std::collections::HashMap;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::credentials::{Keys, secret_keys};
use super::error::CsiError;
use super::parameters::{self, NewVolume};
use super::proto::controller_server::Controller;
use super::proto::controller_service_capability::{Rpc, Type as CapabilityType, rpc::Type};
use super::proto::validate_volume_capabilities_response::Confirmed;
use super::proto::{
    CapacityRange, ControllerGetCapabilitiesRequest, ControllerGetCapabilitiesResponse,
    ControllerServiceCapability, CreateVolumeRequest, CreateVolumeResponse, DeleteVolumeRequest,
    DeleteVolumeResponse, ValidateVolumeCapabilitiesRequest, ValidateVolumeCapabilitiesResponse,
    Volume, VolumeCapability,
};
use super::volume_id::VolumeLocation;
use super::volume_store::{self, VolumeRecord};
use crate::config::BackendConfig;
use crate::store::{ObjectStore, RetryBudget, StoreError, open_store};

pub struct ProvisionerService {
    /// Shared by every store the controller opens, as the node's stores share theirs.
    retry_budget: Arc<RetryBudget>,
}

impl ProvisionerService {
    pub fn new() -> ProvisionerService {
        ProvisionerService {
            retry_budget: Arc::default(),
        }
    }

    async fn open(&self, backend: &BackendConfig) -> Result<Arc<dyn ObjectStore>, CsiError> {
        open_store(backend, &self.retry_budget)
            .await
            .map_err(|e| store_error(backend, e))
    }

    async fn create(&self, request: CreateVolumeRequest) -> Result<Volume, CsiError> {
        let capacity = capacity_bytes(request.capacity_range.as_ref())?;
        check_capabilities(&request.volume_capabilities)?;
        if request.volume_content_source.is_some() {
            return Err(CsiError::invalid(
                "volume_content_source",
                "msfs volumes start empty: neither snapshots nor clones are supported",
            ));
        }
        let NewVolume {
            id,
            location,
            context,
        } = parameters::new_volume(&request.name, &request.parameters)?;
        let keys = controller_keys(&request.secrets)?;
        let backend = parameters::location_backend(&location, &keys)?;
        let store = self.open(&backend).await?;
        let wanted = VolumeRecord {
            name: request.name.clone(),
            volume_id: id.clone(),
            capacity_bytes: capacity,
            context: context.clone(),
        };
        match volume_store::read_record(store.as_ref(), &location)
            .await
            .map_err(|e| store_error(&backend, e))?
        {
            Some(existing) if existing == wanted => {
                tracing::info!(name = %request.name, volume_id = %id, "volume exists already");
            }
            Some(existing) => {
                return Err(CsiError::AlreadyExists(format!(
                    "volume {:?} exists with other parameters or capacity (its prefix {} in \
                     bucket {} was created for {:?}, {} bytes)",
                    request.name,
                    location.prefix,
                    location.bucket,
                    existing.name,
                    existing.capacity_bytes
                )));
            }
            None => {
                volume_store::write_record(store.as_ref(), &location, &wanted)
                    .await
                    .map_err(|e| store_error(&backend, e))?;
                tracing::info!(name = %request.name, volume_id = %id, bucket = %location.bucket,
                    prefix = %location.prefix, "volume created");
            }
        }
        Ok(Volume {
            capacity_bytes: capacity,
            volume_id: id,
            volume_context: context.into_iter().collect(),
            ..Default::default()
        })
    }

    async fn delete(&self, request: DeleteVolumeRequest) -> Result<(), CsiError> {
        if request.volume_id.is_empty() {
            return Err(CsiError::invalid("volume_id", "required"));
        }
        // Not one of ours (a static PersistentVolume's, or garbage): nothing to delete.
        let Some(location) = VolumeLocation::decode(&request.volume_id) else {
            tracing::info!(volume_id = %request.volume_id, "not a provisioned volume: nothing to delete");
            return Ok(());
        };
        let keys = controller_keys(&request.secrets)?;
        let backend = parameters::location_backend(&location, &keys)?;
        let store = self.open(&backend).await?;
        match volume_store::delete_volume(store, &location).await {
            Ok(emptied) => {
                tracing::info!(volume_id = %request.volume_id, objects = emptied.objects,
                    uploads = emptied.uploads, kept = location.keep_data, "volume deleted");
                Ok(())
            }
            // The bucket went with everything in it.
            Err(StoreError::NoSuchBucket { .. }) => Ok(()),
            Err(e) => Err(store_error(&backend, e)),
        }
    }

    async fn validate(
        &self,
        request: ValidateVolumeCapabilitiesRequest,
    ) -> Result<ValidateVolumeCapabilitiesResponse, CsiError> {
        if request.volume_id.is_empty() {
            return Err(CsiError::invalid("volume_id", "required"));
        }
        if request.volume_capabilities.is_empty() {
            return Err(CsiError::invalid("volume_capabilities", "required"));
        }
        let unknown = || CsiError::NotFound(format!("volume {} does not exist", request.volume_id));
        let location = VolumeLocation::decode(&request.volume_id).ok_or_else(unknown)?;
        let keys = controller_keys(&request.secrets)?;
        let backend = parameters::location_backend(&location, &keys)?;
        let store = self.open(&backend).await?;
        let record = match volume_store::read_record(store.as_ref(), &location).await {
            Ok(Some(record)) if record.volume_id == request.volume_id => record,
            Ok(_) | Err(StoreError::NoSuchBucket { .. }) => return Err(unknown()),
            Err(e) => return Err(store_error(&backend, e)),
        };
        let context_matches = request
            .volume_context
            .iter()
            .filter(|(k, _)| !k.contains('/'))
            .all(|(k, v)| record.context.get(k) == Some(v));
        let response = match check_capabilities(&request.volume_capabilities) {
            Ok(()) if context_matches => ValidateVolumeCapabilitiesResponse {
                confirmed: Some(Confirmed {
                    volume_context: request.volume_context,
                    volume_capabilities: request.volume_capabilities,
                    parameters: request.parameters,
                    mutable_parameters: HashMap::new(),
                }),
                message: String::new(),
            },
            Ok(()) => ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message: "the volume context is not the one the volume was created with".into(),
            },
            Err(e) => ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message: e.to_string(),
            },
        };
        Ok(response)
    }
}

/// What the controller signs with: the keys of the request's secrets (the StorageClass's
/// provisioner secret, with the node publish secret's keys), else its own AWS chain.
fn controller_keys(secrets: &HashMap<String, String>) -> Result<Keys, CsiError> {
    if secrets.is_empty() {
        return Ok(Keys::DefaultChain);
    }
    secret_keys(secrets).map(Keys::Static).map_err(|_| {
        CsiError::invalid(
            "secrets",
            "the provisioner secret needs access_key_id and secret_access_key (or key_id \
             and access_key); without a secret the controller uses its own AWS credentials",
        )
    })
}

/// A store failure, addressed to the bucket; a missing bucket is the StorageClass's fault.
fn store_error(backend: &BackendConfig, error: StoreError) -> CsiError {
    match error {
        StoreError::NoSuchBucket { bucket } => {
            CsiError::invalid("bucketName", format!("bucket {bucket:?} does not exist"))
        }
        StoreError::RetriesExhausted { last, .. }
            if matches!(*last, StoreError::NoSuchBucket { .. }) =>
        {
            store_error(backend, *last)
        }
        source => CsiError::Backend {
            dir_name: format!("bucket {}", backend.bucket),
            source,
        },
    }
}

/// What the volume reports as its capacity. S3 enforces none: it is the size asked for (the
/// required bytes, else the limit), recorded and reported, not a quota; 0 when nothing was
/// asked, which CSI reads as "unknown".
fn capacity_bytes(range: Option<&CapacityRange>) -> Result<i64, CsiError> {
    let Some(range) = range else {
        return Ok(0);
    };
    if range.required_bytes < 0 || range.limit_bytes < 0 {
        return Err(CsiError::invalid(
            "capacity_range",
            "required_bytes and limit_bytes must not be negative",
        ));
    }
    if range.limit_bytes > 0 && range.required_bytes > range.limit_bytes {
        return Err(CsiError::invalid(
            "capacity_range",
            format!(
                "required_bytes {} exceeds limit_bytes {}",
                range.required_bytes, range.limit_bytes
            ),
        ));
    }
    Ok(if range.required_bytes > 0 {
        range.required_bytes
    } else {
        range.limit_bytes
    })
}

/// Every capability must be a mount (a filesystem) with an access mode; every mode is served,
/// as the node publishes any.
fn check_capabilities(capabilities: &[VolumeCapability]) -> Result<(), CsiError> {
    if capabilities.is_empty() {
        return Err(CsiError::invalid("volume_capabilities", "required"));
    }
    for capability in capabilities {
        super::request::check_capability("volume_capabilities", capability)?;
    }
    Ok(())
}

#[tonic::async_trait]
impl Controller for ProvisionerService {
    async fn create_volume(
        &self,
        request: Request<CreateVolumeRequest>,
    ) -> Result<Response<CreateVolumeResponse>, Status> {
        let volume = self.create(request.into_inner()).await?;
        Ok(Response::new(CreateVolumeResponse {
            volume: Some(volume),
        }))
    }

    async fn delete_volume(
        &self,
        request: Request<DeleteVolumeRequest>,
    ) -> Result<Response<DeleteVolumeResponse>, Status> {
        self.delete(request.into_inner()).await?;
        Ok(Response::new(DeleteVolumeResponse {}))
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<ValidateVolumeCapabilitiesResponse>, Status> {
        Ok(Response::new(self.validate(request.into_inner()).await?))
    }

    async fn controller_get_capabilities(
        &self,
        _request: Request<ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<ControllerGetCapabilitiesResponse>, Status> {
        let create_delete = ControllerServiceCapability {
            r#type: Some(CapabilityType::Rpc(Rpc {
                r#type: Type::CreateDeleteVolume as i32,
            })),
        };
        Ok(Response::new(ControllerGetCapabilitiesResponse {
            capabilities: vec![create_delete],
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_what_was_asked_for_and_checked() {
        let range = |required_bytes, limit_bytes| CapacityRange {
            required_bytes,
            limit_bytes,
        };
        assert_eq!(capacity_bytes(None).expect("none"), 0);
        assert_eq!(capacity_bytes(Some(&range(5, 0))).expect("required"), 5);
        assert_eq!(capacity_bytes(Some(&range(0, 9))).expect("limit"), 9);
        assert_eq!(capacity_bytes(Some(&range(5, 9))).expect("both"), 5);
        for bad in [range(9, 5), range(-1, 0), range(0, -1)] {
            let error = capacity_bytes(Some(&bad)).expect_err("refused").to_string();
            assert!(error.starts_with("capacity_range: "), "{error}");
        }
    }
}
