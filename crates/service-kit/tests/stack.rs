//! The shared stack over real HTTP: error format, limits, panics, timeouts, request ids, trace context,
//! the internal credential, metrics and the standard routes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use axum::routing::{get, post};
use domain::{Code, Status};
use service_kit::health::Check;
use service_kit::outbound::HttpClient;
use service_kit::testing::spawn;
use service_kit::{ApiError, HttpConfig, SecretString, ServiceApp};
use utoipa_axum::router::OpenApiRouter;

fn test_app(http: HttpConfig, ready: bool) -> axum::Router {
    let api = OpenApiRouter::new()
        .route("/v1/things/{name}", get(|service_kit::extract::Path(name): service_kit::extract::Path<String>| async move {
            Err::<(), _>(ApiError::new(Status::not_found(format!("thing {name:?} not found"))))
        }))
        .route("/v1/echo", post(|service_kit::extract::Json(v): service_kit::extract::Json<serde_json::Value>| async move {
            service_kit::extract::Json(v)
        }))
        .route("/v1/panic", get(|| async {
            if std::hint::black_box(true) {
                panic!("secret-in-panic-payload");
            }
            "unreachable"
        }))
        .route("/v1/slow", get(|| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            "late"
        }))
        .route("/v1/busy", get(|| async {
            Err::<(), _>(ApiError::from_code(Code::Unavailable, "try later").with_retry_after(Duration::from_secs(7)))
        }));
    ServiceApp::new("test", api)
        .http_config(http)
        .readiness(Check::new("db", move || async move {
            if ready { Ok(()) } else { Err("closed".into()) }
        }))
        .into_router()
}

/// GETs `path` from `server`.
async fn get_from(server: &service_kit::testing::TestServer, path: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{}{path}", server.url))
        .send()
        .await
        .unwrap()
}

fn http() -> HttpConfig {
    HttpConfig {
        request_timeout: Duration::from_millis(300),
        body_limit: 1024,
        internal_token: None,
    }
}

async fn problem(resp: reqwest::Response) -> (u16, HeaderMap, serde_json::Value) {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    assert_eq!(
        headers["content-type"], "application/problem+json",
        "status {status}"
    );
    let body: serde_json::Value = resp.json().await.unwrap();
    let rid = body["requestId"].as_str().unwrap();
    assert!(!rid.is_empty());
    assert_eq!(headers["x-request-id"].to_str().unwrap(), rid);
    (status, headers, body)
}

#[tokio::test]
async fn not_found_is_problem_json_with_request_id() {
    let server = spawn(test_app(http(), true)).await;
    let c = reqwest::Client::new();
    let (status, _, body) = problem(
        c.get(format!("{}/v1/things/x", server.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], 5);
    assert_eq!(body["title"], "NotFound");
    assert_eq!(body["type"], "about:blank");
    assert_eq!(body["detail"], "thing \"x\" not found");
    // A route that does not exist at all answers the same format.
    let (status, _, body) = problem(
        c.get(format!("{}/nowhere", server.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], 5);
    // A wrong method too.
    let (status, _, body) = problem(
        c.delete(format!("{}/v1/echo", server.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 405);
    assert_eq!(body["code"], 3);
}

#[tokio::test]
async fn caller_request_id_is_echoed() {
    let server = spawn(test_app(http(), true)).await;
    let resp = reqwest::Client::new()
        .get(format!("{}/v1/things/x", server.url))
        .header("x-request-id", "abc-123")
        .send()
        .await
        .unwrap();
    let (_, _, body) = problem(resp).await;
    assert_eq!(body["requestId"], "abc-123");
}

#[tokio::test]
async fn oversized_body_is_413_problem_json() {
    let server = spawn(test_app(http(), true)).await;
    let big = serde_json::json!({"data": "x".repeat(4096)});
    let (status, _, body) = problem(
        reqwest::Client::new()
            .post(format!("{}/v1/echo", server.url))
            .json(&big)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(body["code"], 3);
    // Under the limit it passes.
    let small = serde_json::json!({"data": "x"});
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/echo", server.url))
        .json(&small)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn bad_json_names_the_problem() {
    let server = spawn(test_app(http(), true)).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/echo", server.url))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    let (status, _, body) = problem(resp).await;
    assert_eq!(status, 400);
    assert!(
        body["detail"].as_str().unwrap().starts_with("body: "),
        "{body}"
    );
}

#[tokio::test]
async fn panic_is_500_problem_json_without_the_payload() {
    let server = spawn(test_app(http(), true)).await;
    let resp = get_from(&server, "/v1/panic").await;
    let (status, _, body) = problem(resp).await;
    assert_eq!(status, 500);
    assert_eq!(body["code"], 13);
    assert!(!body.to_string().contains("secret-in-panic-payload"));
}

#[tokio::test]
async fn slow_handler_is_504_problem_json() {
    let server = spawn(test_app(http(), true)).await;
    let resp = get_from(&server, "/v1/slow").await;
    let (status, _, body) = problem(resp).await;
    assert_eq!(status, 504);
    assert_eq!(body["code"], 4);
}

#[tokio::test]
async fn unavailable_carries_retry_after() {
    let server = spawn(test_app(http(), true)).await;
    let resp = get_from(&server, "/v1/busy").await;
    let (status, headers, _) = problem(resp).await;
    assert_eq!(status, 503);
    assert_eq!(headers["retry-after"], "7");
}

#[tokio::test]
async fn health_readiness_metrics_and_openapi() {
    let server = spawn(test_app(http(), true)).await;
    let c = reqwest::Client::new();
    assert_eq!(
        c.get(format!("{}/healthz", server.url))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        c.get(format!("{}/readyz", server.url))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let _ = c
        .get(format!("{}/v1/things/abc", server.url))
        .send()
        .await
        .unwrap();
    let metrics = c
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("route=\"/v1/things/{name}\""), "{metrics}");
    assert!(
        !metrics.contains("/v1/things/abc"),
        "raw paths must not become labels"
    );
    assert!(
        metrics.contains("http_request_duration_seconds_bucket"),
        "{metrics}"
    );
    let doc: serde_json::Value = c
        .get(format!("{}/openapi.json", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["info"]["title"], "berth test");
    assert!(doc["components"]["schemas"]["Problem"].is_object());

    let unready = spawn(test_app(http(), false)).await;
    let (status, _, body) = problem(
        c.get(format!("{}/readyz", unready.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 503);
    assert_eq!(body["detail"], "not ready: db: closed");
}

#[tokio::test]
async fn internal_token_is_required_when_configured() {
    let config = HttpConfig {
        internal_token: Some(SecretString::new("inside")),
        ..http()
    };
    let server = spawn(test_app(config, true)).await;
    let c = reqwest::Client::new();
    let (status, _, body) = problem(
        c.get(format!("{}/v1/things/x", server.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(body["code"], 16);
    let wrong = c
        .get(format!("{}/v1/things/x", server.url))
        .bearer_auth("outside")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let right = c
        .get(format!("{}/v1/things/x", server.url))
        .bearer_auth("inside")
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 404);
    // Probes stay open so orchestrators can check health.
    assert_eq!(
        c.get(format!("{}/healthz", server.url))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn the_openapi_document_needs_no_internal_credential() {
    let config = HttpConfig {
        internal_token: Some(SecretString::new("inside")),
        ..http()
    };
    let server = spawn(test_app(config, true)).await;
    let resp = get_from(&server, "/openapi.json").await;
    assert_eq!(resp.status(), 200, "the document is public like the probes");
    let doc: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(doc["info"]["title"], "berth test");
    // Only the exact path is public: nothing under it, and no API route.
    assert_eq!(get_from(&server, "/openapi.json/x").await.status(), 401);
    assert_eq!(get_from(&server, "/v1/things/x").await.status(), 401);
}

/// An upstream that records the headers it receives.
async fn recording_upstream() -> (service_kit::testing::TestServer, Arc<Mutex<Vec<HeaderMap>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let router = axum::Router::new().route(
        "/hop",
        get(move |headers: HeaderMap| {
            let record = record.clone();
            async move {
                record.lock().unwrap().push(headers);
                "ok"
            }
        }),
    );
    (spawn(router).await, seen)
}

#[tokio::test]
async fn traceparent_and_request_id_reach_the_outgoing_call() {
    let (upstream, seen) = recording_upstream().await;
    let client = HttpClient::new(
        Duration::from_secs(5),
        Some(SecretString::new("internal-cred")),
    );
    let hop_url = format!("{}/hop", upstream.url);
    let api = OpenApiRouter::new().route(
        "/v1/forward",
        get(move || {
            let client = client.clone();
            let hop_url = hop_url.clone();
            async move {
                client
                    .request(reqwest::Method::GET, &hop_url)
                    .send()
                    .await
                    .unwrap();
                "forwarded"
            }
        }),
    );
    let server = spawn(ServiceApp::new("fwd", api).into_router()).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let incoming = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let resp = reqwest::Client::new()
        .get(format!("{}/v1/forward", server.url))
        .header("traceparent", &incoming)
        .header("x-request-id", "req-42")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let headers = seen.lock().unwrap().pop().expect("the upstream was called");
    let outgoing = headers["traceparent"].to_str().unwrap();
    let parts: Vec<&str> = outgoing.split('-').collect();
    assert_eq!(parts.len(), 4, "{outgoing}");
    assert_eq!(parts[1], trace_id, "the trace continues");
    assert_ne!(
        parts[2], "00f067aa0ba902b7",
        "with a span of this service as parent"
    );
    assert_eq!(headers["x-request-id"], "req-42");
    assert_eq!(headers["authorization"], "Bearer internal-cred");
}
