//! The machine-driver API (service `machine-driver`, docs/design.md, “Machine driver API”).
//!
//! | method | route |
//! |---|---|
//! | [`Client::create`] | `POST /v1/machines:create` |
//! | [`Client::initialize`] | `POST /v1/machines:initialize` |
//! | [`Client::delete`] | `POST /v1/machines:delete` |
//! | [`Client::status`] | `POST /v1/machines:status` |
//! | [`Client::list`] | `POST /v1/machines:list` |
//! | [`Client::volume_ids`] | `POST /v1/volume-ids` |
//! | [`Client::providers`] | `GET /v1/providers` |
//! | [`Client::check_class`] | `POST /v1/machineclasses:check` |
//!
//! Errors come back as [`ClientError`] whose `status` is the driver's machine code and message, as
//! MCM's `status.FromError` would read them from `machineCodesError`.

use domain::machine::{
    ClassCheck, CreateMachineResponse, DeleteMachineResponse, GetMachineStatusResponse,
    GetVolumeIdsRequest, GetVolumeIdsResponse, InitializeMachineResponse, ListMachinesRequest,
    ListMachinesResponse, MachineRequest, PersistentVolumeSpec,
};
use reqwest::Method;
use serde::Serialize;

use crate::{ApiClient, ClientError};

pub use domain::machine::{ProviderInfo, ProviderList};

/// A typed client of this API.
pub type Client = ApiClient<MachineDriverApi>;

/// Names the machine-driver API in [`ApiClient`]'s type; never made.
#[derive(Debug)]
pub enum MachineDriverApi {}

impl Client {
    /// CreateMachine: creates the VM backing `req.machine`, or adopts the one that already does.
    /// Safe to call again after any failure, including a lost answer.
    pub async fn create(&self, req: &MachineRequest) -> Result<CreateMachineResponse, ClientError> {
        self.post("/v1/machines:create", req).await
    }

    /// InitializeMachine; [`domain::Code::Uninitialized`] while the VM is not ready yet.
    pub async fn initialize(
        &self,
        req: &MachineRequest,
    ) -> Result<InitializeMachineResponse, ClientError> {
        self.post("/v1/machines:initialize", req).await
    }

    /// DeleteMachine; succeeds when no VM backs the machine.
    pub async fn delete(&self, req: &MachineRequest) -> Result<DeleteMachineResponse, ClientError> {
        self.post("/v1/machines:delete", req).await
    }

    /// GetMachineStatus; [`domain::Code::NotFound`] when no VM backs the machine,
    /// [`domain::Code::OutOfRange`] when several do.
    pub async fn status(
        &self,
        req: &MachineRequest,
    ) -> Result<GetMachineStatusResponse, ClientError> {
        self.post("/v1/machines:status", req).await
    }

    /// GetMachineStatus, with an Uninitialized (17) answer read as a status too: its body carries the
    /// VM's providerID, node name, addresses and conditions, as MCM reads them before it calls
    /// InitializeMachine. The flag says whether the VM is initialised.
    pub async fn status_even_uninitialized(
        &self,
        req: &MachineRequest,
    ) -> Result<(GetMachineStatusResponse, bool), ClientError> {
        let response = self
            .inner
            .call_any(Method::POST, "/v1/machines:status", Some(req))
            .await?;
        if response.status().is_success() {
            let status = response
                .json()
                .await
                .map_err(|e| ClientError::transport(&e, self.inner.base_url()))?;
            return Ok((status, true));
        }
        if response.status() != reqwest::StatusCode::CONFLICT {
            return Err(crate::decode_error(response).await);
        }
        // A 409 is read twice (as a problem and as a status), so its bytes are kept.
        let headers = response.headers().clone();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ClientError::transport(&e, self.inner.base_url()))?;
        let problem_code = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("code").and_then(serde_json::Value::as_u64));
        if problem_code == Some(domain::Code::Uninitialized as u64)
            && let Ok(status) = serde_json::from_slice::<GetMachineStatusResponse>(&bytes)
        {
            return Ok((status, false));
        }
        let mut rebuilt = http::Response::new(bytes);
        *rebuilt.status_mut() = http::StatusCode::CONFLICT;
        *rebuilt.headers_mut() = headers;
        Err(crate::decode_error(reqwest::Response::from(rebuilt)).await)
    }

    /// ListMachines: provider id → machine name for every VM of the class.
    pub async fn list(
        &self,
        req: &ListMachinesRequest,
    ) -> Result<ListMachinesResponse, ClientError> {
        self.post("/v1/machines:list", req).await
    }

    /// GetVolumeIDs: the volume ids of the specs a provider can map, in order.
    pub async fn volume_ids(
        &self,
        pv_specs: &[PersistentVolumeSpec],
    ) -> Result<Vec<String>, ClientError> {
        let req = GetVolumeIdsRequest {
            pv_specs: pv_specs.to_vec(),
        };
        let answer: GetVolumeIdsResponse = self.post("/v1/volume-ids", &req).await?;
        Ok(answer.volume_ids)
    }

    /// CheckMachineClass: whether `req`'s class and secret pass CreateMachine's checks.
    pub async fn check_class(&self, req: &MachineRequest) -> Result<ClassCheck, ClientError> {
        self.post("/v1/machineclasses:check", req).await
    }

    /// The provider plugins the driver has.
    pub async fn providers(&self) -> Result<ProviderList, ClientError> {
        self.inner.get("/v1/providers").await
    }

    async fn post<B: Serialize, T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.inner.json(Method::POST, path, Some(body)).await
    }
}
