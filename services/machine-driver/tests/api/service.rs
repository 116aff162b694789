//! The service itself: standard routes, providers, malformed bodies.

use domain::Code;
use serde_json::{Value, json};
use service_kit::Env;

use crate::support::*;

#[tokio::test]
async fn standard_routes_answer() {
    let config =
        machine_driver::Config::from_env(&Env::default().with("BERTH_LISTEN", "127.0.0.1:0"))
            .unwrap();
    let app = machine_driver::build(config).await.unwrap();
    let url = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until(std::future::pending()));
    let c = reqwest::Client::new();
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        let r = c.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let doc: Value = c
        .get(format!("{url}/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["info"]["title"], "berth machine-driver");
    for path in [
        "/v1/machines:create",
        "/v1/machines:initialize",
        "/v1/machines:delete",
        "/v1/machines:status",
        "/v1/machines:list",
        "/v1/volume-ids",
    ] {
        assert!(doc["paths"][path]["post"].is_object(), "{path} in OpenAPI");
    }
    assert!(doc["paths"]["/v1/providers"]["get"].is_object());
}

#[tokio::test]
async fn providers_are_listed() {
    let app = spawn_app().await;
    let list = app.machines.providers().await.unwrap();
    let names: Vec<&str> = list.providers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["Alicloud", "Docker"]);
    assert!(list.providers[0].description.contains("ECS"));
    assert!(list.providers[1].description.contains("container"));
    // Driver calls are measured by method, provider and machine code.
    app.machines.volume_ids(&[]).await.unwrap();
    app.status(&req("m-metrics")).await.unwrap_err();
    let metrics = reqwest::get(format!("{}/metrics", app.driver.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for want in [
        "berth_driver_requests_total{method=\"GetVolumeIDs\",provider=\"*\",code=\"OK\"}",
        "berth_driver_requests_total{method=\"GetMachineStatus\",provider=\"Alicloud\",code=\"NotFound\"}",
        "berth_driver_request_duration_seconds",
    ] {
        assert!(metrics.contains(want), "{want} not in /metrics");
    }
}

#[tokio::test]
async fn wrong_provider_is_invalid_argument_naming_the_providers() {
    let app = spawn_app().await;
    let mut r = req("m-wrong");
    r.machine_class.provider = "AWS".into();
    let e = app.create(&r).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert_eq!(
        e.status.message,
        "machineClass.provider: requested for Provider 'AWS', we only support 'Alicloud', 'Docker'"
    );
    for path in [
        "/v1/machines:create",
        "/v1/machines:initialize",
        "/v1/machines:delete",
        "/v1/machines:status",
    ] {
        let (status, _, body) = app.raw(path, &serde_json::to_value(&r).unwrap()).await;
        assert_eq!(status, 400, "{path}");
        assert_eq!(body["code"], 3);
        assert_eq!(
            body["machineCodesError"],
            "machine codes error: code = [InvalidArgument] message = [machineClass.provider: requested for Provider 'AWS', we only support 'Alicloud', 'Docker']"
        );
    }
    let mut l = list_req();
    l.machine_class.provider = String::new();
    let e = app.machines.list(&l).await.unwrap_err();
    assert_code(&e, Code::InvalidArgument, 400);
    assert_eq!(app.emulator.stats().total_calls(), 0);
}

#[tokio::test]
async fn malformed_bodies_answer_400_with_machine_codes_error() {
    let app = spawn_app().await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/machines:create", app.driver.url))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], 3);
    assert!(
        body["machineCodesError"]
            .as_str()
            .unwrap()
            .starts_with("machine codes error: code = [InvalidArgument] message = [body:"),
        "{body}"
    );
    let (status, _, body) = app
        .raw(
            "/v1/machines:status",
            &json!({"machine": {"metadata": {"name": 5}}}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        body["detail"].as_str().unwrap().contains("machine"),
        "{body}"
    );
}
