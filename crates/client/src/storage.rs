//! The storage-ops API (service `storage-ops`, docs/design.md, “Storage ops API”).
//!
//! | method | route |
//! |---|---|
//! | [`Client::add`] | `POST /v1/volumes` |
//! | [`Client::get`] | `GET /v1/volumes/{namespace}/{name}` |
//! | [`Client::list`] | `GET /v1/volumes?namespace=&labelSelector=&limit=&continue=` |
//! | [`Client::watch`] | `GET /v1/volumes?namespace=&watch=true&resourceVersion=` |
//! | [`Client::delete`], [`Client::delete_with_policy`] | `DELETE /v1/volumes/{namespace}/{name}` |
//! | [`Client::stats`] | `GET /v1/volumes/{namespace}/{name}/stats` |
//! | [`Client::orphans`] | `GET /v1/orphans` |

use domain::volume::ReclaimPolicy;
use domain::{DeleteResult, OrphanList, Volume, VolumeList, VolumeProvisionerProfile, VolumeStats};
use reqwest::{Method, StatusCode};

use crate::{ApiClient, ClientError, encode, query_string};

/// A typed client of this API.
pub type Client = ApiClient<StorageOpsApi>;

/// Names the storage-ops API in [`ApiClient`]'s type; never made.
#[derive(Debug)]
pub enum StorageOpsApi {}

/// ListStorage's parameters; every one is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListParams {
    /// Only this namespace (all when `None`).
    pub namespace: Option<String>,
    /// A label selector (`app=db,tier in (a,b)`).
    pub label_selector: Option<String>,
    /// Page size (the service's default, 100, when `None`; at most 1000).
    pub limit: Option<u32>,
    /// The previous page's `continue` token.
    pub continue_token: Option<String>,
}

impl Client {
    /// AddStorage: `(volume, created)`, where `created` is true for a 201 (made now) and false for a
    /// 200 (there already with the same spec). A different spec under the name is
    /// [`domain::Code::AlreadyExists`].
    pub async fn add(
        &self,
        profile: &VolumeProvisionerProfile,
    ) -> Result<(Volume, bool), ClientError> {
        let response = self
            .inner
            .call(Method::POST, "/v1/volumes", Some(profile))
            .await?;
        let created = response.status() == StatusCode::CREATED;
        let volume = self.decode(response).await?;
        Ok((volume, created))
    }

    /// ReadStorage; [`domain::Code::NotFound`] when there is no such volume.
    pub async fn get(&self, namespace: &str, name: &str) -> Result<Volume, ClientError> {
        self.inner.get(&item_path(namespace, name, "")).await
    }

    /// ListStorage: one page.
    pub async fn list(&self, params: &ListParams) -> Result<VolumeList, ClientError> {
        let mut query = Vec::new();
        if let Some(ns) = &params.namespace {
            query.push(("namespace", ns.clone()));
        }
        if let Some(s) = &params.label_selector {
            query.push(("labelSelector", s.clone()));
        }
        if let Some(l) = params.limit {
            query.push(("limit", l.to_string()));
        }
        if let Some(c) = &params.continue_token {
            query.push(("continue", c.clone()));
        }
        self.inner
            .get(&format!("/v1/volumes{}", query_string(&query)))
            .await
    }

    /// Starts a watch of `namespace`'s volumes (matching `selector`) after `resource_version`
    /// (every current one first, as ADDED, when `None`), for at most `timeout_seconds`.
    pub async fn watch(
        &self,
        namespace: &str,
        selector: Option<&str>,
        resource_version: Option<&str>,
        timeout_seconds: u64,
    ) -> Result<crate::watch::Watch, ClientError> {
        let mut query = vec![
            ("namespace", namespace.to_string()),
            ("watch", "true".to_string()),
            ("timeoutSeconds", timeout_seconds.to_string()),
        ];
        if let Some(s) = selector {
            query.push(("labelSelector", s.to_string()));
        }
        if let Some(v) = resource_version {
            query.push(("resourceVersion", v.to_string()));
        }
        crate::watch::Watch::open(&self.inner, &format!("/v1/volumes{}", query_string(&query)))
            .await
    }

    /// Every volume matching `params` (namespace, selector), following `continue` to the end.
    pub async fn list_all(&self, params: &ListParams) -> Result<Vec<Volume>, ClientError> {
        let mut params = params.clone();
        let mut all = Vec::new();
        loop {
            let page = self.list(&params).await?;
            all.extend(page.items);
            match page.continue_token {
                Some(token) => params.continue_token = Some(token),
                None => return Ok(all),
            }
        }
    }

    /// Changes a volume's labels, or grows its capacity, by a JSON merge patch
    /// (`{"metadata": {"labels": {..}, "resourceVersion": ".."}, "spec": {"capacity": "2Gi"}}`).
    pub async fn patch(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Volume, ClientError> {
        self.inner
            .json(Method::PATCH, &item_path(namespace, name, ""), Some(patch))
            .await
    }

    /// DeleteStorage with the volume's own reclaim policy: `deleted` says whether there was one.
    pub async fn delete(&self, namespace: &str, name: &str) -> Result<DeleteResult, ClientError> {
        self.inner
            .json::<(), _>(Method::DELETE, &item_path(namespace, name, ""), None)
            .await
    }

    /// DeleteStorage overriding the volume's reclaim policy (`Retain` keeps the backend object).
    pub async fn delete_with_policy(
        &self,
        namespace: &str,
        name: &str,
        policy: ReclaimPolicy,
    ) -> Result<DeleteResult, ClientError> {
        let policy = match policy {
            ReclaimPolicy::Delete => "Delete",
            ReclaimPolicy::Retain => "Retain",
        };
        let path = format!(
            "{}{}",
            item_path(namespace, name, ""),
            query_string(&[("reclaimPolicy", policy.to_string())])
        );
        self.inner.json::<(), _>(Method::DELETE, &path, None).await
    }

    /// What a volume uses.
    pub async fn stats(&self, namespace: &str, name: &str) -> Result<VolumeStats, ClientError> {
        self.inner.get(&item_path(namespace, name, "/stats")).await
    }

    /// Backend objects Berth made that no volume owns (a fresh scan).
    pub async fn orphans(&self) -> Result<OrphanList, ClientError> {
        self.inner.get("/v1/orphans").await
    }

    async fn decode<T: serde::de::DeserializeOwned>(
        &self,
        response: reqwest::Response,
    ) -> Result<T, ClientError> {
        let base = self.inner.base_url().to_string();
        response.json().await.map_err(|e| ClientError {
            status: domain::Status::new(
                domain::Code::Internal,
                format!("call to {base} answered a body that does not decode: {e}"),
            ),
            http_status: None,
            request_id: None,
            retry_after: None,
        })
    }
}

/// A volume's path, each segment percent-encoded ([`encode`]).
fn item_path(namespace: &str, name: &str, suffix: &str) -> String {
    format!("/v1/volumes/{}/{}{suffix}", encode(namespace), encode(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_queries_are_encoded() {
        assert_eq!(item_path("ns", "a.b", "/stats"), "/v1/volumes/ns/a.b/stats");
        assert_eq!(item_path("ns", "../x", ""), "/v1/volumes/ns/..%2Fx");
        assert_eq!(
            query_string(&[
                ("labelSelector", "app in (a,b)".into()),
                ("limit", "5".into())
            ]),
            "?labelSelector=app%20in%20%28a%2Cb%29&limit=5"
        );
    }
}
