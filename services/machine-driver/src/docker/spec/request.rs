//! The request's other parts the provider reads: the machine's name, UID and providerID, the
//! namespace's and class's names, and the secret's user data; and the container names and
//! provider ids made from them.
//!
//! Apart from the spec proper because they come from the machine and the secret, not the class:
//! every call checks them (they reach container names, labels, logs and messages), whatever the
//! class says.

use domain::machine::{Machine, MachineClass, MachineRequest, Secret};
use domain::{Status, names};

use super::decode::Bootstrap;
use super::{PROVIDER_ID_PREFIX, SECRET_USER_DATA, SPEC};

/// The longest machine name: a container's host name is at most 63 characters.
pub(super) const MAX_MACHINE_NAME: usize = 63;
/// The longest machine UID accepted (Kubernetes UIDs have 36 characters).
pub(super) const MAX_UID_LEN: usize = 128;
/// The largest user data accepted.
pub const MAX_USER_DATA: usize = 1024 * 1024;

/// The machine's name, which is also its container's name and host name: a DNS-1123 subdomain of 2
/// to 63 characters.
pub fn machine_name(machine: &Machine) -> Result<String, Status> {
    let name = machine.metadata.name.as_str();
    let field = "machine.metadata.name";
    names::validate_dns1123_subdomain(field, name, MAX_MACHINE_NAME)?;
    if name.len() < 2 {
        return Err(Status::invalid(
            field,
            "must be at least 2 characters (a Docker container name)",
        ));
    }
    Ok(name.to_owned())
}

/// The request's other names: the machine's namespace (empty: `default`) a DNS-1123 label, the
/// class's name (possibly empty) a DNS-1123 subdomain. Both reach labels, logs and messages.
pub fn check_names(req: &MachineRequest) -> Result<(), Status> {
    let namespace = req.machine.metadata.namespace.as_str();
    if !namespace.is_empty() {
        names::validate_dns1123_label("machine.metadata.namespace", namespace)?;
    }
    check_class_name(&req.machine_class)
}

/// The class's name (possibly empty): a DNS-1123 subdomain of at most 253 characters.
pub fn check_class_name(class: &MachineClass) -> Result<(), Status> {
    let name = class.metadata.name.as_str();
    if name.is_empty() {
        return Ok(());
    }
    names::validate_dns1123_subdomain("machineClass.metadata.name", name, 253)
}

/// The machine's UID (possibly empty): at most 128 ASCII letters, digits, `-`, `_` and `.`.
pub fn machine_uid(machine: &Machine) -> Result<String, Status> {
    let uid = machine.metadata.uid.as_str();
    let ok = uid.len() <= MAX_UID_LEN
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok {
        return Err(Status::invalid(
            "machine.metadata.uid",
            format!(
                "must be at most {MAX_UID_LEN} ASCII letters, digits, '-', '_' or '.' (a Kubernetes UID)"
            ),
        ));
    }
    Ok(uid.to_owned())
}

/// The provider id of the container named `name`.
pub fn provider_id(name: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{name}")
}

/// The name of a machine's container: the machine's name in the `default` namespace (as it was
/// before namespaces), `<namespace>_<machine>` in any other. Two namespaces may then hold machines of
/// the same name, and neither learns of the other's through a name the Engine refuses as taken.
/// A driver serving a stack (`instance`) names `<namespace>_<machine>_<instance>`, so two stacks on
/// one Engine may hold the same machine too. `_` is in no namespace, machine name or instance, so
/// the three forms never name the same container.
pub fn container_name(namespace: &str, machine: &str, instance: Option<&str>) -> String {
    match instance {
        Some(instance) => format!("{namespace}_{machine}_{instance}"),
        None if namespace == service_kit::tenancy::DEFAULT_NAMESPACE => machine.to_owned(),
        None => format!("{namespace}_{machine}"),
    }
}

/// Whether `name` is a container name [`container_name`] makes.
fn is_container_name(name: &str) -> bool {
    const FIELD: &str = "machine.spec.providerID";
    let parts: Vec<&str> = name.split('_').collect();
    let (namespace, machine, instance) = match parts.as_slice() {
        [machine] => (None, *machine, None),
        [namespace, machine] => (Some(*namespace), *machine, None),
        [namespace, machine, instance] => (Some(*namespace), *machine, Some(*instance)),
        _ => return false,
    };
    let label = |text: &str| names::validate_dns1123_label(FIELD, text).is_ok();
    namespace.is_none_or(label)
        && instance.is_none_or(label)
        && names::validate_dns1123_subdomain(FIELD, machine, MAX_MACHINE_NAME).is_ok()
}

/// The container name a provider id names.
pub fn decode_provider_id(provider_id: &str) -> Result<&str, Status> {
    const FIELD: &str = "machine.spec.providerID";
    provider_id
        .strip_prefix(PROVIDER_ID_PREFIX)
        .filter(|name| is_container_name(name))
        .ok_or_else(|| {
            Status::invalid(
                FIELD,
                format!("is not of the form {PROVIDER_ID_PREFIX}<container name>"),
            )
        })
}

/// A machine's providerID, when it has one, names a container ([`decode_provider_id`]).
pub fn check_provider_id(machine: &Machine) -> Result<(), Status> {
    let provider_id = machine.spec.provider_id.as_str();
    if !provider_id.is_empty() {
        decode_provider_id(provider_id)?;
    }
    Ok(())
}

/// The user data to write into the container. With `bootstrap: exec` it is required and must be a
/// program the kernel can run: a script starting with `#!` (the container may have no shell to
/// interpret anything else).
pub fn user_data(secret: &Secret, bootstrap: Bootstrap) -> Result<Option<Vec<u8>>, Status> {
    const FIELD: &str = "secret.data[userData]";
    let data = secret.get(SECRET_USER_DATA)?.filter(|d| !d.is_empty());
    match (&data, bootstrap) {
        (Some(d), _) if d.len() > MAX_USER_DATA => Err(Status::invalid(
            FIELD,
            format!("is {} bytes; at most {MAX_USER_DATA}", d.len()),
        )),
        (None, Bootstrap::Exec) => Err(Status::invalid(
            FIELD,
            format!("is required when {SPEC}.bootstrap is exec"),
        )),
        (Some(d), Bootstrap::Exec) if !d.starts_with(b"#!") => Err(Status::invalid(
            FIELD,
            format!(
                "must start with #! (an interpreter line) when {SPEC}.bootstrap is exec: it is executed as a program"
            ),
        )),
        _ => Ok(data),
    }
}
