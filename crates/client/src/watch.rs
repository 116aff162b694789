//! A `watch=true` answer read as events, whichever service streams it (the machine controller's
//! kinds, storage-ops' volumes, the registry's orchestrators): one JSON event per line.

use domain::{Code, Status};
use reqwest::Method;
use serde_json::Value;

use crate::{ClientError, ServiceClient};

/// One event of a watch.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    pub event: String,
    /// The object (for a bookmark, only its `metadata.resourceVersion`).
    pub object: Value,
}

/// A watch's stream of events, read line by line from the answer.
#[derive(Debug)]
pub struct Watch {
    response: reqwest::Response,
    buffer: Vec<u8>,
    base: String,
}

/// The longest event line read: an object is far smaller; a longer line is no Berth answer.
const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

impl Watch {
    /// Starts the watch at `path` (its query says `watch=true` and the rest).
    pub(crate) async fn open(inner: &ServiceClient, path: &str) -> Result<Watch, ClientError> {
        let response = inner.call::<()>(Method::GET, path, None).await?;
        Ok(Watch {
            response,
            buffer: Vec::new(),
            base: inner.base_url().to_string(),
        })
    }

    /// The next event, or `None` when the server ended the stream (its `timeoutSeconds`).
    pub async fn next(&mut self) -> Result<Option<WatchEvent>, ClientError> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                let value: Value = serde_json::from_slice(&line).map_err(|_| self.garbled())?;
                return Ok(Some(WatchEvent {
                    event: value["type"].as_str().unwrap_or_default().to_string(),
                    object: value["object"].clone(),
                }));
            }
            if self.buffer.len() > MAX_EVENT_BYTES {
                return Err(self.garbled());
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.buffer.extend_from_slice(&chunk),
                Ok(None) => return Ok(None),
                Err(e) => return Err(ClientError::transport(&e, &self.base)),
            }
        }
    }

    fn garbled(&self) -> ClientError {
        ClientError {
            status: Status::new(
                Code::Internal,
                format!(
                    "the watch from {} sent a line that is not an event",
                    self.base
                ),
            ),
            http_status: None,
            request_id: None,
            retry_after: None,
        }
    }
}
