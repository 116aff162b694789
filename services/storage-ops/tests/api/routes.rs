//! The standard routes, the OpenAPI document, and query parameters no route declares.

use client::storage::ListParams;
use domain::volume::ReclaimPolicy;
use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn standard_routes_answer_and_every_route_is_in_the_openapi() {
    let app = spawn_app().await;
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        let r = app
            .http
            .get(format!("{}{path}", app.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let doc: Value = app
        .http
        .get(format!("{}/openapi.json", app.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["info"]["title"], "berth storage-ops");
    // The selector's pattern is a literal in an annotation: held here to the one the domain tests
    // hold to the parser.
    let selector = doc["paths"]["/v1/volumes"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "labelSelector")
        .unwrap();
    assert_eq!(
        selector["schema"]["pattern"].as_str(),
        Some(domain::schema::LABEL_SELECTOR)
    );
    for (path, method) in [
        ("/v1/volumes", "post"),
        ("/v1/volumes", "get"),
        ("/v1/volumes/{namespace}/{name}", "get"),
        ("/v1/volumes/{namespace}/{name}", "delete"),
        ("/v1/volumes/{namespace}/{name}/stats", "get"),
        ("/v1/orphans", "get"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "{method} {path}");
    }
    for schema in [
        "Volume",
        "VolumeList",
        "VolumeProvisionerProfile",
        "VolumeStats",
        "OrphanList",
        "DeleteResult",
        "Problem",
    ] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
    }
}

#[tokio::test]
async fn every_route_refuses_query_parameters_it_does_not_declare() {
    let app = spawn_app().await;
    app.storage.add(&profile("data", "1Gi")).await.unwrap();
    for (method, path, name) in [
        ("GET", "/v1/volumes?bogus=1", "bogus"),
        ("GET", "/v1/volumes?limit=5&Namespace=team", "Namespace"),
        ("GET", "/v1/volumes/team/data?bogus=1", "bogus"),
        ("GET", "/v1/volumes/team/data/stats?verbose", "verbose"),
        ("GET", "/v1/orphans?bogus=1", "bogus"),
        ("DELETE", "/v1/volumes/team/data?force=true", "force"),
        ("POST", "/v1/volumes?dryRun=true", "dryRun"),
    ] {
        let request = app
            .http
            .request(method.parse().unwrap(), format!("{}{path}", app.url));
        let request = if method == "POST" {
            request.json(&json!({"name": "other", "capacity": "1Gi"}))
        } else {
            request
        };
        let (status, p) = problem(request.send().await.unwrap()).await;
        assert_eq!(status, 400, "{method} {path}: {p}");
        assert_eq!(p["code"], 3, "{p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(&format!("{name}: is not a query parameter of {method} ")),
            "{method} {path}: {detail}"
        );
    }
    // Nothing was made or removed by the refused calls; declared parameters still work.
    let page = app
        .storage
        .list(&ListParams {
            namespace: Some("team".into()),
            limit: Some(5),
            ..ListParams::default()
        })
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    let gone = app
        .storage
        .delete_with_policy("team", "data", ReclaimPolicy::Delete)
        .await
        .unwrap();
    assert!(gone.deleted);
}
