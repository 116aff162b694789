//! The machine-controller API (service `machine-controller`, docs/design.md, “Machine controller
//! API”): stored secrets, machine classes, machines, machine sets and deployments, as
//! Kubernetes-shaped JSON objects, one set of calls for every kind.
//!
//! | method | route |
//! |---|---|
//! | [`Client::list`] | `GET /v1/namespaces/{namespace}/{kind}?labelSelector=` |
//! | [`Client::watch`] | `GET /v1/namespaces/{namespace}/{kind}?watch=true&resourceVersion=` |
//! | [`Client::create`] | `POST /v1/namespaces/{namespace}/{kind}` |
//! | [`Client::get`] | `GET /v1/namespaces/{namespace}/{kind}/{name}` |
//! | [`Client::put`] | `PUT /v1/namespaces/{namespace}/{kind}/{name}` |
//! | [`Client::patch`] | `PATCH /v1/namespaces/{namespace}/{kind}/{name}` (JSON merge patch) |
//! | [`Client::delete`] | `DELETE /v1/namespaces/{namespace}/{kind}/{name}` |

use domain::resources::Kind;
use domain::{Code, Status};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::{ApiClient, ClientError, encode, query_string};

/// A typed client of this API.
pub type Client = ApiClient<MachineControllerApi>;

/// Names the machine-controller API in [`ApiClient`]'s type; never made.
#[derive(Debug)]
pub enum MachineControllerApi {}

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

fn collection(kind: Kind, namespace: &str) -> String {
    format!("/v1/namespaces/{}/{}", encode(namespace), kind.plural())
}

fn item(kind: Kind, namespace: &str, name: &str) -> String {
    format!("{}/{}", collection(kind, namespace), encode(name))
}

impl Client {
    /// The namespace's objects of `kind` (matching `selector` when given): the list object, whose
    /// `items` are the objects and `metadata.resourceVersion` what a watch continues from.
    pub async fn list(
        &self,
        kind: Kind,
        namespace: &str,
        selector: Option<&str>,
    ) -> Result<Value, ClientError> {
        let query = match selector {
            Some(s) => query_string(&[("labelSelector", s.to_string())]),
            None => String::new(),
        };
        self.inner
            .get(&format!("{}{query}", collection(kind, namespace)))
            .await
    }

    /// Starts a watch of the namespace's objects of `kind` after `resource_version` (every current
    /// object first, as ADDED, when `None`), for at most `timeout_seconds`.
    pub async fn watch(
        &self,
        kind: Kind,
        namespace: &str,
        selector: Option<&str>,
        resource_version: Option<&str>,
        timeout_seconds: u64,
    ) -> Result<Watch, ClientError> {
        let mut pairs = vec![
            ("watch", "true".to_string()),
            ("timeoutSeconds", timeout_seconds.to_string()),
        ];
        if let Some(s) = selector {
            pairs.push(("labelSelector", s.to_string()));
        }
        if let Some(v) = resource_version {
            pairs.push(("resourceVersion", v.to_string()));
        }
        let path = format!("{}{}", collection(kind, namespace), query_string(&pairs));
        let response = self.inner.call::<()>(Method::GET, &path, None).await?;
        Ok(Watch {
            response,
            buffer: Vec::new(),
            base: self.inner.base_url().to_string(),
        })
    }

    /// One object; [`Code::NotFound`] when there is none.
    pub async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, ClientError> {
        self.inner.get(&item(kind, namespace, name)).await
    }

    /// Makes an object; [`Code::AlreadyExists`] when the name is taken.
    pub async fn create(
        &self,
        kind: Kind,
        namespace: &str,
        object: &Value,
    ) -> Result<Value, ClientError> {
        self.inner
            .json(Method::POST, &collection(kind, namespace), Some(object))
            .await
    }

    /// Replaces (or makes) an object: `(object, created)`.
    pub async fn put(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        object: &Value,
    ) -> Result<(Value, bool), ClientError> {
        let response = self
            .inner
            .call(Method::PUT, &item(kind, namespace, name), Some(object))
            .await?;
        let created = response.status() == StatusCode::CREATED;
        let base = self.inner.base_url().to_string();
        let value = response
            .json()
            .await
            .map_err(|e| ClientError::transport(&e, &base))?;
        Ok((value, created))
    }

    /// Changes an object by a JSON merge patch.
    pub async fn patch(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, ClientError> {
        self.inner
            .json(Method::PATCH, &item(kind, namespace, name), Some(patch))
            .await
    }

    /// Deletes an object (or marks it, until its finalizers are done): the object as it then is.
    pub async fn delete(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ClientError> {
        self.inner
            .json::<(), _>(Method::DELETE, &item(kind, namespace, name), None)
            .await
    }
}
