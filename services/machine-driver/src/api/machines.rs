//! The calls on machines' VMs that answer plainly: CreateMachine, InitializeMachine,
//! DeleteMachine and ListMachines. Apart from GetMachineStatus, whose answer has a shape of its
//! own, and from the calls about the driver itself.

use axum::extract::State;
use domain::machine::{
    CreateMachineResponse, DeleteMachineResponse, InitializeMachineResponse, ListMachinesRequest,
    ListMachinesResponse, MachineRequest,
};
use domain::{Code, Status};

use service_kit::ApiError;
use service_kit::error::Problem;
use service_kit::extract::Json;
use service_kit::tenancy::Caller;

use super::AppState;
use super::checks::{body, check_machine_quota, hidden, namespace_of, provider_for};
use super::metrics::observed;
use super::openapi::{
    PRECONDITION, PRECONDITION_ON_CREATE, list_request_example, machine_request_example,
};

/// CreateMachine: makes the VM backing `machine` from `machineClass`, or adopts the one that already
/// does, so a retry never makes a second VM. One name is one VM: when the name's VM was made for
/// another machine (another UID, or another namespace), the answer is AlreadyExists saying only that
/// the name is taken.
#[utoipa::path(
    post,
    path = "/v1/machines:create",
    tag = "machines",
    request_body(
        content = MachineRequest,
        description = "The machine, its class and the secret. The example is for the Alicloud provider against `berth up`'s ECS emulator: put the emulator access key `berth up` prints in place of the two placeholders (the driver refuses them as they are)",
        example = machine_request_example
    ),
    responses(
        (status = 200, description = "The VM exists (created now or adopted)", body = CreateMachineResponse),
        (status = 400, description = "Unknown provider, bad spec field (a region outside ECS's region-id grammar included), bad providerID or UID, or missing secret key (code 3), naming it", body = Problem),
        (status = 401, description = "The cloud refused the credentials (code 16)", body = Problem),
        (status = 403, description = "The caller may not act in machine.metadata.namespace (code 7)", body = Problem),
        (status = 409, description = "The machine name is taken by another machine's VM (code 6; it says only that), or several VMs without a recorded owner carry the name (code 11)", body = Problem),
        (status = 412, description = PRECONDITION_ON_CREATE, body = Problem),
        (status = 429, description = "The namespace has as many machines as the operator's quota (BERTH_QUOTA_MACHINES) allows, or no capacity or quota in the zone (code 8)", body = Problem),
        (status = 503, description = "The cloud or the Docker Engine is throttling or unavailable, or the machine's VM was requested with other parameters and is not listed yet; retry (code 14)", body = Problem),
    )
)]
pub(super) async fn create_machine(
    State(state): State<AppState>,
    caller: Caller,
    parsed: Result<Json<MachineRequest>, ApiError>,
) -> Result<Json<CreateMachineResponse>, ApiError> {
    let req = body(parsed)?;
    let provider = provider_for(&state, &req.machine_class)?;
    let namespace = namespace_of(&req)?;
    caller.audit_object(format!("{namespace}/{}", req.machine.metadata.name));
    // The caller named the namespace, so saying it may not act there tells it nothing new (as
    // storage-ops answers AddStorage, and the controller a create); the calls that look a machine
    // up answer one there as missing.
    if hidden(&caller, &req, namespace)? {
        return observed("CreateMachine", provider.name(), async {
            Err(Status::new(
                Code::PermissionDenied,
                format!(
                    "machine.metadata.namespace: the token may not act in namespace {namespace:?}"
                ),
            ))
        })
        .await;
    }
    observed("CreateMachine", provider.name(), async {
        let Some(limit) = state.quota_machines else {
            return provider.create_machine(&req).await;
        };
        // A request with something wrong in it is told so, not to delete a machine.
        provider.check_create(&req)?;
        let lock = state.create_lock(namespace);
        let _held = lock.lock().await;
        check_machine_quota(provider.as_ref(), &req, namespace, limit).await?;
        provider.create_machine(&req).await
    })
    .await
}

/// InitializeMachine: the step after creation; Uninitialized (code 17) until it can complete.
#[utoipa::path(
    post,
    path = "/v1/machines:initialize",
    tag = "machines",
    request_body(content = MachineRequest, description = "The machine, its class and the secret. The example initialises the machine CreateMachine's example makes (create it first, with the same body)", example = machine_request_example),
    responses(
        (status = 200, description = "Initialized", body = InitializeMachineResponse),
        (status = 400, description = "Bad request (code 3)", body = Problem),
        (status = 401, description = "The cloud refused the credentials (code 16)", body = Problem),
        (status = 404, description = "No VM backs the machine, or it is in a namespace the caller may not see (code 5)", body = Problem),
        (status = 409, description = "Not initialized yet (code 17) or several VMs (code 11)", body = Problem),
        (status = 412, description = PRECONDITION, body = Problem),
        (status = 503, description = "Retry (code 14)", body = Problem),
    )
)]
pub(super) async fn initialize_machine(
    State(state): State<AppState>,
    caller: Caller,
    parsed: Result<Json<MachineRequest>, ApiError>,
) -> Result<Json<InitializeMachineResponse>, ApiError> {
    let req = body(parsed)?;
    let provider = provider_for(&state, &req.machine_class)?;
    let namespace = namespace_of(&req)?;
    caller.audit_object(format!("{namespace}/{}", req.machine.metadata.name));
    if hidden(&caller, &req, namespace)? {
        let name = &req.machine.metadata.name;
        return observed("InitializeMachine", provider.name(), async {
            Err(provider.missing(name))
        })
        .await;
    }
    observed(
        "InitializeMachine",
        provider.name(),
        provider.initialize_machine(&req),
    )
    .await
}

/// DeleteMachine: releases the VM and what it left behind; a VM that does not exist is OK, and so is
/// a machine in a namespace the caller may not see (answered as one that does not exist).
#[utoipa::path(
    post,
    path = "/v1/machines:delete",
    tag = "machines",
    request_body(content = MachineRequest, description = "The machine, its class and the secret (see CreateMachine's example)", example = machine_request_example),
    responses(
        (status = 200, description = "Nothing backs the machine any more", body = DeleteMachineResponse),
        (status = 400, description = "Bad request (code 3)", body = Problem),
        (status = 401, description = "The cloud refused the credentials (code 16)", body = Problem),
        (status = 412, description = PRECONDITION, body = Problem),
        (status = 503, description = "The VM is between states, or the cloud or Docker Engine is unavailable; retry (code 14)", body = Problem),
    )
)]
pub(super) async fn delete_machine(
    State(state): State<AppState>,
    caller: Caller,
    parsed: Result<Json<MachineRequest>, ApiError>,
) -> Result<Json<DeleteMachineResponse>, ApiError> {
    let req = body(parsed)?;
    let provider = provider_for(&state, &req.machine_class)?;
    let namespace = namespace_of(&req)?;
    caller.audit_object(format!("{namespace}/{}", req.machine.metadata.name));
    if hidden(&caller, &req, namespace)? {
        let name = &req.machine.metadata.name;
        return observed("DeleteMachine", provider.name(), async {
            Ok(provider.nothing_to_delete(name))
        })
        .await;
    }
    observed(
        "DeleteMachine",
        provider.name(),
        provider.delete_machine(&req),
    )
    .await
}

/// ListMachines: every VM the class's cluster and role tags identify, provider id → machine name,
/// of the namespaces the caller may see.
#[utoipa::path(
    post,
    path = "/v1/machines:list",
    tag = "machines",
    request_body(content = ListMachinesRequest, description = "The class and the secret (see CreateMachine's example)", example = list_request_example),
    responses(
        (status = 200, description = "The VMs", body = ListMachinesResponse),
        (status = 400, description = "Bad request (code 3)", body = Problem),
        (status = 401, description = "The cloud refused the credentials (code 16)", body = Problem),
        (status = 412, description = PRECONDITION, body = Problem),
        (status = 503, description = "The cloud or the Docker Engine is unavailable; retry (code 14)", body = Problem),
    )
)]
pub(super) async fn list_machines(
    State(state): State<AppState>,
    caller: Caller,
    parsed: Result<Json<ListMachinesRequest>, ApiError>,
) -> Result<Json<ListMachinesResponse>, ApiError> {
    let req = body(parsed)?;
    let provider = provider_for(&state, &req.machine_class)?;
    observed(
        "ListMachines",
        provider.name(),
        provider.list_machines(&req, &caller.namespaces),
    )
    .await
}
