//! The writer's memory of rows and sequences against what the database holds: after a restart
//! (a writer that has read nothing), after a refused or panicking edit, and after a reseal it did
//! not write through `update`.

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
