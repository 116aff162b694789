//! The server closes a connection that does not send a whole request head within its idle time (a
//! slow-loris caller), while an ordinary caller beside it is answered; a request already being
//! answered is not cut off by that limit.

use std::time::{Duration, Instant};

use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn server(idle: Duration) -> String {
    let router = axum::Router::new()
        .route("/fast", get(|| async { "ok" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(800)).await;
                "late"
            }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(service_kit::server::serve_with(
        router,
        listener,
        std::future::pending(),
        idle,
    ));
    addr
}

/// Reads until the server closes; `true` when it did within `patience`.
async fn closed_within(stream: &mut TcpStream, patience: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + patience;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn a_head_that_trickles_in_is_cut_off_and_others_are_answered() {
    let addr = server(Duration::from_millis(300)).await;
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /fast HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    // An ordinary caller beside it.
    let mut other = TcpStream::connect(&addr).await.unwrap();
    other
        .write_all(b"GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    other.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Ten times the limit is patience enough on a loaded machine; without the limit it never closes.
    assert!(
        closed_within(&mut slow, Duration::from_secs(3)).await,
        "a connection trickling its head was kept open"
    );
    // An idle keep-alive connection is closed too.
    let mut idle = TcpStream::connect(&addr).await.unwrap();
    assert!(closed_within(&mut idle, Duration::from_secs(3)).await);
}

#[tokio::test]
async fn an_answer_slower_than_the_idle_limit_still_arrives() {
    let addr = server(Duration::from_millis(200)).await;
    let mut caller = TcpStream::connect(&addr).await.unwrap();
    caller
        .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    caller.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("late"), "{answer}");
}
