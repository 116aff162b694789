//! The standard routes, the OpenAPI document, and the kinds with their config schemas.

use domain::orchestrator::DEFAULT_DOCKER_HOST;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn standard_routes_answer_and_every_route_is_in_the_openapi_document() {
    let app = spawn_app().await;
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        let r = app.send(app.http.get(format!("{}{path}", app.url))).await;
        assert_eq!(r.status, 200, "{path}");
    }
    let doc = app
        .send(app.http.get(format!("{}/openapi.json", app.url)))
        .await
        .body;
    assert_eq!(doc["info"]["title"], "berth orchestrator-registry");
    for (path, methods) in [
        (
            "/v1/orchestrators/{name}",
            &["get", "head", "put", "delete"][..],
        ),
        ("/v1/orchestrators", &["get"][..]),
        ("/v1/orchestrators:detect", &["get"][..]),
        ("/v1/orchestrators:default", &["get"][..]),
        ("/v1/kinds", &["get"][..]),
    ] {
        for m in methods {
            assert!(doc["paths"][path][m].is_object(), "{m} {path} missing");
        }
    }
    let put_params = doc["paths"]["/v1/orchestrators/{name}"]["put"]["parameters"]
        .as_array()
        .unwrap();
    assert!(
        put_params
            .iter()
            .any(|p| p["name"] == "If-Match" && p["in"] == "header")
    );
    for schema in [
        "Orchestrator",
        "RegisterOrchestrator",
        "OrchestratorList",
        "KindInfo",
        "Detection",
        "Problem",
    ] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
    }
}

#[tokio::test]
async fn kinds_lists_the_four_factories_with_their_config_schemas() {
    let app = spawn_app().await;
    let r = app.kinds().await;
    assert_eq!(r.status, 200);
    let kinds = r.body.as_array().unwrap();
    let by_kind = |k: &str| kinds.iter().find(|i| i["kind"] == k).unwrap().clone();
    assert_eq!(kinds.len(), 4);
    assert_eq!(by_kind("local")["storageOps"], true);
    assert_eq!(by_kind("docker")["storageOps"], true);
    assert_eq!(by_kind("kubernetes")["storageOps"], true);
    assert_eq!(
        by_kind("kubernetes")["configSchema"]["required"],
        json!(["namespace"])
    );
    assert_eq!(by_kind("nomad")["storageOps"], false);
    assert!(by_kind("local")["configSchema"]["properties"]["basePath"].is_object());
    assert_eq!(
        by_kind("local")["configSchema"]["required"],
        json!(["basePath"])
    );
    assert_eq!(
        by_kind("docker")["configSchema"]["properties"]["host"]["default"],
        DEFAULT_DOCKER_HOST
    );
    // The typed client reads the same answer.
    let typed = app.registry.kinds().await.unwrap();
    assert_eq!(typed.len(), 4);
    assert!(typed.iter().all(|k| !k.description.is_empty()));
}
