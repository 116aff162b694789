//! PatchStorage: labels changed and removed, capacity grown where the backend can, refused where it
//! cannot or must not (a shrink, a field that cannot change, a stale resourceVersion, a quota).

use std::collections::BTreeMap;

use domain::Code;
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn labels_change_and_go_and_the_version_moves() {
    let app = spawn_app().await;
    let mut p = profile("data", "1Mi");
    p.labels = Some(BTreeMap::from([("app".to_string(), "web".to_string())]));
    let (v, _) = app.storage.add(&p).await.unwrap();
    // Past the millisecond the volume became Ready in, so a patch that moved its Ready condition's
    // lastTransitionTime would show it (the check below could not fail otherwise).
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let patched = app
        .storage
        .patch(
            "team",
            "data",
            &json!({"metadata": {"labels": {"tier": "gold", "app": null}}}),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.metadata.labels,
        BTreeMap::from([("tier".to_string(), "gold".to_string())])
    );
    assert_ne!(
        patched.metadata.resource_version,
        v.metadata.resource_version
    );
    assert_eq!(app.storage.get("team", "data").await.unwrap(), patched);
    // Ready did not change, so neither did its lastTransitionTime (every patch moved it once).
    assert_eq!(
        patched.status.conditions[0].last_transition_time,
        v.status.conditions[0].last_transition_time
    );
    // The same patch again changes nothing, not even the version.
    let again = app
        .storage
        .patch(
            "team",
            "data",
            &json!({"metadata": {"labels": {"tier": "gold"}}}),
        )
        .await
        .unwrap();
    assert_eq!(again, patched);
    // A selector finds it by its new label.
    let list = app
        .storage
        .list(&client::storage::ListParams {
            namespace: Some("team".into()),
            label_selector: Some("tier=gold".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    // A bad label is refused, naming it.
    let e = app
        .storage
        .patch(
            "team",
            "data",
            &json!({"metadata": {"labels": {"bad key!": "x"}}}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    assert!(e.status.message.contains("metadata.labels"), "{e}");
    // `labels: null` removes them all.
    let bare = app
        .storage
        .patch("team", "data", &json!({"metadata": {"labels": null}}))
        .await
        .unwrap();
    assert!(bare.metadata.labels.is_empty());
}

#[tokio::test]
async fn a_stale_resource_version_is_a_conflict_and_the_current_one_applies() {
    let app = spawn_app().await;
    let (v, _) = app.storage.add(&profile("data", "1Mi")).await.unwrap();
    let first = app
        .storage
        .patch(
            "team",
            "data",
            &json!({"metadata": {"labels": {"a": "1"}, "resourceVersion": v.metadata.resource_version}}),
        )
        .await
        .unwrap();
    // The version read before that patch is stale now.
    let e = app
        .storage
        .patch(
            "team",
            "data",
            &json!({"metadata": {"labels": {"a": "2"}, "resourceVersion": v.metadata.resource_version}}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.http_status, Some(409), "{e}");
    assert!(e.status.message.contains("metadata.resourceVersion"), "{e}");
    assert_eq!(
        app.storage
            .get("team", "data")
            .await
            .unwrap()
            .metadata
            .labels["a"],
        "1"
    );
    let e = app
        .storage
        .patch(
            "team",
            "data",
            &json!({"metadata": {"resourceVersion": "007"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    app.storage
        .patch(
            "team",
            "data",
            &json!({"metadata": {"labels": {"a": "2"}, "resourceVersion": first.metadata.resource_version}}),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_sparse_file_grows_a_directory_grows_its_record_and_nothing_shrinks() {
    let app = spawn_app().await;
    let mut p = profile("blob", "1Mi");
    p.parameters = Some(BTreeMap::from([("format".to_string(), "file".to_string())]));
    let (v, _) = app.storage.add(&p).await.unwrap();
    let file = app
        .base
        .join("team")
        .join(format!("blob-{}", v.metadata.uid));
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 1 << 20);
    let grown = app
        .storage
        .patch("team", "blob", &json!({"spec": {"capacity": "3Mi"}}))
        .await
        .unwrap();
    assert_eq!(grown.spec.capacity, "3Mi");
    assert_eq!(grown.spec.capacity_bytes, 3 << 20);
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 3 << 20);
    let stats = app.storage.stats("team", "blob").await.unwrap();
    assert_eq!(stats.capacity_bytes, 3 << 20);
    // Adding it again as it was first asked is now a different volume: 409 naming the capacity.
    let e = app.storage.add(&p).await.unwrap_err();
    assert_eq!(code(&e), Code::AlreadyExists, "{e}");
    // Smaller: refused, nothing changed.
    let e = app
        .storage
        .patch("team", "blob", &json!({"spec": {"capacity": "2Mi"}}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    assert!(e.status.message.contains("cannot shrink"), "{e}");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 3 << 20);

    app.storage.add(&profile("dir", "1Mi")).await.unwrap();
    let grown = app
        .storage
        .patch("team", "dir", &json!({"spec": {"capacity": "1Gi"}}))
        .await
        .unwrap();
    assert_eq!(grown.spec.capacity_bytes, 1 << 30);
}

#[tokio::test]
async fn fields_that_cannot_change_are_refused_by_name_and_may_be_sent_as_they_are() {
    let app = spawn_app().await;
    let (v, _) = app.storage.add(&profile("data", "1Mi")).await.unwrap();
    // What a read gave, sent back whole with one label more: applies.
    let mut whole = serde_json::to_value(&v).unwrap();
    whole["metadata"]["labels"] = json!({"new": "yes"});
    let patched = app.storage.patch("team", "data", &whole).await.unwrap();
    assert_eq!(patched.metadata.labels["new"], "yes");
    for (patch, field) in [
        (json!({"spec": {"replicas": 3}}), "spec.replicas"),
        (
            json!({"spec": {"orchestrator": "other"}}),
            "spec.orchestrator",
        ),
        (json!({"metadata": {"uid": "x"}}), "metadata.uid"),
        (json!({"spec": {"size": "1Gi"}}), "spec.size"),
        (json!({"kind": "Machine"}), "kind"),
        (json!({"apiVersion": "v1"}), "apiVersion"),
        (json!({"status2": {}}), "status2"),
        // The status is ignored, but only as what a read gave: an object.
        (json!({"status": "garbage"}), "status"),
        // At most 64 labels (a break-it run grew one volume to 125,000).
        (
            json!({"metadata": {"labels": (0..65).map(|i| (format!("k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>()}}),
            "metadata.labels",
        ),
        (json!({"spec": {"\u{1b}[2J": 1}}), "spec.\\u{1b}[2J"),
        (json!({"spec": {"capacity": 5}}), "spec.capacity"),
        (json!([]), "body"),
    ] {
        let e = app.storage.patch("team", "data", &patch).await.unwrap_err();
        assert_eq!(code(&e), Code::InvalidArgument, "{patch}: {e}");
        assert!(e.status.message.starts_with(field), "{patch}: {e}");
    }
    let e = app
        .storage
        .patch(
            "team",
            "nothing",
            &json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::NotFound, "{e}");
}

#[tokio::test]
async fn a_growth_past_the_namespace_quota_is_refused_and_changes_nothing() {
    let app = spawn_app_with(&[("BERTH_QUOTA_VOLUME_BYTES", "4Mi")]).await;
    app.storage.add(&profile("a", "1Mi")).await.unwrap();
    app.storage.add(&profile("b", "1Mi")).await.unwrap();
    let e = app
        .storage
        .patch("team", "a", &json!({"spec": {"capacity": "4Mi"}}))
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::ResourceExhausted, "{e}");
    assert_eq!(
        app.storage.get("team", "a").await.unwrap().spec.capacity,
        "1Mi"
    );
    // To the quota exactly: allowed.
    app.storage
        .patch("team", "a", &json!({"spec": {"capacity": "3Mi"}}))
        .await
        .unwrap();
}
