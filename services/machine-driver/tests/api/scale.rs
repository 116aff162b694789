//! Scale under faults.

use ecs_emulator::Faults;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_creates_under_throttling_and_server_errors() {
    let app = spawn_app_with(|c| c.ecs.retry = retry(30)).await;
    app.emulator
        .set_faults(Faults {
            throttle_rate: 0.2,
            throttle_time_left_ms: 20,
            server_error_rate: 0.05,
            ..Faults::default()
        })
        .unwrap();
    let results = futures::future::join_all((0..200).map(|n| {
        let app = &app;
        async move { app.create(&req(&format!("m-scale-{n:03}"))).await }
    }))
    .await;
    let failures: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    let ids: std::collections::BTreeSet<String> = results
        .into_iter()
        .map(|r| r.unwrap().provider_id)
        .collect();
    assert_eq!(ids.len(), 200);
    assert_eq!(app.emulator.instance_count(), 200);
    let stats = app.emulator.stats();
    assert!(stats.throttled > 0 && stats.server_errors > 0, "{stats:?}");
    app.emulator.set_faults(Faults::default()).unwrap();
    assert_eq!(app.list().await.unwrap().len(), 200);
}
