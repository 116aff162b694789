//! ListMachines.

use std::collections::BTreeMap;

use ecs_emulator::Seed;

use crate::support::*;

#[tokio::test]
async fn list_machines_successfully() {
    let app = spawn_app().await;
    assert!(app.list().await.unwrap().is_empty(), "empty result");
    let a = app.create(&req("m-list-a")).await.unwrap();
    let b = app.create(&req("m-list-b")).await.unwrap();
    app.run_directly(
        "m-other-cluster",
        &[("kubernetes.io/cluster/other", "1"), (ROLE_TAG, "1")],
    )
    .await;
    app.run_directly("m-no-role", &[(CLUSTER_TAG, "1")]).await;
    let list = app.list().await.unwrap();
    assert_eq!(
        list,
        BTreeMap::from([
            (a.provider_id, "m-list-a".to_string()),
            (b.provider_id, "m-list-b".to_string()),
        ])
    );
}

#[tokio::test]
async fn list_machines_across_several_pages() {
    let app = spawn_app().await;
    let tags: BTreeMap<String, String> = [(CLUSTER_TAG, "1"), (ROLE_TAG, "1")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    app.emulator
        .seed(&Seed {
            count: 260,
            region_id: Some(REGION.into()),
            name_prefix: "seed-".into(),
            tags,
            ..Seed::default()
        })
        .unwrap();
    app.emulator
        .seed(&Seed {
            count: 7,
            region_id: Some(REGION.into()),
            name_prefix: "foreign-".into(),
            tags: [("kubernetes.io/cluster/other".to_string(), "1".to_string())].into(),
            ..Seed::default()
        })
        .unwrap();
    let before = app.calls("DescribeInstances");
    let list = app.list().await.unwrap();
    assert_eq!(list.len(), 260);
    assert_eq!(app.calls("DescribeInstances") - before, 3, "pages of 100");
    assert!(list.keys().all(|k| k.starts_with("cn-shanghai.i-")));
    assert!(list.values().all(|v| v.starts_with("seed-")));
}
