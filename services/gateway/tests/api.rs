//! The gateway over real HTTP, in front of recording stand-in upstreams: authentication and scopes on
//! every route family, what reaches the upstream, timeouts, the circuit breaker and the rate limit.
//! The same checks against the real services are in the workspace `tests/` crate.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::any;
use common::*;
use gateway::routes::Scope;
use service_kit::testing::eventually;

/// (method, path, upstream index, needed scope) for every route of the API tables of
/// docs/design.md, and `/v1/orphans` (docs/architecture.md, “Routes”, lists every route the gateway
/// forwards).
const ROUTES: [(&str, &str, usize, Scope); 26] = [
    ("POST", "/v1/machines:create", 0, Scope::MachinesWrite),
    ("POST", "/v1/machines:initialize", 0, Scope::MachinesWrite),
    ("POST", "/v1/machines:delete", 0, Scope::MachinesWrite),
    ("POST", "/v1/machines:status", 0, Scope::MachinesRead),
    ("POST", "/v1/machines:list", 0, Scope::MachinesRead),
    ("POST", "/v1/volume-ids", 0, Scope::MachinesRead),
    ("GET", "/v1/providers", 0, Scope::MachinesRead),
    (
        "PUT",
        "/v1/orchestrators/local",
        1,
        Scope::OrchestratorsWrite,
    ),
    (
        "GET",
        "/v1/orchestrators/local",
        1,
        Scope::OrchestratorsRead,
    ),
    (
        "HEAD",
        "/v1/orchestrators/local",
        1,
        Scope::OrchestratorsRead,
    ),
    ("GET", "/v1/orchestrators", 1, Scope::OrchestratorsRead),
    (
        "DELETE",
        "/v1/orchestrators/local",
        1,
        Scope::OrchestratorsWrite,
    ),
    ("GET", "/v1/kinds", 1, Scope::OrchestratorsRead),
    (
        "GET",
        "/v1/orchestrators:detect",
        1,
        Scope::OrchestratorsRead,
    ),
    ("POST", "/v1/volumes", 2, Scope::VolumesWrite),
    ("GET", "/v1/volumes/default/data", 2, Scope::VolumesRead),
    (
        "GET",
        "/v1/volumes?namespace=default",
        2,
        Scope::VolumesRead,
    ),
    ("DELETE", "/v1/volumes/default/data", 2, Scope::VolumesWrite),
    ("GET", "/v1/orphans", 2, Scope::VolumesRead),
    ("POST", "/v1/machineclasses:check", 0, Scope::MachinesRead),
    (
        "GET",
        "/v1/namespaces/default/machines",
        3,
        Scope::MachinesRead,
    ),
    (
        "POST",
        "/v1/namespaces/default/machines",
        3,
        Scope::MachinesWrite,
    ),
    (
        "GET",
        "/v1/namespaces/default/secrets/s",
        3,
        Scope::MachinesRead,
    ),
    (
        "PUT",
        "/v1/namespaces/default/machineclasses/c",
        3,
        Scope::MachinesWrite,
    ),
    (
        "PATCH",
        "/v1/namespaces/default/machinesets/s",
        3,
        Scope::MachinesWrite,
    ),
    (
        "DELETE",
        "/v1/namespaces/default/machinedeployments/d",
        3,
        Scope::MachinesWrite,
    ),
];

fn holder_of(scope: Scope) -> &'static str {
    match scope {
        Scope::MachinesRead | Scope::VolumesRead | Scope::OrchestratorsRead => "reader",
        _ => "writer",
    }
}

#[tokio::test]
async fn every_route_needs_a_known_token_with_its_scope() {
    let h = spawn_gateway(&[]).await;
    for (method, path, idx, scope) in ROUTES {
        let none = call(&h.url, method, path, None).await;
        assert_eq!(none.status(), 401, "{method} {path} without a token");
        // RFC 9110: a 401 names the scheme to authenticate with.
        assert_eq!(
            none.headers()["www-authenticate"],
            "Bearer realm=\"berth\"",
            "{method} {path}"
        );
        if method != "HEAD" {
            assert_eq!(none.headers()["content-type"], "application/problem+json");
        }
        assert_eq!(
            call(&h.url, method, path, Some("nonsense")).await.status(),
            401,
            "{method} {path} unknown token"
        );
        let wrong = if holder_of(scope) == "reader" {
            "writer"
        } else {
            "reader"
        };
        assert_eq!(
            call(&h.url, method, path, Some(&format!("tok-{wrong}")))
                .await
                .status(),
            403,
            "{method} {path} as {wrong}"
        );
        let before = h.seen[idx].lock().unwrap().len();
        let ok = call(
            &h.url,
            method,
            path,
            Some(&format!("tok-{}", holder_of(scope))),
        )
        .await;
        assert_eq!(ok.status(), 200, "{method} {path} with {scope}");
        assert_eq!(
            h.seen[idx].lock().unwrap().len(),
            before + 1,
            "{method} {path} reached upstream {idx}"
        );
        assert_eq!(
            call(&h.url, method, path, Some("tok-root")).await.status(),
            200,
            "admin may {method} {path}"
        );
    }
    assert_eq!(
        call(&h.url, "GET", "/v1/orchestrators", Some("tok-volumes-only"))
            .await
            .status(),
        403
    );
    let unknown = call(&h.url, "GET", "/v1/secrets", Some("tok-root")).await;
    assert_eq!(unknown.status(), 404);
    // Probes need no token.
    assert_eq!(call(&h.url, "GET", "/healthz", None).await.status(), 200);
}

#[tokio::test]
async fn the_metrics_page_needs_metrics_read_on_a_cluster_wide_token() {
    // Its counts are every namespace's calls together: a tenant watching them would see when
    // another tenant works (issue 30).
    let namespaced = service_kit::tenancy::Namespaces::parse("team-a").unwrap();
    let line = gateway::auth::tokens_file_line_with(
        "team-scraper",
        "tok-team-scraper",
        &[Scope::MetricsRead],
        &gateway::auth::LineFields {
            namespaces: Some(namespaced),
            ..Default::default()
        },
    );
    let h = spawn_gateway_with(&[], &[line], None).await;
    let page = call(&h.url, "GET", "/metrics", None).await;
    assert_eq!(page.status(), 401);
    assert!(
        page.text()
            .await
            .unwrap()
            .contains("bearer token is required")
    );
    let page = call(&h.url, "GET", "/metrics", Some("tok-reader")).await;
    assert_eq!(page.status(), 403);
    assert!(page.text().await.unwrap().contains("metrics:read"));
    let page = call(&h.url, "GET", "/metrics", Some("tok-team-scraper")).await;
    assert_eq!(page.status(), 403);
    assert!(
        page.text().await.unwrap().contains("cluster-wide"),
        "a namespaced scraper is told why"
    );
    for token in ["tok-scraper", "tok-root"] {
        let page = call(&h.url, "GET", "/metrics", Some(token)).await;
        assert_eq!(page.status(), 200, "{token}");
        assert!(page.text().await.unwrap().contains("berth_build_info"));
    }
}

#[tokio::test]
async fn the_upstream_sees_the_internal_credential_and_forwarding_headers_not_the_callers_token() {
    let h = spawn_gateway(&[]).await;
    let resp = reqwest::Client::new()
        .get(format!("{}/v1/volumes/default/data?x=1", h.url))
        .bearer_auth("tok-reader")
        .header("x-request-id", "rid-7")
        .header("connection", "keep-alive, x-secret-hop")
        .header("x-secret-hop", "1")
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-request-id"], "rid-7");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["upstream"], "storage-ops");
    let (method, path, headers) = h.seen[2].lock().unwrap().pop().unwrap();
    assert_eq!(
        (method.as_str(), path.as_str()),
        ("GET", "/v1/volumes/default/data")
    );
    assert_eq!(headers["authorization"], "Bearer internal-cred");
    assert_eq!(headers["x-request-id"], "rid-7");
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    assert_eq!(headers["x-forwarded-proto"], "http");
    assert!(
        headers["x-forwarded-host"]
            .to_str()
            .unwrap()
            .starts_with("127.0.0.1:")
    );
    assert!(
        !headers.contains_key("x-secret-hop"),
        "hop-by-hop headers named by Connection are dropped"
    );
    let tp = headers["traceparent"].to_str().unwrap();
    assert!(
        tp.contains("4bf92f3577b34da6a3ce929d0e0e4736"),
        "the caller's trace continues: {tp}"
    );
    assert!(
        !tp.contains("00f067aa0ba902b7"),
        "with the gateway's own span as parent: {tp}"
    );
}

#[tokio::test]
async fn bodies_stream_through_in_both_directions() {
    let h = spawn_gateway(&[]).await;
    let body = serde_json::json!({"name": "data", "capacity": "1Gi", "pad": "x".repeat(200_000)});
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/volumes", h.url))
        .bearer_auth("tok-writer")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let echoed: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(
        echoed["received"].as_u64().unwrap(),
        serde_json::to_vec(&body).unwrap().len() as u64
    );
    let oversized = serde_json::json!({"pad": "x".repeat(2 << 20)});
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/volumes", h.url))
        .bearer_auth("tok-writer")
        .json(&oversized)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
}

#[tokio::test]
async fn a_slow_upstream_is_answered_504_within_the_timeout() {
    let h = spawn_gateway(&[]).await;
    let started = std::time::Instant::now();
    let resp = call(
        &h.url,
        "GET",
        "/v1/volumes/default/slow",
        Some("tok-reader"),
    )
    .await;
    assert_eq!(resp.status(), 504);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered after {:?}",
        started.elapsed()
    );
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["code"], 4);
    assert!(body["detail"].as_str().unwrap().contains("storage-ops"));
}

#[tokio::test]
async fn a_dead_upstream_is_503_then_the_breaker_opens_and_closes_when_it_returns() {
    let mut h = spawn_gateway(&[
        ("BERTH_BREAKER_FAILURES", "3"),
        ("BERTH_BREAKER_OPEN", "300ms"),
    ])
    .await;
    let registry = h.upstreams.remove(1);
    let addr: SocketAddr = registry.addr;
    registry.shutdown().await;
    let dead = hold_dead(addr);
    for _ in 0..3 {
        let resp = call(&h.url, "GET", "/v1/kinds", Some("tok-reader")).await;
        assert_eq!(resp.status(), 503);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(
            body["detail"], "orchestrator-registry is unreachable",
            "no internal address leaks"
        );
    }
    let open = call(&h.url, "GET", "/v1/kinds", Some("tok-reader")).await;
    assert_eq!(open.status(), 503);
    assert!(open.headers().contains_key("retry-after"));
    let body: serde_json::Value = open.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("circuit breaker open"),
        "{body}"
    );
    // Other upstreams are unaffected.
    assert_eq!(
        call(&h.url, "GET", "/v1/orphans", Some("tok-reader"))
            .await
            .status(),
        200
    );

    // The registry comes back on the same address; after the open period a probe closes the breaker.
    drop(dead);
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let router = axum::Router::new().fallback(any(|| async {
        axum::Json(serde_json::json!({"upstream": "back"}))
    }));
    tokio::spawn(service_kit::serve(router, listener, std::future::pending()));
    until_the_registry_answers(&h.url, Duration::from_secs(10)).await;
}

#[tokio::test]
async fn the_rate_limit_answers_429_with_retry_after() {
    let h = spawn_gateway(&[
        ("BERTH_RATE_LIMIT_RPS", "1"),
        ("BERTH_RATE_LIMIT_BURST", "3"),
    ])
    .await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(call(&h.url, "GET", "/v1/kinds", Some("tok-reader")).await);
    }
    assert!(statuses[..3].iter().all(|r| r.status() == 200));
    let limited = statuses.pop().unwrap();
    assert_eq!(limited.status(), 429);
    assert!(limited.headers().contains_key("retry-after"));
    let body: serde_json::Value = limited.json().await.unwrap();
    assert_eq!(body["code"], 8);
    // Another token has its own bucket.
    assert_eq!(
        call(&h.url, "GET", "/v1/kinds", Some("tok-root"))
            .await
            .status(),
        200
    );
}

#[tokio::test]
async fn readiness_and_openapi_aggregate_the_upstreams() {
    let h = spawn_gateway(&[]).await;
    // The stand-ins answer 200 to /readyz and to /openapi.json with a body that has no paths.
    assert_eq!(call(&h.url, "GET", "/readyz", None).await.status(), 200);
    let doc: serde_json::Value = call(&h.url, "GET", "/openapi.json", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(doc["info"]["title"], "berth gateway", "{doc}");
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer",
        "{doc}"
    );
    let mut h = h;
    let storage = h.upstreams.remove(2);
    let addr = storage.addr;
    storage.shutdown().await;
    let _dead = hold_dead(addr);
    let resp = call(&h.url, "GET", "/readyz", None).await;
    assert_eq!(resp.status(), 503);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("storage-ops: unreachable"),
        "{body}"
    );
}

#[tokio::test]
async fn readiness_says_a_slow_upstream_timed_out_rather_than_that_it_is_unreachable() {
    // A storage-ops that is up, but whose own readiness hangs (its registry does).
    let router = axum::Router::new().route(
        "/readyz",
        axum::routing::get(|| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            "late"
        }),
    );
    let slow = service_kit::testing::spawn(router).await;
    let h = spawn_gateway_with(&[], &[], Some(slow.url.clone())).await;
    let resp = call(&h.url, "GET", "/readyz", None).await;
    assert_eq!(resp.status(), 503);
    let body: serde_json::Value = resp.json().await.unwrap();
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("storage-ops: timed out after 2s"), "{body}");
    assert!(!detail.contains("unreachable"), "{body}");
}

#[tokio::test]
async fn metrics_count_proxied_calls_by_route_template_and_upstream() {
    let h = spawn_gateway(&[]).await;
    assert_eq!(
        call(
            &h.url,
            "GET",
            "/v1/volumes/default/some-volume",
            Some("tok-reader")
        )
        .await
        .status(),
        200
    );
    assert_eq!(
        call(&h.url, "GET", "/v1/volumes/default/some-volume", None)
            .await
            .status(),
        401
    );
    let text = metrics_page(&h.url).await;
    let line = |needles: &[&str]| text.lines().any(|l| needles.iter().all(|n| l.contains(n)));
    assert!(
        line(&[
            "http_requests_total{",
            "service=\"gateway\"",
            "route=\"/v1/volumes/{namespace}/{name}\"",
            "status=\"200\""
        ]),
        "{text}"
    );
    assert!(
        line(&[
            "http_requests_total{",
            "service=\"gateway\"",
            "route=\"/v1/volumes/{namespace}/{name}\"",
            "status=\"401\""
        ]),
        "{text}"
    );
    assert!(
        line(&[
            "berth_gateway_upstream_responses_total{",
            "upstream=\"storage-ops\"",
            "status=\"200\""
        ]),
        "{text}"
    );
    assert!(
        line(&[
            "berth_gateway_upstream_duration_seconds_bucket{",
            "upstream=\"storage-ops\""
        ]),
        "{text}"
    );
    assert!(
        !text.contains("some-volume"),
        "raw paths never become labels"
    );
}

#[tokio::test]
async fn a_restarted_upstream_takes_the_next_call_even_a_post() {
    let mut h = spawn_gateway(&[]).await;
    for _ in 0..3 {
        let resp = call(&h.url, "POST", "/v1/volumes", Some("tok-writer")).await;
        assert_eq!(resp.status(), 200);
    }
    // The gateway now holds idle keep-alive connections to storage-ops. It restarts on the same
    // address, closing them; the next call must find a live connection, not fail on a dead one.
    let storage = h.upstreams.remove(2);
    let addr = storage.addr;
    storage.shutdown().await;
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let router = axum::Router::new().fallback(any(|| async {
        axum::Json(serde_json::json!({"upstream": "restarted"}))
    }));
    tokio::spawn(service_kit::serve(router, listener, std::future::pending()));
    for _ in 0..3 {
        let resp = call(&h.url, "POST", "/v1/volumes", Some("tok-writer")).await;
        assert_eq!(resp.status(), 200);
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["upstream"], "restarted");
    }
}

#[tokio::test]
async fn shutdown_lets_calls_in_flight_finish_then_stops_serving() {
    let mut h = spawn_gateway(&[]).await;
    let url = h.url.clone();
    let in_flight = tokio::spawn(async move {
        call(&url, "GET", "/v1/volumes/default/pause", Some("tok-reader")).await
    });
    // Wait until the call has reached the upstream, then shut the gateway down under it.
    let seen = h.seen[2].clone();
    eventually(
        "the call reaches storage-ops",
        Duration::from_secs(5),
        || {
            let seen = seen.clone();
            async move { (!seen.lock().unwrap().is_empty()).then_some(()) }
        },
    )
    .await;
    let _ = h.stop.take().unwrap().send(());
    let resp = in_flight.await.unwrap();
    assert_eq!(resp.status(), 200, "the call in flight is answered");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["upstream"], "storage-ops");
    tokio::time::timeout(Duration::from_secs(5), &mut h.served)
        .await
        .expect("the gateway stops once drained")
        .unwrap()
        .unwrap();
    let after = reqwest::Client::new()
        .get(format!("{}/healthz", h.url))
        .send()
        .await;
    assert!(after.is_err(), "nothing listens after shutdown");
}

/// Sends a POST whose body is chunk-encoded (no declared length) over a raw connection, in `chunks`
/// pieces of `size` bytes, and returns the answer's status line and its text.
async fn post_chunked(url: &str, chunks: usize, size: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = url.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = "POST /v1/volumes HTTP/1.1\r\nhost: berth\r\nauthorization: Bearer tok-writer\r\n\
                content-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    let _ = socket.write_all(head.as_bytes()).await;
    let piece = format!("{size:x}\r\n{}\r\n", "x".repeat(size));
    for _ in 0..chunks {
        // The gateway may refuse before the body ends and close; what it answered is still read.
        if socket.write_all(piece.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = socket.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).to_string()
}

#[tokio::test]
async fn a_chunked_body_streams_through_and_one_over_the_limit_is_413_without_tripping_the_breaker()
{
    let h = spawn_gateway(&[("BERTH_BREAKER_FAILURES", "1")]).await;
    let answer = post_chunked(&h.url, 4, 1000).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"received\":4000"), "{answer}");
    let answer = post_chunked(&h.url, 64, 64 * 1024).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    // The caller's oversized body is not the upstream's failure: the breaker stays closed.
    let resp = call(&h.url, "GET", "/v1/volumes", Some("tok-reader")).await;
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn stalled_connections_are_closed_and_a_slow_call_is_not() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = spawn_gateway(&[("BERTH_IDLE_TIMEOUT", "150ms")]).await;
    let address = h.url.trim_start_matches("http://").to_string();
    // Whether the gateway closes `socket` within `within`.
    async fn closed_within(socket: &mut tokio::net::TcpStream, within: Duration) -> bool {
        let mut rest = Vec::new();
        matches!(
            tokio::time::timeout(within, socket.read_to_end(&mut rest)).await,
            Ok(Ok(_) | Err(_))
        )
    }
    // A head that never ends (slow loris).
    let mut loris = tokio::net::TcpStream::connect(&address).await.unwrap();
    loris
        .write_all(b"GET /v1/kinds HTTP/1.1\r\nhost: berth\r\n")
        .await
        .unwrap();
    // A keep-alive connection that went quiet after one call.
    let mut quiet = tokio::net::TcpStream::connect(&address).await.unwrap();
    quiet
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: berth\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 12];
    quiet.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");
    assert!(closed_within(&mut loris, Duration::from_secs(2)).await);
    assert!(closed_within(&mut quiet, Duration::from_secs(2)).await);
    // A call that takes longer than the idle timeout (the slow upstream, answered 504 at 300 ms) is
    // busy, not stalled: it gets its answer.
    let resp = call(
        &h.url,
        "GET",
        "/v1/volumes/default/slow",
        Some("tok-reader"),
    )
    .await;
    assert_eq!(resp.status(), 504);
}

#[tokio::test]
async fn one_connections_calls_each_get_their_own_deadline() {
    let h = spawn_gateway(&[]).await;
    // One client, one keep-alive connection: its calls share the connection's timer.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let get = |path: &'static str| {
        client
            .get(format!("{}{path}", h.url))
            .bearer_auth("tok-reader")
            .send()
    };
    for _ in 0..2 {
        let started = std::time::Instant::now();
        assert_eq!(get("/v1/volumes/default/slow").await.unwrap().status(), 504);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(3),
            "{took:?}"
        );
    }
    // A timer that fired is set again for the next call, which is not cut short.
    assert_eq!(get("/v1/volumes").await.unwrap().status(), 200);
    assert_eq!(get("/v1/volumes/default/slow").await.unwrap().status(), 504);
}

#[tokio::test]
async fn a_connection_stalled_mid_head_does_not_hold_up_shutdown() {
    use tokio::io::AsyncWriteExt;
    // hyper drops a half-sent head at graceful shutdown; the stall watch backs it up.
    let mut h = spawn_gateway(&[("BERTH_IDLE_TIMEOUT", "300ms")]).await;
    let mut loris = tokio::net::TcpStream::connect(h.url.trim_start_matches("http://"))
        .await
        .unwrap();
    loris
        .write_all(b"GET /v1/kinds HTTP/1.1\r\nhost: berth\r\n")
        .await
        .unwrap();
    let _ = h.stop.take().unwrap().send(());
    tokio::time::timeout(Duration::from_secs(3), &mut h.served)
        .await
        .expect("the gateway stops although a head never ended")
        .unwrap()
        .unwrap();
}

/// A watch the gateway proxies ends when the gateway starts to drain, rather than holding its
/// drain for as long as the upstream would stream (`berth up`'s Ctrl-C waited 30 s for them).
#[tokio::test]
async fn a_drain_ends_the_watches_it_proxies() {
    let upstream = streaming_upstream().await;
    // With the token's calls in flight capped (the default), and with the cap off: the watch
    // ends either way.
    for in_flight_cap in ["64", "0"] {
        let mut h = spawn_gateway_with(
            &[("BERTH_TOKEN_MAX_IN_FLIGHT", in_flight_cap)],
            &[],
            Some(upstream.url.clone()),
        )
        .await;
        let mut response = reqwest::Client::new()
            .get(format!(
                "{}/v1/volumes?namespace=default&watch=true&timeoutSeconds=600",
                h.url
            ))
            .bearer_auth("tok-reader")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let first = tokio::time::timeout(Duration::from_secs(5), response.chunk())
            .await
            .unwrap()
            .unwrap();
        assert!(first.is_some(), "the watch streams through the gateway");
        let started = std::time::Instant::now();
        let _ = h.stop.take().unwrap().send(());
        let rest = tokio::time::timeout(Duration::from_secs(10), async {
            while response.chunk().await.ok().flatten().is_some() {}
        })
        .await;
        assert!(
            rest.is_ok(),
            "the proxied watch outlived the drain (in-flight cap {in_flight_cap})"
        );
        tokio::time::timeout(Duration::from_secs(10), &mut h.served)
            .await
            .expect("the gateway's drain waited for the watch")
            .unwrap()
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "in-flight cap {in_flight_cap}: {:?}",
            started.elapsed()
        );
    }
}

/// A watch does not outlive its token: revoking the token, or its expiry, ends the stream the
/// gateway proxies (the client's next call, a watch again, is then refused). Tokens that stay
/// are untouched by the reload.
#[tokio::test]
async fn a_revoked_or_expired_token_ends_its_watches() {
    use gateway::auth::{LineFields, tokens_file_line_with};
    let upstream = streaming_upstream().await;
    let expires = chrono::Utc::now() + chrono::Duration::seconds(3);
    let short = tokens_file_line_with(
        "short",
        "tok-short",
        &[Scope::VolumesRead],
        &LineFields {
            expires: Some(expires),
            ..LineFields::default()
        },
    );
    let h = spawn_gateway_with(&[], &[short], Some(upstream.url.clone())).await;
    let watch = |token: &'static str| {
        reqwest::Client::new()
            .get(format!(
                "{}/v1/volumes?namespace=default&watch=true&timeoutSeconds=600",
                h.url
            ))
            .bearer_auth(token)
            .send()
    };
    // Whether a stream ends within `within` (it streams a bookmark every 100 ms until then).
    async fn ends(response: &mut reqwest::Response, within: Duration) -> bool {
        tokio::time::timeout(within, async {
            while response.chunk().await.ok().flatten().is_some() {}
        })
        .await
        .is_ok()
    }
    let mut revoked = watch("tok-reader").await.unwrap();
    let mut kept = watch("tok-volumes-only").await.unwrap();
    let mut expiring = watch("tok-short").await.unwrap();
    for response in [&revoked, &kept, &expiring] {
        assert_eq!(response.status(), 200);
    }
    assert!(!ends(&mut revoked, Duration::from_millis(500)).await);
    assert!(gateway::auth::revoke_token(&h.dir.path().join("tokens"), "reader").unwrap());
    assert!(
        ends(&mut revoked, Duration::from_secs(5)).await,
        "the revoked token's watch still streams"
    );
    assert_eq!(watch("tok-reader").await.unwrap().status(), 401);
    assert!(
        ends(&mut expiring, Duration::from_secs(6)).await,
        "the expired token's watch still streams"
    );
    assert!(
        !ends(&mut kept, Duration::from_millis(500)).await,
        "a token the reload kept lost its watch"
    );
}

/// A storage-ops that streams a bookmark every 100 ms and never ends by itself.
async fn streaming_upstream() -> service_kit::testing::TestServer {
    let streaming = axum::Router::new().fallback(any(|| async {
        let lines = futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((
                Ok::<_, std::convert::Infallible>(axum::body::Bytes::from_static(
                    b"{\"type\":\"BOOKMARK\",\"object\":{}}\n",
                )),
                (),
            ))
        });
        (
            [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
            axum::body::Body::from_stream(lines),
        )
    }));
    service_kit::testing::spawn(streaming).await
}
