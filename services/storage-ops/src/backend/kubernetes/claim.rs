//! The claim Berth makes for a volume, and which claims are its own (by uid and instance): apart
//! because every operation decides from these whether a claim of that name may be touched.

use std::collections::BTreeMap;

use domain::Code;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::calls::call;
use super::{
    ANNOTATION_NAME, ANNOTATION_NAMESPACE, KubernetesBackend, LABEL_INSTANCE, LABEL_MANAGED_BY,
    LABEL_UID, MANAGED_BY,
};

use crate::backend::{BackendError, ObjectRef};

impl KubernetesBackend {
    /// The claim Berth makes for `v`.
    pub(super) fn claim_for(&self, v: &ObjectRef) -> PersistentVolumeClaim {
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
    pub(super) async fn own_claim(
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
    pub(super) async fn own_claim_if_any(
        &self,
        v: &ObjectRef,
    ) -> Result<Option<PersistentVolumeClaim>, BackendError> {
        match self.own_claim(v).await {
            Err(e) if e.code == Code::AlreadyExists => Ok(None),
            other => other,
        }
    }
}

/// The claim Berth makes for the volume `name` in namespace `namespace`.
pub fn claim_name(namespace: &str, name: &str) -> String {
    format!(
        "{}.{name}",
        service_kit::tenancy::effective_namespace(namespace)
    )
}

pub(super) fn uid_of(claim: &PersistentVolumeClaim) -> Option<&str> {
    label_of(claim, LABEL_UID)
}

pub(super) fn label_of<'c>(claim: &'c PersistentVolumeClaim, label: &str) -> Option<&'c str> {
    claim
        .metadata
        .labels
        .as_ref()?
        .get(label)
        .map(String::as_str)
}

pub(super) fn made_by_berth(claim: &PersistentVolumeClaim) -> bool {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .is_some_and(|v| v == MANAGED_BY)
}
