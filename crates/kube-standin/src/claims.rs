//! The PersistentVolumeClaim handlers: list (with label selectors and `limit`/`continue`), get,
//! create, delete (with preconditions and the pvc-protection finalizer) and JSON merge patch.
//! Apart because they are what storage-ops' `kubernetes` backend calls, each a verb of one
//! resource.

use axum::extract::{Path, Query, State as AxumState};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::cluster::{Cluster, Shared, lock};
use crate::faults::authorize;
use crate::routes::ListQuery;
use crate::status::{Refusal, answer, not_found, refusal};
use crate::validation::{storage_bytes, validate_claim};
use crate::watch::watch_claims;

fn namespace_exists(cluster: &Cluster, namespace: &str) -> Result<(), Refusal> {
    if cluster.namespaces.contains(namespace) {
        return Ok(());
    }
    Err(refusal(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("namespaces {namespace:?} not found"),
        None,
    ))
}

pub(crate) async fn list_claims(
    AxumState(shared): AxumState<Shared>,
    Path(namespace): Path<String>,
    Query(query): Query<ListQuery>,
) -> Response {
    if query.watch == Some(true) {
        return watch_claims(shared, namespace, query);
    }
    let cluster = lock(&shared);
    answer((|| {
        authorize(&cluster, "list", "persistentvolumeclaims", &namespace, None)?;
        let selector: domain::Selector = query
            .label_selector
            .as_deref()
            .unwrap_or("")
            .parse()
            .map_err(|e: domain::Status| {
                refusal(StatusCode::BAD_REQUEST, "BadRequest", e.message, None)
            })?;
        let after = match &query.continue_token {
            None => None,
            Some(token) => Some(decode_continue(token).ok_or_else(|| {
                refusal(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "continue key is not valid: the token was not issued by this server".into(),
                    None,
                )
            })?),
        };
        let matching = cluster.claims.iter().filter(|((ns, name), claim)| {
            ns == &namespace
                && after.as_ref().is_none_or(|a| name > a)
                && selector.matches(&labels_of(claim))
        });
        let limit = query.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut items: Vec<Value> = Vec::new();
        let mut more = false;
        for (_, claim) in matching {
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(claim.clone());
        }
        let mut metadata = json!({"resourceVersion": cluster.resource_version.to_string()});
        if more && let Some(last) = items.last() {
            let last = last["metadata"]["name"].as_str().unwrap_or_default();
            metadata["continue"] =
                json!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(last));
        }
        Ok(
            json!({"kind": "PersistentVolumeClaimList", "apiVersion": "v1", "metadata": metadata, "items": items}),
        )
    })())
}

fn decode_continue(token: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    String::from_utf8(bytes).ok()
}

pub(crate) fn labels_of(claim: &Value) -> domain::Labels {
    claim["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) async fn get_claim(
    AxumState(cluster): AxumState<Shared>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let cluster = lock(&cluster);
    answer((|| {
        authorize(
            &cluster,
            "get",
            "persistentvolumeclaims",
            &namespace,
            Some(&name),
        )?;
        cluster
            .claims
            .get(&(namespace.clone(), name.clone()))
            .cloned()
            .ok_or_else(|| not_found(&name))
    })())
}

pub(crate) async fn post_claim(
    AxumState(cluster): AxumState<Shared>,
    Path(namespace): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let mut cluster = lock(&cluster);
    let result = (|| {
        authorize(
            &cluster,
            "create",
            "persistentvolumeclaims",
            &namespace,
            None,
        )?;
        // No content type is JSON, as the API server takes it (the first type it supports); the
        // official Python client sends none.
        let json_body = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|v| v.starts_with("application/json"));
        if !json_body {
            return Err(refusal(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                "the body of a create must be application/json".into(),
                None,
            ));
        }
        let claim: Value = serde_json::from_slice(&body).map_err(|e| {
            refusal(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("the body is not JSON: {e}"),
                None,
            )
        })?;
        cluster.sent.push(claim.clone());
        create_claim(&mut cluster, &namespace, claim)
    })();
    match result {
        Ok(made) => (StatusCode::CREATED, axum::Json(made)).into_response(),
        Err((code, status)) => (code, axum::Json(status)).into_response(),
    }
}

/// Validates and stores a new claim; what the API server adds (uid, resourceVersion,
/// creationTimestamp, the pvc-protection finalizer, a Pending status) is added.
pub(crate) fn create_claim(
    cluster: &mut Cluster,
    namespace: &str,
    mut claim: Value,
) -> Result<Value, Refusal> {
    namespace_exists(cluster, namespace)?;
    validate_claim(&claim, namespace)?;
    let name = claim["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let key = (namespace.to_string(), name.clone());
    if cluster.claims.contains_key(&key) {
        return Err(refusal(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("persistentvolumeclaims {name:?} already exists"),
            Some(&name),
        ));
    }
    let requested = storage_bytes(&claim).unwrap_or_default();
    if let Some(quota) = cluster.faults.quota.clone() {
        let in_namespace: Vec<&Value> = cluster
            .claims
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|(_, c)| c)
            .collect();
        let used: u64 = in_namespace.iter().filter_map(|c| storage_bytes(c)).sum();
        let over_count = quota.claims.is_some_and(|max| in_namespace.len() + 1 > max);
        let over_bytes = quota.storage.is_some_and(|max| used + requested > max);
        if over_count || over_bytes {
            let (what, requested, used, limited) = if over_count {
                let n = in_namespace.len();
                (
                    "count/persistentvolumeclaims",
                    1,
                    n as u64,
                    quota.claims.unwrap_or(0) as u64,
                )
            } else {
                (
                    "requests.storage",
                    requested,
                    used,
                    quota.storage.unwrap_or(0),
                )
            };
            return Err(refusal(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!(
                    "persistentvolumeclaims {name:?} is forbidden: exceeded quota: {}, requested: {what}={requested}, used: {what}={used}, limited: {what}={limited}",
                    quota.name
                ),
                Some(&name),
            ));
        }
    }
    let version = cluster.next_version();
    let metadata = claim["metadata"].as_object_mut().expect("validated");
    metadata.insert("namespace".into(), json!(namespace));
    metadata.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    metadata.insert("resourceVersion".into(), json!(version));
    metadata.insert(
        "creationTimestamp".into(),
        json!(chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()),
    );
    metadata.insert("finalizers".into(), json!(["kubernetes.io/pvc-protection"]));
    claim["apiVersion"] = json!("v1");
    claim["kind"] = json!("PersistentVolumeClaim");
    claim["status"] = json!({"phase": "Pending"});
    if claim["spec"]["volumeMode"].is_null() {
        claim["spec"]["volumeMode"] = json!("Filesystem");
    }
    cluster.claims.insert(key.clone(), claim.clone());
    cluster.changed(&key, "ADDED", None);
    Ok(claim)
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteOptions {
    #[serde(default)]
    preconditions: Option<Preconditions>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preconditions {
    uid: Option<String>,
    resource_version: Option<String>,
}

pub(crate) async fn delete_claim(
    AxumState(cluster): AxumState<Shared>,
    Path((namespace, name)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let mut cluster = lock(&cluster);
    answer((|| {
        authorize(
            &cluster,
            "delete",
            "persistentvolumeclaims",
            &namespace,
            Some(&name),
        )?;
        let options: DeleteOptions = if body.is_empty() {
            DeleteOptions {
                preconditions: None,
            }
        } else {
            serde_json::from_slice(&body).map_err(|e| {
                refusal(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("DeleteOptions: {e}"),
                    None,
                )
            })?
        };
        let key = (namespace.clone(), name.clone());
        let claim = cluster
            .claims
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(&name))?;
        if let Some(pre) = &options.preconditions {
            let uid = claim["metadata"]["uid"].as_str().unwrap_or_default();
            let version = claim["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default();
            let failed = pre.uid.as_deref().is_some_and(|u| u != uid)
                || pre
                    .resource_version
                    .as_deref()
                    .is_some_and(|v| v != version);
            if failed {
                return Err(refusal(
                    StatusCode::CONFLICT,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on persistentvolumeclaims {name:?}: Precondition failed: UID in precondition: {}, UID in object meta: {uid}",
                        pre.uid.as_deref().unwrap_or("")
                    ),
                    Some(&name),
                ));
            }
        }
        if cluster.in_use.contains(&key) {
            let version = cluster.next_version();
            let claim = cluster.claims.get_mut(&key).expect("present");
            if claim["metadata"]["deletionTimestamp"].is_null() {
                claim["metadata"]["deletionTimestamp"] =
                    json!(chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string());
                claim["metadata"]["resourceVersion"] = json!(version);
                cluster.changed(&key, "MODIFIED", None);
            }
            let claim = cluster.claims.get(&key).cloned().expect("present");
            return Ok(claim);
        }
        // The object as it was deleted, as the API server answers a DELETE it carried out at once.
        let mut gone = cluster.remove_claim(&key).unwrap_or(claim);
        gone["metadata"]["deletionTimestamp"] =
            json!(chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string());
        gone["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        Ok(gone)
    })())
}

pub(crate) async fn patch_claim(
    AxumState(cluster): AxumState<Shared>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let mut cluster = lock(&cluster);
    answer((|| {
        authorize(
            &cluster,
            "patch",
            "persistentvolumeclaims",
            &namespace,
            Some(&name),
        )?;
        let merge = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/merge-patch+json"));
        if !merge {
            return Err(refusal(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                "the stand-in takes JSON merge patches (application/merge-patch+json) only".into(),
                None,
            ));
        }
        let patch: Value = serde_json::from_slice(&body).map_err(|e| {
            refusal(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("the patch is not JSON: {e}"),
                None,
            )
        })?;
        let key = (namespace.clone(), name.clone());
        let mut claim = cluster
            .claims
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(&name))?;
        let spec_before = claim["spec"].clone();
        let bytes_before = storage_bytes(&claim);
        merge_patch(&mut claim, &patch);
        // The one change of spec allowed: more storage, on a class that allows expansion, as the
        // API server's validation and its PersistentVolumeClaimResize admission plugin say.
        let mut resized = claim["spec"].clone();
        resized["resources"]["requests"]["storage"] =
            spec_before["resources"]["requests"]["storage"].clone();
        if resized == spec_before && claim["spec"] != spec_before {
            let bytes = storage_bytes(&claim);
            if bytes.is_none() || bytes < bytes_before {
                return Err(refusal(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    format!(
                        "PersistentVolumeClaim {name:?} is invalid: spec.resources.requests.storage: Forbidden: field can not be less than previous value"
                    ),
                    Some(&name),
                ));
            }
            let class = claim["spec"]["storageClassName"]
                .as_str()
                .unwrap_or_default();
            if !cluster.expandable.contains(class) {
                return Err(refusal(
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    format!(
                        "persistentvolumeclaims {name:?} is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"
                    ),
                    Some(&name),
                ));
            }
            // Bound: the resizer grows it at once here.
            if claim["status"]["phase"] == "Bound" {
                claim["status"]["capacity"]["storage"] =
                    claim["spec"]["resources"]["requests"]["storage"].clone();
            }
        } else if claim["spec"] != spec_before {
            return Err(refusal(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!(
                    "PersistentVolumeClaim {name:?} is invalid: spec: Forbidden: spec is immutable after creation except resources.requests"
                ),
                Some(&name),
            ));
        }
        let version = cluster.next_version();
        claim["metadata"]["resourceVersion"] = json!(version);
        cluster.claims.insert(key.clone(), claim.clone());
        cluster.changed(&key, "MODIFIED", None);
        Ok(claim)
    })())
}

/// RFC 7386: `null` removes, objects merge, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let map = target.as_object_mut().expect("an object");
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}
