//! JSON bodies through the kit's `Json` extractor: every body is an object, and a body that does not
//! decode is refused naming the field and the expected type, never the value it held.

use axum::routing::post;
use serde_json::{Value, json};
use service_kit::extract::Json;
use service_kit::testing::spawn;
use service_kit::{HttpConfig, ServiceApp};
use utoipa_axum::router::OpenApiRouter;

/// Routes shaped like the services' own: a driver request (which carries a secret), GetVolumeIDs, a
/// free-form object and a volume profile.
fn app() -> axum::Router {
    let api = OpenApiRouter::new()
        .route(
            "/v1/machines:create",
            post(|Json(_): Json<domain::MachineRequest>| async { Json(json!({})) }),
        )
        .route(
            "/v1/volume-ids",
            post(|Json(r): Json<domain::GetVolumeIdsRequest>| async move {
                Json(json!({"specs": r.pv_specs.len()}))
            }),
        )
        .route(
            "/v1/echo",
            post(|Json(v): Json<Value>| async move { Json(v) }),
        )
        .route(
            "/v1/volumes",
            post(
                |Json(p): Json<domain::VolumeProvisionerProfile>| async move {
                    Json(json!({"name": p.name}))
                },
            ),
        );
    ServiceApp::new("bodies", api)
        .http_config(HttpConfig::default())
        .into_router()
}

/// POSTs `body` as JSON text and returns the status and the answer.
async fn post_text(url: &str, path: &str, body: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    if status >= 400 {
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
    (status, r.json().await.unwrap_or(Value::Null))
}

fn detail(body: &Value) -> &str {
    body["detail"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn arrays_and_other_non_objects_are_refused_for_every_body() {
    let server = spawn(app()).await;
    // serde reads a struct from an array by position; a body must be an object instead.
    for (path, body) in [
        ("/v1/volumes", r#"["arrayvol",null,"1Mi"]"#),
        ("/v1/volume-ids", "[[]]"),
        ("/v1/machines:create", "[{}, {}, {}]"),
        ("/v1/echo", "[1, 2]"),
        ("/v1/echo", "\"text\""),
        ("/v1/echo", "42"),
        ("/v1/echo", "null"),
        ("/v1/echo", "  \n true"),
    ] {
        let (status, answer) = post_text(&server.url, path, body).await;
        assert_eq!(status, 400, "{path} {body}: {answer}");
        assert_eq!(answer["code"], 3, "{answer}");
        assert!(
            detail(&answer).starts_with("body: must be a JSON object"),
            "{path} {body}: {answer}"
        );
    }
    // Objects still pass, leading whitespace and all.
    let (status, answer) = post_text(&server.url, "/v1/volume-ids", " {\"pvSpecs\": []}").await;
    assert_eq!(status, 200, "{answer}");
    let (status, _) = post_text(&server.url, "/v1/echo", "{}").await;
    assert_eq!(status, 200);
    // Broken JSON still says where it broke.
    let (status, answer) = post_text(&server.url, "/v1/echo", "[1,").await;
    assert_eq!(status, 400);
    assert!(detail(&answer).starts_with("body: "), "{answer}");
    let (status, answer) = post_text(&server.url, "/v1/echo", "").await;
    assert_eq!(status, 400);
    assert!(detail(&answer).starts_with("body: "), "{answer}");
}

#[tokio::test]
async fn decode_errors_name_the_field_and_type_but_never_the_value() {
    let server = spawn(app()).await;
    let machine = json!({"metadata": {"name": "m-1"}});
    let class = json!({"provider": "Alicloud", "providerSpec": {}});
    for (secret, field, expected) in [
        (
            json!({"data": "S3CR3T-VALUE"}),
            "secret.data",
            "expected a map",
        ),
        (json!("S3CR3T-VALUE"), "secret", "expected struct Secret"),
        (
            json!({"stringData": {"password": ["S3CR3T-VALUE"]}}),
            "secret.stringData.password",
            "expected a string",
        ),
        (
            json!({"data": {"token": 31337_31337u64}}),
            "secret.data.token",
            "expected a string",
        ),
        (
            json!({"stringData": {"password": {"S3CR3T-VALUE": 1}}}),
            "secret.stringData.password",
            "expected a string",
        ),
    ] {
        let body = json!({"machine": machine, "machineClass": class, "secret": secret});
        let (status, answer) =
            post_text(&server.url, "/v1/machines:create", &body.to_string()).await;
        assert_eq!(status, 400, "{answer}");
        let text = answer.to_string();
        assert!(!text.contains("S3CR3T-VALUE"), "the value leaked: {text}");
        assert!(!text.contains("3133731337"), "the value leaked: {text}");
        assert!(
            detail(&answer).starts_with(&format!("{field}: invalid type: ")),
            "{text}"
        );
        assert!(detail(&answer).contains(expected), "{text}");
    }
    // An unknown field is named (it is a name, not a value); a missing one too.
    let (_, answer) = post_text(
        &server.url,
        "/v1/volumes",
        r#"{"name": "a", "capacity": "1Gi", "size": "S3CR3T-VALUE"}"#,
    )
    .await;
    assert!(detail(&answer).contains("unknown field `size`"), "{answer}");
    assert!(!answer.to_string().contains("S3CR3T-VALUE"), "{answer}");
    let (_, answer) = post_text(&server.url, "/v1/volumes", r#"{"capacity": "1Gi"}"#).await;
    assert_eq!(detail(&answer), "body: missing field `name`", "{answer}");
    // A value of the wrong kind for an enum or a number is not echoed either.
    let (_, answer) = post_text(
        &server.url,
        "/v1/volumes",
        r#"{"name": "a", "capacity": "1Gi", "replicas": "S3CR3T-VALUE"}"#,
    )
    .await;
    assert!(
        detail(&answer).starts_with("replicas: invalid type: string, expected"),
        "{answer}"
    );
    let (_, answer) = post_text(
        &server.url,
        "/v1/volumes",
        r#"{"name": "a", "capacity": "1Gi", "replicas": 31337313373133731337}"#,
    )
    .await;
    assert!(
        !answer.to_string().contains("31337313373133731337"),
        "{answer}"
    );
    assert!(detail(&answer).starts_with("replicas: "), "{answer}");
}
