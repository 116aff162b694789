//! Reading what the cluster did with a claim (its phase, and the events that say why it is not
//! bound): apart because a claim is made at once but usable only later, and this is how the
//! volume's status follows it.

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};

use super::KubernetesBackend;
use super::calls::call;
use super::claim::claim_name;
use crate::backend::{BackendError, ObjectRef, Observed};

impl KubernetesBackend {
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

    pub(super) async fn observe_claim(&self, v: &ObjectRef) -> Result<Observed, BackendError> {
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
