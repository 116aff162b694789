//! The shared stack over real HTTP: error format, limits, panics, timeouts, request ids, trace context,
//! the internal credential, metrics and the standard routes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use axum::routing::{get, post};
use domain::{Code, Status};
use service_kit::health::{Check, NotReady};
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
            if ready {
                Ok(())
            } else {
                Err(NotReady::new("closed"))
            }
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

/// Sends `request` as raw bytes and reads the answer until the server closes (or 5 s pass).
async fn raw_exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer and close before reading everything: a failed write is fine.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

fn assert_problem(answer: &str, status: u16) {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    assert!(
        head.starts_with(&format!("HTTP/1.1 {status} ")),
        "want {status}: {answer:?}"
    );
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains("content-type: application/problem+json"),
        "{answer:?}"
    );
    assert!(head.contains("x-request-id: "), "{answer:?}");
    let problem: serde_json::Value = serde_json::from_str(body).expect("a problem+json body");
    assert_eq!(problem["status"], status, "{body}");
    assert_eq!(problem["code"], 3, "{body}");
    assert!(!problem["requestId"].as_str().unwrap().is_empty(), "{body}");
}

#[tokio::test]
async fn protocol_errors_are_problem_json_with_a_request_id() {
    let server = spawn(test_app(http(), true)).await;
    // A garbage request line.
    assert_problem(
        &raw_exchange(server.addr, b"\x01\x02 nonsense\r\n\r\n").await,
        400,
    );
    // A Content-Length that is not a number.
    assert_problem(
        &raw_exchange(
            server.addr,
            b"POST /v1/echo HTTP/1.1\r\nhost: x\r\ncontent-length: ten\r\n\r\n",
        )
        .await,
        400,
    );
    // A path over hyper's limit.
    let long = format!("GET /{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(70 * 1024));
    let answer = raw_exchange(server.addr, long.as_bytes()).await;
    assert!(
        answer.starts_with("HTTP/1.1 414 ") || answer.starts_with("HTTP/1.1 431 "),
        "{answer:?}"
    );
    assert_problem(&answer, answer[9..12].parse().unwrap());
    // More header fields than hyper takes.
    let mut many = String::from("GET /healthz HTTP/1.1\r\nhost: x\r\n");
    for i in 0..120 {
        many.push_str(&format!("x-h{i}: v\r\n"));
    }
    many.push_str("\r\n");
    assert_problem(&raw_exchange(server.addr, many.as_bytes()).await, 431);
}

/// The number of series lines (samples) in a Prometheus text page.
fn series_count(page: &str) -> usize {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count()
}

#[tokio::test]
async fn no_metric_label_is_chosen_by_a_caller() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = spawn(test_app(http(), true)).await;
    let scrape = || async {
        reqwest::get(format!("{}/metrics", server.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    // Warm up every kind of answer once, so the page holds its steady-state series.
    for method in ["GET", "POST", "PATCH", "FOO"] {
        let _ = raw_exchange(
            server.addr,
            format!("{method} /nowhere HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await;
    }
    let _ = raw_exchange(
        server.addr,
        b"FOO /v1/things/a HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    let _ = scrape().await;
    let before = series_count(&scrape().await);
    // 20,000 calls with a new method and a new path each, over one keep-alive connection.
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    for i in 0..20_000u32 {
        let request =
            format!("M{i:X}Q /random/{i}/path HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        // Read one answer: its head, then its declared body.
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let length: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map_or(0, |v| v.trim().parse().unwrap());
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).await.unwrap();
    }
    let page = scrape().await;
    let after = series_count(&page);
    // Other tests in this process add series meanwhile: the bound is far below one per request, and
    // every method label is one of a closed set.
    assert!(
        after < before + 200,
        "20,000 random methods and paths grew /metrics from {before} to {after} series"
    );
    for value in page.split("method=\"").skip(1) {
        let value = &value[..value.find('"').unwrap()];
        assert!(
            [
                "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
                "OTHER"
            ]
            .contains(&value),
            "method label {value:?}"
        );
    }
    assert!(page.contains("method=\"OTHER\""), "{page}");
    assert!(!page.contains("M7CFQ"), "a caller's method became a label");
    assert!(!page.contains("/random/"), "a caller's path became a label");
}
