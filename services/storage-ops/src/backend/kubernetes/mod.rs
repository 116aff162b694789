//! The `kubernetes` backend: a PersistentVolumeClaim per Berth volume, in the namespace the
//! orchestrator's config names, through kube-rs (no hand-written Kubernetes client).
//!
//! The claim is named `<namespace>.<name>` (a Berth namespace is a DNS-1123 label, so it holds no
//! dot, and a volume name is a DNS-1123 subdomain of at most 63 characters: the name is a valid,
//! unambiguous DNS-1123 subdomain whatever the two are), labelled `app.kubernetes.io/managed-by:
//! berth`, `berth.io/volume-uid` and `berth.io/instance` (this stack's), and annotated with the Berth
//! namespace and name. A claim of that name carrying the uid is adopted; one without it is never
//! changed (409 naming the clash).
//!
//! A claim is made at once but becomes usable only when the cluster binds it, so this backend
//! *observes* ([`Backend::observe`]): the volume is Pending until its claim is Bound, then Ready;
//! a Lost claim is Failed; a `WaitForFirstConsumer` class or a `ProvisioningFailed` event is said in
//! the message. What the API server says is mapped to Berth's codes in [`api_error`]: RBAC's 403 is a
//! precondition naming the verb, resource and namespace, a ResourceQuota's 403 is 429 naming the
//! quota, an invalid claim 400, an unreachable or hung server 503 with Retry-After; the server's address only
//! ever reaches the log.
//!
//! Layout: this file holds the labels, the backend and its [`Backend`] impl; `client` the
//! shared client of an API server and its credentials; `claim` the claim Berth makes for a
//! volume and which claims are its own; `observe` reading a claim's phase and events;
//! `lifecycle` making, growing, deleting, releasing and scanning claims; `calls` the bound on
//! a call and what the API server's answers mean.

use domain::orchestrator::KubernetesConfig;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::Api;

use super::{Backend, BackendError, Found, ObjectRef, Observed, Usage};

mod calls;
mod claim;
mod client;
mod lifecycle;
mod observe;

pub use calls::api_error;
pub use claim::claim_name;
pub use client::SharedClient;

/// The label every claim Berth makes carries, as Kubernetes' recommended labels say it.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// [`LABEL_MANAGED_BY`]'s value.
pub const MANAGED_BY: &str = "berth";
/// The label holding the volume's uid.
pub const LABEL_UID: &str = "berth.io/volume-uid";
/// The label holding the stack's instance, so two Berths sharing a namespace never take each
/// other's claims.
pub const LABEL_INSTANCE: &str = "berth.io/instance";
/// The annotation holding the Berth namespace.
pub const ANNOTATION_NAMESPACE: &str = "berth.io/namespace";
/// The annotation holding the Berth name.
pub const ANNOTATION_NAME: &str = "berth.io/name";

/// One orchestrator's claims.
#[derive(Clone)]
pub struct KubernetesBackend {
    config: KubernetesConfig,
    client: SharedClient,
    instance: String,
}

impl KubernetesBackend {
    /// The backend of `config`, calling the API server through `client`, labelling its claims as
    /// made by the stack `instance`.
    pub fn new(config: KubernetesConfig, client: SharedClient, instance: &str) -> Self {
        KubernetesBackend {
            config,
            client,
            instance: instance.to_string(),
        }
    }

    async fn claims(&self) -> Result<Api<PersistentVolumeClaim>, BackendError> {
        Ok(Api::namespaced(
            self.client.get().await?,
            &self.config.namespace,
        ))
    }

    /// Where the claim of `v` is, as the volume's `status.location` says it.
    fn location(&self, claim: &str) -> String {
        format!("{}/{claim}", self.config.namespace)
    }
}

impl Backend for KubernetesBackend {
    fn create<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<String, BackendError>> {
        Box::pin(self.create_claim(v))
    }

    fn observes(&self) -> bool {
        true
    }

    fn observe<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<Observed, BackendError>> {
        Box::pin(self.observe_claim(v))
    }

    fn delete<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.delete_claim(v))
    }

    fn release<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.release_claim(v))
    }

    fn grow<'a>(&'a self, v: &'a ObjectRef, bytes: u64) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(self.grow_claim(v, bytes))
    }

    fn usage<'a>(&'a self, v: &'a ObjectRef) -> BoxFuture<'a, Result<Usage, BackendError>> {
        let _ = v;
        // The API server knows what a claim was granted, not what is used in it (that is the
        // kubelet's, per node): nothing to ask it, so a claim gone or unreachable does not fail a
        // stats call that can only say "unavailable" anyway.
        Box::pin(std::future::ready(Ok(Usage {
            used_bytes: None,
            available_bytes: None,
            source: "unavailable",
        })))
    }

    fn scan(&self) -> BoxFuture<'_, Result<Vec<Found>, BackendError>> {
        Box::pin(self.scan_claims())
    }

    fn remove_found<'a>(&'a self, f: &'a Found) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move {
            let v = ObjectRef {
                uid: f.uid.clone(),
                namespace: f.namespace.clone(),
                name: f.name.clone(),
                capacity_bytes: 0,
                file: false,
            };
            self.delete_claim(&v).await
        })
    }

    fn identity(&self) -> String {
        format!(
            "kubernetes:{}/{}",
            self.config.server.as_deref().unwrap_or("in-cluster"),
            self.config.namespace
        )
    }
}
