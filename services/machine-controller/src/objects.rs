//! What a write of each kind must be, and what it may not undo: decoding and checking a caller's
//! body into the object to store, the checks that need other objects (a class's secret, a
//! machine's class), and the refusals of deleting what others use.
//!
//! A caller writes `metadata.name`, `labels`, `annotations` and the kind's own fields; everything
//! else in `metadata` (uid, versions, timestamps, finalizers, owner references) and all of `status`
//! are the controller's, dropped from what a caller sends and kept from what is stored.

use std::sync::Arc;

use client::ClientError;
use domain::machine::{Machine, MachineClass, MachineRequest, ObjectMeta};
use domain::resources::{
    Kind, MachineDeployment, MachineResource, MachineSet, SecretResource, check_class,
};
use domain::{Code, Status};
use serde_json::{Map, Value, json};
use service_kit::ApiError;

use crate::seal::{Keyring, SecretValues};
use crate::store::{Sealed, Store, Stored};

/// What the write handlers share.
#[derive(Debug, Clone)]
pub struct Writer {
    /// The database.
    pub store: Store,
    /// The keys secrets are sealed with.
    pub keys: Arc<Keyring>,
    /// The machine driver, which checks classes.
    pub driver: client::machines::Client,
    /// The most replicas a set or deployment may ask for.
    pub max_replicas: u32,
}

/// A checked body, ready to store.
#[derive(Debug)]
pub struct Prepared {
    /// The object without controller-owned fields.
    pub body: Value,
    /// A secret's values.
    pub values: Option<SecretValues>,
}

fn decode<T: serde::de::DeserializeOwned + serde::Serialize + utoipa::ToSchema>(
    raw: &Value,
) -> Result<T, ApiError> {
    service_kit::extract::decode_value_strict(raw).map_err(|(path, rule)| {
        let field = if path == "." {
            "body".to_string()
        } else {
            path
        };
        ApiError::new(Status::invalid(&field, rule))
    })
}

/// The parts of `metadata` a caller writes.
fn caller_meta(meta: &ObjectMeta) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(meta.name));
    if !meta.labels.is_empty() {
        m.insert("labels".into(), json!(meta.labels));
    }
    if !meta.annotations.is_empty() {
        m.insert("annotations".into(), json!(meta.annotations));
    }
    Value::Object(m)
}

fn refused(code: Code, message: String) -> ApiError {
    ApiError::new(Status::new(code, message))
}

impl Writer {
    /// Decodes and checks what a caller sent for `kind` in `namespace`.
    pub async fn prepare(
        &self,
        kind: Kind,
        namespace: &str,
        raw: &Value,
    ) -> Result<Prepared, ApiError> {
        let text = |field: &str| raw[field].as_str().unwrap_or_default().to_string();
        let (api_version, kind_text) = (text("apiVersion"), text("kind"));
        let (body, values) = match kind {
            Kind::Secret => {
                let secret: SecretResource = decode(raw)?;
                kind.check_write(&secret.metadata, &api_version, &kind_text, namespace)
                    .map_err(ApiError::new)?;
                secret.check().map_err(ApiError::new)?;
                let values = SecretValues {
                    data: secret.data.clone(),
                    string_data: secret.string_data.clone(),
                };
                let mut body =
                    json!({"metadata": caller_meta(&secret.metadata), "keys": values.keys()});
                if !secret.secret_type.is_empty() {
                    body["type"] = json!(secret.secret_type);
                }
                (body, Some(values))
            }
            Kind::MachineClass => {
                let mut class: MachineClass = decode(raw)?;
                kind.check_write(&class.metadata, &api_version, &kind_text, namespace)
                    .map_err(ApiError::new)?;
                class.metadata.namespace = namespace.to_string();
                check_class(&class).map_err(ApiError::new)?;
                self.check_with_driver(namespace, &class).await?;
                let mut body = serde_json::to_value(&class).map_err(ApiError::internal)?;
                body["metadata"] = caller_meta(&class.metadata);
                if let Some(r) = body.get_mut("secretRef") {
                    r["namespace"] = json!(namespace);
                }
                if let Some(r) = body.get_mut("credentialsSecretRef") {
                    r["namespace"] = json!(namespace);
                }
                (body, None)
            }
            Kind::Machine => {
                let machine: MachineResource = decode(raw)?;
                kind.check_write(&machine.metadata, &api_version, &kind_text, namespace)
                    .map_err(ApiError::new)?;
                machine.check().map_err(ApiError::new)?;
                self.class_exists(namespace, &machine.spec.class.name, "spec.class.name")
                    .await?;
                let body =
                    json!({"metadata": caller_meta(&machine.metadata), "spec": machine.spec});
                (body, None)
            }
            Kind::MachineSet => {
                let set: MachineSet = decode(raw)?;
                kind.check_write(&set.metadata, &api_version, &kind_text, namespace)
                    .map_err(ApiError::new)?;
                set.check(self.max_replicas).map_err(ApiError::new)?;
                self.class_exists(
                    namespace,
                    &set.spec.template.spec.class.name,
                    "spec.template.spec.class.name",
                )
                .await?;
                (
                    json!({"metadata": caller_meta(&set.metadata), "spec": set.spec}),
                    None,
                )
            }
            Kind::MachineDeployment => {
                let deployment: MachineDeployment = decode(raw)?;
                kind.check_write(&deployment.metadata, &api_version, &kind_text, namespace)
                    .map_err(ApiError::new)?;
                deployment.check(self.max_replicas).map_err(ApiError::new)?;
                self.class_exists(
                    namespace,
                    &deployment.spec.template.spec.class.name,
                    "spec.template.spec.class.name",
                )
                .await?;
                (
                    json!({"metadata": caller_meta(&deployment.metadata), "spec": deployment.spec}),
                    None,
                )
            }
        };
        Ok(Prepared { body, values })
    }

    async fn class_exists(&self, namespace: &str, name: &str, field: &str) -> Result<(), ApiError> {
        match self.store.get(Kind::MachineClass, namespace, name).await? {
            Some(_) => Ok(()),
            None => Err(refused(
                Code::FailedPrecondition,
                format!(
                    "{field}: no machine class {name:?} in namespace {namespace:?}; make it first"
                ),
            )),
        }
    }

    /// The class's secret, opened.
    pub async fn secret_of(
        &self,
        namespace: &str,
        class: &MachineClass,
    ) -> Result<SecretValues, Status> {
        let name = class
            .secret_ref
            .as_ref()
            .map(|r| r.name.as_str())
            .unwrap_or_default();
        let stored = self
            .store
            .get(Kind::Secret, namespace, name)
            .await
            .map_err(|e| Status::unavailable(format!("cannot read secret {name:?}: {e}")))?
            .ok_or_else(|| {
                Status::new(
                    Code::FailedPrecondition,
                    format!("secretRef.name: no secret {name:?} in namespace {namespace:?}; make it first"),
                )
            })?;
        self.open(namespace, &stored)
    }

    /// A stored secret's values.
    pub fn open(&self, namespace: &str, stored: &Stored) -> Result<SecretValues, Status> {
        match &stored.sealed {
            Some(sealed) => self
                .keys
                .open(sealed, namespace, stored.name(), stored.uid()),
            None => Ok(SecretValues::default()),
        }
    }

    /// Seals `values` for the secret `name` (uid `uid`) in `namespace`.
    pub fn seal(
        &self,
        values: &SecretValues,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Sealed, ApiError> {
        self.keys
            .seal(values, namespace, name, uid)
            .map_err(ApiError::new)
    }

    /// Holds a class to the driver's own CreateMachine checks (its spec and its secret's keys).
    async fn check_with_driver(
        &self,
        namespace: &str,
        class: &MachineClass,
    ) -> Result<(), ApiError> {
        let secret = self
            .secret_of(namespace, class)
            .await
            .map_err(ApiError::new)?;
        let mut machine = Machine::default();
        machine.metadata.name = class.metadata.name.clone();
        machine.metadata.namespace = namespace.to_string();
        let req = MachineRequest {
            machine,
            machine_class: class.clone(),
            secret: secret.as_secret(),
        };
        match self.driver.check_class(&req).await {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.code(), Code::InvalidArgument | Code::FailedPrecondition) => {
                // The driver names fields under `machineClass.`: here the class is the body.
                let message = e.status.message.replace("machineClass.", "");
                Err(refused(e.code(), message))
            }
            Err(e) => Err(driver_unavailable(&e)),
        }
    }

    /// Refuses deleting a secret a class uses, or a class a machine, set or deployment uses,
    /// naming them: what uses it could then neither be made nor deleted.
    pub async fn check_unused(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        let mut users = Vec::new();
        match kind {
            Kind::Secret => {
                let (classes, _) = self.store.list(Kind::MachineClass, Some(namespace)).await?;
                for class in classes {
                    let uses = ["secretRef", "credentialsSecretRef"]
                        .iter()
                        .any(|field| class.body[field]["name"] == json!(name));
                    if uses {
                        users.push(format!("MachineClass {}", class.name()));
                    }
                }
            }
            Kind::MachineClass => {
                for user in [Kind::Machine, Kind::MachineSet, Kind::MachineDeployment] {
                    let (objects, _) = self.store.list(user, Some(namespace)).await?;
                    for o in objects {
                        let class = if user == Kind::Machine {
                            &o.body["spec"]["class"]["name"]
                        } else {
                            &o.body["spec"]["template"]["spec"]["class"]["name"]
                        };
                        if class == &json!(name) {
                            users.push(format!("{user} {}", o.name()));
                        }
                    }
                }
            }
            _ => {}
        }
        if users.is_empty() {
            return Ok(());
        }
        let shown: Vec<String> = users.iter().take(5).cloned().collect();
        let more = if users.len() > 5 {
            format!(" and {} more", users.len() - 5)
        } else {
            String::new()
        };
        Err(refused(
            Code::FailedPrecondition,
            format!(
                "{kind} {name:?} is in use by {}{more}: delete or change them first",
                shown.join(", ")
            ),
        ))
    }
}

/// The machine driver did not answer a check: retryable, in words that name no address.
pub fn driver_unavailable(e: &ClientError) -> ApiError {
    tracing::warn!(error = %e, "the machine driver did not answer");
    let mut error = ApiError::from_code(
        Code::Unavailable,
        format!(
            "the machine driver could not check it: {}; retry shortly",
            e.public_reason()
        ),
    );
    if let Some(after) = e.retry_after {
        error = error.with_retry_after(after);
    }
    error
}

/// The body a replacement (PUT, or a patch once merged) stores: the caller's fields from
/// `prepared`, the controller's from `current`.
pub fn replacement(prepared: &Value, current: &Value) -> Value {
    let mut body = prepared.clone();
    for field in ["finalizers", "ownerReferences"] {
        if let Some(v) = current["metadata"].get(field) {
            body["metadata"][field] = v.clone();
        }
    }
    if let Some(status) = current.get("status") {
        body["status"] = status.clone();
    }
    body
}

/// RFC 7386 JSON merge patch: `patch`'s members replace `target`'s, `null` removes one, objects
/// merge member by member.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Some(map) = target.as_object_mut() else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_patch_replaces_merges_and_removes() {
        let mut target = json!({"a": "b", "c": {"d": "e", "f": "g"}, "list": [1, 2]});
        merge_patch(
            &mut target,
            &json!({"a": "z", "c": {"f": null, "h": 1}, "list": [3]}),
        );
        assert_eq!(
            target,
            json!({"a": "z", "c": {"d": "e", "h": 1}, "list": [3]})
        );
        // RFC 7386's own examples.
        let mut t = json!({"a": [{"b": "c"}]});
        merge_patch(&mut t, &json!({"a": [1]}));
        assert_eq!(t, json!({"a": [1]}));
        let mut t = json!(["a", "b"]);
        merge_patch(&mut t, &json!({"a": "c"}));
        assert_eq!(t, json!({"a": "c"}));
        let mut t = json!({"e": null});
        merge_patch(&mut t, &json!({"a": 1}));
        assert_eq!(t, json!({"e": null, "a": 1}));
    }

    #[test]
    fn a_replacement_keeps_what_the_controller_owns() {
        let current = json!({
            "metadata": {"name": "m", "finalizers": ["berth.io/machine"], "ownerReferences": [{"uid": "s"}]},
            "spec": {"class": {"name": "old"}},
            "status": {"phase": "Running"}
        });
        let body = replacement(
            &json!({"metadata": {"name": "m"}, "spec": {"class": {"name": "new"}}}),
            &current,
        );
        assert_eq!(body["metadata"]["finalizers"], json!(["berth.io/machine"]));
        assert_eq!(body["metadata"]["ownerReferences"], json!([{"uid": "s"}]));
        assert_eq!(body["status"]["phase"], "Running");
        assert_eq!(body["spec"]["class"]["name"], "new");
    }
}
