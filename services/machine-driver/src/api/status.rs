//! GetMachineStatus and its 409 answer, which carries the VM when it is Uninitialized (code 17):
//! apart because that answer is shaped for MCM's creation flow, unlike every other call's.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use domain::machine::{Condition, GetMachineStatusResponse, MachineRequest, NodeAddress};
use domain::{Code, Status};
use serde::Serialize;
use service_kit::ApiError;
use service_kit::error::{PROBLEM_JSON, Problem};
use service_kit::extract::Json;
use service_kit::tenancy::Caller;

use super::AppState;
use super::checks::{body, hidden, namespace_of, provider_for};
use super::metrics::observed;
use super::openapi::{PRECONDITION, machine_request_example};
use crate::provider::INITIALIZED_CONDITION;

/// GetMachineStatus's 409 answer: a problem, plus, for Uninitialized (code 17), the VM it is about
/// as a 200 would describe it. MCM's creation flow takes providerID and nodeName from the response
/// that comes with code 17, then calls InitializeMachine; without them it stops with "nodeName or
/// providerID is empty after creation flow".
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusProblem {
    /// The problem (code 11 or 17).
    #[serde(flatten)]
    pub problem: Problem,
    /// Code 17: the cloud's id of the VM.
    #[serde(rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// Code 17: the node name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Code 17: the VM's addresses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<NodeAddress>>,
    /// Code 17: the VM's conditions, the `Initialized` one `False`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// GetMachineStatus's error answer: a plain problem, or Uninitialized with the VM.
#[derive(Debug)]
pub(super) enum StatusAnswerError {
    Plain(ApiError),
    Uninitialized {
        error: ApiError,
        machine: GetMachineStatusResponse,
    },
}

impl From<ApiError> for StatusAnswerError {
    fn from(e: ApiError) -> Self {
        StatusAnswerError::Plain(e)
    }
}

impl IntoResponse for StatusAnswerError {
    fn into_response(self) -> Response {
        let (error, machine) = match self {
            StatusAnswerError::Plain(e) => return e.into_response(),
            StatusAnswerError::Uninitialized { error, machine } => (error, machine),
        };
        tracing::debug!(code = %error.status().code, message = %error.status().message, "VM not initialised");
        let request_id = service_kit::request_id::current().unwrap_or_default();
        let body = StatusProblem {
            problem: error.problem(&request_id),
            provider_id: Some(machine.provider_id),
            node_name: Some(machine.node_name),
            addresses: Some(machine.addresses),
            conditions: Some(machine.conditions),
        };
        let mut response = (
            error.http_status(),
            serde_json::to_vec(&body).unwrap_or_default(),
        )
            .into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        response
    }
}

/// The Uninitialized status a VM's [`INITIALIZED_CONDITION`] `False` stands for, if it has one.
fn not_initialized(vm: &GetMachineStatusResponse) -> Option<Status> {
    let c = vm
        .conditions
        .iter()
        .find(|c| c.kind == INITIALIZED_CONDITION && c.status == "False")?;
    let message = if c.message.is_empty() {
        format!("VM {} exists but is not initialised", vm.provider_id)
    } else {
        c.message.clone()
    };
    Some(Status::new(Code::Uninitialized, message))
}

/// GetMachineStatus: the VM backing the machine, its addresses and its cloud status. A VM that
/// exists but is not initialised yet is Uninitialized (code 17), carrying the VM, so MCM calls
/// InitializeMachine.
#[utoipa::path(
    post,
    path = "/v1/machines:status",
    tag = "machines",
    request_body(content = MachineRequest, description = "The machine, its class and the secret (see CreateMachine's example)", example = machine_request_example),
    responses(
        (status = 200, description = "The VM, initialised", body = GetMachineStatusResponse),
        (status = 400, description = "Bad request (code 3)", body = Problem),
        (status = 401, description = "The cloud refused the credentials (code 16)", body = Problem),
        (status = 404, description = "No VM backs the machine, or it is in a namespace the caller may not see (code 5)", body = Problem),
        (status = 412, description = PRECONDITION, body = Problem),
        (status = 503, description = "The cloud or the Docker Engine is unavailable; retry (code 14)", body = Problem),
        (status = 409, description = "Several VMs back the machine (code 11), or the VM exists but is not initialised yet (code 17; the answer then also carries its providerID, nodeName, addresses and conditions, and InitializeMachine is the next call)", body = StatusProblem),
    )
)]
pub(super) async fn get_machine_status(
    State(state): State<AppState>,
    caller: Caller,
    parsed: Result<Json<MachineRequest>, ApiError>,
) -> Result<Json<GetMachineStatusResponse>, StatusAnswerError> {
    let req = body(parsed)?;
    let provider = provider_for(&state, &req.machine_class)?;
    let namespace = namespace_of(&req)?;
    if hidden(&caller, &req, namespace)? {
        let name = &req.machine.metadata.name;
        return Ok(observed("GetMachineStatus", provider.name(), async {
            Err(provider.missing(name))
        })
        .await?);
    }
    let mut uninitialized_vm = None;
    let answer = observed("GetMachineStatus", provider.name(), async {
        let vm = provider.get_machine_status(&req).await?;
        match not_initialized(&vm) {
            Some(status) => {
                uninitialized_vm = Some(vm);
                Err(status)
            }
            None => Ok(vm),
        }
    })
    .await;
    match (answer, uninitialized_vm) {
        (Err(error), Some(machine)) => Err(StatusAnswerError::Uninitialized { error, machine }),
        (answer, _) => answer.map_err(StatusAnswerError::Plain),
    }
}
