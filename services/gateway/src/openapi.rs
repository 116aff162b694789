//! The merged OpenAPI document: the three services' documents, fetched with the internal credential,
//! joined, and annotated with the scope each operation needs and the answers the gateway itself gives
//! on every operation (400, 401, 403, 408, 413, 429, 503, 504, as shared `components/responses`).
//! Cached; refetched when stale or when an upstream was missing from the last merge.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{Value, json};
use service_kit::openapi;
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

/// The gateway's own answers, which any proxied operation can get before (or instead of) its
/// upstream's: (status, name under `components/responses`, description). 429 and 503 carry
/// `Retry-After`. (The gateway never answers 502: an upstream it cannot reach, or whose answer
/// breaks off, is its 503.)
const GATEWAY_RESPONSES: [(&str, &str, &str); 8] = [
    (
        "400",
        "GatewayBadRequest",
        "Refused by the gateway (code 3): two Authorization headers, a path with a dot-segment or an encoded slash, or a body that ended before its declared length",
    ),
    (
        "401",
        "Unauthenticated",
        "No bearer token, or one the gateway does not know (code 16)",
    ),
    (
        "403",
        "Forbidden",
        "The token lacks the scope the operation needs, its x-berth-scope (code 7)",
    ),
    (
        "408",
        "BodyTimeout",
        "The request body did not arrive whole within the upstream's time limit, or stopped arriving (code 4)",
    ),
    (
        "413",
        "BodyTooLarge",
        "The body is larger than the limit, BERTH_BODY_LIMIT (code 3)",
    ),
    (
        "429",
        "TooManyRequests",
        "The token is over its rate limit, or its address failed to authenticate too often (code 8); Retry-After says when to call again",
    ),
    (
        "503",
        "UpstreamUnavailable",
        "The service behind this operation is unreachable, or calls to it are paused by its circuit breaker (code 14); Retry-After says when to call again",
    ),
    (
        "504",
        "UpstreamTimeout",
        "The service behind this operation did not answer within its time limit (code 4)",
    ),
];

/// Joins the documents' paths and components, marks every operation with the scope it needs, and
/// states the gateway's own answers on every operation.
pub(crate) fn merge(docs: &[(UpstreamId, Option<Value>)]) -> Value {
    let mut paths = serde_json::Map::new();
    let mut components: BTreeMap<&str, serde_json::Map<String, Value>> = BTreeMap::new();
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
                            add_gateway_responses(op);
                        }
                    }
                }
                paths.insert(path.clone(), item);
            }
        }
        for kind in ["schemas", "responses", "headers"] {
            if let Some(s) = doc
                .pointer(&format!("/components/{kind}"))
                .and_then(Value::as_object)
            {
                let into = components.entry(kind).or_default();
                for (name, value) in s {
                    into.insert(name.clone(), value.clone());
                }
            }
        }
    }
    let responses = components.entry("responses").or_default();
    for (status, name, description) in GATEWAY_RESPONSES {
        responses.insert(
            name.to_string(),
            openapi::problem_response(status, description),
        );
    }
    components
        .entry("headers")
        .or_default()
        .extend(openapi::shared_headers().map(|(name, header)| (name.to_string(), header)));
    // A shared answer of a service that the gateway's own now stands for is no longer referenced.
    let referenced = serde_json::to_string(&paths).unwrap_or_default();
    components
        .entry("responses")
        .or_default()
        .retain(|name, _| referenced.contains(&format!("\"#/components/responses/{name}\"")));
    let mut components: serde_json::Map<String, Value> = components
        .into_iter()
        .map(|(kind, map)| (kind.to_string(), Value::Object(map)))
        .collect();
    components.insert(
        "securitySchemes".into(),
        json!({"bearer": {"type": "http", "scheme": "bearer"}}),
    );
    let mut description = "Berth's public API. Every /v1 call needs a bearer token whose scopes include the operation's `x-berth-scope` (or `admin`); reads need `<family>:read`, writes `<family>:write`. /healthz and /readyz need no token; the gateway's /metrics needs `metrics:read` on a cluster-wide token (its counts are every namespace's together). Every error answer is application/problem+json (schema Problem).".to_string();
    if !missing.is_empty() {
        description.push_str(&format!(
            " Not included right now (unreachable): {}.",
            missing.join(", ")
        ));
    }
    let mut merged = json!({
        "openapi": "3.1.0",
        "info": {"title": "berth gateway", "version": env!("CARGO_PKG_VERSION"), "description": description},
        "paths": paths,
        "components": components,
    });
    openapi::bodiless_head(&mut merged);
    merged
}

/// States the gateway's answers on one operation. Where the upstream states the same status by a
/// shared reference (its stack's 413, its own timeout's 504), the gateway's shared answer, which
/// covers both, takes its place; where it describes its own (a machine driver's 401 from the
/// cloud, storage-ops' 429 for capacity), that stays and says the gateway's as well.
fn add_gateway_responses(operation: &mut serde_json::Map<String, Value>) {
    let responses = openapi::responses_of(operation);
    for (status, name, description) in GATEWAY_RESPONSES {
        match responses.get_mut(status) {
            Some(own) if own.get("$ref").is_none() => {
                if let Some(text) = own.get("description").and_then(Value::as_str) {
                    own["description"] =
                        json!(format!("{text}. Or, from the gateway: {description}"));
                }
                openapi::tell_the_truth(status, own);
            }
            _ => {
                responses.insert(status.to_string(), openapi::response_ref(name));
            }
        }
    }
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
        // The gateway's own answers, on every operation, by reference.
        for status in ["400", "401", "403", "408", "413", "429", "503", "504"] {
            let response = &doc["paths"]["/v1/volumes"]["get"]["responses"][status];
            let name = response["$ref"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap();
            assert!(
                doc["components"]["responses"][name]["content"]["application/problem+json"]
                    .is_object(),
                "{status}"
            );
        }
        assert!(
            doc["components"]["responses"]["TooManyRequests"]["headers"]["Retry-After"].is_object()
        );
        assert!(
            doc["info"]["description"]
                .as_str()
                .unwrap()
                .contains("machine-driver")
        );
    }
}
