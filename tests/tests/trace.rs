//! One AddStorage call through the gateway is one trace: the gateway, storage-ops and the registry
//! all record spans with the caller's trace id (read from an in-memory span exporter).

use std::time::Duration;

use berth_tests::Stack;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use service_kit::testing::eventually;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[tokio::test]
async fn one_add_storage_call_is_one_trace_across_three_services() {
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    tracing_subscriber::registry()
        .with(tracing_subscriber::EnvFilter::new("info"))
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("e2e")))
        .init();

    let stack = Stack::spawn(&[]).await;
    let base_path = stack.data.path().join("volumes/trace");
    let r = stack
        .call("PUT", "/v1/orchestrators/trace-local", Some("tok-admin"))
        .json(&serde_json::json!({"kind": "local", "config": {"basePath": base_path}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());

    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let r = stack
        .call("POST", "/v1/volumes", Some("tok-admin"))
        .header("traceparent", format!("00-{trace_id}-b7ad6b7169203331-01"))
        .json(&serde_json::json!({"name": "traced", "capacity": "8Mi", "orchestrator": "trace-local"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);

    let services = eventually("spans from three services", Duration::from_secs(10), || {
        let exporter = exporter.clone();
        async move {
            let spans = exporter.get_finished_spans().ok()?;
            let mut services: Vec<String> = spans
                .iter()
                .filter(|s| {
                    s.name == "request" && s.span_context.trace_id().to_string() == trace_id
                })
                .filter_map(|s| {
                    s.attributes
                        .iter()
                        .find(|kv| kv.key.as_str() == "service")
                        .map(|kv| kv.value.to_string())
                })
                .collect();
            services.sort();
            services.dedup();
            (services.len() >= 3).then_some(services)
        }
    })
    .await;
    assert_eq!(
        services,
        ["gateway", "orchestrator-registry", "storage-ops"]
    );
}
