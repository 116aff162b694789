//! Requests as raw bytes on a TCP connection, and the head of what comes back.
//!
//! Apart because no HTTP client would send what the attacks send (a body that is not UTF-8, a
//! head of 1 MiB, random bytes as the request line): these write the bytes as they are and read
//! only the status and content type, so the scenarios say what to send and nothing else.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{ANSWER_LIMIT, Target};

/// A raw answer: its status and content type, or the server closing without one.
pub(crate) enum Answer {
    Status(u16, String),
    Closed,
}

/// Sends `request` as it is and reads the answer's head (the server may close instead).
pub(crate) async fn raw(addr: &str, request: &[u8]) -> Result<Answer, String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        // The server may answer (and close) before all of a huge request is written.
        let _ = stream.write_all(request).await;
        let mut head = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    head.extend_from_slice(&buf[..n]);
                    if head.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
        Ok(parse_head(&head))
    };
    tokio::time::timeout(ANSWER_LIMIT, exchange)
        .await
        .map_err(|_| format!("no answer within {ANSWER_LIMIT:?}"))?
}

fn parse_head(head: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let Some(status) = lines
        .next()
        .and_then(|l| l.strip_prefix("HTTP/1.1 "))
        .and_then(|l| l.get(..3))
        .and_then(|s| s.parse().ok())
    else {
        return Answer::Closed;
    };
    let content_type = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    Answer::Status(status, content_type)
}

pub(crate) fn request(
    target: &Target,
    method: &str,
    path: &str,
    extra: &[u8],
    body: &[u8],
) -> Vec<u8> {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        target.addr,
        target.token,
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(extra);
    r.extend_from_slice(b"\r\n");
    r.extend_from_slice(body);
    r
}
