//! Logging and tracing, set up the same way by every binary.
//!
//! Spans always carry OpenTelemetry context, so a `traceparent` that arrives is continued and one goes
//! out on every service-to-service call, whether or not anything is exported. When
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, spans are also exported there over OTLP/HTTP. Logs are human
//! by default and JSON with `BERTH_LOG_FORMAT=json`; the filter comes from `BERTH_LOG` (default `info`).

use std::io::IsTerminal as _;
use std::time::Duration;

use axum::extract::Request;
use axum::http::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{Env, vars};

/// Keeps the tracer provider alive; dropping it flushes spans not yet exported.
pub struct TelemetryGuard {
    provider: SdkTracerProvider,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// Builds the tracer provider: OTLP/HTTP export when an endpoint is configured, none otherwise (spans
/// still get ids, so trace context propagates).
pub fn tracer_provider(
    service: &str,
    env: &Env,
) -> Result<SdkTracerProvider, Box<dyn std::error::Error + Send + Sync>> {
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(service.to_string())
        .build();
    let mut builder = SdkTracerProvider::builder().with_resource(resource);
    if env.get(vars::OTLP_ENDPOINT).is_some() {
        // The exporter reads OTEL_EXPORTER_OTLP_* itself, which is the convention operators expect.
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()?;
        builder = builder.with_batch_exporter(exporter);
    }
    Ok(builder.build())
}

/// Checks the log settings before anything is set up: `BERTH_LOG_FORMAT` is `json`, or `human` (the
/// default; `text` is read the same), and
/// `BERTH_LOG` a filter `tracing` reads. A typo in either is the operator's setting refused, as any
/// other (a binary exits 2 naming it), never ignored.
pub fn check_settings(env: &Env) -> Result<(), crate::config::ConfigError> {
    if let Some(format) = env.get(vars::LOG_FORMAT)
        && !matches!(format, "json" | "human" | "text" | "")
    {
        return Err(crate::config::ConfigError {
            var: vars::LOG_FORMAT.into(),
            value: format.into(),
            problem: "must be json, or human (the default)".into(),
        });
    }
    if let Some(filter) = env.get(vars::LOG) {
        let refused = |why: String| crate::config::ConfigError {
            var: vars::LOG.into(),
            value: filter.into(),
            problem: format!("is not a log filter such as info or warn,gateway=debug ({why})"),
        };
        EnvFilter::try_new(filter).map_err(|e| refused(e.to_string()))?;
        // `tracing` reads a bare word as a target to log at every level, so a misspelt level
        // (`warning`, `inof`) is taken as the name of a target nothing logs under, and every log
        // line, audit lines included, is off. Here a bare word must be a level; a target is
        // written `target=level`.
        for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            let bare = !directive.contains(['=', '[', ':']);
            let level = matches!(
                directive.to_ascii_lowercase().as_str(),
                "trace" | "debug" | "info" | "warn" | "error" | "off"
            );
            if bare && !level {
                return Err(refused(format!(
                    "{directive:?} is no level (trace, debug, info, warn, error, off); write a target as {directive}=LEVEL"
                )));
            }
        }
    }
    Ok(())
}

/// [`init`] for a binary's start: a refused log setting is printed and exits 2, as every refused
/// setting does; any other failure exits 1.
pub fn init_or_exit(
    program: &str,
    service: &str,
    env: &Env,
) -> Result<TelemetryGuard, std::process::ExitCode> {
    if let Err(e) = check_settings(env) {
        eprintln!("{program}: {e}");
        return Err(std::process::ExitCode::from(2));
    }
    init(service, env).map_err(|e| {
        eprintln!("{program}: telemetry setup failed: {e}");
        std::process::ExitCode::FAILURE
    })
}

/// Installs the global subscriber and propagator for a binary. Logs go to stderr, so what a command
/// prints for people and scripts (the `berth up` banner) stays alone on stdout. Call once, at start; a second call (as
/// when `berth up` runs several services in one process) keeps the first setup.
pub fn init(
    service: &str,
    env: &Env,
) -> Result<TelemetryGuard, Box<dyn std::error::Error + Send + Sync>> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let provider = tracer_provider(service, env)?;
    let tracer = provider.tracer("berth");
    opentelemetry::global::set_tracer_provider(provider.clone());
    let filter = EnvFilter::try_new(env.get(vars::LOG).unwrap_or("info"))?;
    let otel = tracing_opentelemetry::layer().with_tracer(tracer);
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    let result = if env.get(vars::LOG_FORMAT) == Some("json") {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .json()
                    .flatten_event(true)
                    .with_current_span(true),
            )
            .try_init()
    } else {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    // Colour codes only for a person at a terminal, never into a file or a pipe.
                    .with_ansi(std::io::stderr().is_terminal()),
            )
            .try_init()
    };
    if result.is_err() {
        tracing::debug!("a global subscriber was already installed; keeping it");
    }
    Ok(TelemetryGuard { provider })
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(key.as_bytes()),
            axum::http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Writes the current span's trace context (`traceparent`, `tracestate`) into `headers`, in place of
/// any already there. Without a span (its level filtered out) the headers are left as they are, so a
/// proxy passes its caller's context through unchanged rather than cutting the trace.
pub fn inject_context(headers: &mut HeaderMap) {
    // Request spans are at info: below that level there is none to look up (a cheap global read
    // spares asking the subscriber for the current span on every call).
    if tracing::level_filters::LevelFilter::current() < tracing::Level::INFO {
        return;
    }
    let span = tracing::Span::current();
    if span.is_disabled() {
        return;
    }
    headers.remove("traceparent");
    headers.remove("tracestate");
    let context = span.context();
    TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
}

/// The trace context a request arrived with.
pub fn extract_context(headers: &HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// The span of one request, continuing the caller's trace (`traceparent`).
pub(crate) fn request_span(
    service: &'static str,
    request: &Request,
    route: &str,
    request_id: &axum::http::HeaderValue,
) -> tracing::Span {
    let span = tracing::info_span!(
        "request",
        service,
        method = %request.method(),
        route = %route,
        // Request ids are checked to be printable ASCII before they get here.
        request_id = request_id.to_str().unwrap_or_default(),
        status = tracing::field::Empty,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    if !span.is_disabled() {
        let _ = span.set_parent(extract_context(request.headers()));
        // The ids every log line of the request carries, so a line in the log leads to its trace.
        let context = span.context();
        let ids = opentelemetry::trace::TraceContextExt::span(&context)
            .span_context()
            .clone();
        if ids.is_valid() {
            span.record("trace_id", tracing::field::display(ids.trace_id()));
            span.record("span_id", tracing::field::display(ids.span_id()));
        }
    }
    span
}

/// The one log line per request, once the answer is ready; probes and scrapes log at debug so they
/// do not drown the log.
pub(crate) fn log_answer(probe: bool, status: u16, elapsed: Duration) {
    tracing::Span::current().record("status", status);
    let elapsed_ms = elapsed.as_secs_f64() * 1000.0;
    if probe {
        tracing::debug!(status, elapsed_ms, "answered");
    } else {
        tracing::info!(status, elapsed_ms, "answered");
    }
}
