//! What every Berth service shares, so that a service's own code is only its API and its logic.
//!
//! A service builds an [`utoipa_axum::router::OpenApiRouter`] of its routes and hands it to
//! [`app::ServiceApp`], which adds `/healthz`, `/readyz`, `/metrics` and `/openapi.json` and wraps
//! everything in the one middleware stack. [`server::serve`] runs the result until shutdown.
//!
//! # Layout
//! - [`config`]: typed settings from `BERTH_*` variables (read from a map, so tests never touch the
//!   process environment; a service names the other programs' variables it reads, the kit knows
//!   none), with domain's duration form and [`SecretString`] (re-exported from `domain`).
//! - [`error`]: [`ApiError`], the problem+json answer every non-2xx response uses; its body,
//!   [`error::Problem`], is defined in `domain` so the typed client can read it without this kit.
//! - [`extract`]: `Json`, `Path` and `Query` extractors whose rejections are [`ApiError`]s.
//! - [`paths`]: where a caller-named directory really leads, symbolic links resolved, checked
//!   against the operator's roots.
//! - [`query`]: one rule for query parameters, read from the OpenAPI document: a route takes the ones
//!   its operation declares and refuses any other.
//! - [`openapi`]: the answers the stack gives on every route, added to each service's document, and
//!   every error answer stated as problem+json.
//! - [`middleware`]: the stack, outermost first: request id → trace (with `traceparent`) → metrics →
//!   problem+json for bare error answers → internal credential → timeout → panic catching → body limit.
//!   It wraps every router, and [`middleware::Stack::handle`] runs the same steps for a server that
//!   does not go through axum (the gateway's proxy engine).
//! - [`request_id`]: `x-request-id` handling and the task-local that carries it to logs, errors and
//!   outgoing calls.
//! - [`telemetry`]: logging (human or JSON), OpenTelemetry export over OTLP, W3C trace context.
//! - [`metrics`]: the HTTP metrics and the `/metrics` page, declared and recorded the one way every
//!   Berth metric is (`metric-families`, re-exported there).
//! - [`process_metrics`]: the `process_*` and `berth_build_info` series every `/metrics` page ends
//!   with.
//! - [`health`]: liveness and readiness ([`health::NotReady`] says why not).
//! - [`memory`]: the process's memory settings (transparent huge pages off), applied at start.
//! - [`outbound`]: [`outbound::inject_propagation`], which adds `traceparent` and `x-request-id` to a
//!   service-to-service call (the typed client `client` is handed it by the services that build
//!   one), and a reqwest wrapper that also adds the internal credential, for the gateway's own calls.
//! - [`protocol`]: problem+json in place of the bare 400/414/431 hyper writes for requests it cannot
//!   parse, by wrapping each connection's socket.
//! - [`connections`]: the cap on a listener's connections (oldest idle closed first), which the
//!   services' server and the gateway's engine share.
//! - [`tenancy`]: the caller (its token's name and namespaces, as the gateway forwards them), the
//!   [`tenancy::Caller`] extractor handlers check objects against, and the one audit line the stack
//!   writes per mutating call.
//! - [`watch`]: the change feed a store publishes to, and the `watch=true` stream of a list route
//!   (Kubernetes' events, resume, 410, bookmarks), with the operator's limits on it.
//! - [`app`], [`server`]: assembling a service's router, and serving it with graceful shutdown, on
//!   hyper's HTTP/1 connection builder with a head-read limit (`BERTH_IDLE_TIMEOUT`), or by an engine
//!   of the service's own ([`server::Engine`]).
//! - `testing` (cargo feature `testing`, which only dev-dependencies turn on): spawning any router on
//!   `127.0.0.1:0` and quiet-by-default test logs.

pub mod app;
pub mod config;
pub mod connections;
pub mod error;
pub mod extract;
pub mod health;
pub mod memory;
pub mod metrics;
pub mod middleware;
pub mod openapi;
pub mod outbound;
pub mod paths;
pub mod process_metrics;
pub mod protocol;
pub mod query;
pub mod request_id;
pub mod server;
pub mod telemetry;
pub mod tenancy;
#[cfg(feature = "testing")]
pub mod testing;
pub mod watch;

pub use app::ServiceApp;
pub use config::{Env, HttpConfig, SecretString};
pub use error::ApiError;
pub use server::{serve, shutdown_signal};
