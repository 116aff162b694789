//! The settings every service shares, read the same way everywhere: HTTP ([`HttpConfig`]) and the
//! internal credential's file, the data directory, the listen address, a SQLite service's
//! database ([`SqliteServiceConfig`]), where orchestrators may point ([`orchestrator_limits`]) and
//! an unusable `DOCKER_HOST`.
//!
//! Apart from the names and the value parsing because these are what a setting means: a newcomer
//! adding a shared setting reads this file, not the machinery under it.

use std::time::Duration;

use super::{ConfigError, Env, SecretString, vars};

/// The HTTP settings every service has.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// How long a request may take before it is answered 504.
    pub request_timeout: Duration,
    /// The largest request body, in bytes; larger ones are answered 413.
    pub body_limit: usize,
    /// When set, every route but health, metrics and `/openapi.json` requires this bearer credential.
    pub internal_token: Option<SecretString>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            request_timeout: Duration::from_secs(30),
            body_limit: 1 << 20,
            internal_token: None,
        }
    }
}

impl HttpConfig {
    /// Reads `BERTH_REQUEST_TIMEOUT`, `BERTH_BODY_LIMIT` and `BERTH_INTERNAL_TOKEN`.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let d = HttpConfig::default();
        Ok(HttpConfig {
            request_timeout: env.duration_or(vars::REQUEST_TIMEOUT, d.request_timeout)?,
            body_limit: usize::try_from(env.bytes_or(vars::BODY_LIMIT, d.body_limit as u64)?)
                .unwrap_or(usize::MAX),
            internal_token: env.secret(vars::INTERNAL_TOKEN),
        })
    }
}

/// Resolves `BERTH_INTERNAL_TOKEN_FILE` into `BERTH_INTERNAL_TOKEN`: the file's content (trimmed) is
/// the credential. When the file does not exist it is created holding a fresh random credential, so
/// the containers of a compose stack, sharing one volume, agree on one made at the first start and
/// never committed or baked into an image; whichever service starts first makes it, and a race
/// between two is settled by the file system (the loser reads the winner's). Setting both variables
/// is refused: which one wins would be a guess.
pub fn resolve_internal_token_file(env: Env) -> Result<Env, ConfigError> {
    let Some(path) = env
        .get(vars::INTERNAL_TOKEN_FILE)
        .map(std::path::PathBuf::from)
    else {
        return Ok(env);
    };
    let bad = |problem: String| ConfigError {
        var: vars::INTERNAL_TOKEN_FILE.to_string(),
        value: path.display().to_string(),
        problem,
    };
    if env.get(vars::INTERNAL_TOKEN).is_some() {
        return Err(bad(format!(
            "is set together with {}: set only one of them",
            vars::INTERNAL_TOKEN
        )));
    }
    let token = read_or_create_secret_file(&path).map_err(|e| bad(e.to_string()))?;
    Ok(env.with(vars::INTERNAL_TOKEN, token))
}

/// Why a secret file could not be used. The secret itself is never part of the message.
#[derive(Debug, thiserror::Error)]
enum SecretFileError {
    #[error("cannot be read or created: {0}")]
    Io(#[from] std::io::Error),
    #[error("is empty: it must hold the credential")]
    Empty,
}

fn read_or_create_secret_file(path: &std::path::Path) -> Result<String, SecretFileError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::read_to_string(path) {
        Ok(text) => {
            return match text.trim() {
                "" => Err(SecretFileError::Empty),
                token => Ok(token.to_string()),
            };
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    // Written whole under a private name, then linked into place: a reader never sees a half-written
    // file, and `hard_link` fails when another process linked its own first.
    let token = random_credential();
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let staging = dir.join(format!(
        ".{}.{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        uuid::Uuid::new_v4().simple()
    ));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&staging)?;
        file.write_all(format!("{token}\n").as_bytes())?;
        file.sync_all()
    })();
    let linked = written.and_then(|()| std::fs::hard_link(&staging, path));
    let _ = std::fs::remove_file(&staging);
    match linked {
        Ok(()) => Ok(token),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_or_create_secret_file(path),
        Err(e) => Err(e.into()),
    }
}

/// 244 random bits from the OS generator (two version-4 UUIDs), hex-encoded.
fn random_credential() -> String {
    let mut bytes = Vec::with_capacity(32);
    bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `DOCKER_HOST` is set to an address Berth cannot use (an `ssh://` Engine, say, which Berth does
/// not speak); the text says why, in words that name the variable. One type for every service that
/// reads Docker's variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UnusableDockerHost(String);

impl UnusableDockerHost {
    /// Why `DOCKER_HOST` cannot be used.
    pub fn new(why: impl Into<String>) -> Self {
        UnusableDockerHost(why.into())
    }
}

/// Where state lives when `BERTH_DATA_DIR` is unset (in `domain`, so the CLI's flags share it
/// without linking the kit).
pub use domain::DEFAULT_DATA_DIR;

/// The data directory: `BERTH_DATA_DIR`, or `./berth-data`.
pub fn data_dir(env: &Env) -> std::path::PathBuf {
    std::path::PathBuf::from(env.get(vars::DATA_DIR).unwrap_or(DEFAULT_DATA_DIR))
}

/// `path` made absolute against the working directory, with `.` and `..` resolved lexically (the
/// operator meant the directory the text names), then held to the rules of a `basePath`
/// ([`domain::orchestrator::normalize_base_path`]): `field` names it in the refusal.
pub fn absolute_base_path(field: &str, path: &std::path::Path) -> Result<String, BasePathError> {
    use std::path::{Component, PathBuf};
    let absolute = std::path::absolute(path).map_err(BasePathError::NotAbsolute)?;
    let mut out = PathBuf::from("/");
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    let text = out.to_str().ok_or(BasePathError::NotUtf8)?;
    domain::orchestrator::normalize_base_path(field, text)
        .map_err(|s| BasePathError::Rule(s.message))
}

/// Why a directory cannot be a `basePath` ([`absolute_base_path`]); the text completes a sentence
/// that starts with the variable or field.
#[derive(Debug, thiserror::Error)]
pub enum BasePathError {
    /// The working directory could not be read to make it absolute.
    #[error("cannot be made absolute: {0}")]
    NotAbsolute(#[source] std::io::Error),
    /// The path is not UTF-8, so it cannot be stored or compared as text.
    #[error("is not valid UTF-8")]
    NotUtf8,
    /// It breaks a rule of a `basePath` (the domain's words, naming the field).
    #[error("{0}")]
    Rule(String),
}

/// Where registered orchestrators may point (`BERTH_LOCAL_ROOTS`, `BERTH_DOCKER_ENDPOINTS`,
/// `BERTH_KUBERNETES_SERVERS`, and in-cluster Kubernetes in a pod). The
/// registry checks a registration against these and storage-ops checks them again before it acts,
/// so both read them with this one function. Unset, the roots are `<data dir>/volumes` (and
/// `BERTH_LOCAL_BASE_PATH` when set: the operator named it) and the endpoints the local socket (and
/// `DOCKER_HOST` when set and usable).
pub fn orchestrator_limits(
    env: &Env,
) -> Result<domain::orchestrator::OrchestratorLimits, ConfigError> {
    let bad = |var: &str, value: &str, problem: String| ConfigError {
        var: var.to_string(),
        value: value.to_string(),
        problem,
    };
    let local_roots = match env.get(vars::LOCAL_ROOTS) {
        Some(list) => {
            let roots = list
                .split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(|r| absolute_base_path(vars::LOCAL_ROOTS, std::path::Path::new(r)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|problem| bad(vars::LOCAL_ROOTS, list, problem.to_string()))?;
            if roots.is_empty() {
                return Err(bad(
                    vars::LOCAL_ROOTS,
                    list,
                    "names no directory: expected absolute paths separated by commas".into(),
                ));
            }
            roots
        }
        None => {
            let mut roots = Vec::new();
            let default = data_dir(env).join("volumes");
            roots.push(absolute_base_path(vars::DATA_DIR, &default).map_err(|p| {
                bad(
                    vars::DATA_DIR,
                    &default.display().to_string(),
                    p.to_string(),
                )
            })?);
            if let Some(base) = env.get(vars::LOCAL_BASE_PATH) {
                roots.push(
                    absolute_base_path(vars::LOCAL_BASE_PATH, std::path::Path::new(base))
                        .map_err(|p| bad(vars::LOCAL_BASE_PATH, base, p.to_string()))?,
                );
            }
            roots
        }
    };
    let docker_endpoints = match env.get(vars::DOCKER_ENDPOINTS) {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| domain::orchestrator::validate_docker_host(vars::DOCKER_ENDPOINTS, e))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|s| bad(vars::DOCKER_ENDPOINTS, list, s.message))?,
        None => {
            let mut endpoints = vec![domain::orchestrator::DEFAULT_DOCKER_HOST.to_string()];
            // An unusable DOCKER_HOST (`ssh://`) is detection's to report, not an endpoint.
            if let Some(host) = env.get(vars::DOCKER_HOST)
                && let Ok(host) =
                    domain::orchestrator::validate_docker_host(vars::DOCKER_HOST, host)
                && !endpoints.contains(&host)
            {
                endpoints.push(host);
            }
            endpoints
        }
    };
    let kubernetes_servers = match env.get(vars::KUBERNETES_SERVERS) {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| domain::orchestrator::validate_kubernetes_server(vars::KUBERNETES_SERVERS, s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|s| bad(vars::KUBERNETES_SERVERS, list, s.message))?,
        None => Vec::new(),
    };
    Ok(domain::orchestrator::OrchestratorLimits {
        local_roots,
        docker_endpoints,
        kubernetes_servers,
        in_cluster: env
            .get(vars::KUBERNETES_SERVICE_HOST)
            .is_some_and(|h| !h.trim().is_empty()),
    })
}

/// The settings of a service that keeps its state in one SQLite file (the registry, storage-ops):
/// read here once, so the two services name, default and document them alike.
#[derive(Debug, Clone)]
pub struct SqliteServiceConfig {
    /// Where to listen (`BERTH_LISTEN`, default `127.0.0.1:<the service's port>`).
    pub listen: std::net::SocketAddr,
    /// Timeouts, body limit, internal credential.
    pub http: HttpConfig,
    /// Where state lives (`BERTH_DATA_DIR`, default `./berth-data`).
    pub data_dir: std::path::PathBuf,
    /// The SQLite file (the service's own variable, default `<data dir>/<the service's file>`).
    pub db_path: std::path::PathBuf,
}

impl SqliteServiceConfig {
    /// Reads the settings: `db_var` names the database file, `db_file` its name in the data
    /// directory when `db_var` is unset.
    pub fn from_env(
        env: &Env,
        default_port: u16,
        db_var: &str,
        db_file: &str,
    ) -> Result<Self, ConfigError> {
        let data_dir = data_dir(env);
        let db_path = env
            .get(db_var)
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| data_dir.join(db_file));
        Ok(SqliteServiceConfig {
            listen: listen_addr(env, default_port)?,
            http: HttpConfig::from_env(env)?,
            data_dir,
            db_path,
        })
    }
}

/// The listen address from `BERTH_LISTEN`, or `127.0.0.1:<default_port>`.
pub fn listen_addr(env: &Env, default_port: u16) -> Result<std::net::SocketAddr, ConfigError> {
    env.parse_or(
        vars::LISTEN,
        std::net::SocketAddr::from(([127, 0, 0, 1], default_port)),
    )
}
