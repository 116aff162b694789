//! A service's listener under its connection cap, and what a caller that writes a whole body over the
//! limit before reading sees.

use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::post;
use service_kit::server::{Limits, serve_limited};
use service_kit::{HttpConfig, ServiceApp};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use utoipa_axum::router::OpenApiRouter;

async fn service(max_connections: usize) -> SocketAddr {
    service_kit::testing::init_test_logging();
    let api = OpenApiRouter::new().route(
        "/v1/echo",
        post(
            |service_kit::extract::Json(v): service_kit::extract::Json<serde_json::Value>| async move {
                service_kit::extract::Json(v)
            },
        ),
    );
    let router = ServiceApp::new("test", api)
        .http_config(HttpConfig {
            request_timeout: Duration::from_secs(10),
            body_limit: 1024,
            internal_token: None,
        })
        .into_router();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = Limits {
        idle_timeout: Duration::from_secs(30),
        max_connections: Some(max_connections),
    };
    tokio::spawn(serve_limited(
        router,
        listener,
        std::future::pending(),
        limits,
    ));
    addr
}

/// Sends one keep-alive `GET /healthz` and reads its whole answer.
async fn one_call(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.ends_with(b"}") {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "closed mid-answer: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(answer).unwrap()
}

#[tokio::test]
async fn at_its_cap_a_service_closes_the_oldest_idle_connection_for_a_new_caller() {
    let cap = 4;
    let addr = service(cap).await;
    let mut held = Vec::new();
    for _ in 0..cap {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        assert!(one_call(&mut stream).await.starts_with("HTTP/1.1 200"));
        held.push(stream);
    }
    // One more caller is answered...
    let mut newcomer = TcpStream::connect(addr).await.unwrap();
    assert!(one_call(&mut newcomer).await.starts_with("HTTP/1.1 200"));
    // ...because the oldest idle connection was closed to make room for it,
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(5), held[0].read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0) | Err(_))),
        "the oldest idle connection was kept: {closed:?}"
    );
    // and only that one: the others still answer.
    for stream in &mut held[1..] {
        assert!(one_call(stream).await.starts_with("HTTP/1.1 200"));
    }
}

/// Writes a request with a body of `len` bytes completely, through a small send buffer as a remote
/// caller's would be, and only then reads the answer.
pub async fn whole_body_then_read(addr: SocketAddr, path: &str, len: usize) -> String {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(64 * 1024).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let body = vec![b' '; len];
    stream
        .write_all(&body)
        .await
        .expect("the whole body is taken (no broken pipe)");
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .expect("the answer is read (no reset)");
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_caller_that_writes_a_body_over_the_limit_before_reading_reads_the_413() {
    let addr = service(64).await;
    for _ in 0..3 {
        let answer = whole_body_then_read(addr, "/v1/echo", 1_500_000).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert!(
            answer.contains("content-type: application/problem+json"),
            "{answer}"
        );
        assert!(answer.contains(r#""status":413"#), "{answer}");
    }
}

/// Issue 30, point 5: a connection part-way through a request head (a slow loris) counts against the
/// cap like an idle one, and one asked to make room closes at once, not after the idle timeout
/// (30 s here) that a graceful close would wait for its head.
#[tokio::test]
async fn at_its_cap_a_connection_mid_head_is_closed_at_once_for_a_new_caller() {
    let cap = 4;
    let addr = service(cap).await;
    let mut held = Vec::new();
    for _ in 0..cap {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        held.push(stream);
        // Accepted in turn, so "oldest" is well defined.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut newcomer = TcpStream::connect(addr).await.unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(5), one_call(&mut newcomer)).await;
    assert!(
        answered.is_ok_and(|a| a.starts_with("HTTP/1.1 200")),
        "the newcomer was not answered"
    );
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(2), held[0].read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0) | Err(_))),
        "the oldest connection, mid-head, was kept: {closed:?}"
    );
    // The others finish their heads and are answered.
    for stream in &mut held[1..] {
        stream.write_all(b"\r\n").await.unwrap();
        let mut answer = Vec::new();
        while !answer.ends_with(b"}") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buf[..n]);
        }
        assert!(answer.starts_with(b"HTTP/1.1 200"));
    }
}
