//! The one way Berth's services reach a Docker Engine: [`connect`] a client to an address
//! (`unix:///var/run/docker.sock`, `tcp://host:2375`) and agree on the API version, or [`ping`] one
//! to learn whether an Engine answers there at all.
//!
//! The machine driver (containers as machines), storage-ops (Docker volumes) and the registry
//! (detecting an Engine on a first start) each spoke to the Engine their own way, the last with a
//! hand-written `GET /_ping`; they now share this, so an address means the same to all three and a
//! fix to how one is reached reaches them all. What each does with the client, and how it words an
//! Engine's errors for its callers, stays its own.

use std::time::Duration;

pub use bollard::Docker;
pub use bollard::errors::Error;

/// Where connecting failed: the caller words it for its own callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Making the client (an address bollard cannot use).
    Connecting,
    /// Agreeing on the API version: the first call, so the first that reaches the Engine.
    AgreeingOnVersion,
}

impl Stage {
    /// What was being done, for a message (`connecting`, `agreeing on the API version`).
    pub fn doing(self) -> &'static str {
        match self {
            Stage::Connecting => "connecting",
            Stage::AgreeingOnVersion => "agreeing on the API version",
        }
    }
}

/// A client of the Engine at `host` (`unix://…` a socket, anything else HTTP), each call bounded by
/// `timeout`, with the API version agreed with the Engine (its first call).
pub async fn connect(host: &str, timeout: Duration) -> Result<Docker, (Stage, Error)> {
    let seconds = timeout.as_secs().max(1);
    let docker = if host.starts_with("unix://") {
        Docker::connect_with_unix(host, seconds, bollard::API_DEFAULT_VERSION)
    } else {
        Docker::connect_with_http(host, seconds, bollard::API_DEFAULT_VERSION)
    }
    .map_err(|e| (Stage::Connecting, e))?;
    docker
        .negotiate_version()
        .await
        .map_err(|e| (Stage::AgreeingOnVersion, e))
}

/// Whether an Engine at `host` answers `GET /_ping` within `timeout` (connecting included). Any
/// failure is `false`, with why, for the caller's log.
pub async fn ping(host: &str, timeout: Duration) -> Result<(), String> {
    let attempt = async {
        let seconds = timeout.as_secs().max(1);
        let docker = if host.starts_with("unix://") {
            Docker::connect_with_unix(host, seconds, bollard::API_DEFAULT_VERSION)
        } else if host.starts_with("tcp://") || host.starts_with("http://") {
            Docker::connect_with_http(host, seconds, bollard::API_DEFAULT_VERSION)
        } else {
            return Err(format!("{host:?} is neither unix:// nor tcp://"));
        }
        .map_err(|e| e.to_string())?;
        docker.ping().await.map(drop).map_err(|e| e.to_string())
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(answered) => answered,
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// An Engine as far as `/_ping` goes: one answer, then the connection closes.
    async fn fake_engine(answer: &'static [u8]) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).await.unwrap();
            assert!(
                buf[..n].starts_with(b"GET /_ping HTTP/1.1\r\n"),
                "{:?}",
                String::from_utf8_lossy(&buf[..n])
            );
            s.write_all(answer).await.unwrap();
        });
        format!("tcp://{addr}")
    }

    #[tokio::test]
    async fn ping_is_an_engine_answering_ok_and_nothing_else() {
        let ok =
            fake_engine(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK")
                .await;
        assert_eq!(ping(&ok, Duration::from_secs(5)).await, Ok(()));
        let refused = fake_engine(
            b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(ping(&refused, Duration::from_secs(5)).await.is_err());
        // Nothing listens on a port just released; no socket at a path; an address of no scheme.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gone = closed.local_addr().unwrap();
        drop(closed);
        assert!(
            ping(&format!("tcp://{gone}"), Duration::from_secs(5))
                .await
                .is_err()
        );
        assert!(
            ping("unix:///nonexistent/docker.sock", Duration::from_secs(5))
                .await
                .is_err()
        );
        assert!(ping("ssh://me@box", Duration::from_secs(5)).await.is_err());
    }

    #[tokio::test]
    async fn a_silent_engine_is_no_engine_within_the_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (_s, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        let started = std::time::Instant::now();
        let why = ping(&format!("tcp://{addr}"), Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "{why}");
    }
}
