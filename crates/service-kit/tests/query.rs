//! Query parameters: every route takes exactly the ones its OpenAPI operation declares, and any other
//! is a 400 naming it, whether or not the handler reads the query at all.

use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};
use service_kit::extract::{Json, Query};
use service_kit::testing::spawn;
use service_kit::{HttpConfig, ServiceApp};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Page size.
    limit: Option<u32>,
    /// The previous page's token.
    #[serde(rename = "continue")]
    #[param(rename = "continue")]
    continue_token: Option<String>,
}

/// A route that reads its query.
#[utoipa::path(get, path = "/v1/items", params(ListQuery), responses((status = 200)))]
async fn list_items(Query(q): Query<ListQuery>) -> Json<Value> {
    Json(json!({"limit": q.limit, "continue": q.continue_token}))
}

/// A route that declares no query parameters and never looks at the query.
#[utoipa::path(
    get,
    path = "/v1/items/{name}",
    params(("name" = String, Path, description = "The item")),
    responses((status = 200))
)]
async fn get_item(
    service_kit::extract::Path(name): service_kit::extract::Path<String>,
) -> Json<Value> {
    Json(json!({"name": name}))
}

fn app() -> axum::Router {
    let api = OpenApiRouter::new()
        .routes(routes!(list_items))
        .routes(routes!(get_item))
        // Not in the document at all: takes no query parameters either.
        .route("/v1/undocumented", get(|| async { "ok" }));
    ServiceApp::new("query", api)
        .http_config(HttpConfig::default())
        .into_router()
}

async fn call(url: &str, path_and_query: &str) -> (u16, Value) {
    let r = reqwest::get(format!("{url}{path_and_query}"))
        .await
        .unwrap();
    let status = r.status().as_u16();
    if status >= 400 {
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn undeclared_query_parameters_are_refused_on_every_route() {
    let server = spawn(app()).await;
    for (path, name) in [
        ("/v1/items?bogus=1", "bogus"),
        ("/v1/items?limit=5&bogus", "bogus"),
        ("/v1/items?%62ogus=1", "bogus"),
        ("/v1/items/a?limit=5", "limit"),
        ("/v1/items/a?x=", "x"),
        ("/v1/undocumented?x=1", "x"),
        ("/healthz?verbose=1", "verbose"),
        ("/openapi.json?format=yaml", "format"),
    ] {
        let (status, body) = call(&server.url, path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["code"], 3, "{body}");
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(&format!("{name}: is not a query parameter of ")),
            "{path}: {detail}"
        );
    }
    let (_, body) = call(&server.url, "/v1/items?bogus=1").await;
    assert_eq!(
        body["detail"],
        "bogus: is not a query parameter of GET /v1/items; it takes limit, continue"
    );
    let (_, body) = call(&server.url, "/v1/items/a?x=1").await;
    assert_eq!(
        body["detail"],
        "x: is not a query parameter of GET /v1/items/{name}; it takes none"
    );
    // Declared ones, an empty query and a HEAD of a GET route pass.
    for path in [
        "/v1/items?limit=5&continue=abc",
        "/v1/items?",
        "/v1/items",
        "/v1/items/a",
        "/v1/undocumented",
        "/healthz",
    ] {
        assert_eq!(call(&server.url, path).await.0, 200, "{path}");
    }
    let head = reqwest::Client::new()
        .head(format!("{}/v1/items/a?x=1", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 400);
    // The document states that 400 on every operation.
    let doc = call(&server.url, "/openapi.json").await.1;
    for path in ["/v1/items", "/v1/items/{name}"] {
        let refusal = &doc["paths"][path]["get"]["responses"]["400"];
        assert_eq!(
            refusal["content"]["application/problem+json"]["schema"]["$ref"],
            "#/components/schemas/Problem",
            "{path}: {refusal}"
        );
    }
}
