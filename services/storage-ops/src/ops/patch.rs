//! PatchStorage: a JSON merge patch (RFC 7386) of a volume's labels and capacity, with Kubernetes'
//! optimistic concurrency (`metadata.resourceVersion` in the patch must be the volume's).
//!
//! What a patch may change is what can change without making a new volume: `metadata.labels`, and
//! `spec.capacity` upwards, where the backend can grow the object (a sparse file, a directory's
//! record, a Kubernetes claim whose class allows expansion; a Docker volume cannot: 412). Every
//! other field of a volume may be sent back as it is (a client that patches with what it read), and
//! is refused, naming it, when it differs. A growth is made on the backend first and recorded after:
//! a crash in between leaves an object larger than its record, which a retry of the same patch
//! records; never a record larger than its object.

use std::sync::Arc;

use domain::quantity::Quantity;
use domain::{Labels, Status, Volume, VolumePhase};
use serde_json::Value;

use super::add::row_spec_hash;
use super::{Ops, OpsError, to_volume};
use crate::backend::capacity_limit;
use crate::store::{VolumeChange, VolumeRow};

/// What a patch asks for, checked against nothing but itself.
#[derive(Debug, Default)]
pub struct VolumePatch {
    /// Label changes: a value sets, `None` removes.
    labels: Vec<(String, Option<String>)>,
    /// `metadata.labels: null`: every label goes (before `labels` apply).
    clear_labels: bool,
    /// The capacity asked for.
    capacity: Option<Quantity>,
    /// `metadata.resourceVersion`: the version the caller read.
    expected_version: Option<i64>,
    /// Other fields sent, to be equal to the volume's (`spec.replicas`, `metadata.uid`…).
    unchanged: Vec<(&'static str, Value)>,
}

fn invalid(field: &str, rule: impl Into<String>) -> OpsError {
    OpsError::BackendRefused(Status::invalid(field, rule.into()))
}

/// The fields a patch may send back as they are, by part.
const METADATA_SAME: [&str; 4] = ["name", "namespace", "uid", "creationTimestamp"];
const SPEC_SAME: [&str; 4] = ["orchestrator", "capacityBytes", "replicas", "parameters"];

impl VolumePatch {
    /// Reads a merge patch, refusing what can never apply (naming the field and the rule).
    pub fn parse(patch: &Value) -> Result<Self, OpsError> {
        let Value::Object(top) = patch else {
            return Err(invalid(
                "body",
                "must be a JSON object (a merge patch of the volume)",
            ));
        };
        let mut parsed = VolumePatch::default();
        for (key, value) in top {
            match key.as_str() {
                "metadata" => parsed.read_metadata(value)?,
                "spec" => parsed.read_spec(value)?,
                // What a reader got back, sent whole: the status is the service's, never the
                // caller's, and is ignored as Kubernetes ignores it on the main resource.
                "status" => {
                    if !(value.is_object() || value.is_null()) {
                        return Err(invalid(
                            "status",
                            "must be an object (a volume's status, which is ignored)",
                        ));
                    }
                }
                "apiVersion" | "kind" => {
                    let is = if key == "kind" {
                        domain::volume::VOLUME_KIND
                    } else {
                        domain::resources::API_VERSION
                    };
                    if value.as_str() != Some(is) {
                        return Err(invalid(key, format!("must be {is:?} (a volume's)")));
                    }
                }
                other => {
                    // A caller's name is shown escaped: never a control character into a terminal.
                    return Err(invalid(
                        &other.escape_debug().to_string(),
                        "is not a field of a volume (metadata, spec and status are)",
                    ));
                }
            }
        }
        Ok(parsed)
    }

    fn read_metadata(&mut self, value: &Value) -> Result<(), OpsError> {
        let Value::Object(metadata) = value else {
            return Err(invalid("metadata", "must be an object"));
        };
        for (key, value) in metadata {
            match key.as_str() {
                "labels" => match value {
                    Value::Null => self.clear_labels = true,
                    Value::Object(labels) => {
                        for (k, v) in labels {
                            let v = match v {
                                Value::Null => None,
                                Value::String(s) => Some(s.clone()),
                                _ => {
                                    return Err(invalid(
                                        &format!("metadata.labels.{}", k.escape_debug()),
                                        "must be a string, or null to remove the label",
                                    ));
                                }
                            };
                            self.labels.push((k.clone(), v));
                        }
                    }
                    _ => {
                        return Err(invalid(
                            "metadata.labels",
                            "must be an object of strings (null removes a label, or all of them)",
                        ));
                    }
                },
                "resourceVersion" => {
                    let text = match value {
                        Value::String(s) => s.as_str(),
                        Value::Null => continue,
                        _ => {
                            return Err(invalid(
                                "metadata.resourceVersion",
                                "must be a string (as a read gives it)",
                            ));
                        }
                    };
                    let version = text
                        .parse::<i64>()
                        .ok()
                        .filter(|v| *v >= 0 && text == v.to_string())
                        .ok_or_else(|| {
                            invalid(
                                "metadata.resourceVersion",
                                format!("must be a version a read gave, got {text:?}"),
                            )
                        })?;
                    self.expected_version = Some(version);
                }
                other => match METADATA_SAME.iter().find(|f| **f == other) {
                    Some(field) => self.unchanged.push((field, value.clone())),
                    None => {
                        return Err(invalid(
                            &format!("metadata.{}", other.escape_debug()),
                            "is not a field of a volume's metadata (labels and resourceVersion may change)",
                        ));
                    }
                },
            }
        }
        Ok(())
    }

    fn read_spec(&mut self, value: &Value) -> Result<(), OpsError> {
        let Value::Object(spec) = value else {
            return Err(invalid("spec", "must be an object"));
        };
        for (key, value) in spec {
            match key.as_str() {
                "capacity" => {
                    let Value::String(text) = value else {
                        return Err(invalid(
                            "spec.capacity",
                            "must be a quantity string such as \"2Gi\"",
                        ));
                    };
                    self.capacity = Some(
                        Quantity::parse_field("spec.capacity", text)
                            .map_err(OpsError::BackendRefused)?,
                    );
                }
                other => match SPEC_SAME.iter().find(|f| **f == other) {
                    Some(field) => self.unchanged.push((field, value.clone())),
                    None => {
                        return Err(invalid(
                            &format!("spec.{}", other.escape_debug()),
                            "is not a field of a volume's spec (capacity may grow)",
                        ));
                    }
                },
            }
        }
        Ok(())
    }

    /// The volume's labels after this patch.
    fn labels_of(&self, row: &VolumeRow) -> Result<Labels, OpsError> {
        let mut labels = if self.clear_labels {
            Labels::default()
        } else {
            row.labels.clone()
        };
        for (k, v) in &self.labels {
            match v {
                Some(v) => {
                    labels.insert(k.clone(), v.clone());
                }
                None => {
                    labels.remove(k);
                }
            }
        }
        domain::names::validate_labels("metadata.labels", &labels)
            .map_err(OpsError::BackendRefused)?;
        Ok(labels)
    }

    /// Refuses a field sent with another value than the volume's.
    fn check_unchanged(&self, volume: &Volume) -> Result<(), OpsError> {
        let read = serde_json::to_value(volume).unwrap_or_default();
        for (field, sent) in &self.unchanged {
            let part = if METADATA_SAME.contains(field) {
                "metadata"
            } else {
                "spec"
            };
            let is = &read[part][*field];
            if is != sent {
                return Err(invalid(
                    &format!("{part}.{field}"),
                    format!(
                        "cannot be changed (it is {is}); only metadata.labels and spec.capacity (upwards) can"
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Ops {
    /// PatchStorage.
    pub async fn patch(
        self: &Arc<Self>,
        namespace: String,
        name: String,
        patch: VolumePatch,
    ) -> Result<Volume, OpsError> {
        let this = self.clone();
        // In its own task: a caller hanging up must not stop a growth between backend and record.
        service_kit::request_id::spawn_in_request(async move {
            this.patch_locked(&namespace, &name, patch).await
        })
        .await?
    }

    async fn patch_locked(
        &self,
        namespace: &str,
        name: &str,
        patch: VolumePatch,
    ) -> Result<Volume, OpsError> {
        let _guard = self.locks.lock(namespace, name).await;
        let not_found = || OpsError::NotFound {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let row = self
            .store
            .get(namespace, name)
            .await?
            .ok_or_else(not_found)?;
        if let Some(expected) = patch.expected_version
            && expected != row.resource_version
        {
            return Err(crate::store::StoreError::Stale {
                current: row.resource_version,
            }
            .into());
        }
        patch.check_unchanged(&to_volume(&row))?;
        if row.phase == VolumePhase::Deleting {
            return Err(OpsError::PatchOfDeleting {
                namespace: row.namespace,
                name: row.name,
            });
        }
        let labels = patch.labels_of(&row)?;
        let (capacity, capacity_bytes) = match patch.capacity {
            Some(asked) if asked.bytes() < row.capacity_bytes => {
                return Err(invalid(
                    "spec.capacity",
                    format!(
                        "cannot shrink (it is {}, asked {asked}): a volume only grows",
                        row.capacity
                    ),
                ));
            }
            Some(asked) if asked.bytes() > row.capacity_bytes => (asked.to_string(), asked.bytes()),
            _ => (row.capacity.clone(), row.capacity_bytes),
        };
        if labels == row.labels && capacity_bytes == row.capacity_bytes {
            return Ok(to_volume(&row));
        }
        let mut limit = None;
        if capacity_bytes > row.capacity_bytes {
            if row.phase != VolumePhase::Ready {
                return Err(OpsError::BackendRefused(Status::new(
                    domain::Code::FailedPrecondition,
                    format!(
                        "volume {namespace}/{name} is {}, not Ready: it can grow once it is Ready",
                        row.phase.as_str()
                    ),
                )));
            }
            // The orchestrator's capacity as it is registered now (the same rule as an add's);
            // one deregistered since keeps the capacity it was made under.
            limit = match self.lookup(&row.orchestrator).await? {
                Some(o) => capacity_limit(o.kind, &o.config),
                None => capacity_limit(row.kind, &row.backend_config),
            };
            let backend = self.stored_backend(&row)?;
            backend
                .grow(&row.object_ref(), capacity_bytes)
                .await
                .map_err(|e| OpsError::BackendRefused(e.into()))?;
        }
        let mut changed = row.clone();
        changed.labels = labels;
        changed.capacity = capacity;
        changed.capacity_bytes = capacity_bytes;
        let change = VolumeChange {
            uid: row.uid.clone(),
            expected_version: Some(row.resource_version),
            spec_hash: row_spec_hash(&changed),
            labels: changed.labels,
            capacity: changed.capacity,
            capacity_bytes,
        };
        let row = self
            .store
            .update(change, limit)
            .await?
            .ok_or_else(not_found)?;
        Ok(to_volume(&row))
    }
}
