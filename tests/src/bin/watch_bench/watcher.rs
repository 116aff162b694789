//! One watcher: opens its watch, then reads events until it has seen every write's, and records
//! when it read each ([`Watched`]).
//!
//! Apart because it is the part that runs a thousand times at once, each on its own connection:
//! what one watcher does is read here, how they are started, waited for and summed up in `run`.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::ADMIN_TOKEN;

/// What one watcher saw.
#[derive(Default)]
pub(crate) struct Watched {
    /// When the event of write `n` was read, by `n`.
    pub(crate) seen: Vec<Option<Instant>>,
    pub(crate) bookmarks: usize,
    /// Why the stream ended before every event was read, if it did.
    pub(crate) ended: Option<String>,
}

/// One watch: reports to `opened` when its answer's head is in, then reads events until it has
/// seen every write's, its stream ends, or `stop` says so.
pub(crate) async fn watcher(
    http: reqwest::Client,
    url: String,
    events: usize,
    opening: Arc<Semaphore>,
    opened: mpsc::UnboundedSender<Result<(), String>>,
    mut stop: watch::Receiver<bool>,
) -> Watched {
    let mut w = Watched {
        seen: vec![None; events],
        ..Watched::default()
    };
    let mut response = {
        let _permit = opening.acquire().await;
        match http.get(&url).bearer_auth(ADMIN_TOKEN).send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                let _ = opened.send(Err(format!("{status}: {body}")));
                w.ended = Some(format!("refused: {status}"));
                return w;
            }
            Err(e) => {
                let _ = opened.send(Err(e.to_string()));
                w.ended = Some(format!("not opened: {e}"));
                return w;
            }
        }
    };
    let _ = opened.send(Ok(()));
    let mut buffer: Vec<u8> = Vec::new();
    let mut read = 0;
    while read < events {
        let chunk = tokio::select! {
            chunk = response.chunk() => chunk,
            _ = stop.changed() => {
                w.ended = Some("stopped after the grace period".into());
                break;
            }
        };
        let bytes = match chunk {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                w.ended = Some("the stream ended".into());
                break;
            }
            Err(e) => {
                w.ended = Some(format!("the stream broke: {e}"));
                break;
            }
        };
        let now = Instant::now();
        buffer.extend_from_slice(&bytes);
        while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                w.ended = Some(format!(
                    "not JSON: {}",
                    String::from_utf8_lossy(&line).trim_end()
                ));
                return w;
            };
            match event["type"].as_str() {
                Some("MODIFIED") => {
                    let seq = event["object"]["metadata"]["labels"]["seq"]
                        .as_str()
                        .and_then(|s| s.parse::<usize>().ok());
                    if let Some(slot) = seq.and_then(|n| w.seen.get_mut(n))
                        && slot.is_none()
                    {
                        *slot = Some(now);
                        read += 1;
                    }
                }
                Some("BOOKMARK") => w.bookmarks += 1,
                Some("ERROR") => {
                    w.ended = Some(format!("ERROR event: {}", event["object"]));
                    return w;
                }
                _ => {}
            }
        }
    }
    w
}
