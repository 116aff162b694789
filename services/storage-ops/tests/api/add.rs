//! AddStorage: idempotency, concurrent adds, bad input, capacities.

use std::collections::{BTreeMap, HashSet};

use client::storage::ListParams;
use domain::{Code, VolumePhase};
use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn add_read_list_delete_round_trip() {
    let app = spawn_app().await;
    let mut p = profile("data", "1536Mi");
    p.labels = Some(BTreeMap::from([("app".into(), "db".into())]));
    let response = app.post_raw(&serde_json::to_value(&p).unwrap()).await;
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["location"], "/v1/volumes/team/data");
    let created: domain::Volume = response.json().await.unwrap();
    assert_eq!(created.status.phase, VolumePhase::Ready);
    assert_eq!(created.spec.capacity, "1536Mi");
    assert_eq!(created.spec.capacity_bytes, 1536 << 20);
    assert_eq!(created.spec.orchestrator, "disk");
    assert_eq!(created.spec.replicas, 1);
    let uid = created.metadata.uid.clone();
    let dir = app.base.join("team").join(format!("data-{uid}"));
    assert_eq!(created.status.location, dir.display().to_string());
    assert!(dir.is_dir());
    // Marked committed (0700, not the 000 of an uncommitted object) before the answer.
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o7777, 0o700);

    // Read after create sees it, at once.
    let read = app.storage.get("team", "data").await.unwrap();
    assert_eq!(read, created);
    let list = app.storage.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items, vec![created.clone()]);
    assert!(list.continue_token.is_none());

    let gone = app.storage.delete("team", "data").await.unwrap();
    assert!(gone.deleted);
    assert!(!dir.exists());
    let again = app.storage.delete("team", "data").await.unwrap();
    assert!(
        !again.deleted,
        "a repeated delete is a 200 saying there was nothing"
    );
    let e = app.storage.get("team", "data").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    assert_eq!(e.http_status, Some(404));
    let raw = app
        .http
        .get(format!("{}/v1/volumes", app.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(raw, r#"{"items":[]}"#);
}

#[tokio::test]
async fn the_same_spec_again_is_200_and_a_different_one_409_naming_the_fields() {
    let app = spawn_app().await;
    let (first, created) = app.storage.add(&profile("data", "1Gi")).await.unwrap();
    assert!(created);
    // 1024Mi is 1Gi: specs compare by bytes, not by spelling; naming the orchestrator it is on is the same.
    let mut same = profile("data", "1024Mi");
    same.orchestrator = Some("disk".into());
    let (again, created) = app.storage.add(&same).await.unwrap();
    assert!(!created);
    assert_eq!(again, first);
    // Spelling out the documented defaults asks for the same volume too.
    let mut defaults = profile("data", "1Gi");
    defaults.parameters = Some(
        [("format", "directory"), ("reclaimPolicy", "Delete")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
    );
    let (again, created) = app.storage.add(&defaults).await.unwrap();
    assert!(!created);
    assert_eq!(again, first);
    let mut retain = profile("data", "1Gi");
    retain.parameters = Some([("reclaimPolicy".to_string(), "Retain".to_string())].into());
    let e = app.storage.add(&retain).await.unwrap_err();
    assert_eq!(e.http_status, Some(409), "{e:?}");

    let mut other = profile("data", "2Gi");
    other.replicas = Some(2);
    let e = app.storage.add(&other).await.unwrap_err();
    assert_eq!(code(&e), Code::AlreadyExists);
    assert_eq!(e.http_status, Some(409));
    assert!(
        e.status.message.contains("capacity is 1Gi (asked 2Gi)"),
        "{}",
        e.status.message
    );
    assert!(
        e.status.message.contains("replicas is 1 (asked 2)"),
        "{}",
        e.status.message
    );
    assert_eq!(app.storage.get("team", "data").await.unwrap(), first);
    assert_eq!(app.objects("team").len(), 1);
}

#[tokio::test]
async fn a_hundred_concurrent_adds_of_one_spec_make_one_directory_and_one_201() {
    let app = spawn_app().await;
    let calls = (0..100).map(|_| {
        let storage = app.storage.clone();
        async move { storage.add(&profile("shared", "1Gi")).await }
    });
    let results = futures::future::join_all(calls).await;
    let mut created = 0;
    let mut uids = HashSet::new();
    for r in results {
        let (v, c) = r.unwrap();
        created += usize::from(c);
        assert_eq!(v.status.phase, VolumePhase::Ready);
        uids.insert(v.metadata.uid);
    }
    assert_eq!(created, 1, "exactly one 201, the rest 200");
    assert_eq!(uids.len(), 1);
    assert_eq!(app.objects("team").len(), 1);
}

#[tokio::test]
async fn a_hundred_concurrent_adds_of_different_specs_conflict_and_leave_the_first_untouched() {
    let app = spawn_app().await;
    let calls = (1..=100).map(|i| {
        let storage = app.storage.clone();
        async move {
            (
                i,
                storage.add(&profile("contested", &format!("{i}Mi"))).await,
            )
        }
    });
    let results = futures::future::join_all(calls).await;
    let winners: Vec<_> = results.iter().filter(|(_, r)| r.is_ok()).collect();
    assert_eq!(winners.len(), 1);
    let (winner_i, winner) = winners[0];
    let (first, created) = winner.as_ref().unwrap();
    assert!(created);
    for (_, r) in &results {
        if let Err(e) = r {
            assert_eq!(code(e), Code::AlreadyExists, "{e}");
        }
    }
    let now = app.storage.get("team", "contested").await.unwrap();
    assert_eq!(&now, first);
    assert_eq!(now.spec.capacity_bytes, (*winner_i as u64) << 20);
    assert_eq!(app.objects("team").len(), 1);
}

#[tokio::test]
async fn a_body_that_is_not_an_object_is_a_400_and_nothing_is_made() {
    let app = spawn_app().await;
    // serde reads a struct from an array by position, so this was a 201 for volume "arrayvol".
    for body in [
        json!(["arrayvol", null, "1Mi"]),
        json!([["arrayvol"]]),
        json!("arrayvol"),
    ] {
        let (status, p) = problem(app.post_raw(&body).await).await;
        assert_eq!(status, 400, "{body}: {p}");
        assert_eq!(p["code"], 3, "{p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("body: must be a JSON object"),
            "{body}: {detail}"
        );
    }
    assert!(
        app.storage
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(app.objects("default").is_empty());
}

#[tokio::test]
async fn capacities_have_one_limit_and_one_wording() {
    let app = spawn_app().await;
    const TOO_LARGE: &str =
        "is too large: a quantity must be less than 8Ei (at most 9223372036854775807 bytes)";
    for capacity in [
        "8Ei",
        "16Ei",
        "9223372036854775808",
        "18446744073709551616",
        "1e19",
        "1e400",
        "1e99999",
        "9300P",
    ] {
        let (status, p) = problem(
            app.post_raw(&json!({"name": "big", "capacity": capacity}))
                .await,
        )
        .await;
        assert_eq!(status, 400, "{capacity}: {p}");
        assert_eq!(
            p["detail"],
            format!("capacity: {capacity:?} {TOO_LARGE}"),
            "{capacity}"
        );
    }
    // An exponent and a unit together are not a quantity at all, whatever their size, and say why.
    for capacity in ["1e400Gi", "1e3Gi"] {
        let (status, p) = problem(
            app.post_raw(&json!({"name": "big", "capacity": capacity}))
                .await,
        )
        .await;
        assert_eq!(status, 400, "{capacity}: {p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.starts_with(&format!("capacity: {capacity:?} is not a quantity: ")),
            "{detail}"
        );
        assert!(detail.contains("not both"), "{detail}");
    }
    // Just under the limit is a capacity like any other.
    let (v, created) = app
        .storage
        .add(&profile("largest", "9223372036854775807"))
        .await
        .unwrap();
    assert!(created);
    assert_eq!(v.spec.capacity_bytes, i64::MAX as u64);
    assert!(app.storage.add(&profile("big", "7Ei")).await.unwrap().1);
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_field_and_nothing_is_made() {
    let app = spawn_app().await;
    let long = "a".repeat(64);
    let cases: Vec<(Value, &str)> = vec![
        (json!({"name": "../etc", "capacity": "1Gi"}), "name"),
        (json!({"name": "a/b", "capacity": "1Gi"}), "name"),
        (json!({"name": long, "capacity": "1Gi"}), "name"),
        (
            json!({"name": "ok", "namespace": "..", "capacity": "1Gi"}),
            "namespace",
        ),
        (
            json!({"name": "ok", "namespace": "a".repeat(64), "capacity": "1Gi"}),
            "namespace",
        ),
        (json!({"name": "ok", "capacity": "5Gb"}), "capacity"),
        (json!({"name": "ok", "capacity": "0"}), "capacity"),
        (
            json!({"name": "ok", "capacity": "1Gi", "replicas": 0}),
            "replicas",
        ),
        (
            json!({"name": "ok", "capacity": "1Gi", "labels": {"a": "b c"}}),
            "labels[a]",
        ),
        (
            json!({"name": "ok", "capacity": "1Gi", "parameters": {"format": "zfs"}}),
            "parameters.format",
        ),
        (
            json!({"name": "ok", "capacity": "1Gi", "size": "2"}),
            "size: unknown field `size`",
        ),
    ];
    for (body, field) in cases {
        let (status, p) = problem(app.post_raw(&body).await).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(p["code"], 3, "{body}");
        let detail = p["detail"].as_str().unwrap();
        assert!(detail.starts_with(field), "{body}: {detail}");
    }
    // A well-formed name that is not registered is state, not shape: 412 (code 9), naming the field.
    let body = json!({"name": "ok", "capacity": "1Gi", "orchestrator": "nope"});
    let (status, p) = problem(app.post_raw(&body).await).await;
    assert_eq!((status, p["code"].as_u64()), (412, Some(9)), "{p}");
    assert!(
        p["detail"].as_str().unwrap().starts_with("orchestrator"),
        "{p}"
    );
    // Sent byte for byte: an HTTP client library would resolve the dots before they left.
    for path in [
        "/v1/volumes/../x",
        "/v1/volumes/%2E%2E/x",
        "/v1/volumes/team/%2E%2E",
        "/v1/volumes/team/..%2Fetc",
        "/v1/volumes/team/..%2F..%2Fetc/stats",
    ] {
        assert_eq!(raw_status("GET", &app.url, path).await, 400, "GET {path}");
        if !path.ends_with("/stats") {
            let status = raw_status("DELETE", &app.url, path).await;
            assert_eq!(status, 400, "DELETE {path}");
        }
    }
    for path in [
        &format!("/v1/volumes/team/{long}"),
        "/v1/volumes?limit=0",
        "/v1/volumes?limit=1001",
        "/v1/volumes?continue=garbage",
        "/v1/volumes?labelSelector=a%20in%20",
        "/v1/volumes?namespace=Bad",
    ] {
        let (status, p) = problem(
            app.http
                .get(format!("{}{path}", app.url))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!((status, p["code"].as_u64()), (400, Some(3)), "{path}: {p}");
    }
    let (status, p) = problem(
        app.http
            .delete(format!("{}/v1/volumes/team/x?reclaimPolicy=Keep", app.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(p["detail"].as_str().unwrap().starts_with("reclaimPolicy"));
    assert!(!app.base.exists() || std::fs::read_dir(&app.base).unwrap().count() == 0);
    assert!(
        app.storage
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn capacity_exhaustion_is_a_429_and_leaves_nothing() {
    let app = spawn_app().await;
    let small = app.tmp.path().join("small");
    register_local(&app.registry, "small", &small, Some("10Mi"), false).await;
    let mut p = profile("one", "6Mi");
    p.orchestrator = Some("small".into());
    app.storage.add(&p).await.unwrap();
    let mut q = profile("two", "5Mi");
    q.orchestrator = Some("small".into());
    let e = app.storage.add(&q).await.unwrap_err();
    assert_eq!(code(&e), Code::ResourceExhausted, "{e}");
    assert_eq!(e.http_status, Some(429));
    // Full until something is freed: no Retry-After, which would have the caller wait for nothing
    // (a break-it finding: the CLI said "retry in 1s").
    assert!(e.retry_after.is_none());
    assert!(
        e.status.message.contains("\"small\""),
        "{}",
        e.status.message
    );
    // What the orchestrator's volumes take is every namespace's business but the caller's (a
    // break-it finding: the figure told one tenant what the others held).
    let taken = (6u64 << 20).to_string();
    assert!(
        !e.status.message.contains(&taken),
        "the use is said: {}",
        e.status.message
    );
    assert_eq!(objects_under(&small, "team").len(), 1);
    assert!(matches!(app.storage.get("team", "two").await, Err(e) if code(&e) == Code::NotFound));
    // Freeing space lets it in.
    app.storage.delete("team", "one").await.unwrap();
    app.storage.add(&q).await.unwrap();
}

/// What the operator or the caller got wrong is answered as such, never as a 500: a file larger
/// than the file system holds is the caller's 400 and leaves no Failed volume to hold capacity; a
/// base path that is a file, or one that leads through a link into a volume's own directory (where
/// deleting that volume would delete the new ones), is the operator's 412, and nothing is made.
#[tokio::test]
async fn sizes_and_base_paths_the_file_system_cannot_take_are_refused_as_such() {
    let app = spawn_app().await;

    // 7 EiB is a valid quantity; ext4 holds 16 TiB a file (a file system that takes it makes it
    // sparse, which is no failure either).
    let mut huge = profile("huge", "7Ei");
    huge.parameters = Some(BTreeMap::from([("format".into(), "file".into())]));
    let response = app.post_raw(&serde_json::to_value(&huge).unwrap()).await;
    if response.status() != 201 {
        let (status, body) = problem(response).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["title"], "InvalidArgument", "{body}");
        assert!(
            body["detail"].as_str().unwrap().contains("capacity"),
            "{body}"
        );
        let e = app.storage.get("team", "huge").await.unwrap_err();
        assert_eq!(code(&e), Code::NotFound, "no Failed volume is kept");
        assert!(app.objects("team").is_empty(), "{:?}", app.objects("team"));
    }

    let file_base = app.tmp.path().join("a-file");
    std::fs::write(&file_base, b"not a directory").unwrap();
    register_local(&app.registry, "filebase", &file_base, None, false).await;
    let outer: domain::Volume = app
        .post_raw(&serde_json::to_value(profile("outer", "1Gi")).unwrap())
        .await
        .json()
        .await
        .unwrap();
    let link = app.tmp.path().join("link");
    std::os::unix::fs::symlink(&outer.status.location, &link).unwrap();
    register_local(&app.registry, "nested", &link.join("vols"), None, false).await;
    for orchestrator in ["filebase", "nested"] {
        let mut p = profile(&format!("on-{orchestrator}"), "1Gi");
        p.orchestrator = Some(orchestrator.into());
        let (status, body) = problem(app.post_raw(&serde_json::to_value(&p).unwrap()).await).await;
        assert_eq!(status, 412, "{orchestrator}: {body}");
        assert_eq!(
            body["title"], "FailedPrecondition",
            "{orchestrator}: {body}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&outer.status.location).unwrap().count(),
        0,
        "nothing made inside the outer volume"
    );
    assert_eq!(std::fs::read(&file_base).unwrap(), b"not a directory");

    // By its text, such a base path is refused at registration already.
    let e = app
        .registry
        .register(
            "inside",
            &domain::orchestrator::RegisterOrchestrator {
                config: Some(json!({"basePath": format!("{}/vols", outer.status.location)})),
                ..domain::orchestrator::RegisterOrchestrator::new(domain::OrchestratorKind::Local)
            },
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e:?}");
}
