//! `berth_controller_machines`: stored machines by provider and phase on `/metrics`. In a binary of
//! its own, since the series is the process's: no other test's controller counts into it here.

#[allow(dead_code, unreachable_pub)]
#[path = "api/support.rs"]
mod support;

use std::time::Duration;

use serde_json::json;
use support::{quick, running, spawn_app};

async fn metrics(url: &str) -> String {
    reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn machines_are_counted_by_provider_and_phase() {
    let app = spawn_app(quick()).await;
    app.alicloud_class("small", "ecs.g6.large").await;
    for name in ["w-1", "w-2"] {
        let (status, made) = app
            .post(
                "machines",
                json!({"metadata": {"name": name}, "spec": {"class": {"name": "small"}}}),
            )
            .await;
        assert_eq!(status, 201, "{made}");
    }
    app.machines_until("both run", |m| running(m) == 2).await;
    let running_two = "berth_controller_machines{provider=\"Alicloud\",phase=\"Running\"} 2";
    let page = service_kit::testing::eventually(
        "two Running machines counted",
        Duration::from_secs(10),
        || async {
            let page = metrics(&app.url).await;
            page.contains(running_two).then_some(page)
        },
    )
    .await;
    assert!(
        page.contains("# HELP berth_controller_machines ")
            && page.contains("# TYPE berth_controller_machines gauge"),
        "{page}"
    );
    app.delete("machines", "w-1").await;
    app.machines_until("one left", |m| m.len() == 1).await;
    service_kit::testing::eventually("one counted", Duration::from_secs(10), || async {
        metrics(&app.url)
            .await
            .contains("berth_controller_machines{provider=\"Alicloud\",phase=\"Running\"} 1")
            .then_some(())
    })
    .await;
}
