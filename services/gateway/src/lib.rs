//! The API gateway: Berth's only public entry.
//!
//! It authenticates bearer tokens against hashed scopes, routes by path prefix to the three services,
//! forwards over pooled keep-alive connections with streamed bodies, limits each token's rate, bounds
//! each upstream's time, opens a circuit breaker on an upstream that keeps failing, and aggregates
//! readiness and OpenAPI.
//!
//! # Layout
//! - [`routes`]: which upstream and which scope a request needs, by exact method and path template;
//!   paths with dot-segments or encoded slashes are refused before routing.
//! - [`auth`]: the tokens file (SHA-256 hashes, scopes, namespaces, lifetimes; names unique; revoking;
//!   the last-used file beside it) and constant-time authentication.
//! - `admission`: the gateway's shared state and the checks on a proxied call (token, rate, scope),
//!   and the caller's identity (`x-berth-token-name`, `x-berth-namespaces`) it forwards.
//! - `limits`: the per-token and per-address rate limiters (governor) and the per-upstream circuit
//!   breaker.
//! - `engine`: the thread-per-core server that carries proxied calls, with its connection cap.
//! - `proxy`: forwarding to the upstreams over hyper's HTTP/1.1 client, pooled per worker: the
//!   forwarded headers, the breaker, the timeout and retries.
//! - `openapi`: the merged, scope-annotated OpenAPI document.
//! - `docs`: `/docs`, a page that lists every operation of that document and tries them out.
//! - this file: [`Config`], the gateway's own routes (probes, metrics, OpenAPI), and [`build`].
//!
//! Only [`Config`], [`build`], [`auth`] and [`routes`] are public: what `berth up`, the CLI and the
//! tests use.

mod admission;
pub mod auth;
mod docs;
mod engine;
mod limits;
pub mod mint;
mod openapi;
mod proxy;
pub mod routes;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use service_kit::config::{ConfigError, Renamed, listen_addr, vars};
use service_kit::extract::Json;
use service_kit::health::{Check, NotReady};
use service_kit::outbound::HttpClient;
use service_kit::server::Application;
use service_kit::{Env, HttpConfig, SecretString, ServiceApp};

use crate::admission::Gateway;
use crate::auth::TokenStore;
use crate::limits::{BreakerConfig, FailureLimiter, InFlight, RateLimit, RateLimiter};
use crate::openapi::OpenApiCache;
use crate::proxy::{Forwarder, Upstream};
use crate::routes::UpstreamId;

/// The service's name in logs, metrics and traces.
pub const NAME: &str = "gateway";
/// The port it listens on by default.
pub const DEFAULT_PORT: u16 = 8080;

service_kit::declare_variables! {
    /// Every variable the gateway reads besides the kit's ([`service_kit::config::vars::EVERY_SERVICE`]):
    /// the binary refuses any other `BERTH_*` one ([`service_kit::config::check_names`]), and a test
    /// checks every name this crate's sources spell is here.
    pub const VARS = [
        env_vars::MACHINE_DRIVER_URL,
        env_vars::REGISTRY_URL,
        env_vars::STORAGE_OPS_URL,
        env_vars::MACHINE_CONTROLLER_URL,
        env_vars::UPSTREAM_TIMEOUT,
        env_vars::MACHINE_DRIVER_TIMEOUT,
        env_vars::TOKENS_FILE,
        env_vars::CREATE_ADMIN_TOKEN,
        env_vars::RATE_LIMIT_RPS,
        env_vars::RATE_LIMIT_BURST,
        env_vars::BREAKER_FAILURES,
        env_vars::BREAKER_OPEN,
        env_vars::WORKERS,
        env_vars::IDLE_TIMEOUT,
        env_vars::BREAKER_COUNT_5XX,
        env_vars::AUTH_FAILURE_RPS,
        env_vars::AUTH_FAILURE_BURST,
        env_vars::MAX_CONNECTIONS,
        env_vars::TOKEN_MAX_IN_FLIGHT,
    ];
    /// The gateway's names retired in this release: its own settings carry no service name (the
    /// convention in [`service_kit::config`]), as `BERTH_RATE_LIMIT_RPS` and the others never did.
    pub const RENAMED = [
        Renamed::same("BERTH_GATEWAY_WORKERS", env_vars::WORKERS),
            Renamed::same("BERTH_GATEWAY_IDLE_TIMEOUT", env_vars::IDLE_TIMEOUT),
            Renamed::same("BERTH_GATEWAY_MAX_CONNECTIONS", env_vars::MAX_CONNECTIONS),
    ];
}

/// Variable names the gateway reads besides the shared ones.
pub mod env_vars {
    /// The machine driver's base URL.
    pub const MACHINE_DRIVER_URL: &str = "BERTH_MACHINE_DRIVER_URL";
    /// The registry's base URL.
    pub const REGISTRY_URL: &str = "BERTH_REGISTRY_URL";
    /// Storage ops' base URL.
    pub const STORAGE_OPS_URL: &str = "BERTH_STORAGE_OPS_URL";
    /// The machine controller's base URL.
    pub const MACHINE_CONTROLLER_URL: &str = "BERTH_MACHINE_CONTROLLER_URL";
    /// How long the registry and storage ops may take to answer.
    pub const UPSTREAM_TIMEOUT: &str = "BERTH_UPSTREAM_TIMEOUT";
    /// How long the machine driver may take to answer (cloud calls are slow).
    pub const MACHINE_DRIVER_TIMEOUT: &str = "BERTH_MACHINE_DRIVER_TIMEOUT";
    /// The tokens file.
    pub const TOKENS_FILE: &str = "BERTH_TOKENS_FILE";
    /// `true`: when the tokens file does not exist at start, create it holding one admin token and
    /// print that token once in the log (a container's first start, where no one can run
    /// `berth token create` beforehand).
    pub const CREATE_ADMIN_TOKEN: &str = "BERTH_CREATE_ADMIN_TOKEN";
    /// Sustained requests per second per token (0 turns limiting off).
    pub const RATE_LIMIT_RPS: &str = "BERTH_RATE_LIMIT_RPS";
    /// Requests per token allowed at once.
    pub const RATE_LIMIT_BURST: &str = "BERTH_RATE_LIMIT_BURST";
    /// Consecutive failures that open an upstream's breaker.
    pub const BREAKER_FAILURES: &str = "BERTH_BREAKER_FAILURES";
    /// How long an open breaker refuses calls.
    pub const BREAKER_OPEN: &str = "BERTH_BREAKER_OPEN";
    /// Worker threads serving calls (default: one per core).
    pub const WORKERS: &str = "BERTH_WORKERS";
    /// How long a caller's connection may go without progress (a complete request head, or bytes of
    /// an answer written) while no call of it is being answered, before it is closed.
    pub const IDLE_TIMEOUT: &str = "BERTH_IDLE_TIMEOUT";
    /// Whether an upstream's 5xx answers count against its breaker.
    pub const BREAKER_COUNT_5XX: &str = "BERTH_BREAKER_COUNT_5XX";
    /// Failed authentications per second allowed from one address (0 turns the limit off).
    pub const AUTH_FAILURE_RPS: &str = "BERTH_AUTH_FAILURE_RPS";
    /// Failed authentications allowed from one address at once.
    pub const AUTH_FAILURE_BURST: &str = "BERTH_AUTH_FAILURE_BURST";
    /// Callers' connections held at once; over it the oldest idle one is closed.
    pub const MAX_CONNECTIONS: &str = service_kit::config::vars::MAX_CONNECTIONS;
    /// Calls one token may have in flight at once (0 turns the cap off).
    pub const TOKEN_MAX_IN_FLIGHT: &str = "BERTH_TOKEN_MAX_IN_FLIGHT";
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
    pub upstream_urls: [String; 4],
    /// Time allowed to the registry and storage ops.
    pub upstream_timeout: Duration,
    /// Time allowed to the machine driver.
    pub machine_driver_timeout: Duration,
    /// The tokens file.
    pub tokens_file: PathBuf,
    /// Whether a first start (no tokens file) creates one with an admin token, logged once.
    pub create_admin_token: bool,
    /// Per-token rate limit; `None` when off.
    rate_limit: Option<RateLimit>,
    /// Per-address limit of failed authentications; `None` when off.
    auth_failure_limit: Option<RateLimit>,
    /// Circuit-breaker settings.
    breaker: BreakerConfig,
    /// Worker threads of the proxy engine.
    pub workers: usize,
    /// How long a caller's connection may stall (see [`env_vars::IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// Callers' connections held at once; `None` for the default, from the file limit.
    pub max_connections: Option<usize>,
    /// Calls one token may have in flight at once; `None` when off.
    token_max_in_flight: Option<u32>,
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
        let rps = rate_or(env, RATE_LIMIT_RPS, 100.0)?;
        let burst = rate_or(env, RATE_LIMIT_BURST, (rps * 2.0).max(1.0))?;
        let auth_rps = rate_or(env, AUTH_FAILURE_RPS, 10.0)?;
        let auth_burst = rate_or(env, AUTH_FAILURE_BURST, 100.0)?;
        Ok(Config {
            listen: listen_addr(env, DEFAULT_PORT)?,
            http,
            internal_token: env.secret(vars::INTERNAL_TOKEN),
            upstream_urls: [
                url(MACHINE_DRIVER_URL, 8081),
                url(REGISTRY_URL, 8082),
                url(STORAGE_OPS_URL, 8083),
                url(MACHINE_CONTROLLER_URL, 8084),
            ],
            upstream_timeout,
            machine_driver_timeout,
            tokens_file: env
                .get(TOKENS_FILE)
                .map(PathBuf::from)
                .unwrap_or_else(|| data_dir.join("tokens")),
            create_admin_token: env.parse_or(CREATE_ADMIN_TOKEN, false)?,
            rate_limit: (rps > 0.0).then_some(RateLimit {
                rps,
                burst: burst.max(1.0),
            }),
            auth_failure_limit: (auth_rps > 0.0).then_some(RateLimit {
                rps: auth_rps,
                burst: auth_burst.max(1.0),
            }),
            breaker: BreakerConfig {
                failures: env.parse_or(BREAKER_FAILURES, 5)?,
                open_for: env.duration_or(BREAKER_OPEN, Duration::from_secs(5))?,
                count_5xx: env.parse_or(BREAKER_COUNT_5XX, false)?,
            },
            workers: env.parse_or(
                WORKERS,
                std::thread::available_parallelism().map_or(2, |n| n.get()),
            )?,
            idle_timeout: env.duration_or(IDLE_TIMEOUT, Duration::from_secs(30))?,
            max_connections: Some(env.parse_or(MAX_CONNECTIONS, 0usize)?).filter(|&n| n > 0),
            token_max_in_flight: Some(env.parse_or(TOKEN_MAX_IN_FLIGHT, 64u32)?).filter(|&n| n > 0),
        })
    }
}

/// A rate or a burst: a finite number, 0 or more (a rate of 0 turns its limit off). A negative or
/// not-a-number value would otherwise turn the limit off without a word, and an infinite one
/// make a bucket no call ever empties.
fn rate_or(env: &Env, key: &str, default: f64) -> Result<f64, ConfigError> {
    let value: f64 = env.parse_or(key, default)?;
    if value.is_finite() && value >= 0.0 && value <= f64::from(u32::MAX) {
        return Ok(value);
    }
    Err(ConfigError {
        var: key.to_string(),
        value: env.get(key).unwrap_or_default().to_string(),
        problem: format!(
            "must be a number from 0 to {} (0 turns the limit off)",
            u32::MAX
        ),
    })
}

/// Why the gateway cannot be assembled from its configuration.
#[derive(Debug, thiserror::Error)]
enum AssembleError {
    #[error(transparent)]
    Upstream(#[from] proxy::UpstreamUrlError),
    #[error(transparent)]
    Tokens(#[from] auth::TokensFileError),
}

/// The gateway's state and the router of its own routes (probes, metrics, OpenAPI). Fails when an
/// upstream URL or the tokens file is malformed.
fn assemble(config: &Config) -> Result<(Arc<Gateway>, axum::Router), AssembleError> {
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
        failures: config.auth_failure_limit.map(FailureLimiter::new),
        in_flight: config.token_max_in_flight.map(InFlight::new),
        openapi: OpenApiCache::new(http.clone(), sources.clone()),
    });
    let mut app = ServiceApp::new(NAME, docs::routes())
        .metric_prefixes(&["berth_gateway_"])
        .http_config(config.http.clone())
        .openapi_route(get({
            let gateway = gateway.clone();
            move || async move { Json(gateway.openapi.document().await) }
        }));
    for (id, base) in sources {
        let http = http.clone();
        let gateway = gateway.clone();
        app = app.readiness(Check::new(id.name(), move || {
            let (http, url) = (http.clone(), format!("{base}/readyz"));
            let paused = gateway.upstream(id).breaker.is_open();
            async move {
                if paused {
                    return Err(NotReady::new(
                        "calls to it are paused: its circuit breaker is open",
                    ));
                }
                match http
                    .request(reqwest::Method::GET, &url)
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await
                {
                    Ok(r) if r.status().is_success() => Ok(()),
                    Ok(r) => Err(NotReady::new(format!("answered {}", r.status().as_u16()))),
                    // Say what was seen: a service that is up but slow (its own dependency hanging)
                    // is not one that cannot be reached.
                    Err(e) if e.is_timeout() => {
                        Err(NotReady::new("timed out after 2s waiting for its /readyz"))
                    }
                    Err(e) if e.is_connect() => {
                        Err(NotReady::new("unreachable (connection refused or failed)"))
                    }
                    Err(_) => Err(NotReady::new(
                        "unreachable (the connection failed mid-answer)",
                    )),
                }
            }
        }));
    }
    Ok((gateway, app.into_router()))
}

/// Binds the listener and builds the application.
pub async fn build(
    config: Config,
) -> Result<Application, Box<dyn std::error::Error + Send + Sync>> {
    // Bound first: a start that cannot listen makes no admin token that nobody is shown.
    let listener = service_kit::server::bind(config.listen, vars::LISTEN).await?;
    build_on(config, listener)
}

/// Builds the application on a listener already bound. `berth up` binds every port first, then
/// writes its admin token, then builds the gateway here: the tokens file is read with the token in
/// it, so the token works from the first call (no probing with it until a reload picks it up).
pub fn build_on(
    config: Config,
    listener: tokio::net::TcpListener,
) -> Result<Application, Box<dyn std::error::Error + Send + Sync>> {
    if config.create_admin_token {
        let made = auth::ensure_admin_token(&config.tokens_file).map_err(|e| {
            format!(
                "cannot create the tokens file {} ({}): {e}",
                config.tokens_file.display(),
                env_vars::CREATE_ADMIN_TOKEN
            )
        })?;
        if let Some(token) = made {
            // Shown here, once: only its hash is kept. The log is the one place a container's
            // operator can read it (`docker compose logs gateway`).
            tracing::info!(
                tokens_file = %config.tokens_file.display(),
                "first start: created an admin token; it is shown only this once, so keep it. \
                 admin token: {token}"
            );
        }
    }
    let (gateway, router) = assemble(&config)?;
    let stack = service_kit::middleware::Stack::forwarding(NAME, &config.http);
    Ok(
        Application::new(router, listener).with_engine(engine::engine(
            gateway,
            stack,
            engine::Settings {
                workers: config.workers,
                idle_timeout: config.idle_timeout,
                max_connections: config.max_connections,
            },
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_that_is_no_rate_is_refused_naming_the_variable() {
        for bad in ["-5", "NaN", "1e309", "inf", "5000000000"] {
            for var in [
                env_vars::RATE_LIMIT_RPS,
                env_vars::RATE_LIMIT_BURST,
                env_vars::AUTH_FAILURE_RPS,
                env_vars::AUTH_FAILURE_BURST,
            ] {
                let e = Config::from_env(&Env::default().with(var, bad)).unwrap_err();
                assert_eq!(e.var, var, "{bad}");
                assert!(e.problem.contains("0 turns the limit off"), "{e}");
            }
        }
        let off = Config::from_env(&Env::default().with(env_vars::RATE_LIMIT_RPS, "0")).unwrap();
        assert!(off.rate_limit.is_none());
        let on = Config::from_env(&Env::default().with(env_vars::RATE_LIMIT_RPS, "0.5")).unwrap();
        assert_eq!(on.rate_limit.map(|l| l.rps), Some(0.5));
    }
}
