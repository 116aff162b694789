//! The calls about the driver rather than one machine's VM: GetVolumeIDs, CheckMachineClass and
//! the provider list. Apart because none of them reads or makes a VM.

use axum::extract::State;
use domain::machine::{ClassCheck, GetVolumeIdsRequest, GetVolumeIdsResponse, MachineRequest};
use service_kit::ApiError;
use service_kit::error::Problem;
use service_kit::extract::Json;

use super::AppState;
use super::checks::{body, driver_error, namespace_of, provider_for};
use super::metrics::observed;
use super::openapi::{PRECONDITION_ON_CREATE, machine_request_example};
use crate::provider::ProviderList;

/// GetVolumeIDs: the provider volume ids of the persistent volume specs some provider can map, in
/// the order of the specs; the others are skipped.
#[utoipa::path(
    post,
    path = "/v1/volume-ids",
    tag = "machines",
    request_body = GetVolumeIdsRequest,
    responses(
        (status = 200, description = "The ids", body = GetVolumeIdsResponse),
        (status = 400, description = "Bad request (code 3)", body = Problem),
    )
)]
pub(super) async fn get_volume_ids(
    State(state): State<AppState>,
    parsed: Result<Json<GetVolumeIdsRequest>, ApiError>,
) -> Result<Json<GetVolumeIdsResponse>, ApiError> {
    let req = body(parsed)?;
    observed("GetVolumeIDs", "*", state.providers.get_volume_ids(&req)).await
}

/// CheckMachineClass (Berth's own, not MCM's): whether a class and its secret pass every check
/// CreateMachine makes before it calls the cloud or the Engine — the spec's fields (400) and what
/// this driver's operator allows (412) — with the machine in the body standing for any machine of
/// the class. The machine controller asks it when a class is written, so a stored class is held to
/// the driver's own rules. It reads nothing and makes nothing.
#[utoipa::path(
    post,
    path = "/v1/machineclasses:check",
    tag = "machines",
    request_body(content = MachineRequest, description = "A machine of the class, the class and its secret", example = machine_request_example),
    responses(
        (status = 200, description = "The class and secret pass CreateMachine's checks", body = ClassCheck),
        (status = 400, description = "Unknown provider, bad spec field or missing secret key (code 3), naming it", body = Problem),
        (status = 412, description = PRECONDITION_ON_CREATE, body = Problem),
    )
)]
pub(super) async fn check_machine_class(
    State(state): State<AppState>,
    parsed: Result<Json<MachineRequest>, ApiError>,
) -> Result<Json<ClassCheck>, ApiError> {
    let req = body(parsed)?;
    let provider = provider_for(&state, &req.machine_class)?;
    namespace_of(&req)?;
    provider.check_create(&req).map_err(driver_error)?;
    Ok(Json(ClassCheck {
        provider: provider.name().to_string(),
    }))
}

/// The provider plugins this driver has (what `machineClass.provider` may name).
#[utoipa::path(
    get,
    path = "/v1/providers",
    tag = "providers",
    responses((status = 200, description = "The providers, sorted by name", body = ProviderList))
)]
pub(super) async fn list_providers(State(state): State<AppState>) -> Json<ProviderList> {
    Json(state.providers.list())
}
