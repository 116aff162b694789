//! The service answers the routes every Berth service has.

use service_kit::Env;

#[tokio::test]
async fn standard_routes_answer() {
    let config =
        storage_ops::Config::from_env(&Env::default().with("BERTH_LISTEN", "127.0.0.1:0")).unwrap();
    let app = storage_ops::build(config).await.unwrap();
    let url = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until(std::future::pending()));
    let c = reqwest::Client::new();
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        let r = c.get(format!("{url}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let doc: serde_json::Value = c
        .get(format!("{url}/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["info"]["title"], "berth storage-ops");
}
