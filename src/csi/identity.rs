//! The Identity service: who the plugin is and whether it is ready.

use tonic::{Request, Response, Status};

use super::proto::identity_server::Identity;
use super::proto::plugin_capability::{Service, Type as CapabilityType, service::Type};
use super::proto::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, PluginCapability, ProbeRequest, ProbeResponse,
};

pub struct IdentityService {
    pub driver_name: String,
    /// Report CONTROLLER_SERVICE: this is the provisioning controller, or a node plugin of a
    /// deployment that runs one (instances of a plugin answer alike).
    pub controller_service: bool,
}

/// A CSI driver name: `^[a-zA-Z][A-Za-z0-9-._]{0,61}[a-zA-Z]$` (at most 63 characters, DNS-like).
pub fn check_driver_name(name: &str) -> Result<(), String> {
    let bytes = name.as_bytes();
    let ok = (2..=63).contains(&bytes.len())
        && bytes[0].is_ascii_alphabetic()
        && bytes[bytes.len() - 1].is_ascii_alphabetic()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "driver name {name:?} is not valid: 2 to 63 letters, digits, '-', '.' or '_', \
             starting and ending with a letter"
        ))
    }
}

#[tonic::async_trait]
impl Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _request: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        Ok(Response::new(GetPluginInfoResponse {
            name: self.driver_name.clone(),
            vendor_version: env!("CARGO_PKG_VERSION").to_string(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _request: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        // A node plugin alone has a capabilities-only controller: no CONTROLLER_SERVICE, so
        // the CO never expects provisioning or attach from it.
        let capabilities = if self.controller_service {
            vec![PluginCapability {
                r#type: Some(CapabilityType::Service(Service {
                    r#type: Type::ControllerService as i32,
                })),
            }]
        } else {
            Vec::new()
        };
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities,
        }))
    }

    async fn probe(
        &self,
        _request: Request<ProbeRequest>,
    ) -> Result<Response<ProbeResponse>, Status> {
        // The socket is bound only once the engines are built, so an answer means ready.
        Ok(Response::new(ProbeResponse { ready: Some(true) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_names_follow_the_csi_rule() {
        assert!(check_driver_name("msfs.csi.nvidia.com").is_ok());
        for bad in ["", "m", "1msfs", "msfs.", "ms fs", &"a".repeat(64)] {
            assert!(check_driver_name(bad).is_err(), "{bad:?}");
        }
    }
}
