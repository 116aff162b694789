//! Names of the variables every service reads.
//!
//! A file of its own because it is the list other crates import (`service_kit::config::vars::…`)
//! and where one looks a name up: it is found here, not among the code that parses and checks
//! values.

/// Where the service listens (`host:port`).
pub const LISTEN: &str = "BERTH_LISTEN";
/// Per-request timeout (`30s`, `500ms`).
pub const REQUEST_TIMEOUT: &str = "BERTH_REQUEST_TIMEOUT";
/// Largest request body accepted, in bytes or as a quantity (`1Mi`).
pub const BODY_LIMIT: &str = "BERTH_BODY_LIMIT";
/// The credential the gateway presents to services; when set, services refuse calls without it.
pub const INTERNAL_TOKEN: &str = "BERTH_INTERNAL_TOKEN";
/// A file holding the internal credential, in place of [`INTERNAL_TOKEN`]: images have no shell to
/// read a secret into a variable, and a compose stack makes the credential on its first start.
pub const INTERNAL_TOKEN_FILE: &str = "BERTH_INTERNAL_TOKEN_FILE";
/// `json` for JSON logs, anything else for human ones.
pub const LOG_FORMAT: &str = "BERTH_LOG_FORMAT";
/// Log filter (`info`, `berth=debug,tower_http=info`).
pub const LOG: &str = "BERTH_LOG";
/// Where services keep their state.
pub const DATA_DIR: &str = "BERTH_DATA_DIR";
/// How long a connection may take to send a request head, idle time between requests included
/// (`30s`); then it is closed.
pub const IDLE_TIMEOUT: &str = "BERTH_IDLE_TIMEOUT";
/// Callers' connections a listener holds at once (default from the file limit); over it the
/// oldest idle one is closed to make room ([`crate::connections`]).
pub const MAX_CONNECTIONS: &str = "BERTH_MAX_CONNECTIONS";
/// OTLP endpoint; when set, spans are exported there.
pub const OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// Directories `local` orchestrators may use, comma-separated (default `<data dir>/volumes`,
/// and `BERTH_LOCAL_BASE_PATH` when set).
pub const LOCAL_ROOTS: &str = domain::orchestrator::LOCAL_ROOTS_SETTING;
/// Docker Engine addresses `docker` orchestrators may use, comma-separated (default the local
/// socket, and `DOCKER_HOST` when set).
pub const DOCKER_ENDPOINTS: &str = domain::orchestrator::DOCKER_ENDPOINTS_SETTING;
/// Kubernetes API servers `kubernetes` orchestrators may use, comma-separated (default none;
/// in-cluster is allowed in a pod whatever this says).
pub const KUBERNETES_SERVERS: &str = domain::orchestrator::KUBERNETES_SERVERS_SETTING;
/// Set by Kubernetes in every pod: the in-cluster API server's host.
pub const KUBERNETES_SERVICE_HOST: &str = "KUBERNETES_SERVICE_HOST";
/// The `basePath` of the `local` orchestrator the registry registers on a first start.
pub const LOCAL_BASE_PATH: &str = "BERTH_LOCAL_BASE_PATH";
/// The Docker Engine this process is pointed at (Docker's own variable).
pub const DOCKER_HOST: &str = "DOCKER_HOST";

/// What every service reads through the kit ([`super::HttpConfig`], [`super::listen_addr`],
/// [`super::data_dir`], the internal credential and telemetry).
pub const EVERY_SERVICE: &[&str] = &[
    LISTEN,
    REQUEST_TIMEOUT,
    BODY_LIMIT,
    INTERNAL_TOKEN,
    INTERNAL_TOKEN_FILE,
    LOG_FORMAT,
    LOG,
    DATA_DIR,
    IDLE_TIMEOUT,
    MAX_CONNECTIONS,
];
/// What [`crate::telemetry::init`] reads: all a program that is not a service (the emulator)
/// takes from the kit.
pub const TELEMETRY: &[&str] = &[LOG_FORMAT, LOG];
/// What [`super::orchestrator_limits`] reads, for the services that check orchestrators.
pub const ORCHESTRATOR_LIMITS: &[&str] = &[
    LOCAL_ROOTS,
    DOCKER_ENDPOINTS,
    LOCAL_BASE_PATH,
    DATA_DIR,
    DOCKER_HOST,
    KUBERNETES_SERVERS,
    KUBERNETES_SERVICE_HOST,
];
