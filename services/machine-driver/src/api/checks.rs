//! What every call checks of its request before a provider acts on it (its body, provider,
//! namespace, whether the caller may see it, the machine quota), and how a failure is answered:
//! apart because every handler shares them and they are where a request is refused.

use domain::machine::MachineRequest;
use domain::{Code, Status};
use service_kit::ApiError;
use service_kit::extract::Json;
use service_kit::tenancy::Caller;

use super::AppState;
use crate::provider::Provider;

/// A driver failure as the answer MCM understands.
pub(super) fn driver_error(status: Status) -> ApiError {
    ApiError::new(status).with_machine_codes_error()
}

/// The plugin the class names, or the driver's InvalidArgument listing the ones it has.
pub(super) fn provider_for(
    state: &AppState,
    class: &domain::machine::MachineClass,
) -> Result<std::sync::Arc<dyn crate::provider::Provider>, ApiError> {
    state.providers.for_class(class).map_err(driver_error)
}

/// The body, or a 400 that also carries `machineCodesError`.
pub(super) fn body<T>(parsed: Result<Json<T>, ApiError>) -> Result<T, ApiError> {
    parsed
        .map(|Json(v)| v)
        .map_err(|e| e.with_machine_codes_error())
}

/// The request's namespace (`machine.metadata.namespace`, empty read as `default`), checked: a
/// namespace is a DNS-1123 label, as Kubernetes' are, since providers stamp it on what they make.
pub(super) fn namespace_of(req: &MachineRequest) -> Result<&str, ApiError> {
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
pub(super) fn hidden(
    caller: &Caller,
    req: &MachineRequest,
    namespace: &str,
) -> Result<bool, ApiError> {
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
pub(super) async fn check_machine_quota(
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
