//! The store's own tests: writes and versions, per-namespace sequences, adopting older databases,
//! objects made inside the writer's commit, capacity, and paging.

use std::collections::BTreeMap;

use domain::{Labels, VolumePhase};

use super::*;
use crate::backend::Uncommitted;
use std::path::PathBuf;

pub(crate) fn row(ns: &str, name: &str, orchestrator: &str, bytes: u64) -> VolumeRow {
    VolumeRow {
        uid: uuid::Uuid::new_v4().to_string(),
        namespace: ns.into(),
        name: name.into(),
        orchestrator: orchestrator.into(),
        kind: OrchestratorKind::Local,
        backend_config: serde_json::json!({"basePath": "/tmp/x"}),
        capacity: bytes.to_string(),
        capacity_bytes: bytes,
        replicas: 1,
        labels: Labels::new(),
        parameters: BTreeMap::new(),
        spec_hash: "h".into(),
        phase: VolumePhase::Provisioning,
        reason: String::new(),
        message: String::new(),
        location: String::new(),
        created_at: now(),
        updated_at: now(),
        resource_version: 0,
    }
}

async fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.db")).await.unwrap();
    (dir, store)
}

#[tokio::test]
async fn insert_conflict_update_remove_and_versions_only_grow() {
    let (_dir, store) = open().await;
    let a = store.insert(row("ns", "a", "o", 10), None).await.unwrap();
    let e = store
        .insert(row("ns", "a", "o", 10), None)
        .await
        .unwrap_err();
    assert!(matches!(e, StoreError::Exists(..)), "{e}");
    let b = store.insert(row("ns", "b", "o", 10), None).await.unwrap();
    assert!(b.resource_version > a.resource_version);
    let ready = store
        .set_status(
            &a.uid,
            StatusUpdate {
                phase: VolumePhase::Ready,
                reason: "Provisioned".into(),
                message: String::new(),
                location: Some("/x".into()),
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ready.location, "/x");
    assert!(ready.resource_version > b.resource_version);
    assert_eq!(store.get("ns", "a").await.unwrap().unwrap(), ready);
    assert!(store.remove(&b.uid, true).await.unwrap());
    assert!(!store.remove(&b.uid, false).await.unwrap());
    assert!(
        store.owns(&b.uid).await.unwrap(),
        "retained uids stay owned"
    );
    let c = store.insert(row("ns", "b", "o", 10), None).await.unwrap();
    assert!(c.resource_version > ready.resource_version);
}

/// Each namespace has its own resourceVersion sequence: another namespace's writes do not move
/// it, so a tenant cannot watch it to learn how much the others write (a break-it finding).
#[tokio::test]
async fn a_namespaces_versions_do_not_move_with_anothers_writes() {
    let (_dir, store) = open().await;
    let first = store
        .insert(row("team-b", "x", "o", 1), None)
        .await
        .unwrap();
    for i in 0..5 {
        let theirs = store
            .insert(row("team-a", &format!("a{i}"), "o", 1), None)
            .await
            .unwrap();
        store
            .set_status(
                &theirs.uid,
                StatusUpdate {
                    phase: VolumePhase::Ready,
                    reason: "Provisioned".into(),
                    message: String::new(),
                    location: None,
                },
            )
            .await
            .unwrap();
    }
    let second = store
        .insert(row("team-b", "y", "o", 1), None)
        .await
        .unwrap();
    assert_eq!(second.resource_version, first.resource_version + 1);
}

/// A database an earlier storage-ops made through sqlx's migrator is adopted with its rows; one a
/// newer storage-ops migrated further is refused, and left as it was.
#[tokio::test]
async fn databases_made_by_sqlx_are_adopted_and_newer_ones_refused() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
    let mut old = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    sqlx::migrate!("./migrations").run(&mut old).await.unwrap();
    old.close().await.unwrap();
    let store = Store::open(&path).await.unwrap();
    let kept = store.insert(row("ns", "a", "o", 1), None).await.unwrap();
    drop(store);
    let store = Store::open(&path).await.unwrap();
    assert_eq!(store.get("ns", "a").await.unwrap(), Some(kept));
    drop(store);

    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 7).unwrap();
    drop(conn);
    let e = Store::open(&path).await.err().unwrap().to_string();
    assert!(e.contains("version 7"), "{e}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 7);
}

/// A stand-in backend object: what it did goes to `log`, in order; `make` fails when `refuse`
/// is set, and says its directory is `sync_dir`.
struct Probe {
    name: String,
    sync_dir: PathBuf,
    refuse: bool,
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

impl NewObject for Probe {
    fn make(&mut self) -> Result<Uncommitted, crate::backend::BackendError> {
        self.log.lock().unwrap().push(format!("make {}", self.name));
        if self.refuse {
            return Err(crate::backend::BackendError::new(
                domain::Code::ResourceExhausted,
                "no room",
            ));
        }
        Ok(Uncommitted {
            location: format!("/at/{}", self.name),
            sync_dir: self.sync_dir.clone(),
        })
    }

    fn mark_committed(&mut self) -> Result<(), crate::backend::BackendError> {
        self.log.lock().unwrap().push(format!("mark {}", self.name));
        Ok(())
    }
}

/// The writer makes each insert's object, syncs its directory and commits the row recording
/// where it is, then marks it; an insert whose object cannot be made, or whose directory cannot
/// be synced, gets no row (and no mark) and says why, and the rest of its batch commits.
#[tokio::test]
async fn inserts_with_an_object_commit_only_once_it_is_made_and_synced() {
    let (dir, store) = open().await;
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let inserts = (0..9).map(|i| {
        let store = store.clone();
        let probe = Probe {
            name: format!("v{i}"),
            sync_dir: if i % 3 == 1 {
                dir.path().join("gone")
            } else {
                dir.path().to_path_buf()
            },
            refuse: i % 3 == 2,
            log: log.clone(),
        };
        async move {
            store
                .insert_with_object(row("ns", &format!("v{i}"), "o", 1), None, Box::new(probe))
                .await
        }
    });
    let results = futures::future::join_all(inserts).await;
    let log = log.lock().unwrap().clone();
    for (i, result) in results.iter().enumerate() {
        let stored = store.get("ns", &format!("v{i}")).await.unwrap();
        let (made, marked) = (
            log.iter().position(|l| *l == format!("make v{i}")),
            log.iter().position(|l| *l == format!("mark v{i}")),
        );
        assert!(made.is_some(), "{log:?}");
        match i % 3 {
            0 => {
                assert_eq!(result.as_ref().unwrap().location, format!("/at/v{i}"));
                assert_eq!(stored.unwrap().location, format!("/at/v{i}"));
                assert!(marked > made, "{log:?}");
            }
            1 => {
                let Err(StoreError::DirectorySync { dir: at, cause }) = result else {
                    panic!("{result:?}");
                };
                assert_eq!(cause.kind(), std::io::ErrorKind::NotFound);
                assert_eq!(*at, dir.path().join("gone"));
                assert!(stored.is_none());
                assert!(marked.is_none(), "{log:?}");
            }
            _ => {
                let Err(StoreError::Backend(why)) = result else {
                    panic!("{result:?}");
                };
                assert_eq!(why.code, domain::Code::ResourceExhausted);
                assert!(stored.is_none());
                assert!(marked.is_none(), "{log:?}");
            }
        }
    }
}

/// Two volumes of 7 EiB, each valid, hold more than SQLite's 64-bit `SUM` can add: a later add under
/// a capacity or a quota is refused as over it (it was a 500, "integer overflow", for every add and
/// resize of the orchestrator or namespace after).
#[tokio::test]
async fn sums_past_64_bits_are_over_any_limit_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let quota = NamespaceQuota {
        volumes: None,
        bytes: Some(u64::MAX - 1),
    };
    let store = Store::open_with_quota(&dir.path().join("s.db"), quota)
        .await
        .unwrap();
    let seven_eib = 7u64 << 60;
    store
        .insert(row("ns", "a", "o", seven_eib), None)
        .await
        .unwrap();
    store
        .insert(row("other", "b", "o", seven_eib), None)
        .await
        .unwrap();
    let over = store
        .insert(row("x", "c", "o", 1), Some(1 << 40))
        .await
        .unwrap_err();
    match over {
        StoreError::CapacityExhausted { used, .. } => assert_eq!(used, 14u64 << 60),
        e => panic!("expected CapacityExhausted, got {e:?}"),
    }
    store
        .insert(row("ns", "d", "p", seven_eib), None)
        .await
        .unwrap();
    let over = store
        .insert(row("ns", "e", "q", seven_eib), None)
        .await
        .unwrap_err();
    match over {
        StoreError::QuotaExceeded { used, .. } => assert_eq!(used, 14u64 << 60),
        e => panic!("expected QuotaExceeded, got {e:?}"),
    }
}

#[tokio::test]
async fn capacity_is_checked_inside_the_writer() {
    let (_dir, store) = open().await;
    let inserts = (0..10).map(|i| {
        let store = store.clone();
        async move {
            store
                .insert(row("ns", &format!("v{i}"), "o", 4), Some(10))
                .await
        }
    });
    let results = futures::future::join_all(inserts).await;
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 2);
    assert!(
        results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(|e| matches!(e, StoreError::CapacityExhausted { .. }))
    );
    // Another orchestrator has its own budget.
    store
        .insert(row("ns", "w", "p", 10), Some(10))
        .await
        .unwrap();
}

#[tokio::test]
async fn pages_follow_the_key_order_and_use_the_index() {
    let (_dir, store) = open().await;
    for (ns, name) in [("b", "x"), ("a", "z"), ("a", "y"), ("c", "a")] {
        store.insert(row(ns, name, "o", 1), None).await.unwrap();
    }
    let page = store.page(None, None, 2).await.unwrap();
    let keys: Vec<_> = page
        .iter()
        .map(|r| (r.namespace.as_str(), r.name.as_str()))
        .collect();
    assert_eq!(keys, [("a", "y"), ("a", "z")]);
    let page = store.page(None, Some(("a", "z")), 10).await.unwrap();
    let keys: Vec<_> = page
        .iter()
        .map(|r| (r.namespace.as_str(), r.name.as_str()))
        .collect();
    assert_eq!(keys, [("b", "x"), ("c", "a")]);
    let page = store.page(Some("a"), Some(("a", "y")), 10).await.unwrap();
    assert_eq!(page.len(), 1);
    // A token from another namespace: before it starts at its beginning, after it is empty.
    assert_eq!(
        store
            .page(Some("b"), Some(("a", "z")), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .page(Some("a"), Some(("b", "a")), 10)
            .await
            .unwrap()
            .is_empty()
    );

    for sql in [
        "EXPLAIN QUERY PLAN SELECT uid FROM volumes WHERE (namespace, name) > ('a', 'b') ORDER BY namespace, name LIMIT 10",
        "EXPLAIN QUERY PLAN SELECT uid FROM volumes WHERE namespace = 'a' AND name > 'b' ORDER BY namespace, name LIMIT 10",
    ] {
        let detail: Vec<String> = store
            .inner
            .read
            .read(move |c| {
                c.prepare(sql)?
                    .query_map([], |r| r.get("detail"))?
                    .collect()
            })
            .await
            .unwrap();
        let detail = detail.join("; ");
        assert!(
            detail.contains("USING INDEX volumes_by_key"),
            "{sql}: {detail}"
        );
        assert!(!detail.contains("TEMP B-TREE"), "{sql}: {detail}");
    }
}
