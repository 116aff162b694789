//! A running stand-in, and what a test does through it: what the cluster's controllers would do
//! (bind a claim, lose it, record an event, mark a claim in use) and what a person would (make or
//! delete a claim behind Berth's back). Apart because it is the crate's public face, the one
//! thing a test holds.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::claims::create_claim;
use crate::cluster::{Shared, lock};
use crate::faults::Faults;
use crate::routes::router;

/// A running stand-in on a loopback port.
pub struct StandIn {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    cluster: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    /// Starts one with the namespaces `namespaces`.
    pub async fn start(namespaces: &[&str]) -> StandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        StandIn::start_on(listener, namespaces)
    }

    /// Starts one on `listener` (a port a test chose, or one it stops and starts again).
    pub fn start_on(listener: tokio::net::TcpListener, namespaces: &[&str]) -> StandIn {
        let addr: SocketAddr = listener.local_addr().expect("an address");
        let cluster: Shared = Arc::default();
        {
            let mut c = lock(&cluster);
            c.namespaces
                .extend(namespaces.iter().map(|n| n.to_string()));
            c.newest = Some(tokio::sync::watch::channel(0).0);
        }
        let app = router(cluster.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        StandIn {
            url: format!("http://{addr}"),
            cluster,
            task,
        }
    }

    /// Lets claims of StorageClass `class` grow, as `allowVolumeExpansion: true` does; others are
    /// refused by the resize admission plugin's 403.
    pub fn allow_expansion(&self, class: &str) {
        lock(&self.cluster).expandable.insert(class.to_string());
    }

    /// Sets what the cluster refuses.
    pub fn set_faults(&self, faults: Faults) {
        lock(&self.cluster).faults = faults;
    }

    /// Every call so far, `METHOD path?query`.
    pub fn calls(&self) -> Vec<String> {
        lock(&self.cluster).calls.clone()
    }

    /// Every object a client sent to be created, exactly as sent (before any check).
    pub fn sent(&self) -> Vec<Value> {
        lock(&self.cluster).sent.clone()
    }

    /// The claim `namespace/name` as stored.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<Value> {
        lock(&self.cluster)
            .claims
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Every claim of `namespace`, by name.
    pub fn claims(&self, namespace: &str) -> BTreeMap<String, Value> {
        lock(&self.cluster)
            .claims
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|((_, name), claim)| (name.clone(), claim.clone()))
            .collect()
    }

    /// Makes a claim as `kubectl create` would, bypassing Berth (a foreign claim).
    pub fn put_claim(&self, namespace: &str, claim: Value) -> Result<Value, Value> {
        let mut cluster = lock(&self.cluster);
        create_claim(&mut cluster, namespace, claim).map_err(|(_, status)| status)
    }

    /// Gives the claim the uid `uid`, as if the API server had (a pact's examples name one).
    pub fn set_uid(&self, namespace: &str, name: &str, uid: &str) -> bool {
        self.update(namespace, name, |claim| {
            claim["metadata"]["uid"] = json!(uid);
        })
    }

    /// Sets one of the claim's labels, as someone editing it would.
    pub fn set_label(&self, namespace: &str, name: &str, key: &str, value: &str) -> bool {
        self.update(namespace, name, |claim| {
            claim["metadata"]["labels"][key] = json!(value);
        })
    }

    /// The PV controller binds the claim: a PersistentVolume of the requested size, `Bound`.
    pub fn bind(&self, namespace: &str, name: &str) -> bool {
        self.update(namespace, name, |claim| {
            let uid = claim["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let storage = claim["spec"]["resources"]["requests"]["storage"].clone();
            let modes = claim["spec"]["accessModes"].clone();
            claim["spec"]["volumeName"] = json!(format!("pvc-{uid}"));
            if claim["spec"]["storageClassName"].is_null() {
                claim["spec"]["storageClassName"] = json!("standard");
            }
            claim["status"] =
                json!({"phase": "Bound", "capacity": {"storage": storage}, "accessModes": modes});
        })
    }

    /// The PV controller of a cluster with capacity to spare: binds every Pending claim of
    /// `namespace`, and says how many.
    pub fn bind_pending(&self, namespace: &str) -> usize {
        let pending: Vec<String> = self
            .claims(namespace)
            .into_iter()
            .filter(|(_, c)| c["status"]["phase"] == "Pending")
            .map(|(name, _)| name)
            .collect();
        pending
            .iter()
            .filter(|name| self.bind(namespace, name))
            .count()
    }

    /// The claim's volume is gone: `Lost`.
    pub fn lose(&self, namespace: &str, name: &str) -> bool {
        self.update(namespace, name, |claim| {
            claim["status"]["phase"] = json!("Lost");
        })
    }

    /// Records an event on the claim, as a controller does (`ProvisioningFailed`,
    /// `WaitForFirstConsumer`).
    pub fn event(&self, namespace: &str, name: &str, reason: &str, message: &str) {
        let mut cluster = lock(&self.cluster);
        let version = cluster.next_version();
        let n = cluster.events.len();
        cluster.events.push(json!({
            "metadata": {"name": format!("{name}.{n:x}"), "namespace": namespace, "resourceVersion": version},
            "involvedObject": {"kind": "PersistentVolumeClaim", "name": name, "namespace": namespace},
            "reason": reason, "message": message, "type": "Warning",
        }));
    }

    /// Whether a pod mounts the claim: while it does, a deleted claim stays, terminating.
    pub fn set_in_use(&self, namespace: &str, name: &str, in_use: bool) {
        let mut cluster = lock(&self.cluster);
        let key = (namespace.to_string(), name.to_string());
        if in_use {
            cluster.in_use.insert(key);
            return;
        }
        cluster.in_use.remove(&key);
        let terminating = cluster
            .claims
            .get(&key)
            .is_some_and(|c| !c["metadata"]["deletionTimestamp"].is_null());
        if terminating {
            cluster.remove_claim(&key);
        }
    }

    /// Deletes a claim behind Berth's back (`kubectl delete pvc`).
    pub fn delete_claim(&self, namespace: &str, name: &str) -> bool {
        lock(&self.cluster)
            .remove_claim(&(namespace.to_string(), name.to_string()))
            .is_some()
    }

    fn update(&self, namespace: &str, name: &str, change: impl FnOnce(&mut Value)) -> bool {
        let mut cluster = lock(&self.cluster);
        let version = cluster.next_version();
        let key = (namespace.to_string(), name.to_string());
        match cluster.claims.get_mut(&key) {
            Some(claim) => {
                change(claim);
                claim["metadata"]["resourceVersion"] = json!(version);
                cluster.changed(&key, "MODIFIED", None);
                true
            }
            None => false,
        }
    }
}
