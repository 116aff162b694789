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

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use domain::Code;
use domain::orchestrator::KubernetesConfig;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{
    Event, PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use tokio::sync::OnceCell;

use super::{Backend, BackendError, Found, ObjectRef, Observed, Usage};

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

/// How long one call to the API server may take: a hung server is answered 503 well within a
/// caller's deadline (the kit's default request timeout is 30 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Claims a scan reads per page.
const SCAN_PAGE: u32 = 500;

/// The client of one API server, made on first use and shared by every orchestrator naming that
/// server (`None`: in-cluster). Made lazily because reading credentials is I/O, and a server whose
/// credentials cannot be had is a precondition of the calls that need it, not of the registration.
#[derive(Clone)]
pub struct SharedClient {
    server: Option<String>,
    kubeconfig: Option<PathBuf>,
    client: Arc<OnceCell<kube::Client>>,
}

impl SharedClient {
    /// The client of `server`, with credentials from `kubeconfig` when it has a context for it.
    pub fn new(server: Option<String>, kubeconfig: Option<PathBuf>) -> Self {
        SharedClient {
            server,
            kubeconfig,
            client: Arc::default(),
        }
    }

    async fn get(&self) -> Result<kube::Client, BackendError> {
        self.client
            .get_or_try_init(|| async {
                // Where the whole workspace is built, a test crate's dependencies compile rustls'
                // ring provider in beside aws-lc-rs, and rustls then has no default: kube's client
                // would panic making its TLS config. The process's is said here, once: aws-lc-rs,
                // the one reqwest uses (an error only means one is installed already).
                let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
                let mut config = self.config().await?;
                config.connect_timeout = Some(Duration::from_secs(5));
                // Past [`CALL_TIMEOUT`]: the call's own bound fires first and says the server did not
                // answer, where the client's would read as a server that cannot be reached.
                config.read_timeout = Some(CALL_TIMEOUT + Duration::from_secs(5));
                config.write_timeout = Some(CALL_TIMEOUT + Duration::from_secs(5));
                kube::Client::try_from(config).map_err(|e| {
                    BackendError::new(
                        Code::FailedPrecondition,
                        "no client for the Kubernetes API server could be made",
                    )
                    .with_detail(e.to_string())
                })
            })
            .await
            .cloned()
    }

    async fn config(&self) -> Result<kube::Config, BackendError> {
        let unusable = |what: &str, e: &dyn std::fmt::Display| {
            BackendError::new(
                Code::FailedPrecondition,
                format!("the Kubernetes credentials cannot be used: {what}"),
            )
            .with_detail(e.to_string())
        };
        let Some(server) = &self.server else {
            return kube::Config::incluster()
                .map_err(|e| unusable("this is not a pod with a service account", &e));
        };
        // The operator's kubeconfig, when it has a cluster of this server: its credentials and
        // CA. Otherwise none (a loopback stand-in, or a server that allows anonymous calls).
        if let Some(path) = &self.kubeconfig {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| unusable("BERTH_KUBECONFIG cannot be read", &e))?;
            let context = kubeconfig.contexts.iter().find_map(|named| {
                let cluster = &named.context.as_ref()?.cluster;
                let listed = kubeconfig
                    .clusters
                    .iter()
                    .find(|c| &c.name == cluster)?
                    .cluster
                    .as_ref()?
                    .server
                    .as_deref()?;
                let same = domain::orchestrator::validate_kubernetes_server("server", listed)
                    .is_ok_and(|s| &s == server);
                same.then(|| named.name.clone())
            });
            if let Some(context) = context {
                let options = kube::config::KubeConfigOptions {
                    context: Some(context),
                    ..Default::default()
                };
                return kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| unusable("BERTH_KUBECONFIG's context for this server", &e));
            }
        }
        let uri = server
            .parse()
            .map_err(|e| unusable("the server's address", &e))?;
        Ok(kube::Config::new(uri))
    }
}

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

    /// The claim Berth makes for `v`.
    fn claim_for(&self, v: &ObjectRef) -> PersistentVolumeClaim {
        let labels = BTreeMap::from([
            (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
            (LABEL_UID.to_string(), v.uid.clone()),
            (LABEL_INSTANCE.to_string(), self.instance.clone()),
        ]);
        let annotations = BTreeMap::from([
            (ANNOTATION_NAMESPACE.to_string(), v.namespace.clone()),
            (ANNOTATION_NAME.to_string(), v.name.clone()),
        ]);
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(claim_name(&v.namespace, &v.name)),
                namespace: Some(self.config.namespace.clone()),
                labels: Some(labels),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(self.config.access_modes.clone()),
                storage_class_name: self.config.storage_class_name.clone(),
                volume_mode: Some(self.config.volume_mode.clone()),
                resources: Some(VolumeResourceRequirements {
                    // Exact bytes: a Berth capacity is whole bytes, and a quantity of plain digits
                    // is what the API server keeps as given.
                    requests: Some(BTreeMap::from([(
                        "storage".to_string(),
                        KubeQuantity(v.capacity_bytes.to_string()),
                    )])),
                    ..VolumeResourceRequirements::default()
                }),
                ..PersistentVolumeClaimSpec::default()
            }),
            status: None,
        }
    }

    /// The claim of `v` if it is the one Berth made for `v` (it carries the uid); `Err` naming the
    /// clash when a claim of that name is someone else's.
    async fn own_claim(
        &self,
        v: &ObjectRef,
    ) -> Result<Option<PersistentVolumeClaim>, BackendError> {
        let name = claim_name(&v.namespace, &v.name);
        let found = call(
            "get",
            &self.config.namespace,
            self.claims().await?.get_opt(&name),
        )
        .await?;
        match found {
            None => Ok(None),
            // The uid alone is not enough: a restored copy of this stack's database holds the
            // same uids, and must not take the original's claims for its own.
            Some(claim)
                if uid_of(&claim) == Some(v.uid.as_str())
                    && label_of(&claim, LABEL_INSTANCE) == Some(self.instance.as_str()) =>
            {
                Ok(Some(claim))
            }
            Some(claim) if claim.metadata.deletion_timestamp.is_some() && made_by_berth(&claim) => {
                Err(BackendError::new(
                    Code::Unavailable,
                    format!(
                        "the PersistentVolumeClaim {name:?} of an earlier volume of this name is still being deleted; retry once it is gone"
                    ),
                ))
            }
            Some(_) => Err(BackendError::new(
                Code::AlreadyExists,
                format!(
                    "a PersistentVolumeClaim named {name:?} already exists in Kubernetes namespace {:?} and was not made by Berth for this volume; Berth never changes it: delete it, or give the volume another name",
                    self.config.namespace
                ),
            )),
        }
    }

    /// [`Self::own_claim`] for a delete or a release: someone else's claim of that name is not
    /// this volume's, so this volume's is gone.
    async fn own_claim_if_any(
        &self,
        v: &ObjectRef,
    ) -> Result<Option<PersistentVolumeClaim>, BackendError> {
        match self.own_claim(v).await {
            Err(e) if e.code == Code::AlreadyExists => Ok(None),
            other => other,
        }
    }

    /// What the claim's events say of why it is not bound yet, newest last.
    async fn claim_events(&self, claim: &str) -> Vec<Event> {
        let Ok(client) = self.client.get().await else {
            return Vec::new();
        };
        let events: Api<Event> = Api::namespaced(client, &self.config.namespace);
        let params = ListParams::default()
            .fields(&format!(
                "involvedObject.kind=PersistentVolumeClaim,involvedObject.name={claim}"
            ))
            .limit(50);
        // Events only explain: a server that refuses them (RBAC) still lets the phase be read.
        match call("list", &self.config.namespace, events.list(&params)).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::debug!(error = %e, "claim events could not be read");
                Vec::new()
            }
        }
    }

    async fn observe_claim(&self, v: &ObjectRef) -> Result<Observed, BackendError> {
        let Some(claim) = self.own_claim(v).await? else {
            return Ok(Observed::Failed {
                reason: "ClaimMissing",
                message: format!(
                    "its PersistentVolumeClaim {:?} is gone (deleted outside Berth); delete the volume",
                    claim_name(&v.namespace, &v.name)
                ),
            });
        };
        let name = claim.metadata.name.clone().unwrap_or_default();
        let status = claim.status.clone().unwrap_or_default();
        match status.phase.as_deref() {
            Some("Bound") => {
                let volume = claim
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.clone())
                    .unwrap_or_default();
                let granted = status
                    .capacity
                    .as_ref()
                    .and_then(|c| c.get("storage"))
                    .map(|q| q.0.clone())
                    .unwrap_or_default();
                let class = claim
                    .spec
                    .as_ref()
                    .and_then(|s| s.storage_class_name.clone())
                    .unwrap_or_default();
                let modes = status.access_modes.clone().unwrap_or_default().join(",");
                Ok(Observed::Ready {
                    location: self.location(&name),
                    message: format!(
                        "claim {name} bound to PersistentVolume {volume} ({granted}, class {class}, {modes})"
                    ),
                })
            }
            Some("Lost") => Ok(Observed::Failed {
                reason: "ClaimLost",
                message: format!(
                    "claim {name} lost its PersistentVolume (the volume it was bound to is gone)"
                ),
            }),
            _ => {
                let events = self.claim_events(&name).await;
                let last = |reason: &str| {
                    events
                        .iter()
                        .rev()
                        .find(|e| e.reason.as_deref() == Some(reason))
                        .and_then(|e| e.message.as_deref().map(bounded))
                };
                let message = if let Some(why) = last("ProvisioningFailed") {
                    format!("claim {name} is not bound: provisioning failed: {why}")
                } else if last("WaitForFirstConsumer").is_some() {
                    format!(
                        "claim {name} waits for a first consumer: its class binds when a pod mounts it (claimName {name})"
                    )
                } else {
                    format!("claim {name} is waiting to be bound")
                };
                Ok(Observed::Pending { message })
            }
        }
    }

    async fn create_claim(&self, v: &ObjectRef) -> Result<String, BackendError> {
        if let Some(claim) = self.own_claim(v).await? {
            return Ok(self.location(&claim.metadata.name.unwrap_or_default()));
        }
        let claim = self.claim_for(v);
        let name = claim.metadata.name.clone().unwrap_or_default();
        match call(
            "create",
            &self.config.namespace,
            self.claims().await?.create(&PostParams::default(), &claim),
        )
        .await
        {
            Ok(_) => Ok(self.location(&name)),
            // Made meanwhile (a retry whose first answer was lost, or someone else's): decided as
            // above.
            Err(e) if e.code == Code::AlreadyExists => match self.own_claim(v).await? {
                Some(_) => Ok(self.location(&name)),
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// Asks for more storage on the volume's claim; the cluster's resizer does the rest (a claim
    /// whose StorageClass does not allow expansion is refused by the API server: 412 here).
    async fn grow_claim(&self, v: &ObjectRef, bytes: u64) -> Result<(), BackendError> {
        let Some(claim) = self.own_claim_if_any(v).await? else {
            return Err(BackendError::new(
                Code::NotFound,
                "the volume's PersistentVolumeClaim is gone",
            ));
        };
        let name = claim.metadata.name.unwrap_or_default();
        let patch = serde_json::json!({"spec": {"resources": {"requests": {"storage": bytes.to_string()}}}});
        call(
            "patch",
            &self.config.namespace,
            self.claims()
                .await?
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await
        .map(|_| ())
    }

    async fn delete_claim(&self, v: &ObjectRef) -> Result<(), BackendError> {
        let Some(claim) = self.own_claim_if_any(v).await? else {
            return Ok(());
        };
        let name = claim.metadata.name.unwrap_or_default();
        if claim.metadata.deletion_timestamp.is_none() {
            // Preconditioned on the uid seen: a claim replaced meanwhile is not deleted.
            let params = DeleteParams {
                preconditions: claim.metadata.uid.map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match call(
                "delete",
                &self.config.namespace,
                self.claims().await?.delete(&name, &params),
            )
            .await
            {
                Ok(_) => {}
                Err(e) if e.code == Code::NotFound => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        // Gone at once, or held by a finalizer (a pod still mounts it): the volume stays Deleting
        // until it is gone, and the reconciler asks again.
        match call(
            "get",
            &self.config.namespace,
            self.claims().await?.get_opt(&name),
        )
        .await?
        {
            None => Ok(()),
            Some(_) => Err(BackendError::new(
                Code::Unavailable,
                format!(
                    "claim {name} is being deleted; it goes once no pod mounts it (the volume stays Deleting until then)"
                ),
            )),
        }
    }

    async fn release_claim(&self, v: &ObjectRef) -> Result<(), BackendError> {
        let Some(claim) = self.own_claim_if_any(v).await? else {
            return Ok(());
        };
        let name = claim.metadata.name.unwrap_or_default();
        // A JSON merge patch setting a label to null removes it: the claim stays, Berth's orphan
        // scan no longer lists it, and the uid says where it came from.
        let patch = serde_json::json!({"metadata": {"labels": {LABEL_MANAGED_BY: null}}});
        call(
            "patch",
            &self.config.namespace,
            self.claims()
                .await?
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await
        .map(|_| ())
    }

    async fn scan_claims(&self) -> Result<Vec<Found>, BackendError> {
        let selector = format!(
            "{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_INSTANCE}={}",
            self.instance
        );
        let mut found = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut params = ListParams::default().labels(&selector).limit(SCAN_PAGE);
            if let Some(t) = &token {
                params = params.continue_token(t);
            }
            let page = call(
                "list",
                &self.config.namespace,
                self.claims().await?.list(&params),
            )
            .await?;
            for claim in page.items {
                let annotations = claim.metadata.annotations.clone().unwrap_or_default();
                let (Some(uid), Some(namespace), Some(name)) = (
                    uid_of(&claim).map(str::to_string),
                    annotations.get(ANNOTATION_NAMESPACE).cloned(),
                    annotations.get(ANNOTATION_NAME).cloned(),
                ) else {
                    continue;
                };
                found.push(Found {
                    uid,
                    namespace,
                    name,
                    location: self.location(&claim.metadata.name.unwrap_or_default()),
                    uncommitted: false,
                });
            }
            match page.metadata.continue_ {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(found),
            }
        }
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

/// The most of an event's message a volume's status carries: the cluster's words are read back as
/// data, and bounded as all such reads are.
const EVENT_MESSAGE_LIMIT: usize = 512;

/// `text` cut to [`EVENT_MESSAGE_LIMIT`] bytes at a character boundary, said to be cut.
fn bounded(text: &str) -> String {
    if text.len() <= EVENT_MESSAGE_LIMIT {
        return text.to_string();
    }
    let mut end = EVENT_MESSAGE_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The claim Berth makes for the volume `name` in namespace `namespace`.
pub fn claim_name(namespace: &str, name: &str) -> String {
    format!(
        "{}.{name}",
        service_kit::tenancy::effective_namespace(namespace)
    )
}

fn uid_of(claim: &PersistentVolumeClaim) -> Option<&str> {
    label_of(claim, LABEL_UID)
}

fn label_of<'c>(claim: &'c PersistentVolumeClaim, label: &str) -> Option<&'c str> {
    claim
        .metadata
        .labels
        .as_ref()?
        .get(label)
        .map(String::as_str)
}

fn made_by_berth(claim: &PersistentVolumeClaim) -> bool {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .is_some_and(|v| v == MANAGED_BY)
}

/// One call to the API server, bounded by [`CALL_TIMEOUT`], its failure in Berth's words.
async fn call<T>(
    verb: &str,
    namespace: &str,
    future: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, BackendError> {
    match tokio::time::timeout(CALL_TIMEOUT, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(api_error(verb, namespace, &e)),
        // 503 with Retry-After rather than 504: the caller's call did not run out of time, the API
        // server's did, and the same call may well succeed in a moment.
        Err(_) => Err(BackendError::new(
            Code::Unavailable,
            format!(
                "the Kubernetes API server did not answer {verb} persistentvolumeclaims within {}s",
                CALL_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// What the API server's answer (or its absence) means for a Berth caller. The message names the
/// verb, resource and namespace, never the server, a token or a CA: those go to the log only.
pub fn api_error(verb: &str, namespace: &str, e: &kube::Error) -> BackendError {
    let kube::Error::Api(status) = e else {
        return BackendError::new(
            Code::Unavailable,
            "the Kubernetes API server could not be reached",
        )
        .with_detail(e.to_string());
    };
    // A server that is not an API server may answer with no Status at all: its code is then all.
    let said = if status.message.is_empty() {
        format!("HTTP {}", status.code)
    } else {
        status.message.clone()
    };
    let code = match (status.code, status.reason.as_str()) {
        // A ResourceQuota refusal is a 403 whose message says "exceeded quota: <name>, ...".
        (403, _) if said.contains("exceeded quota") => {
            return BackendError::new(
                Code::ResourceExhausted,
                format!("the Kubernetes namespace {namespace:?} is over its quota: {said}"),
            );
        }
        // The resize admission plugin's refusal: the class (or a static PV) cannot expand.
        (403, _) if said.contains("can be resized") => {
            return BackendError::new(
                Code::FailedPrecondition,
                format!(
                    "the claim cannot grow: its StorageClass does not allow expansion (allowVolumeExpansion), or it was not provisioned dynamically ({said})"
                ),
            );
        }
        (403, _) => {
            return BackendError::new(
                Code::FailedPrecondition,
                format!(
                    "Berth may not {verb} persistentvolumeclaims in Kubernetes namespace {namespace:?}: its service account needs a Role allowing it (RBAC refused the call)"
                ),
            )
            .with_detail(said);
        }
        (401, _) => {
            return BackendError::new(
                Code::FailedPrecondition,
                "the Kubernetes API server did not accept Berth's credentials",
            )
            .with_detail(said);
        }
        // A delete's 404 is a claim already gone (its caller takes it so); any other verb's is the
        // namespace missing, or no API server at that address: the set-up's, never the volume's.
        (404, _) if verb == "delete" => Code::NotFound,
        (404, _) => {
            return BackendError::new(
                Code::FailedPrecondition,
                format!(
                    "the Kubernetes API server answered 404 to {verb} persistentvolumeclaims in namespace {namespace:?}: the namespace does not exist, or the server is not a Kubernetes API server"
                ),
            )
            .with_detail(said);
        }
        (409, "AlreadyExists") => Code::AlreadyExists,
        (409, _) => Code::Aborted,
        (400 | 422, _) => Code::InvalidArgument,
        (429, _) => Code::Unavailable,
        (504, _) => Code::DeadlineExceeded,
        _ => Code::Unavailable,
    };
    BackendError::new(
        code,
        format!("Kubernetes refused to {verb} the claim: {said}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_words_are_bounded_at_a_character_boundary() {
        assert_eq!(bounded("short"), "short");
        let long = "é".repeat(400);
        let cut = bounded(&long);
        assert!(
            cut.len() <= EVENT_MESSAGE_LIMIT + "…".len(),
            "{}",
            cut.len()
        );
        assert!(cut.ends_with('…'));
    }
}
