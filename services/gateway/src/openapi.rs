//! The merged OpenAPI document: the three services' documents, fetched with the internal credential,
//! joined, and annotated with the scope each operation needs. Cached; refetched when stale or when an
//! upstream was missing from the last merge.

use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{Value, json};
use service_kit::outbound::HttpClient;
use tokio::sync::Mutex;

use crate::routes::Classified;
use crate::routes::{UpstreamId, classify};

/// How long a complete merged document is served before it is fetched again.
const FRESH_FOR: Duration = Duration::from_secs(60);

/// The cache of the merged document.
pub(crate) struct OpenApiCache {
    http: HttpClient,
    sources: Vec<(UpstreamId, String)>,
    cached: Mutex<Option<(Instant, bool, Value)>>,
}

impl OpenApiCache {
    /// A cache over `sources` (upstream, base URL).
    pub(crate) fn new(http: HttpClient, sources: Vec<(UpstreamId, String)>) -> Self {
        OpenApiCache {
            http,
            sources,
            cached: Mutex::new(None),
        }
    }

    /// The merged document, fetching it if the cached one is stale or incomplete.
    pub(crate) async fn document(&self) -> Value {
        let mut cached = self.cached.lock().await;
        if let Some((at, complete, doc)) = cached.as_ref()
            && *complete
            && at.elapsed() < FRESH_FOR
        {
            return doc.clone();
        }
        let fetches = self.sources.iter().map(|(id, base)| async move {
            let doc = async {
                let response = self
                    .http
                    .request(reqwest::Method::GET, format!("{base}/openapi.json"))
                    .send()
                    .await
                    .ok()?;
                if !response.status().is_success() {
                    return None;
                }
                response.json::<Value>().await.ok()
            }
            .await;
            (*id, doc)
        });
        let docs = futures::future::join_all(fetches).await;
        let complete = docs.iter().all(|(_, d)| d.is_some());
        let merged = merge(&docs);
        *cached = Some((Instant::now(), complete, merged.clone()));
        merged
    }
}

/// Joins the documents' paths and schemas, and marks every operation with the scope it needs.
pub(crate) fn merge(docs: &[(UpstreamId, Option<Value>)]) -> Value {
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    let mut missing = Vec::new();
    for (id, doc) in docs {
        let Some(doc) = doc else {
            missing.push(id.name());
            continue;
        };
        if let Some(p) = doc.get("paths").and_then(Value::as_object) {
            for (path, item) in p {
                let mut item = item.clone();
                if let Some(ops) = item.as_object_mut() {
                    for (method, op) in ops.iter_mut() {
                        let Ok(m) = method.to_uppercase().parse::<Method>() else {
                            continue;
                        };
                        if let (Classified::Route(route), Some(op)) =
                            (classify(&m, path), op.as_object_mut())
                        {
                            op.insert(
                                "security".into(),
                                json!([{"bearer": [route.scope.as_str()]}]),
                            );
                            op.insert("x-berth-scope".into(), json!(route.scope.as_str()));
                            op.insert("x-berth-upstream".into(), json!(id.name()));
                        }
                    }
                }
                paths.insert(path.clone(), item);
            }
        }
        if let Some(s) = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object)
        {
            for (name, schema) in s {
                schemas.insert(name.clone(), schema.clone());
            }
        }
    }
    let mut description = "Berth's public API. Every /v1 call needs a bearer token whose scopes include the operation's `x-berth-scope` (or `admin`); reads need `<family>:read`, writes `<family>:write`. /healthz, /readyz and /metrics need no token.".to_string();
    if !missing.is_empty() {
        description.push_str(&format!(
            " Not included right now (unreachable): {}.",
            missing.join(", ")
        ));
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "berth gateway", "version": env!("CARGO_PKG_VERSION"), "description": description},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_operations_carry_their_scope() {
        let registry = json!({"paths": {"/v1/orchestrators/{name}": {"get": {}, "put": {}}}, "components": {"schemas": {"Orchestrator": {}}}});
        let storage = json!({"paths": {"/v1/volumes": {"post": {}, "get": {}}}});
        let doc = merge(&[
            (UpstreamId::Registry, Some(registry)),
            (UpstreamId::StorageOps, Some(storage)),
            (UpstreamId::MachineDriver, None),
        ]);
        assert_eq!(
            doc["paths"]["/v1/orchestrators/{name}"]["put"]["x-berth-scope"],
            "orchestrators:write"
        );
        assert_eq!(
            doc["paths"]["/v1/orchestrators/{name}"]["get"]["security"][0]["bearer"][0],
            "orchestrators:read"
        );
        assert_eq!(
            doc["paths"]["/v1/volumes"]["post"]["x-berth-scope"],
            "volumes:write"
        );
        assert!(doc["components"]["schemas"]["Orchestrator"].is_object());
        assert!(
            doc["info"]["description"]
                .as_str()
                .unwrap()
                .contains("machine-driver")
        );
    }
}
