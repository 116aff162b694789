//! The orchestrator-registry API (service `orchestrator-registry`, docs/design.md, “Orchestrator
//! registry API”).
//!
//! | method | route |
//! |---|---|
//! | [`Client::register`] | `PUT /v1/orchestrators/{name}` |
//! | [`Client::get`] | `GET /v1/orchestrators/{name}` |
//! | [`Client::has`] | `HEAD /v1/orchestrators/{name}` |
//! | [`Client::list`] | `GET /v1/orchestrators` |
//! | [`Client::watch`] | `GET /v1/orchestrators?watch=true&resourceVersion=` |
//! | [`Client::deregister`] | `DELETE /v1/orchestrators/{name}` |
//! | [`Client::kinds`] | `GET /v1/kinds` |
//! | [`Client::detect`] | `GET /v1/orchestrators:detect` |
//! | [`Client::default_orchestrator`] | `GET /v1/orchestrators:default` |

use domain::orchestrator::{Detection, KindInfo, OrchestratorList, RegisterOrchestrator};
use domain::{Code, DeleteResult, Orchestrator};
use reqwest::Method;

use crate::{ApiClient, ClientError};

/// A typed client of this API.
pub type Client = ApiClient<RegistryApi>;

/// Names the orchestrator-registry API in [`ApiClient`]'s type; never made.
#[derive(Debug)]
pub enum RegistryApi {}

impl Client {
    /// Registers (or replaces) the orchestrator `name`; the same request again changes nothing.
    /// Bad input is a [`Code::InvalidArgument`] naming the field.
    pub async fn register(
        &self,
        name: &str,
        req: &RegisterOrchestrator,
    ) -> Result<Orchestrator, ClientError> {
        self.inner
            .json(Method::PUT, &item_path(name), Some(req))
            .await
    }

    /// The orchestrator `name`; [`Code::NotFound`] when it is not registered.
    pub async fn get(&self, name: &str) -> Result<Orchestrator, ClientError> {
        self.inner.get(&item_path(name)).await
    }

    /// Whether `name` is registered (maya's `HasOrchestrator`).
    pub async fn has(&self, name: &str) -> Result<bool, ClientError> {
        match self
            .inner
            .call::<()>(Method::HEAD, &item_path(name), None)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Code::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every registered orchestrator, sorted by name.
    pub async fn list(&self) -> Result<OrchestratorList, ClientError> {
        self.inner.get("/v1/orchestrators").await
    }

    /// Starts a watch of the orchestrators after `resource_version` (every one first, as ADDED,
    /// when `None`), for at most `timeout_seconds`.
    pub async fn watch(
        &self,
        resource_version: Option<&str>,
        timeout_seconds: u64,
    ) -> Result<crate::watch::Watch, ClientError> {
        let mut query = vec![
            ("watch", "true".to_string()),
            ("timeoutSeconds", timeout_seconds.to_string()),
        ];
        if let Some(v) = resource_version {
            query.push(("resourceVersion", v.to_string()));
        }
        crate::watch::Watch::open(
            &self.inner,
            &format!("/v1/orchestrators{}", crate::query_string(&query)),
        )
        .await
    }

    /// Deregisters `name`; succeeds whether or not it was registered.
    pub async fn deregister(&self, name: &str) -> Result<(), ClientError> {
        self.deregister_reporting(name).await.map(|_| ())
    }

    /// Deregisters `name` and says whether there was one to deregister.
    pub async fn deregister_reporting(&self, name: &str) -> Result<bool, ClientError> {
        let result: DeleteResult = self
            .inner
            .json::<(), _>(Method::DELETE, &item_path(name), None)
            .await?;
        Ok(result.deleted)
    }

    /// The kinds the registry can build, with their config schemas.
    pub async fn kinds(&self) -> Result<Vec<KindInfo>, ClientError> {
        self.inner.get("/v1/kinds").await
    }

    /// The kind the registry's environment implies, and the rule that decided it.
    pub async fn detect(&self) -> Result<Detection, ClientError> {
        self.inner.get("/v1/orchestrators:detect").await
    }

    /// The default orchestrator; [`Code::NotFound`] when none is the default.
    pub async fn default_orchestrator(&self) -> Result<Orchestrator, ClientError> {
        self.inner.get("/v1/orchestrators:default").await
    }
}

/// `/v1/orchestrators/{name}`, with the name percent-encoded so a bad name reaches the service (and is
/// refused there as a 400 naming it) instead of changing the route.
fn item_path(name: &str) -> String {
    let mut path = String::from("/v1/orchestrators/");
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            path.push(char::from(b));
        } else {
            path.push_str(&format!("%{b:02X}"));
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_percent_encoded_into_one_segment() {
        assert_eq!(item_path("local"), "/v1/orchestrators/local");
        assert_eq!(item_path("a/b c"), "/v1/orchestrators/a%2Fb%20c");
        assert_eq!(item_path(".."), "/v1/orchestrators/..");
    }
}
