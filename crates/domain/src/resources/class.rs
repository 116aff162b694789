//! The rules of a machine class write. Apart because a class has no type of its own here: it is
//! [`crate::MachineClass`], the driver's type, sent to the driver unchanged, so only the
//! controller's rules for it live in this file.

use crate::code::Status;
use crate::machine::MachineClass;
use crate::names::validate_dns1123_label;

/// The checks of a machine class write that need no driver: its references stay in its own
/// namespace (a tenant may not point at another's secret), and `provider` is given. The provider's
/// own rules (its spec, its secret's keys) are the driver's, which the controller asks.
pub fn check_class(class: &MachineClass) -> Result<(), Status> {
    if class.provider.is_empty() {
        return Err(Status::invalid(
            "provider",
            "is required (Alicloud or Docker)",
        ));
    }
    if !class.provider_spec.is_object() {
        return Err(Status::invalid(
            "providerSpec",
            "must be an object (the provider's spec)",
        ));
    }
    let Some(secret_ref) = &class.secret_ref else {
        return Err(Status::invalid(
            "secretRef.name",
            "is required: the name of a secret in this namespace",
        ));
    };
    check_local_reference(
        "secretRef",
        &secret_ref.name,
        &secret_ref.namespace,
        &class.metadata.namespace,
    )?;
    if let Some(credentials) = &class.credentials_secret_ref {
        check_local_reference(
            "credentialsSecretRef",
            &credentials.name,
            &credentials.namespace,
            &class.metadata.namespace,
        )?;
    }
    Ok(())
}

fn check_local_reference(
    field: &str,
    name: &str,
    namespace: &str,
    own: &str,
) -> Result<(), Status> {
    validate_dns1123_label(&format!("{field}.name"), name)?;
    if !namespace.is_empty() && namespace != own {
        return Err(Status::invalid(
            &format!("{field}.namespace"),
            "must be the class's own namespace (or absent): a class may only use secrets beside it",
        ));
    }
    Ok(())
}
