//! The writer's memory of rows and sequences against what the database holds: after a restart
//! (a writer that has read nothing), after a refused or panicking edit, and after a reseal it did
//! not write through `update`.

use std::time::Duration;

use domain::Status;
use domain::resources::Kind;
use serde_json::json;

use super::{Sealed, Store, StoreError};

async fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(&dir.path().join("controller.db"))
        .await
        .expect("open")
}

fn machine(name: &str) -> serde_json::Value {
    json!({"metadata": {"name": name}, "spec": {"class": {"name": "c"}}})
}

#[tokio::test]
async fn a_taken_name_is_refused_and_versions_go_on_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    let first = store
        .create(Kind::Machine, "ns", machine("a"), None)
        .await
        .unwrap();
    drop(store);
    // A new writer remembers nothing: the table itself refuses the name.
    let store = open(&dir).await;
    let again = store.create(Kind::Machine, "ns", machine("a"), None).await;
    assert!(matches!(again, Err(StoreError::Exists { .. })), "{again:?}");
    let second = store
        .create(Kind::Machine, "ns", machine("b"), None)
        .await
        .unwrap();
    assert!(
        second.resource_version > first.resource_version,
        "{} after {}",
        second.resource_version,
        first.resource_version
    );
    // A list reads the sequence where the writer stored it.
    let (_, listed_at) = store.list(Kind::Machine, Some("ns")).await.unwrap();
    assert_eq!(listed_at, second.resource_version);
}

#[tokio::test]
async fn an_edit_starts_from_the_last_write_not_from_a_refused_or_panicking_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    store
        .create(Kind::Machine, "ns", machine("a"), None)
        .await
        .unwrap();
    let edit = |phase: &'static str| {
        move |body: &mut serde_json::Value, _: &mut Option<Sealed>| {
            body["status"] = json!({"phase": phase});
            Ok(())
        }
    };
    store
        .update(Kind::Machine, "ns", "a", None, None, edit("Creating"))
        .await
        .unwrap();
    let refused = store
        .update(Kind::Machine, "ns", "a", None, None, |body, _| {
            body["status"] = json!({"phase": "Failed"});
            Err(Status::invalid("status", "refused in a test"))
        })
        .await;
    assert!(
        matches!(refused, Err(StoreError::Refused(_))),
        "{refused:?}"
    );
    let panicked = store
        .update(Kind::Machine, "ns", "a", None, None, |_, _| panic!("edit"))
        .await;
    assert!(panicked.is_err());
    let written = store
        .update(Kind::Machine, "ns", "a", None, None, |body, _| {
            assert_eq!(body["status"]["phase"], "Creating", "{body}");
            body["metadata"]["labels"] = json!({"x": "1"});
            Ok(())
        })
        .await
        .unwrap();
    let read = store.get(Kind::Machine, "ns", "a").await.unwrap().unwrap();
    assert_eq!(read.body, written.object().body);
    assert_eq!(read.body["status"]["phase"], "Creating");
}

#[tokio::test]
async fn an_edit_after_a_reseal_keeps_the_new_sealing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    let old = Sealed {
        key_id: "k1".into(),
        bytes: vec![1, 2, 3],
    };
    let new = Sealed {
        key_id: "k2".into(),
        bytes: vec![4, 5, 6],
    };
    let secret = json!({"metadata": {"name": "cloud"}});
    let made = store
        .create(Kind::Secret, "ns", secret, Some(old.clone()))
        .await
        .unwrap();
    assert!(store.reseal(made.uid(), &old, &new).await.unwrap());
    store
        .update(Kind::Secret, "ns", "cloud", None, None, |body, _| {
            body["metadata"]["labels"] = json!({"rotated": "yes"});
            Ok(())
        })
        .await
        .unwrap();
    let read = store
        .get(Kind::Secret, "ns", "cloud")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.sealed, Some(new));
    assert_eq!(read.body["metadata"]["labels"]["rotated"], "yes");
}

/// Queues a write that holds the writer for `hold` (after telling the test it started), so the
/// writes queued meanwhile share the next batch; it first runs `pragma` on the writing connection,
/// with `{pages}` replaced by the database's size in pages (a "disk" as full as it is now).
async fn hold_writer(store: &Store, hold: Duration, pragma: Option<&'static str>) {
    let (started, running) = tokio::sync::oneshot::channel::<()>();
    let store = store.clone();
    tokio::spawn(async move {
        store
            .commit(move |session| {
                Box::pin(async move {
                    if let Some(pragma) = pragma {
                        let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
                            .fetch_one(&mut session.conn)
                            .await?;
                        let pragma = pragma.replace("{pages}", &pages.to_string());
                        sqlx::query(sqlx::AssertSqlSafe(pragma))
                            .execute(&mut session.conn)
                            .await?;
                    }
                    let _ = started.send(());
                    tokio::time::sleep(hold).await;
                    Ok(((), Vec::new()))
                })
            })
            .await
            .expect("the holding write");
    });
    running.await.expect("the holding write started");
}

/// SQLite may roll a whole transaction back on a full disk. The batch that met it is undone whole
/// and every write in it answered as failed, none published; the writer's memory still matches
/// the database, so once there is room again the object is edited, not re-made.
#[tokio::test]
async fn a_full_disk_undoes_the_whole_batch_and_the_writer_still_knows_what_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    store
        .create(Kind::Machine, "ns", machine("kept"), None)
        .await
        .unwrap();
    let mut feed = store.feed().subscribe_now();
    hold_writer(
        &store,
        Duration::from_millis(300),
        Some("PRAGMA max_page_count = {pages}"),
    )
    .await;
    let mut big = machine("big");
    big["spec"]["blob"] = json!("x".repeat(200_000));
    let (created, deleted) = tokio::join!(
        store.create(Kind::Machine, "ns", big, None),
        store.delete(Kind::Machine, "ns", "kept", None, None),
    );
    assert!(created.is_err(), "{created:?}");
    assert!(matches!(deleted, Err(StoreError::Batch(_))), "{deleted:?}");
    let kept = store.get(Kind::Machine, "ns", "kept").await.unwrap();
    assert!(
        kept.is_some(),
        "a write answered as failed must not have happened"
    );
    assert!(
        feed.try_recv().is_err(),
        "nothing of the batch is published"
    );
    hold_writer(
        &store,
        Duration::ZERO,
        Some("PRAGMA max_page_count = 1073741823"),
    )
    .await;
    let again = store
        .create(Kind::Machine, "ns", machine("kept"), None)
        .await;
    assert!(matches!(again, Err(StoreError::Exists { .. })), "{again:?}");
    let edited = store
        .update(Kind::Machine, "ns", "kept", None, None, |body, _| {
            body["metadata"]["labels"] = json!({"after": "full"});
            Ok(())
        })
        .await
        .unwrap();
    let read = store
        .get(Kind::Machine, "ns", "kept")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.body, edited.object().body);
}

/// A store dropped while writes are queued finishes them; a store opened meanwhile on the same
/// database waits for that writer to end, so no resourceVersion is handed out twice.
#[tokio::test]
async fn a_store_opened_again_waits_for_the_last_writer_so_versions_never_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let old = open(&dir).await;
    old.create(Kind::Machine, "ns", machine("first"), None)
        .await
        .unwrap();
    hold_writer(&old, Duration::from_millis(500), None).await;
    let queued = {
        let old = old.clone();
        tokio::spawn(async move {
            old.create(Kind::Machine, "ns", machine("queued"), None)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Its caller gone, the write still stands.
    queued.abort();
    drop(old);
    let new = open(&dir).await;
    new.create(Kind::Machine, "ns", machine("after"), None)
        .await
        .unwrap();
    let (machines, _) = new.list(Kind::Machine, Some("ns")).await.unwrap();
    let mut versions: Vec<u64> = machines.iter().map(|m| m.resource_version).collect();
    assert_eq!(machines.len(), 3, "{machines:?}");
    versions.sort();
    versions.dedup();
    assert_eq!(versions.len(), 3, "a resourceVersion repeats: {machines:?}");
}

#[tokio::test]
async fn owned_machines_reads_what_a_set_counts_by_as_a_whole_read_would() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir).await;
    let owned_by = |name: &str, owner: &str| {
        let mut body = machine(name);
        body["metadata"]["ownerReferences"] = json!([{"apiVersion": "berth.io/v1", "kind": "MachineSet", "name": "s", "uid": owner, "controller": true}]);
        body
    };
    let mut preserved = owned_by("b-preserved", "set-1");
    preserved["metadata"]["annotations"] = json!({"berth.io/preserve": "true"});
    let mut not_quite = owned_by("c-preserve-false", "set-1");
    not_quite["metadata"]["annotations"] = json!({"berth.io/preserve": "false"});
    for body in [
        owned_by("a-running", "set-1"),
        preserved,
        not_quite,
        owned_by("d-deleting", "set-1"),
        owned_by("other-set", "set-2"),
    ] {
        store.create(Kind::Machine, "ns", body, None).await.unwrap();
    }
    store
        .update(Kind::Machine, "ns", "a-running", None, None, |body, _| {
            body["status"] = json!({"phase": "Running"});
            Ok(())
        })
        .await
        .unwrap();
    // Held by a finalizer, so the deletion only marks it.
    store
        .update(Kind::Machine, "ns", "d-deleting", None, None, |body, _| {
            body["metadata"]["finalizers"] = json!(["berth.io/machine"]);
            Ok(())
        })
        .await
        .unwrap();
    store
        .delete(Kind::Machine, "ns", "d-deleting", None, None)
        .await
        .unwrap();

    let owned = store.owned_machines("set-1").await.unwrap();
    let whole = store.owned(Kind::Machine, "set-1").await.unwrap();
    let names: Vec<&str> = owned.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        ["a-running", "b-preserved", "c-preserve-false", "d-deleting"]
    );
    for (summary, stored) in owned.iter().zip(&whole) {
        let machine: domain::resources::MachineResource = stored.decode().unwrap();
        assert_eq!(summary.name, machine.metadata.name);
        assert_eq!(summary.uid, machine.metadata.uid);
        assert_eq!(summary.phase, machine.status.phase, "{}", summary.name);
        assert_eq!(
            summary.deleting,
            machine.metadata.deletion_timestamp.is_some(),
            "{}",
            summary.name
        );
        assert_eq!(
            Some(&summary.created),
            machine.metadata.creation_timestamp.as_ref()
        );
        assert_eq!(summary.preserved, machine.preserved(), "{}", summary.name);
    }
    let flags: Vec<(bool, bool)> = owned.iter().map(|m| (m.preserved, m.deleting)).collect();
    assert_eq!(
        flags,
        [(false, false), (true, false), (false, false), (false, true)]
    );
    assert_eq!(owned[0].phase, domain::resources::MachinePhase::Running);
    assert_eq!(owned[1].phase, domain::resources::MachinePhase::Pending);
}
