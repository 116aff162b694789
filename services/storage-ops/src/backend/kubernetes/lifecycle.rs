//! Making, growing, deleting and releasing a volume's claim, and scanning for Berth's claims:
//! apart because these are the calls that change the cluster, each deciding first (by
//! [`claim`](super::claim)) whether the claim is this volume's.

use domain::Code;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};

use super::calls::call;
use super::claim::uid_of;
use super::{
    ANNOTATION_NAME, ANNOTATION_NAMESPACE, KubernetesBackend, LABEL_INSTANCE, LABEL_MANAGED_BY,
    MANAGED_BY,
};

use crate::backend::{BackendError, Found, ObjectRef};

/// Claims a scan reads per page.
const SCAN_PAGE: u32 = 500;
impl KubernetesBackend {
    pub(super) async fn create_claim(&self, v: &ObjectRef) -> Result<String, BackendError> {
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
    pub(super) async fn grow_claim(&self, v: &ObjectRef, bytes: u64) -> Result<(), BackendError> {
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

    pub(super) async fn delete_claim(&self, v: &ObjectRef) -> Result<(), BackendError> {
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

    pub(super) async fn release_claim(&self, v: &ObjectRef) -> Result<(), BackendError> {
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

    pub(super) async fn scan_claims(&self) -> Result<Vec<Found>, BackendError> {
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
