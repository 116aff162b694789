//! A request's log lines carry its trace id and span id, so a line in the log leads to its trace.

use axum::routing::get;
use opentelemetry::trace::TracerProvider as _;
use service_kit::testing::LogCapture;
use service_kit::{HttpConfig, ServiceApp};
use tracing_subscriber::layer::SubscriberExt;
use utoipa_axum::router::OpenApiRouter;

#[tokio::test]
async fn every_log_line_of_a_request_names_its_trace_and_span() {
    let capture = LogCapture::default();
    let provider =
        service_kit::telemetry::tracer_provider("test", &service_kit::Env::default()).unwrap();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::INFO)
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")))
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(capture.clone()),
        );
    tracing::subscriber::set_global_default(subscriber).unwrap();
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let api = OpenApiRouter::new().route(
        "/v1/hello",
        get(|| async {
            tracing::info!("inside the handler");
            "hi"
        }),
    );
    let router = ServiceApp::new("test", api)
        .http_config(HttpConfig {
            request_timeout: std::time::Duration::from_secs(5),
            body_limit: 1024,
            internal_token: None,
        })
        .into_router();
    let server = service_kit::testing::spawn(router).await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let answer = reqwest::Client::new()
        .get(format!("{}/v1/hello", server.url))
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let text = String::from_utf8(capture.bytes()).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("inside the handler") || l.contains("answered"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    for line in lines {
        assert!(line.contains(&format!("trace_id={trace}")), "{line}");
        assert!(line.contains("span_id="), "{line}");
        assert!(
            !line.contains("span_id=00f067aa0ba902b7"),
            "the span is the request's own: {line}"
        );
    }
}
