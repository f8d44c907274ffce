//! A capabilities-only Controller service, so that conformance suites and tools that probe it
//! get an answer. Volumes are provisioned statically; every other RPC is UNIMPLEMENTED.

use tonic::{Request, Response, Status};

use super::proto::controller_server::Controller;
use super::proto::{ControllerGetCapabilitiesRequest, ControllerGetCapabilitiesResponse};

pub struct ControllerService;

#[tonic::async_trait]
impl Controller for ControllerService {
    async fn controller_get_capabilities(
        &self,
        _request: Request<ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<ControllerGetCapabilitiesResponse>, Status> {
        Ok(Response::new(ControllerGetCapabilitiesResponse {
            capabilities: Vec::new(),
        }))
    }
}
