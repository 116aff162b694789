//! The API gateway: Berth's only public entry.
//!
//! It authenticates bearer tokens against hashed scopes, routes by path prefix to the three services,
//! forwards over pooled keep-alive connections with streamed bodies, limits each token's rate, bounds
//! each upstream's time, opens a circuit breaker on an upstream that keeps failing, and aggregates
//! readiness and OpenAPI.
//!
//! # Layout
//! - [`routes`]: which upstream and which scope a request needs.
//! - [`auth`]: the tokens file (SHA-256 hashes and scopes) and constant-time authentication.
//! - [`limits`]: the per-token rate limiter and the per-upstream circuit breaker.
//! - [`engine`]: the thread-per-core server that carries proxied calls.
//! - [`proxy`]: forwarding to the upstreams over pooled connections: the request head, the
//!   breaker, the timeout and retries.
//! - [`client`]: the HTTP/1.1 connection those calls go over, driven in the calling task.
//! - [`openapi`]: the merged, scope-annotated OpenAPI document.
//! - this file: [`Config`], the gateway's state and own routes (probes, metrics, OpenAPI), and
//!   [`build`].

pub mod auth;
pub mod client;
pub mod engine;
pub mod limits;
pub mod openapi;
pub mod proxy;
pub mod routes;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::header;
use axum::routing::get;
use domain::Code;
use service_kit::config::{ConfigError, listen_addr, vars};
use service_kit::extract::Json;
use service_kit::health::Check;
use service_kit::outbound::HttpClient;
use service_kit::server::Application;
use service_kit::{ApiError, Env, HttpConfig, SecretString, ServiceApp};
use utoipa_axum::router::OpenApiRouter;

use crate::auth::TokenStore;
use crate::limits::{BreakerConfig, RateLimit, RateLimiter};
use crate::openapi::OpenApiCache;
use crate::proxy::{Forwarder, Upstream};
use crate::routes::UpstreamId;

/// The service's name in logs, metrics and traces.
pub const NAME: &str = "gateway";
/// The port it listens on by default.
pub const DEFAULT_PORT: u16 = 8080;

/// Variable names the gateway reads besides the shared ones.
pub mod env_vars {
    /// The machine driver's base URL.
    pub const MACHINE_DRIVER_URL: &str = "BERTH_MACHINE_DRIVER_URL";
    /// The registry's base URL.
    pub const REGISTRY_URL: &str = "BERTH_REGISTRY_URL";
    /// Storage ops' base URL.
    pub const STORAGE_OPS_URL: &str = "BERTH_STORAGE_OPS_URL";
    /// How long the registry and storage ops may take to answer.
    pub const UPSTREAM_TIMEOUT: &str = "BERTH_UPSTREAM_TIMEOUT";
    /// How long the machine driver may take to answer (cloud calls are slow).
    pub const MACHINE_DRIVER_TIMEOUT: &str = "BERTH_MACHINE_DRIVER_TIMEOUT";
    /// The tokens file.
    pub const TOKENS_FILE: &str = "BERTH_TOKENS_FILE";
    /// Sustained requests per second per token (0 turns limiting off).
    pub const RATE_LIMIT_RPS: &str = "BERTH_RATE_LIMIT_RPS";
    /// Requests per token allowed at once.
    pub const RATE_LIMIT_BURST: &str = "BERTH_RATE_LIMIT_BURST";
    /// Consecutive failures that open an upstream's breaker.
    pub const BREAKER_FAILURES: &str = "BERTH_BREAKER_FAILURES";
    /// How long an open breaker refuses calls.
    pub const BREAKER_OPEN: &str = "BERTH_BREAKER_OPEN";
    /// Worker threads serving calls (default: one per core).
    pub const WORKERS: &str = "BERTH_GATEWAY_WORKERS";
    /// How long a caller's connection may go without progress (a complete request head, or bytes of
    /// an answer written) while no call of it is being answered, before it is closed.
    pub const IDLE_TIMEOUT: &str = "BERTH_GATEWAY_IDLE_TIMEOUT";
}

/// The gateway's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Timeouts and body limit for callers (the gateway itself requires tokens, not the internal
    /// credential).
    pub http: HttpConfig,
    /// The credential sent to the services.
    pub internal_token: Option<SecretString>,
    /// Upstream base URLs, in [`UpstreamId::ALL`] order.
    pub upstream_urls: [String; 3],
    /// Time allowed to the registry and storage ops.
    pub upstream_timeout: Duration,
    /// Time allowed to the machine driver.
    pub machine_driver_timeout: Duration,
    /// The tokens file.
    pub tokens_file: PathBuf,
    /// Per-token rate limit; `None` when off.
    pub rate_limit: Option<RateLimit>,
    /// Circuit-breaker settings.
    pub breaker: BreakerConfig,
    /// Worker threads of the proxy engine.
    pub workers: usize,
    /// How long a caller's connection may stall (see [`env_vars::IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
}

impl Config {
    /// Reads the settings; unset variables take their defaults.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        use env_vars::*;
        let data_dir = service_kit::config::data_dir(env);
        let url = |var: &str, port: u16| {
            env.get(var)
                .map(str::to_string)
                .unwrap_or_else(|| format!("http://127.0.0.1:{port}"))
        };
        let upstream_timeout = env.duration_or(UPSTREAM_TIMEOUT, Duration::from_secs(30))?;
        let machine_driver_timeout =
            env.duration_or(MACHINE_DRIVER_TIMEOUT, Duration::from_secs(90))?;
        let mut http = HttpConfig::from_env(env)?;
        // Callers hold tokens, not the internal credential; and the gateway's own limit must outlast
        // its slowest upstream so the upstream's own timeout answer gets through.
        http.internal_token = None;
        if env.get(vars::REQUEST_TIMEOUT).is_none() {
            http.request_timeout =
                upstream_timeout.max(machine_driver_timeout) + Duration::from_secs(5);
        }
        let rps: f64 = env.parse_or(RATE_LIMIT_RPS, 100.0)?;
        let burst: f64 = env.parse_or(RATE_LIMIT_BURST, (rps * 2.0).max(1.0))?;
        Ok(Config {
            listen: listen_addr(env, DEFAULT_PORT)?,
            http,
            internal_token: env.secret(vars::INTERNAL_TOKEN),
            upstream_urls: [
                url(MACHINE_DRIVER_URL, 8081),
                url(REGISTRY_URL, 8082),
                url(STORAGE_OPS_URL, 8083),
            ],
            upstream_timeout,
            machine_driver_timeout,
            tokens_file: env
                .get(TOKENS_FILE)
                .map(PathBuf::from)
                .unwrap_or_else(|| data_dir.join("tokens")),
            rate_limit: (rps > 0.0).then_some(RateLimit {
                rps,
                burst: burst.max(1.0),
            }),
            breaker: BreakerConfig {
                failures: env.parse_or(BREAKER_FAILURES, 5)?,
                open_for: env.duration_or(BREAKER_OPEN, Duration::from_secs(5))?,
            },
            workers: env.parse_or(
                WORKERS,
                std::thread::available_parallelism().map_or(2, |n| n.get()),
            )?,
            idle_timeout: env.duration_or(IDLE_TIMEOUT, Duration::from_secs(30))?,
        })
    }
}

/// What the gateway's handlers share.
pub struct Gateway {
    /// In [`UpstreamId::ALL`] order.
    upstreams: Vec<Upstream>,
    forwarder: Forwarder,
    tokens: Arc<TokenStore>,
    limiter: Option<RateLimiter>,
    openapi: OpenApiCache,
}

impl Gateway {
    fn upstream(&self, id: UpstreamId) -> &Upstream {
        &self.upstreams[id.index()]
    }
}

/// The gateway's state and the router of its own routes (probes, metrics, OpenAPI). Fails when an
/// upstream URL or the tokens file is malformed.
fn assemble(config: &Config) -> Result<(Arc<Gateway>, axum::Router), String> {
    let mut upstreams = Vec::new();
    for (id, url) in UpstreamId::ALL.into_iter().zip(&config.upstream_urls) {
        let timeout = if id == UpstreamId::MachineDriver {
            config.machine_driver_timeout
        } else {
            config.upstream_timeout
        };
        upstreams.push(Upstream::new(id, url, timeout, config.breaker)?);
    }
    let http = HttpClient::new(Duration::from_secs(5), config.internal_token.clone());
    let sources = UpstreamId::ALL
        .into_iter()
        .zip(
            config
                .upstream_urls
                .iter()
                .map(|u| u.trim_end_matches('/').to_string()),
        )
        .collect::<Vec<_>>();
    let gateway = Arc::new(Gateway {
        upstreams,
        forwarder: Forwarder::new(config.internal_token.clone()),
        tokens: TokenStore::watch(&config.tokens_file)?,
        limiter: config.rate_limit.map(RateLimiter::new),
        openapi: OpenApiCache::new(http.clone(), sources.clone()),
    });
    let mut app = ServiceApp::new(NAME, OpenApiRouter::new())
        .http_config(config.http.clone())
        .openapi_route(get({
            let gateway = gateway.clone();
            move || async move { Json(gateway.openapi.document().await) }
        }));
    for (id, base) in sources {
        let http = http.clone();
        app = app.readiness(Check::new(id.name(), move || {
            let (http, url) = (http.clone(), format!("{base}/readyz"));
            async move {
                match http
                    .request(reqwest::Method::GET, &url)
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await
                {
                    Ok(r) if r.status().is_success() => Ok(()),
                    Ok(r) => Err(format!("answered {}", r.status().as_u16())),
                    Err(_) => Err("unreachable".to_string()),
                }
            }
        }));
    }
    Ok((gateway, app.into_router()))
}

/// The token checks for a proxied call, in order: present, known, scoped, within its rate. `memory`
/// is what its connection remembers of the last token it presented.
pub(crate) fn admit(
    gateway: &Gateway,
    request: &Request,
    route: routes::RouteInfo,
    memory: &mut Option<auth::Remembered>,
) -> Result<(), ApiError> {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ApiError::from_code(
                Code::Unauthenticated,
                "a bearer token is required (Authorization: Bearer <token>)",
            )
        })?;
    gateway
        .tokens
        .authenticate_remembering(presented, memory, |entry| {
            authorize(gateway, entry, request, route)
        })
        .unwrap_or_else(|| {
            Err(ApiError::from_code(
                Code::Unauthenticated,
                "the bearer token is not known",
            ))
        })
}

/// The checks on a known token: scoped, within its rate.
fn authorize(
    gateway: &Gateway,
    entry: &auth::TokenEntry,
    request: &Request,
    route: routes::RouteInfo,
) -> Result<(), ApiError> {
    if !entry.allows(route.scope) {
        return Err(ApiError::from_code(
            Code::PermissionDenied,
            format!(
                "token {:?} lacks the scope {} that {} {} needs",
                entry.name,
                route.scope,
                request.method(),
                route.template
            ),
        ));
    }
    if let Some(limiter) = &gateway.limiter
        && let Err(wait) = limiter.check(&entry.name)
    {
        return Err(ApiError::from_code(
            Code::ResourceExhausted,
            format!("token {:?} is over its rate limit", entry.name),
        )
        .with_retry_after(wait));
    }
    Ok(())
}

/// Binds the listener and builds the application.
pub async fn build(
    config: Config,
) -> Result<Application, Box<dyn std::error::Error + Send + Sync>> {
    let (gateway, router) = assemble(&config)?;
    let listener = service_kit::server::bind(config.listen, vars::LISTEN).await?;
    let stack = service_kit::middleware::Stack::new(NAME, &config.http);
    Ok(
        Application::new(router, listener).with_engine(engine::engine(
            gateway,
            stack,
            engine::Settings {
                workers: config.workers,
                idle_timeout: config.idle_timeout,
            },
        )),
    )
}
