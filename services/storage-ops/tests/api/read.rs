//! ListStorage pages and their signed continue tokens, and stats.

use std::collections::BTreeMap;
use std::path::Path;

use client::storage::ListParams;
use domain::Code;
use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn continue_tokens_are_signed_and_outlive_a_restart() {
    use base64::Engine as _;
    let app = spawn_app().await;
    for name in ["a", "b", "c"] {
        app.storage.add(&profile(name, "1Mi")).await.unwrap();
    }
    let first = app
        .storage
        .list(&ListParams {
            limit: Some(1),
            ..ListParams::default()
        })
        .await
        .unwrap();
    let token = first.continue_token.expect("a next page");
    // Forged positions: the old token format (base64url of a JSON pair) of positions this service
    // never issued, and an issued token with its position changed.
    let forge = |pair: Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(pair.to_string().as_bytes())
    };
    let (_, mac) = token.rsplit_once('.').expect("a signed token");
    for forged in [
        forge(json!(["../..", "%"])),
        forge(json!(["team", "a"])),
        format!("{}.{mac}", forge(json!(["team", "b"]))),
        format!("{token}x"),
        "garbage".to_string(),
    ] {
        let (status, p) = problem(
            app.http
                .get(format!("{}/v1/volumes", app.url))
                .query(&[("continue", forged.as_str())])
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 400, "{forged}: {p}");
        assert!(
            p["detail"]
                .as_str()
                .unwrap()
                .starts_with("query parameter continue: is not a token this service issued"),
            "{p}"
        );
    }
    // Another process on the same database (a restart) takes the token and goes on from it.
    let again = spawn_storage(
        &app.tmp.path().join("storage.db"),
        app.registry.service().base_url(),
        &[],
    )
    .await;
    let rest = storage_client(&again)
        .list(&ListParams {
            continue_token: Some(token),
            ..ListParams::default()
        })
        .await
        .unwrap();
    let names: Vec<_> = rest
        .items
        .iter()
        .map(|v| v.metadata.name.as_str())
        .collect();
    assert_eq!(names, ["b", "c"]);
}

#[tokio::test]
async fn pages_are_stable_complete_and_filtered_pages_are_full() {
    let app = spawn_app().await;
    let mut expected = Vec::new();
    for ns in ["alpha", "beta", "gamma"] {
        for i in 0..12 {
            let name = format!("v{i:02}");
            let mut p = profile(&name, "1Mi");
            p.namespace = Some(ns.into());
            if i % 3 == 0 {
                p.labels = Some(BTreeMap::from([("tier".into(), "gold".into())]));
            }
            app.storage.add(&p).await.unwrap();
            expected.push((ns.to_string(), name));
        }
    }
    expected.sort();
    let mut seen = Vec::new();
    let mut params = ListParams {
        limit: Some(10),
        ..Default::default()
    };
    let mut pages = 0;
    loop {
        let page = app.storage.list(&params).await.unwrap();
        pages += 1;
        seen.extend(
            page.items
                .iter()
                .map(|v| (v.metadata.namespace.clone(), v.metadata.name.clone())),
        );
        match page.continue_token {
            Some(t) => {
                assert_eq!(page.items.len(), 10, "only the last page is short");
                params.continue_token = Some(t);
            }
            None => break,
        }
    }
    assert_eq!(pages, 4);
    assert_eq!(seen, expected);

    let beta = app
        .storage
        .list_all(&ListParams {
            namespace: Some("beta".into()),
            limit: Some(5),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(beta.len(), 12);
    assert!(beta.iter().all(|v| v.metadata.namespace == "beta"));

    // 12 gold volumes spread over 36: a page of 4 still comes back full.
    let page = app
        .storage
        .list(&ListParams {
            label_selector: Some("tier=gold".into()),
            limit: Some(4),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.items.len(), 4);
    assert!(page.continue_token.is_some());
    let gold = app
        .storage
        .list_all(&ListParams {
            label_selector: Some("tier in (gold)".into()),
            limit: Some(4),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(gold.len(), 12);
    assert!(gold.iter().all(|v| v.metadata.labels["tier"] == "gold"));
    let none = app
        .storage
        .list(&ListParams {
            label_selector: Some("tier=silver".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(none.items.is_empty() && none.continue_token.is_none());
}

#[tokio::test]
async fn sparse_files_and_directories_report_stats() {
    let app = spawn_app().await;
    let mut p = profile("blob", "64Mi");
    p.parameters = Some(BTreeMap::from([("format".into(), "file".into())]));
    let (v, _) = app.storage.add(&p).await.unwrap();
    let meta = std::fs::metadata(&v.status.location).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.len(), 64 << 20);
    let stats = app.storage.stats("team", "blob").await.unwrap();
    assert_eq!(stats.capacity_bytes, 64 << 20);
    assert_eq!(stats.source, "file");
    assert!(stats.used_bytes.unwrap() < 1 << 20, "sparse: {stats:?}");
    // Issue 32, point 12: what the volume can still take, not the host file system's free space.
    assert_eq!(
        stats.available_bytes,
        Some((64 << 20) - stats.used_bytes.unwrap()),
        "{stats:?}"
    );

    let (d, _) = app.storage.add(&profile("dir", "1Mi")).await.unwrap();
    std::fs::write(Path::new(&d.status.location).join("f"), vec![7u8; 100_000]).unwrap();
    let stats = app.storage.stats("team", "dir").await.unwrap();
    assert_eq!(stats.source, "walk");
    let used = stats.used_bytes.unwrap();
    assert!(used >= 100_000, "{stats:?}");
    assert_eq!(stats.available_bytes, Some((1 << 20) - used), "{stats:?}");
    // Written past its capacity (a directory cannot stop it): nothing left, not a wrap-around.
    std::fs::write(Path::new(&d.status.location).join("g"), vec![7u8; 2 << 20]).unwrap();
    let stats = app.storage.stats("team", "dir").await.unwrap();
    assert_eq!(stats.available_bytes, Some(0), "{stats:?}");

    let e = app.storage.stats("team", "nope").await.unwrap_err();
    assert_eq!(code(&e), Code::NotFound);
    app.storage.delete("team", "blob").await.unwrap();
    assert!(!Path::new(&v.status.location).exists());

    // Removed behind Berth's back: the data is gone, said as such (DataLoss), not a 500.
    std::fs::remove_dir_all(&d.status.location).unwrap();
    let e = app.storage.stats("team", "dir").await.unwrap_err();
    assert_eq!(code(&e), Code::DataLoss, "{e:?}");
}
