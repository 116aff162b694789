//! The API gateway: Berth's only public entry. It authenticates bearer tokens, routes by path prefix to the three services, limits rates and times, and aggregates health and OpenAPI.
//!
//! # Layout
//! - [`Config`]: settings from `BERTH_*` variables.
//! - [`router`]: the HTTP API, a pure function of its state so tests can drive it with `oneshot`.
//! - [`build`]: binds the listener and assembles the [`Application`] that `main` (or `berth up`) runs.

use service_kit::config::{ConfigError, listen_addr, vars};
use service_kit::server::Application;
use service_kit::{Env, HttpConfig, ServiceApp};
use utoipa_axum::router::OpenApiRouter;

/// The service's name in logs, metrics and traces.
pub const NAME: &str = "gateway";
/// The port it listens on by default.
pub const DEFAULT_PORT: u16 = 8080;

/// The service's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (`BERTH_LISTEN`, default `127.0.0.1:8080`).
    pub listen: std::net::SocketAddr,
    /// Timeouts, body limit, internal credential.
    pub http: HttpConfig,
}

impl Config {
    /// Reads the settings; unset variables take their defaults.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Config {
            listen: listen_addr(env, DEFAULT_PORT)?,
            http: HttpConfig::from_env(env)?,
        })
    }
}

/// The service's router.
pub fn router(config: &Config) -> axum::Router {
    ServiceApp::new(NAME, OpenApiRouter::new())
        .http_config(config.http.clone())
        .into_router()
}

/// Binds the listener and builds the application.
pub async fn build(
    config: Config,
) -> Result<Application, Box<dyn std::error::Error + Send + Sync>> {
    let listener = service_kit::server::bind(config.listen, vars::LISTEN).await?;
    Ok(Application::new(router(&config), listener))
}
