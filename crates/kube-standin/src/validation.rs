//! The checks the API server makes of a claim, strictly. Apart because they are where the stand-in
//! is strict where Berth could be wrong: each rule answers as the API server's validation does.

use axum::http::StatusCode;
use serde_json::{Map, Value};

use crate::status::{Refusal, refusal};

pub(crate) fn storage_bytes(claim: &Value) -> Option<u64> {
    let text = claim["spec"]["resources"]["requests"]["storage"].as_str()?;
    domain::Quantity::parse_field("storage", text)
        .ok()
        .map(|q| q.bytes())
}

/// The checks the API server makes of a claim, strictly: a field the type does not have is a 400
/// (`fieldValidation=Strict`), a value it does not take a 422 naming the field.
pub(crate) fn validate_claim(claim: &Value, namespace: &str) -> Result<(), Refusal> {
    let unknown = |path: &str, map: &Map<String, Value>, known: &[&str]| -> Result<(), Refusal> {
        match map.keys().find(|k| !known.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) => Err(refusal(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("strict decoding error: unknown field \"{path}{k}\""),
                None,
            )),
        }
    };
    let object = |v: &Value, path: &str| -> Result<Map<String, Value>, Refusal> {
        match v {
            Value::Object(m) => Ok(m.clone()),
            Value::Null => Ok(Map::new()),
            _ => Err(refusal(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("{path}: expected an object"),
                None,
            )),
        }
    };
    let top = object(claim, "body")?;
    unknown(
        "",
        &top,
        &["apiVersion", "kind", "metadata", "spec", "status"],
    )?;
    // Absent, they are the URL's (the API server decodes with the resource's kind as the default);
    // present, they must be it.
    let said = |field: &str, want: &str| claim[field].is_null() || claim[field] == want;
    if !said("apiVersion", "v1") || !said("kind", "PersistentVolumeClaim") {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the object's apiVersion and kind must be v1 PersistentVolumeClaim".into(),
            None,
        ));
    }
    let metadata = object(&claim["metadata"], "metadata")?;
    unknown(
        "metadata.",
        &metadata,
        &["name", "namespace", "labels", "annotations"],
    )?;
    let spec = object(&claim["spec"], "spec")?;
    unknown(
        "spec.",
        &spec,
        &[
            "accessModes",
            "resources",
            "storageClassName",
            "volumeMode",
            "selector",
            "volumeName",
        ],
    )?;
    let name = claim["metadata"]["name"].as_str().unwrap_or_default();
    let mut invalid = Vec::new();
    if domain::names::validate_dns1123_subdomain("metadata.name", name, 253).is_err() {
        invalid.push(format!(
            "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
        ));
    }
    if let Some(ns) = claim["metadata"]["namespace"].as_str()
        && ns != namespace
    {
        return Err(refusal(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
            None,
        ));
    }
    for (field, kind) in [("labels", "label"), ("annotations", "annotation")] {
        if let Some(map) = claim["metadata"][field].as_object() {
            for (key, value) in map {
                let key_ok = domain::names::validate_label_key("key", key).is_ok();
                let value_ok = value.is_string()
                    && (field == "annotations"
                        || domain::names::validate_label_value(
                            "value",
                            value.as_str().unwrap_or(""),
                        )
                        .is_ok());
                if !key_ok || !value_ok {
                    invalid.push(format!(
                        "metadata.{field}: Invalid value: {key:?}: not a valid {kind}"
                    ));
                }
            }
        }
    }
    let modes = claim["spec"]["accessModes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if modes.is_empty() {
        invalid.push("spec.accessModes: Required value: at least 1 access mode is required".into());
    }
    for mode in &modes {
        if !domain::orchestrator::kubernetes::ACCESS_MODES.contains(&mode.as_str().unwrap_or("")) {
            invalid.push(format!("spec.accessModes: Unsupported value: {mode}"));
        }
    }
    if let Some(mode) = claim["spec"]["volumeMode"].as_str()
        && !domain::orchestrator::kubernetes::VOLUME_MODES.contains(&mode)
    {
        invalid.push(format!("spec.volumeMode: Unsupported value: {mode:?}"));
    }
    let resources = object(&claim["spec"]["resources"], "spec.resources")?;
    unknown("spec.resources.", &resources, &["requests", "limits"])?;
    match storage_bytes(claim) {
        Some(bytes) if bytes > 0 => {}
        _ => invalid.push(
            "spec.resources[storage]: Required value: a storage request of more than 0 is required"
                .into(),
        ),
    }
    if invalid.is_empty() {
        return Ok(());
    }
    Err(refusal(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!(
            "PersistentVolumeClaim {name:?} is invalid: {}",
            invalid.join(", ")
        ),
        Some(name),
    ))
}
