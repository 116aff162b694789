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
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::{ApiClient, ClientError, encode, query_string};

/// A typed client of this API.
pub type Client = ApiClient<MachineControllerApi>;

/// Names the machine-controller API in [`ApiClient`]'s type; never made.
#[derive(Debug)]
pub enum MachineControllerApi {}

pub use crate::watch::{Watch, WatchEvent};

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
        Watch::open(&self.inner, &path).await
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
