//! Secrets never reach a log line, even at TRACE: the values are logged through every path a careless
//! caller might use (`?`, `%`, inside a struct, in an error) and the captured output is searched.

use domain::Secret;
use service_kit::SecretString;
use service_kit::testing::LogCapture;

#[test]
fn secret_values_never_appear_in_trace_logs() {
    let capture = LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(capture.clone())
        .finish();
    let mut secret =
        Secret::from_string_data([("alicloudAccessKeySecret", "plain-value-0xdeadbeef")]);
    secret
        .data
        .insert("token".into(), "YmFzZTY0LXZhbHVlLWNhZmU=".into()); // "base64-value-cafe"
    let token = SecretString::new("bearer-token-feedface");
    tracing::subscriber::with_default(subscriber, || {
        tracing::trace!(?secret, "debug form");
        tracing::trace!(%secret, "display form");
        tracing::trace!(?token, %token, "token");
        tracing::trace!(request = ?domain::MachineRequest { secret: secret.clone(), ..Default::default() }, "whole request");
        let err = secret.get("token").map(|_| ());
        tracing::trace!(?err, "lookup result");
    });
    let text = String::from_utf8(capture.bytes()).unwrap();
    assert!(
        text.contains("alicloudAccessKeySecret"),
        "the key names are logged: {text}"
    );
    for value in [
        "plain-value-0xdeadbeef",
        "YmFzZTY0LXZhbHVlLWNhZmU=",
        "base64-value-cafe",
        "bearer-token-feedface",
    ] {
        assert!(!text.contains(value), "{value} leaked into: {text}");
    }
}

#[tokio::test]
async fn a_refused_body_does_not_log_the_secret_it_held() {
    use axum::routing::post;
    use service_kit::extract::Json;

    let capture = LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(capture.clone())
        .finish();
    // Global: the request is served on other tasks and threads. This is the only test of this binary
    // that installs one, and the other test scopes its own subscriber to its thread.
    tracing::subscriber::set_global_default(subscriber).expect("no global subscriber yet");
    let api = utoipa_axum::router::OpenApiRouter::new().route(
        "/v1/machines:create",
        post(|Json(_): Json<domain::MachineRequest>| async { "made" }),
    );
    let server =
        service_kit::testing::spawn(service_kit::ServiceApp::new("secrets", api).into_router())
            .await;
    let response = reqwest::Client::new()
        .post(format!("{}/v1/machines:create", server.url))
        .json(&serde_json::json!({
            "machine": {"metadata": {"name": "m-1"}},
            "machineClass": {"provider": "Alicloud", "providerSpec": {}},
            "secret": {"data": "S3CR3T-VALUE"},
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let answer = response.text().await.unwrap();
    assert!(!answer.contains("S3CR3T-VALUE"), "answered: {answer}");
    server.shutdown().await;
    let text = String::from_utf8(capture.bytes()).unwrap();
    assert!(
        text.contains("secret.data"),
        "the refusal is logged: {text}"
    );
    assert!(!text.contains("S3CR3T-VALUE"), "logged: {text}");
}
