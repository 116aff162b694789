//! The HTTP API (docs/design.md, “Machine driver API”): one handler per driver method, each
//! documented in the OpenAPI document by its `#[utoipa::path]`.
//!
//! Every error answer is problem+json carrying `machineCodesError`, the exact
//! `machine codes error: code = [..] message = [..]` string MCM parses, including the answers to
//! bodies that do not decode.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use domain::machine::{
    ClassCheck, Condition, CreateMachineResponse, DeleteMachineResponse, GetMachineStatusResponse,
    GetVolumeIdsRequest, GetVolumeIdsResponse, InitializeMachineResponse, ListMachinesRequest,
    ListMachinesResponse, MachineRequest, NodeAddress,
};
use domain::{Code, Status};
use serde::Serialize;
use service_kit::ApiError;
use service_kit::error::{PROBLEM_JSON, Problem};
use service_kit::extract::Json;
use service_kit::metrics::{Counter, DurationHistogram, Family};
use service_kit::tenancy::Caller;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::provider::{INITIALIZED_CONDITION, Provider, ProviderList, Providers};

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The provider plugins, by name.
    pub providers: Providers,
    /// The most machines one namespace may have (`BERTH_QUOTA_MACHINES`); `None`: no limit.
    pub quota_machines: Option<u64>,
    /// One lock per namespace that CreateMachine holds from counting the namespace's machines to
    /// making the new one, so this process's creates cannot race past the quota together.
    create_locks: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

impl AppState {
    /// The handlers' state over these providers, with this machine quota.
    pub fn new(providers: Providers, quota_machines: Option<u64>) -> Self {
        AppState {
            providers,
            quota_machines,
            create_locks: Arc::default(),
        }
    }

    /// The create lock of `namespace`. Entries no create holds are dropped on the way, so the map
    /// holds only namespaces with a create in flight.
    fn create_lock(&self, namespace: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .create_locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        locks.entry(namespace.to_owned()).or_default().clone()
    }
}

/// The API routes, with their OpenAPI descriptions.
pub fn routes(state: AppState) -> OpenApiRouter {
    OpenApiRouter::new()
        .routes(routes!(create_machine))
        .routes(routes!(initialize_machine))
        .routes(routes!(delete_machine))
        .routes(routes!(get_machine_status))
        .routes(routes!(list_machines))
        .routes(routes!(get_volume_ids))
        .routes(routes!(list_providers))
        .routes(routes!(check_machine_class))
        .with_state(state)
}

/// The request bodies as each provider reads them: `machineClass.provider` is `Alicloud` or
/// `Docker`, and one `if provider is P then the body is P's` rule per provider says what P accepts
/// of the machine, its class's `providerSpec` and the secret (each provider's `schema` module, held
/// to its validators by its tests). CreateMachine reads more of a class than the other calls (a
/// machine whose class changed since it was made can still be looked at and deleted), so it has a
/// body schema of its own, `CreateMachineRequest`.
fn document_requests(doc: &mut serde_json::Value) {
    use serde_json::{Value, json};

    use crate::{alicloud, docker};

    fn when(provider: &str, then: Value) -> Value {
        json!({
            "if": {
                "required": ["machineClass"],
                "properties": {"machineClass": {"required": ["provider"], "properties": {"provider": {"const": provider}}}}
            },
            "then": then,
        })
    }
    fn class(spec: Value) -> Value {
        json!({"required": ["providerSpec"], "properties": {"providerSpec": spec}})
    }
    // body: "create", "initialize", "machine" (status and delete) or "list"
    let rules = |body: &str| -> Value {
        let create = body == "create";
        let mut alicloud = json!({"properties": {
            "machineClass": class(alicloud::spec::schema::provider_spec(create)),
            "secret": alicloud::spec::schema::secret(create),
        }});
        let mut docker = json!({"properties": {
            "machineClass": class(docker::spec::schema::provider_spec(create)),
            "secret": docker::spec::schema::secret(),
        }});
        if body != "list" {
            alicloud["properties"]["machine"] = alicloud::spec::schema::machine(create);
            docker["properties"]["machine"] = docker::spec::schema::machine(!create);
            // The machine's namespace, which each provider stamps on what it makes ([`namespace_of`]).
            for machine in [&mut alicloud, &mut docker] {
                machine["properties"]["machine"]["properties"]["metadata"]["properties"]["namespace"] = json!({
                    "type": "string",
                    "pattern": domain::schema::DNS1123_LABEL_OR_EMPTY,
                    "maxLength": domain::names::MAX_NAME_LEN,
                    "description": "The machine's namespace (empty: default), a DNS-1123 label; a token scoped to namespaces sees only machines in them"
                });
            }
        }
        // Only the calls that write or run the user data read it.
        if body == "create" || body == "initialize" {
            docker["allOf"] = json!([docker::spec::schema::exec_needs_a_script()]);
        }
        json!([when(alicloud::NAME, alicloud), when(docker::NAME, docker)])
    };
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if let Some(class) = schemas.get_mut("MachineClass") {
        domain::machine::document_machine_class(class);
    }
    if let Some(list) = schemas.get_mut("ListMachinesRequest") {
        list["allOf"] = rules("list");
    }
    let Some(base) = schemas.get("MachineRequest").cloned() else {
        return;
    };
    for (name, body, what) in [
        ("CreateMachineRequest", "create", "CreateMachine"),
        (
            "InitializeMachineRequest",
            "initialize",
            "InitializeMachine",
        ),
    ] {
        let mut schema = base.clone();
        schema["description"] = json!(format!(
            "The body of {what}: the machine, its class and the secret."
        ));
        schema["allOf"] = rules(body);
        schemas.insert(name.into(), schema);
    }
    if let Some(machine) = schemas.get_mut("MachineRequest") {
        machine["description"] = json!(
            "The body of GetMachineStatus and DeleteMachine: the machine, its class and the secret."
        );
        machine["allOf"] = rules("machine");
    }
    // CheckMachineClass runs CreateMachine's checks, so it takes CreateMachine's body and rules.
    for (path, name) in [
        ("machines:create", "CreateMachineRequest"),
        ("machines:initialize", "InitializeMachineRequest"),
        ("machineclasses:check", "CreateMachineRequest"),
    ] {
        if let Some(body) = doc.pointer_mut(&format!(
            "/paths/~1v1~1{path}/post/requestBody/content/application~1json/schema"
        )) {
            *body = json!({"$ref": format!("#/components/schemas/{name}")});
        }
    }
}

/// OpenAPI `links` from CreateMachine's answer to the calls that take the same request (status,
/// initialise, delete), so a client (and schemathesis' stateful phase) can follow them; and the
/// request bodies per provider ([`document_requests`]).
pub(crate) fn document_links(doc: &mut serde_json::Value) {
    document_requests(doc);
    let links = serde_json::json!({
        "GetMachineStatus": {"operationId": "get_machine_status", "requestBody": "$request.body", "description": "The machine just made"},
        "InitializeMachine": {"operationId": "initialize_machine", "requestBody": "$request.body", "description": "Initialise it"},
        "DeleteMachine": {"operationId": "delete_machine", "requestBody": "$request.body", "description": "Delete it"},
    });
    if let Some(response) = doc.pointer_mut("/paths/~1v1~1machines:create/post/responses/200") {
        response["links"] = links;
    }
}

/// The request example of every machine call: an Alicloud machine against `berth up`'s ECS emulator,
/// its access key placeholders to be replaced with the one `berth up` prints.
fn machine_request_example() -> serde_json::Value {
    serde_json::json!({
        "machine": {
            "metadata": {"name": "worker-1", "namespace": "shoot--demo", "uid": "0d9a3c1e-7f44-4f0e-8d3b-5b6a2c1d7e01"},
            "spec": {"class": {"kind": "MachineClass", "name": "demo-class"}}
        },
        "machineClass": {
            "metadata": {"name": "demo-class", "namespace": "shoot--demo"},
            "provider": "Alicloud",
            "providerSpec": {
                "apiVersion": "mcm.gardener.cloud/v1alpha1",
                "imageID": "m-demo-image",
                "instanceType": "ecs.g6.large",
                "region": "cn-shanghai",
                "zoneID": "cn-shanghai-b",
                "securityGroupID": "sg-demo",
                "vSwitchID": "vsw-demo",
                "keyPairName": "demo",
                "systemDisk": {"category": "cloud_efficiency", "size": 50},
                "tags": {"kubernetes.io/cluster/shoot--demo": "1", "kubernetes.io/role/node": "1"}
            }
        },
        "secret": {"stringData": {"alicloudAccessKeyID": "EMULATOR_ACCESS_KEY_ID", "alicloudAccessKeySecret": "EMULATOR_ACCESS_KEY_SECRET"}}
    })
}

/// The 412 of every machine call: a well-formed request this driver's set-up refuses.
const PRECONDITION: &str = "Well-formed, but this driver's set-up refuses it (code 9), naming the setting: an Alicloud region it knows no ECS endpoint for or its allow-list (BERTH_ALICLOUD_REGIONS) leaves out, a Docker machine when the driver has no usable Docker Engine (DOCKER_HOST) or the secret's dockerHost is not one BERTH_DOCKER_ENDPOINTS allows";
/// CreateMachine's 412: [`PRECONDITION`], and what only creating reads.
const PRECONDITION_ON_CREATE: &str = "Well-formed, but this driver's set-up refuses it (code 9), naming the setting: an Alicloud region it knows no ECS endpoint for or its allow-list (BERTH_ALICLOUD_REGIONS) leaves out, a Docker machine when the driver has no usable Docker Engine (DOCKER_HOST) or the secret's dockerHost is not one BERTH_DOCKER_ENDPOINTS allows, a pull from a registry BERTH_DOCKER_REGISTRIES does not allow, privileged mode without BERTH_DOCKER_ALLOW_PRIVILEGED, a host directory outside BERTH_DOCKER_MOUNT_PATHS, memory, CPUs or pids above the operator's ceiling (BERTH_DOCKER_MEMORY, BERTH_DOCKER_CPUS, BERTH_DOCKER_PIDS), a network BERTH_DOCKER_NETWORKS does not allow, an image the Engine does not have with pull Never, or a network it does not have";

/// ListMachines' request example: the class and secret of [`machine_request_example`].
fn list_request_example() -> serde_json::Value {
    let mut example = machine_request_example();
    example.as_object_mut().map(|o| o.remove("machine"));
    example
}

/// Histogram of driver calls' duration, by `method` and `provider` (MCM's `driver_request_duration`).
pub const METRIC_DURATION: &str = "berth_driver_request_duration_seconds";
/// Counter of driver calls, by `method`, `provider` and `code` (the machine code's name, `OK` on
/// success), so failures are counted by kind (MCM's `requests_total` / `failed_total`).
pub const METRIC_REQUESTS: &str = "berth_driver_requests_total";

static CALL_DURATION: Family<DurationHistogram> = Family::new(
    METRIC_DURATION,
    "Time a driver call took, by method and provider.",
    &["method", "provider"],
);
static CALLS: Family<Counter> = Family::new(
    METRIC_REQUESTS,
    "Driver calls by method, provider and outcome (the machine code's name, OK on success).",
    &["method", "provider", "code"],
);

/// Runs one driver call and records its duration and outcome.
async fn observed<T>(
    method: &'static str,
    provider: &str,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<Json<T>, ApiError> {
    let started = Instant::now();
    let result = call.await;
    let code = match &result {
        Ok(_) => Code::Ok,
        Err(s) => s.code,
    };
    // A series lookup takes a lock: nothing next to a driver call (a cloud or Engine round trip).
    CALL_DURATION
        .series(&[method, provider])
        .record(started.elapsed());
    CALLS.series(&[method, provider, code.name()]).increment(1);
    result.map(Json).map_err(driver_error)
}

/// A driver failure as the answer MCM understands.
fn driver_error(status: Status) -> ApiError {
    ApiError::new(status).with_machine_codes_error()
}

/// The plugin the class names, or the driver's InvalidArgument listing the ones it has.
fn provider_for(
    state: &AppState,
    class: &domain::machine::MachineClass,
) -> Result<std::sync::Arc<dyn crate::provider::Provider>, ApiError> {
    state.providers.for_class(class).map_err(driver_error)
}

/// The body, or a 400 that also carries `machineCodesError`.
fn body<T>(parsed: Result<Json<T>, ApiError>) -> Result<T, ApiError> {
    parsed
        .map(|Json(v)| v)
        .map_err(|e| e.with_machine_codes_error())
}

/// The request's namespace (`machine.metadata.namespace`, empty read as `default`), checked: a
/// namespace is a DNS-1123 label, as Kubernetes' are, since providers stamp it on what they make.
fn namespace_of(req: &MachineRequest) -> Result<&str, ApiError> {
    let namespace = req.machine.metadata.namespace.as_str();
    if !namespace.is_empty() {
        domain::names::validate_dns1123_label("machine.metadata.namespace", namespace)
            .map_err(driver_error)?;
    }
    Ok(service_kit::tenancy::effective_namespace(namespace))
}

/// Whether the caller may not see the request's machine: its namespace is outside the caller's.
/// Such a machine is answered exactly as one that does not exist, once the machine name is known
/// to be well formed (so the answer never echoes a malformed one): what every provider's name rule
/// asks at least, a DNS-1123 subdomain.
fn hidden(caller: &Caller, req: &MachineRequest, namespace: &str) -> Result<bool, ApiError> {
    if caller.allows(namespace) {
        return Ok(false);
    }
    domain::names::validate_dns1123_subdomain(
        "machine.metadata.name",
        &req.machine.metadata.name,
        domain::names::MAX_SUBDOMAIN_LEN,
    )
    .map_err(driver_error)?;
    Ok(true)
}

/// Refuses a CreateMachine that would make a namespace's machines more than the quota
/// (`BERTH_QUOTA_MACHINES`), counted from the provider's own listing of the namespace's stamp (the
/// driver keeps no state). A create of a machine that already has its VM where this create looks
/// (the same name and UID in the namespace, found in the class's cluster: a retry, or MCM's periodic
/// re-create) is never refused.
async fn check_machine_quota(
    provider: &dyn Provider,
    req: &MachineRequest,
    namespace: &str,
    limit: u64,
) -> Result<(), Status> {
    let machines = provider.namespace_machines(req, namespace).await?;
    let m = &req.machine.metadata;
    if machines.iter().any(|l| l.name == m.name && l.uid == m.uid) {
        // Only a VM this create would adopt makes it a re-create: the same name and UID under
        // another class's cluster tag is found nowhere the create looks, and would make a new VM.
        match provider.get_machine_status(req).await {
            Ok(_) => return Ok(()),
            Err(s) if s.code == Code::Uninitialized => return Ok(()),
            Err(s) if s.code == Code::NotFound => {}
            Err(s) => return Err(s),
        }
    }
    let used = u64::try_from(machines.len()).unwrap_or(u64::MAX);
    if used >= limit {
        return Err(Status::new(
            Code::ResourceExhausted,
            format!(
                "quota machines (BERTH_QUOTA_MACHINES) exceeded in namespace {namespace:?}: it has {used} machine(s) and the limit is {limit}; delete one, or ask the operator to raise the quota"
            ),
        ));
    }
    Ok(())
}

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
        (status = 404, description = "The caller may not act in machine.metadata.namespace: answered as for a machine no VM backs (code 5)", body = Problem),
        (status = 409, description = "The machine name is taken by another machine's VM (code 6; it says only that), or several VMs without a recorded owner carry the name (code 11)", body = Problem),
        (status = 412, description = PRECONDITION_ON_CREATE, body = Problem),
        (status = 429, description = "The namespace has as many machines as the operator's quota (BERTH_QUOTA_MACHINES) allows, or no capacity or quota in the zone (code 8)", body = Problem),
        (status = 503, description = "The cloud or the Docker Engine is throttling or unavailable, or the machine's VM was requested with other parameters and is not listed yet; retry (code 14)", body = Problem),
    )
)]
async fn create_machine(
    State(state): State<AppState>,
    caller: Caller,
    parsed: Result<Json<MachineRequest>, ApiError>,
) -> Result<Json<CreateMachineResponse>, ApiError> {
    let req = body(parsed)?;
    let provider = provider_for(&state, &req.machine_class)?;
    let namespace = namespace_of(&req)?;
    caller.audit_object(format!("{namespace}/{}", req.machine.metadata.name));
    if hidden(&caller, &req, namespace)? {
        let name = &req.machine.metadata.name;
        return observed("CreateMachine", provider.name(), async {
            Err(provider.missing(name))
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
async fn initialize_machine(
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
async fn delete_machine(
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
enum StatusAnswerError {
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
async fn get_machine_status(
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
async fn list_machines(
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
async fn get_volume_ids(
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
async fn check_machine_class(
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
async fn list_providers(State(state): State<AppState>) -> Json<ProviderList> {
    Json(state.providers.list())
}
