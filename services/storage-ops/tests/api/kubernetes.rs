//! The kubernetes backend against the stand-in API server (`kube-standin`): claims made, bound,
//! read, listed, measured, deleted and retained; a foreign claim never adopted; what the API server
//! refuses said in Berth's words (issue 31).

use std::collections::BTreeSet;

use domain::orchestrator::RegisterOrchestrator;
use domain::{Code, OrchestratorKind, VolumePhase};
use kube_standin::{Faults, Quota, StandIn};
use serde_json::json;

use service_kit::testing::eventually;
use storage_ops::env_vars;

use crate::support::*;

/// The Kubernetes namespace the claims go in.
const CLAIMS: &str = "berth-volumes";

/// A stand-in cluster, storage-ops allowed to use it, and an orchestrator `cluster` on it.
async fn cluster_app() -> (StandIn, TestApp) {
    cluster_app_with(&[]).await
}

async fn cluster_app_with(extra: &[(&str, &str)]) -> (StandIn, TestApp) {
    let standin = StandIn::start(&[CLAIMS]).await;
    let mut env = vec![("BERTH_KUBERNETES_SERVERS", standin.url.as_str())];
    env.extend_from_slice(extra);
    let app = spawn_app_with(&env).await;
    app.registry
        .register(
            "cluster",
            &RegisterOrchestrator {
                config: Some(
                    json!({"server": standin.url, "namespace": CLAIMS, "storageClassName": "fast"}),
                ),
                ..RegisterOrchestrator::new(OrchestratorKind::Kubernetes)
            },
        )
        .await
        .unwrap();
    (standin, app)
}

fn on_cluster(name: &str, ns: &str, capacity: &str) -> domain::VolumeProvisionerProfile {
    let mut p = profile(name, capacity);
    p.namespace = Some(ns.into());
    p.orchestrator = Some("cluster".into());
    p
}

#[tokio::test]
async fn a_claim_is_made_pending_then_bound_ready_read_measured_and_deleted() {
    let (standin, app) = cluster_app().await;
    let (v, created) = app
        .storage
        .add(&on_cluster("data", "team", "1Gi"))
        .await
        .unwrap();
    assert!(created);
    // Made, not bound: Pending, with the claim's place.
    assert_eq!(v.status.phase, VolumePhase::Pending, "{v:?}");
    assert_eq!(v.status.reason, "Binding");
    assert_eq!(v.status.location, format!("{CLAIMS}/team.data"));
    let claim = standin.claim(CLAIMS, "team.data").expect("the claim");
    let labels = &claim["metadata"]["labels"];
    assert_eq!(labels["app.kubernetes.io/managed-by"], "berth");
    assert_eq!(labels["berth.io/volume-uid"], v.metadata.uid.as_str());
    assert!(labels["berth.io/instance"].is_string());
    assert_eq!(
        claim["metadata"]["annotations"]["berth.io/namespace"],
        "team"
    );
    assert_eq!(claim["metadata"]["annotations"]["berth.io/name"], "data");
    // The capacity in exact bytes, the class and access modes the orchestrator names.
    assert_eq!(
        claim["spec"]["resources"]["requests"]["storage"],
        "1073741824"
    );
    assert_eq!(claim["spec"]["storageClassName"], "fast");
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteOnce"]));

    // The same request again: the same volume, no second claim.
    let (again, created) = app
        .storage
        .add(&on_cluster("data", "team", "1Gi"))
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(again.metadata.uid, v.metadata.uid);
    assert_eq!(standin.claims(CLAIMS).len(), 1);

    // A class that binds on first consumer is said as such, not as a failure.
    standin.event(
        CLAIMS,
        "team.data",
        "WaitForFirstConsumer",
        "waiting for first consumer to be created before binding",
    );
    let read = app.storage.get("team", "data").await.unwrap();
    assert_eq!(read.status.phase, VolumePhase::Pending);
    assert!(
        read.status.message.contains("waits for a first consumer"),
        "{read:?}"
    );

    // Bound by the cluster: Ready, naming the PersistentVolume and what was granted.
    assert!(standin.bind(CLAIMS, "team.data"));
    let read = app.storage.get("team", "data").await.unwrap();
    assert_eq!(read.status.phase, VolumePhase::Ready, "{read:?}");
    let pv = format!(
        "pvc-{}",
        standin.claim(CLAIMS, "team.data").unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
    );
    assert!(read.status.message.contains(&pv), "{read:?}");
    assert!(read.status.message.contains("1073741824"), "{read:?}");

    let stats = app.storage.stats("team", "data").await.unwrap();
    assert_eq!(stats.capacity_bytes, 1 << 30);
    let list = app
        .storage
        .list(&client::storage::ListParams {
            namespace: Some("team".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(app.storage.orphans().await.unwrap().items.is_empty());

    assert!(app.storage.delete("team", "data").await.unwrap().deleted);
    assert!(standin.claim(CLAIMS, "team.data").is_none());
    assert!(!app.storage.delete("team", "data").await.unwrap().deleted);
}

#[tokio::test]
async fn a_claim_berth_did_not_make_is_never_adopted_nor_changed() {
    let (standin, app) = cluster_app().await;
    let foreign = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "team.taken", "labels": {"owner": "someone"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    });
    let before = standin.put_claim(CLAIMS, foreign).unwrap();
    let e = app
        .storage
        .add(&on_cluster("taken", "team", "1Gi"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::AlreadyExists, "{e}");
    let message = e.status.message.clone();
    assert!(
        message.contains("\"team.taken\"") && message.contains("not made by Berth"),
        "{message}"
    );
    assert_eq!(
        standin.claim(CLAIMS, "team.taken").unwrap(),
        before,
        "never changed"
    );
    // Deleting the volume the clash left Failed leaves the foreign claim alone.
    app.storage.delete("team", "taken").await.unwrap();
    assert_eq!(standin.claim(CLAIMS, "team.taken").unwrap(), before);
}

#[tokio::test]
async fn a_claim_with_this_volumes_uid_but_another_stacks_instance_is_not_this_volumes() {
    // What a restored copy of a stack's database meets (`berth restore`): the original's claims
    // carry the same uids, under the original's instance. The copy must not take them for its own.
    let (standin, app) = cluster_app().await;
    app.storage
        .add(&on_cluster("data", "team", "1Gi"))
        .await
        .unwrap();
    assert!(standin.set_label(CLAIMS, "team.data", "berth.io/instance", "the-original"));
    let before = standin.claim(CLAIMS, "team.data").unwrap();
    let e = app
        .storage
        .add(&on_cluster("data2", "team", "1Gi"))
        .await
        .map(|_| ());
    assert!(e.is_ok(), "another volume is unaffected: {e:?}");
    // Deleting the volume leaves the other stack's claim as it was.
    app.storage.delete("team", "data").await.unwrap();
    assert_eq!(standin.claim(CLAIMS, "team.data").unwrap(), before);
    // And a new volume of that name meets it as a claim Berth did not make for it.
    let e = app
        .storage
        .add(&on_cluster("data", "team", "1Gi"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::AlreadyExists, "{e}");
    assert_eq!(standin.claim(CLAIMS, "team.data").unwrap(), before);
}

#[tokio::test]
async fn a_claim_grows_where_its_class_allows_expansion_and_is_refused_412_where_not() {
    let (standin, app) = cluster_app().await;
    app.storage
        .add(&on_cluster("data", "team", "1Gi"))
        .await
        .unwrap();
    assert!(standin.bind(CLAIMS, "team.data"));
    // Pending until a read (or the reconciler) sees it bound: only then may it grow.
    let e = app
        .storage
        .patch("team", "data", &json!({"spec": {"capacity": "2Gi"}}))
        .await
        .unwrap_err();
    assert!(e.status.message.contains("once it is Ready"), "{e}");
    assert_eq!(
        app.storage.get("team", "data").await.unwrap().status.phase,
        VolumePhase::Ready
    );
    // The class `fast` does not allow expansion (yet): 412, the cluster's reason said.
    let e = app
        .storage
        .patch("team", "data", &json!({"spec": {"capacity": "2Gi"}}))
        .await
        .unwrap_err();
    assert_eq!(e.http_status, Some(412), "{e}");
    assert!(e.status.message.contains("allowVolumeExpansion"), "{e}");
    assert_eq!(
        app.storage.get("team", "data").await.unwrap().spec.capacity,
        "1Gi"
    );
    standin.allow_expansion("fast");
    let grown = app
        .storage
        .patch("team", "data", &json!({"spec": {"capacity": "2Gi"}}))
        .await
        .unwrap();
    assert_eq!(grown.spec.capacity_bytes, 2 << 30);
    let claim = standin.claim(CLAIMS, "team.data").unwrap();
    assert_eq!(
        claim["spec"]["resources"]["requests"]["storage"],
        (2u64 << 30).to_string()
    );
    // Labels change in Berth's record alone: the claim keeps Berth's own labels.
    app.storage
        .patch(
            "team",
            "data",
            &json!({"metadata": {"labels": {"tier": "gold"}}}),
        )
        .await
        .unwrap();
    assert_eq!(
        standin.claim(CLAIMS, "team.data").unwrap()["metadata"]["labels"],
        claim["metadata"]["labels"]
    );
}

#[tokio::test]
async fn rbac_quota_and_invalid_claims_are_said_in_berths_words_without_the_server() {
    let (standin, app) = cluster_app().await;
    standin.set_faults(Faults {
        denied: BTreeSet::from([("create".to_string(), "persistentvolumeclaims".to_string())]),
        ..Faults::default()
    });
    let e = app
        .storage
        .add(&on_cluster("rbac", "team", "1Gi"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition, "{e}");
    for part in ["create", "persistentvolumeclaims", CLAIMS] {
        assert!(e.status.message.contains(part), "{part}: {e}");
    }
    assert!(!e.status.message.contains(&standin.url), "{e}");
    app.storage.delete("team", "rbac").await.unwrap();

    standin.set_faults(Faults {
        quota: Some(Quota {
            name: "berth-quota".into(),
            claims: None,
            storage: Some(2 << 30),
        }),
        ..Faults::default()
    });
    app.storage
        .add(&on_cluster("fits", "team", "1Gi"))
        .await
        .unwrap();
    let e = app
        .storage
        .add(&on_cluster("over", "team", "2Gi"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::ResourceExhausted, "{e}");
    assert!(e.status.message.contains("berth-quota"), "{e}");
    assert!(standin.claim(CLAIMS, "team.over").is_none());
}

#[tokio::test]
async fn retain_leaves_the_claim_unlabelled_and_an_in_use_claim_keeps_its_volume_deleting() {
    let (standin, app) = cluster_app().await;
    app.storage
        .add(&on_cluster("kept", "team", "1Gi"))
        .await
        .unwrap();
    app.storage
        .delete_with_policy("team", "kept", domain::volume::ReclaimPolicy::Retain)
        .await
        .unwrap();
    let claim = standin.claim(CLAIMS, "team.kept").expect("retained");
    assert!(claim["metadata"]["labels"]["app.kubernetes.io/managed-by"].is_null());
    assert!(claim["metadata"]["labels"]["berth.io/volume-uid"].is_string());
    assert!(app.storage.orphans().await.unwrap().items.is_empty());

    // A pod mounts it: the claim stays terminating, and the volume Deleting until it is gone.
    app.storage
        .add(&on_cluster("mounted", "team", "1Gi"))
        .await
        .unwrap();
    standin.set_in_use(CLAIMS, "team.mounted", true);
    let e = app.storage.delete("team", "mounted").await.unwrap_err();
    assert_eq!(code(&e), Code::Unavailable, "{e}");
    let read = app.storage.get("team", "mounted").await.unwrap();
    assert_eq!(read.status.phase, VolumePhase::Deleting);
    standin.set_in_use(CLAIMS, "team.mounted", false);
    assert!(app.storage.delete("team", "mounted").await.unwrap().deleted);
    assert!(standin.claim(CLAIMS, "team.mounted").is_none());
}

#[tokio::test]
async fn an_api_server_that_hangs_or_is_down_is_unavailable_with_retry_after() {
    let (standin, app) = cluster_app().await;
    standin.set_faults(Faults {
        hang: true,
        ..Faults::default()
    });
    let started = std::time::Instant::now();
    let e = app
        .storage
        .add(&on_cluster("hung", "team", "1Gi"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::Unavailable, "{e}");
    assert!(e.retry_after.is_some(), "{e:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "answered within the caller's deadline: {:?}",
        started.elapsed()
    );
    drop(standin);
    let e = app
        .storage
        .add(&on_cluster("down", "team", "1Gi"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::Unavailable, "{e}");
    assert!(e.retry_after.is_some(), "{e:?}");
    assert!(!e.status.message.contains("127.0.0.1"), "{e}");
}

#[tokio::test]
async fn a_claim_deleted_behind_berths_back_or_lost_fails_its_volume() {
    let (standin, app) = cluster_app_with(&[(env_vars::RECONCILE_INTERVAL, "100ms")]).await;
    for name in ["gone", "lost"] {
        app.storage
            .add(&on_cluster(name, "team", "1Gi"))
            .await
            .unwrap();
        assert!(standin.bind(CLAIMS, &format!("team.{name}")));
        let read = app.storage.get("team", name).await.unwrap();
        assert_eq!(read.status.phase, VolumePhase::Ready, "{read:?}");
    }
    // kubectl delete pvc, and a PersistentVolume gone from under its claim.
    assert!(standin.delete_claim(CLAIMS, "team.gone"));
    assert!(standin.lose(CLAIMS, "team.lost"));
    for (name, reason) in [("gone", "ClaimMissing"), ("lost", "ClaimLost")] {
        let failed = eventually("the reconciler notices", WAIT, || async {
            let v = app.storage.get("team", name).await.unwrap();
            (v.status.phase == VolumePhase::Failed).then_some(v)
        })
        .await;
        assert_eq!(failed.status.reason, reason, "{failed:?}");
    }
    // Deleting the volume of a claim already gone succeeds.
    assert!(app.storage.delete("team", "gone").await.unwrap().deleted);
}

#[tokio::test]
async fn credentials_for_a_named_server_come_from_the_operators_kubeconfig() {
    let standin = StandIn::start(&[CLAIMS]).await;
    standin.set_faults(Faults {
        token: Some("operator-token-7f3a".into()),
        ..Faults::default()
    });
    // Without credentials the server refuses: said as a precondition, the token never shown.
    let bare = spawn_app_with(&[("BERTH_KUBERNETES_SERVERS", standin.url.as_str())]).await;
    register_cluster(&bare, &standin.url).await;
    let e = bare
        .storage
        .add(&on_cluster("anon", "team", "1Gi"))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition, "{e}");
    assert!(e.status.message.contains("credentials"), "{e}");
    assert!(!e.status.message.contains("operator-token"), "{e}");
    // The operator's kubeconfig has a context for the server: its token is used.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: {}\ncontexts:\n- name: berth\n  context:\n    cluster: standin\n    user: berth\nusers:\n- name: berth\n  user:\n    token: operator-token-7f3a\ncurrent-context: berth\n",
            standin.url
        ),
    )
    .unwrap();
    let app = spawn_app_with(&[
        ("BERTH_KUBERNETES_SERVERS", standin.url.as_str()),
        ("BERTH_KUBECONFIG", kubeconfig.to_str().unwrap()),
    ])
    .await;
    register_cluster(&app, &standin.url).await;
    let (v, _) = app
        .storage
        .add(&on_cluster("authed", "team", "1Gi"))
        .await
        .unwrap();
    assert_eq!(v.status.phase, VolumePhase::Pending, "{v:?}");
    assert!(standin.claim(CLAIMS, "team.authed").is_some());
}

async fn register_cluster(app: &TestApp, server: &str) {
    app.registry
        .register(
            "cluster",
            &RegisterOrchestrator {
                config: Some(json!({"server": server, "namespace": CLAIMS})),
                ..RegisterOrchestrator::new(OrchestratorKind::Kubernetes)
            },
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_watch_sees_berths_claims_made_bound_and_deleted() {
    use futures::StreamExt as _;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use kube::api::{Api, WatchEvent, WatchParams};

    let (standin, app) = cluster_app().await;
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let client = kube::Client::try_from(kube::Config::new(standin.url.parse().unwrap())).unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, CLAIMS);
    let params = WatchParams::default()
        .labels("app.kubernetes.io/managed-by=berth")
        .timeout(20);
    let mut events = claims.watch(&params, "0").await.unwrap().boxed();

    app.storage
        .add(&on_cluster("watched", "team", "1Gi"))
        .await
        .unwrap();
    assert!(standin.bind(CLAIMS, "team.watched"));
    assert!(app.storage.delete("team", "watched").await.unwrap().deleted);

    let mut seen = Vec::new();
    while let Some(event) = events.next().await {
        let (kind, claim) = match event.unwrap() {
            WatchEvent::Added(c) => ("ADDED", c),
            WatchEvent::Modified(c) => ("MODIFIED", c),
            WatchEvent::Deleted(c) => ("DELETED", c),
            other => panic!("{other:?}"),
        };
        let phase = claim.status.and_then(|s| s.phase).unwrap_or_default();
        seen.push(format!("{kind} {} {phase}", claim.metadata.name.unwrap()));
        if kind == "DELETED" {
            break;
        }
    }
    assert_eq!(
        seen.first().unwrap(),
        "ADDED team.watched Pending",
        "{seen:?}"
    );
    assert!(
        seen.contains(&"MODIFIED team.watched Bound".to_string()),
        "{seen:?}"
    );
    assert!(
        seen.last().unwrap().starts_with("DELETED team.watched"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_missing_namespace_is_a_precondition_and_orphan_scans_name_no_server() {
    let (standin, app) = cluster_app().await;
    app.registry
        .register(
            "elsewhere",
            &RegisterOrchestrator {
                config: Some(json!({"server": standin.url, "namespace": "no-such-namespace"})),
                ..RegisterOrchestrator::new(OrchestratorKind::Kubernetes)
            },
        )
        .await
        .unwrap();
    let mut p = on_cluster("lost", "team", "1Gi");
    p.orchestrator = Some("elsewhere".into());
    let e = app.storage.add(&p).await.unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition, "{e}");
    assert!(e.status.message.contains("\"no-such-namespace\""), "{e}");
    app.storage.delete("team", "lost").await.unwrap();

    // A scan that cannot reach the server says which orchestrator, not where it is.
    let url = standin.url.clone();
    drop(standin);
    let orphans = app.storage.orphans().await.unwrap();
    let unscanned = orphans.unscanned.join("; ");
    assert!(
        unscanned.contains("orchestrator \"cluster\""),
        "{unscanned}"
    );
    assert!(!unscanned.contains(&url), "{unscanned}");
}
