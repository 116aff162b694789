//! The order of the one middleware stack, outermost first: request id → trace (with `traceparent`)
//! → metrics → problem+json → internal credential → timeout → panic → body limit → handler.
//!
//! Every service composes this stack ([`service_kit::ServiceApp`]); the gateway's engine runs the
//! same steps through [`service_kit::middleware::Stack::handle`]. The order cannot be seen from one
//! answer, so this test pins it by what each step must and must not see of the others:
//! - the request id is outermost: every answer, whichever step made it, carries it, and the
//!   handler sees the same one;
//! - the trace span is inside it and around the handler: what the handler sends on continues the
//!   caller's trace;
//! - metrics are outside every step that can answer: they count the final status of refusals
//!   (401), timeouts (504), panics (500) and oversized bodies (413);
//! - the credential comes before the timeout and the body limit: a call without it is refused at
//!   once, before a slow handler or an oversized body matters, and no handler runs;
//! - the body limit is innermost: with the credential, an oversized body is a 413 and no handler
//!   runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::routing::{get, post};
use service_kit::testing::spawn;
use service_kit::{HttpConfig, SecretString, ServiceApp};
use utoipa_axum::router::OpenApiRouter;

/// The service name: its own series on the metrics page.
const SERVICE: &str = "stack-order";

#[tokio::test]
async fn the_stack_runs_in_its_documented_order() {
    let handled = Arc::new(AtomicUsize::new(0));
    let api = {
        let (seen, slow, sink, boom) = (
            handled.clone(),
            handled.clone(),
            handled.clone(),
            handled.clone(),
        );
        OpenApiRouter::new()
            .route(
                "/v1/seen",
                get(move || {
                    let seen = seen.clone();
                    async move {
                        seen.fetch_add(1, Ordering::SeqCst);
                        // What this handler would send on: the request id and trace context the
                        // outer steps set around it.
                        let mut headers = reqwest::header::HeaderMap::new();
                        service_kit::outbound::inject_propagation(&mut headers);
                        let header = |name: &str| {
                            headers
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_string()
                        };
                        axum::Json(serde_json::json!({
                            "requestId": service_kit::request_id::current(),
                            "outgoingRequestId": header("x-request-id"),
                            "traceparent": header("traceparent"),
                        }))
                    }
                }),
            )
            .route(
                "/v1/slow",
                get(move || {
                    let slow = slow.clone();
                    async move {
                        slow.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        "late"
                    }
                }),
            )
            .route(
                "/v1/sink",
                post(move |body: axum::body::Bytes| {
                    let sink = sink.clone();
                    async move {
                        sink.fetch_add(1, Ordering::SeqCst);
                        body.len().to_string()
                    }
                }),
            )
            .route(
                "/v1/panic",
                get(move || {
                    let boom = boom.clone();
                    async move {
                        boom.fetch_add(1, Ordering::SeqCst);
                        if std::hint::black_box(true) {
                            panic!("payload");
                        }
                        "unreachable"
                    }
                }),
            )
    };
    let server = spawn(
        ServiceApp::new(SERVICE, api)
            .http_config(HttpConfig {
                request_timeout: Duration::from_millis(300),
                body_limit: 16,
                internal_token: Some(SecretString::new("order-cred")),
            })
            .into_router(),
    )
    .await;
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str, token: bool| {
        let mut request = http.request(method, format!("{}{path}", server.url));
        if token {
            request = request.bearer_auth("order-cred");
        }
        request
    };
    // Every answer, whichever step made it, is problem+json (or the handler's) with the request id.
    let answer = |response: reqwest::Response| async move {
        let status = response.status().as_u16();
        let id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_string();
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        if status >= 400 {
            assert_eq!(body["requestId"], id.as_str(), "{status}: {body}");
        }
        (status, id, body)
    };

    // Request id, then trace, around the handler.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let (status, id, body) = answer(
        call(reqwest::Method::GET, "/v1/seen", true)
            .header("x-request-id", "order-1")
            .header("traceparent", format!("00-{trace_id}-00f067aa0ba902b7-01"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, id.as_str()), (200, "order-1"));
    assert_eq!(
        body["requestId"], "order-1",
        "the handler runs inside the request id"
    );
    assert_eq!(body["outgoingRequestId"], "order-1");
    let traceparent = body["traceparent"].as_str().unwrap();
    assert_eq!(
        traceparent.split('-').nth(1),
        Some(trace_id),
        "the handler runs inside the trace span: {traceparent}"
    );

    // The credential before the timeout: refused at once, the slow handler never started.
    let started = Instant::now();
    let (status, _, body) = answer(
        call(reqwest::Method::GET, "/v1/slow", false)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(started.elapsed() < Duration::from_millis(300));
    // The credential before the body limit: an oversized body without it is a 401, not a 413.
    let (status, _, _) = answer(
        call(reqwest::Method::POST, "/v1/sink", false)
            .body(vec![b'x'; 64])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(
        handled.load(Ordering::SeqCst),
        1,
        "no refused call reached a handler"
    );

    // Inside the credential: the timeout, the panic catcher and the body limit.
    let (status, _, _) = answer(
        call(reqwest::Method::GET, "/v1/slow", true)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 504);
    let (status, _, _) = answer(
        call(reqwest::Method::GET, "/v1/panic", true)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 500);
    let (status, _, _) = answer(
        call(reqwest::Method::POST, "/v1/sink", true)
            .body(vec![b'x'; 64])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(
        handled.load(Ordering::SeqCst),
        3,
        "the slow and the panicking handlers ran; the oversized body reached none"
    );

    // Metrics outside them all: each answer counted under its final status and route template.
    let page = reqwest::get(format!("{}/metrics", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (method, route, status) in [
        ("GET", "/v1/seen", 200),
        ("GET", "/v1/slow", 401),
        ("POST", "/v1/sink", 401),
        ("GET", "/v1/slow", 504),
        ("GET", "/v1/panic", 500),
        ("POST", "/v1/sink", 413),
    ] {
        let line = format!(
            "http_requests_total{{service=\"{SERVICE}\",method=\"{method}\",route=\"{route}\",status=\"{status}\"}} 1"
        );
        assert!(
            page.lines().any(|l| l == line),
            "{line} missing from\n{page}"
        );
    }
}
