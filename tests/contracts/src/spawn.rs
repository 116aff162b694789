//! The real services, each on its own `127.0.0.1:0` listener in this process, wired by URL.
//!
//! Providers are spawned one at a time so a pact is replayed against exactly the service it names;
//! consumers are spawned with the URL of their provider replaced by a Pact mock server's. Every
//! service gets [`INTERNAL_TOKEN`] as its internal credential, the value the pacts' example
//! requests carry.

use std::sync::Arc;

use service_kit::Env;
use service_kit::server::Application;

pub use berth_tests::{ECS_KEY_ID, ECS_KEY_SECRET, INTERNAL_TOKEN};

/// A running service: its URL, and the directory its state lives in (removed on drop).
pub struct Running {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The service's data directory.
    pub data: tempfile::TempDir,
}

/// The environment every spawned service starts from: port 0, a fresh data directory, the
/// internal credential, no rate limit.
pub fn base_env(data: &tempfile::TempDir) -> Env {
    Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_DATA_DIR", data.path().display().to_string())
        .with("BERTH_INTERNAL_TOKEN", INTERNAL_TOKEN)
        .with("BERTH_RATE_LIMIT_RPS", "0")
        .with("BERTH_AUTH_FAILURE_RPS", "0")
        // No Docker Engine is probed: the registry's first start registers `local`, whatever the
        // machine has, so the contracts do not depend on it.
        .with("DOCKER_HOST", "tcp://127.0.0.1:9")
        .with("BERTH_DOCKER_PING_TIMEOUT", "50ms")
}

/// Serves `app` in the background and returns its URL.
pub fn serve(app: Application) -> String {
    let url = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until(std::future::pending()));
    url
}

fn data_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// `env` with `extra` added; a `BERTH_LOCAL_ROOTS` given there keeps the data directory's own
/// `volumes` allowed too, where the services put the default orchestrator.
fn with_extra(mut env: Env, data: &tempfile::TempDir, extra: &[(&str, &str)]) -> Env {
    for (k, v) in extra {
        if *k == "BERTH_LOCAL_ROOTS" {
            let own = data.path().join("volumes");
            env = env.with(k, format!("{v},{}", own.display()));
        } else {
            env = env.with(k, *v);
        }
    }
    env
}

/// The orchestrator registry.
pub async fn registry(extra: &[(&str, &str)]) -> Running {
    let data = data_dir();
    let env = with_extra(base_env(&data), &data, extra);
    let config = orchestrator_registry::Config::from_env(&env).expect("registry config");
    let app = orchestrator_registry::build(config)
        .await
        .expect("the registry builds");
    Running {
        url: serve(app),
        data,
    }
}

/// Storage ops, calling the registry at `registry_url`.
pub async fn storage_ops(registry_url: &str, extra: &[(&str, &str)]) -> Running {
    let data = data_dir();
    let env = with_extra(
        base_env(&data).with("BERTH_REGISTRY_URL", registry_url),
        &data,
        extra,
    );
    let config = storage_ops::Config::from_env(&env).expect("storage-ops config");
    let app = storage_ops::build(config)
        .await
        .expect("storage-ops builds");
    Running {
        url: serve(app),
        data,
    }
}

/// The ECS emulator with the test key, instant lifecycle; returns it with its URL.
pub async fn emulator() -> (ecs_emulator::Emulator, String) {
    let emulator =
        ecs_emulator::Emulator::new(ecs_emulator::Config::for_tests(ECS_KEY_ID, ECS_KEY_SECRET));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = serve(Application::new(emulator.router(), listener));
    (emulator, url)
}

/// The machine driver, calling ECS at `ecs_url`.
pub async fn machine_driver(ecs_url: &str) -> Running {
    let data = data_dir();
    let env = base_env(&data).with("BERTH_ALICLOUD_ENDPOINT", ecs_url);
    let config = machine_driver::Config::from_env(&env).expect("machine-driver config");
    let app = machine_driver::build(config)
        .await
        .expect("the machine driver builds");
    Running {
        url: serve(app),
        data,
    }
}

/// The machine controller, calling the machine driver at `driver_url`.
pub async fn machine_controller(driver_url: &str) -> Running {
    let data = data_dir();
    let env = base_env(&data).with("BERTH_MACHINE_DRIVER_URL", driver_url);
    let config = machine_controller::Config::from_env(&env).expect("machine-controller config");
    let app = machine_controller::build(config)
        .await
        .expect("the machine controller builds");
    Running {
        url: serve(app),
        data,
    }
}

/// The machine controller's API, calling the machine driver at `driver_url`, without its
/// reconcile loop; with the reconcilers' shared state (over the same store and driver client) and
/// `settings`, for a test that runs each reconcile step itself, in an order it chooses.
pub async fn machine_controller_stepped(
    driver_url: &str,
    settings: machine_controller::reconcile::Settings,
) -> (Running, Arc<machine_controller::reconcile::Controller>) {
    let data = data_dir();
    let env = base_env(&data).with("BERTH_MACHINE_DRIVER_URL", driver_url);
    let config = machine_controller::Config::from_env(&env).expect("machine-controller config");
    let writer = machine_controller::writer(&config)
        .await
        .expect("the machine controller's store, keys and driver client");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let router = machine_controller::router(&config, writer.clone());
    let url = serve(Application::new(router, listener));
    let controller = machine_controller::reconcile::Controller::new(writer, settings);
    (Running { url, data }, controller)
}

/// The gateway in front of the four services at the given URLs, with `berth_tests`' tokens.
pub async fn gateway(
    machine_driver: &str,
    registry: &str,
    storage_ops: &str,
    machine_controller: &str,
) -> Running {
    let data = data_dir();
    let tokens: Vec<String> = berth_tests::TOKENS
        .iter()
        .filter(|(_, scopes)| !scopes.is_empty())
        .map(|(token, scopes)| {
            gateway::auth::tokens_file_line(token.trim_start_matches("tok-"), token, scopes)
        })
        .collect();
    let tokens_file = data.path().join("tokens");
    std::fs::write(&tokens_file, tokens.join("\n")).expect("tokens file");
    let env = base_env(&data)
        .with("BERTH_TOKENS_FILE", tokens_file.display().to_string())
        .with("BERTH_MACHINE_DRIVER_URL", machine_driver)
        .with("BERTH_REGISTRY_URL", registry)
        .with("BERTH_STORAGE_OPS_URL", storage_ops)
        .with("BERTH_MACHINE_CONTROLLER_URL", machine_controller);
    let config = gateway::Config::from_env(&env).expect("gateway config");
    let app = gateway::build(config).await.expect("the gateway builds");
    Running {
        url: serve(app),
        data,
    }
}
