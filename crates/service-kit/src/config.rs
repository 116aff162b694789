//! Typed configuration from `BERTH_*` variables.
//!
//! Settings are read once at start from an [`Env`] map: [`Env::from_process`] in a binary (given the
//! variables beyond `BERTH_*` and `OTEL_*` the service reads), a literal
//! map in tests, so no test ever mutates the process environment. A value that does not parse stops
//! the service with a message naming the variable and the expected form.
//!
//! # One convention for names and values
//!
//! **A variable is `BERTH_` + the setting's name, prefixed only by the other thing the setting is
//! about: an outside system (`ALICLOUD_`, `DOCKER_`, `LOCAL_` for local orchestrators,
//! `ECS_EMULATOR_` for the simulated cloud) or the Berth service whose address, database or calls it
//! sets (`REGISTRY_`, `STORAGE_OPS_`, `MACHINE_DRIVER_`); no name carries a unit.** So the gateway's
//! own settings are `BERTH_WORKERS`, `BERTH_RATE_LIMIT_RPS`, `BERTH_TOKENS_FILE`, and one kind of
//! thing has one name in every service: the Docker Engines Berth may use are `BERTH_DOCKER_ENDPOINTS`
//! for the machine driver as for the registry and storage-ops. (Prefixing every service's own
//! settings with the service would rename a dozen; a name without a prefix cannot collide either,
//! since no two services have a setting of the same name meaning different things.)
//!
//! Values: a duration takes a unit (`250ms`, `30s`, `5m`, `1h`; a bare `0` aside), so a number
//! copied from an old `_MS` variable is refused rather than read as hours of seconds; a `BERTH_*`
//! variable set to the empty string is refused (unset it to get the default), so
//! `BERTH_INTERNAL_TOKEN=` cannot silently leave the credential off.
//!
//! # Which names a binary accepts
//!
//! Each component declares the variables it reads next to where it reads them (its `VARS`) and the
//! names it renamed ([`Renamed`], its `RENAMED`); the kit lists only its own ([`vars::EVERY_SERVICE`],
//! [`vars::TELEMETRY`], [`vars::ORCHESTRATOR_LIMITS`]). A binary hands those lists to [`check_names`] before
//! anything reads a setting, and it refuses, naming the nearest known name, any `BERTH_*` variable
//! that is neither one of them nor one of Berth's tools' ([`is_tool_variable`]: the CLI's, the tests'
//! and the scripts', which CI exports and every child process inherits). A renamed variable is read
//! under its old name for one release, with a warning logged once; both names at once are refused.
//! `OTEL_*` and other programs' variables are not Berth's to police.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Names of the variables every service reads.
pub mod vars {
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
}

/// A variable renamed in this release: the new name is read; the old one still works until the next
/// release, with a warning logged once, and setting both is refused (which one wins would be a
/// guess). Each component lists its own in a `RENAMED` beside its `VARS`; [`Env::migrate`] applies
/// them, and is the one way Berth retires a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renamed {
    /// The name being retired.
    pub old: &'static str,
    /// The name to use.
    pub new: &'static str,
    /// How the old name's value is written.
    pub old_form: OldForm,
}

/// How a retired name's value is written, so it can be carried over to the new name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OldForm {
    /// As the new name takes it.
    Same,
    /// A bare number of milliseconds, where the new name takes a duration (`1500` → `1500ms`).
    Milliseconds,
}

impl Renamed {
    /// A rename whose value is written the same under both names.
    pub const fn same(old: &'static str, new: &'static str) -> Self {
        Renamed {
            old,
            new,
            old_form: OldForm::Same,
        }
    }

    /// A `_MS` name retired for a duration-valued one.
    pub const fn milliseconds(old: &'static str, new: &'static str) -> Self {
        Renamed {
            old,
            new,
            old_form: OldForm::Milliseconds,
        }
    }

    /// The value to use given what the new and the old name (a variable, or a command-line flag:
    /// the emulator's `--pending-ms`) were set to: the new one's, or the old one's in the new form
    /// (the warning logged once per process). Both set, or an old value not in its form, is refused.
    pub fn resolve(
        &self,
        new: Option<&str>,
        old: Option<&str>,
    ) -> Result<Option<String>, ConfigError> {
        match (new, old) {
            (Some(_), Some(v)) => Err(ConfigError {
                var: self.old.to_string(),
                value: v.to_string(),
                problem: format!(
                    "is set together with {}: set only {} ({} is deprecated)",
                    self.new, self.new, self.old
                ),
            }),
            (Some(v), None) => Ok(Some(v.to_string())),
            (None, None) => Ok(None),
            (None, Some(v)) => {
                let carried = match self.old_form {
                    OldForm::Same => v.to_string(),
                    OldForm::Milliseconds => match v.trim().parse::<u64>() {
                        Ok(ms) => format!("{ms}ms"),
                        Err(_) => {
                            return Err(ConfigError {
                                var: self.old.to_string(),
                                value: v.to_string(),
                                problem: format!(
                                    "is not a number of milliseconds (and {} is deprecated: set {} to a duration, like {}=1500ms)",
                                    self.old, self.new, self.new
                                ),
                            });
                        }
                    },
                };
                self.warn_once(&carried);
                Ok(Some(carried))
            }
        }
    }

    /// Says once per process that the old name is on its way out: `berth up` and tests read the
    /// configuration more than once, and the operator needs to hear it once.
    fn warn_once(&self, carried: &str) {
        static WARNED: std::sync::Mutex<std::collections::BTreeSet<&'static str>> =
            std::sync::Mutex::new(std::collections::BTreeSet::new());
        let first = WARNED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(self.old);
        if first {
            tracing::warn!(
                "{} is deprecated and will be removed in the next release: set {} instead (read as {}={carried})",
                self.old,
                self.new,
                self.new
            );
        }
    }
}

/// Whether `name` belongs to one of Berth's tools rather than to a component: the CLI's `BERTH_URL`
/// and `BERTH_TOKEN`, and the variables of the tests, CI and scripts (`BERTH_REQUIRE_*`,
/// `BERTH_TEST_*`, `BERTH_BENCH_*`, `BERTH_PY_*`, `BERTH_E2E_*`, `BERTH_IMAGE_*`, and the few named
/// in [`TOOL_VARIABLES`]). CI exports them and every process it starts inherits them, services
/// included, so every binary lets them through.
pub fn is_tool_variable(name: &str) -> bool {
    TOOL_PREFIXES.iter().any(|p| name.starts_with(p)) || TOOL_VARIABLES.contains(&name)
}

/// The prefixes of Berth's tools' variable families ([`is_tool_variable`]).
pub const TOOL_PREFIXES: &[&str] = &[
    "BERTH_REQUIRE_",
    "BERTH_TEST_",
    "BERTH_BENCH_",
    "BERTH_PY_",
    "BERTH_E2E_",
    "BERTH_IMAGE_",
];

/// Berth's tools' variables outside those families ([`is_tool_variable`]): the CLI's, the OpenAPI
/// and pact tests' "write the new file" switches, the browser test's, the image build's, compose's
/// published address, the Python harness'.
pub const TOOL_VARIABLES: &[&str] = &[
    "BERTH_URL",
    "BERTH_TOKEN",
    "BERTH_BLESS_OPENAPI",
    "BERTH_UPDATE_PACTS",
    "BERTH_CHROMIUM",
    "BERTH_STATIC_TARGET_DIR",
    "BERTH_GATEWAY_PUBLISH",
    "BERTH_NARROW_TOKEN",
    "BERTH_OPENAPI_DOCUMENT",
    "BERTH_EMULATOR_KEY_ID",
    "BERTH_EMULATOR_KEY_SECRET",
];

/// The start-up check every binary runs before it reads a setting. A `BERTH_*` variable that is not
/// in `reads` (what the binary's components read), not a name `renamed` retires and not a tool's
/// ([`is_tool_variable`]) is refused when it is a near miss of a known name (named in the error), so
/// `BERTH_INTERNAL_TOKN` stops the service instead of silently leaving the credential off; any
/// other unknown `BERTH_*` name (a shell's own `BERTH_BIN_DIR`, say) is only warned about: the
/// warnings come back, for the binary to print. A `BERTH_*` variable set to the empty string is
/// refused. The binary then applies `renamed` with [`Env::migrate`] (once logging is up, so the
/// deprecation warnings are seen).
pub fn check_names(
    env: &Env,
    reads: &[&str],
    renamed: &[Renamed],
) -> Result<Vec<String>, ConfigError> {
    let known = |name: &str| {
        reads.contains(&name) || renamed.iter().any(|r| r.old == name || r.new == name)
    };
    let mut warnings = Vec::new();
    for (name, value) in &env.0 {
        if !name.starts_with("BERTH_") || is_tool_variable(name) {
            continue;
        }
        if !known(name) {
            let candidates = reads
                .iter()
                .copied()
                .chain(renamed.iter().map(|r| r.new))
                .filter(|c| c.starts_with("BERTH_"));
            match domain::names::near_miss(name, candidates) {
                Some(near) => {
                    return Err(ConfigError {
                        var: name.clone(),
                        // Never the value: a misspelled credential is still a credential.
                        value: String::new(),
                        problem: format!(
                            "is not a variable this program reads, and its setting would silently keep its default: did you mean {near}?"
                        ),
                    });
                }
                None => warnings.push(format!(
                    "{name} is not a variable this program reads (ignored; docs/configuration.md lists every variable)"
                )),
            }
            continue;
        }
        if value.is_empty() {
            return Err(ConfigError {
                var: name.clone(),
                value: String::new(),
                problem: "is set to the empty string: give it a value, or unset it for the default"
                    .to_string(),
            });
        }
    }
    Ok(warnings)
}

/// Declares the variables a crate reads besides the kit's (`VARS`) and the names it retired
/// (`RENAMED`), and with them the test that keeps the list whole: every `"BERTH_…"` literal in the
/// crate's sources must be declared, the kit's, retired or a tool's ([`undeclared_names`]). One
/// declaration makes both, so no crate carries its own copy of the test.
///
/// ```ignore
/// service_kit::declare_variables! {
///     /// Every variable this service reads besides the kit's.
///     pub const VARS = [env_vars::DB, env_vars::TIMEOUT];
///     /// Its names retired in this release: none.
///     pub const RENAMED = [];
/// }
/// ```
#[macro_export]
macro_rules! declare_variables {
    (
        $(#[$vars_meta:meta])*
        $vars_vis:vis const VARS = [$($var:expr),* $(,)?];
        $(#[$renamed_meta:meta])*
        $renamed_vis:vis const RENAMED = [$($renamed:expr),* $(,)?];
    ) => {
        $(#[$vars_meta])*
        $vars_vis const VARS: &[&str] = &[$($var),*];
        $(#[$renamed_meta])*
        $renamed_vis const RENAMED: &[$crate::config::Renamed] = &[$($renamed),*];

        #[cfg(test)]
        #[test]
        fn every_variable_this_crate_reads_is_declared() {
            let src = ::std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
            let undeclared = $crate::config::undeclared_names(src, VARS, RENAMED);
            assert!(undeclared.is_empty(), "add these to VARS: {undeclared:?}");
        }
    };
}

/// The `"BERTH_…"` literals in the Rust sources under `dir` that are neither in `reads`, nor the
/// kit's ([`vars::EVERY_SERVICE`]), nor names of `renamed`, nor a tool's: what a crate's test
/// asserts is empty, so a variable cannot be read without being declared (and so accepted at
/// start, and listed).
pub fn undeclared_names(dir: &std::path::Path, reads: &[&str], renamed: &[Renamed]) -> Vec<String> {
    names_in_sources(dir)
        .into_iter()
        .filter(|n| {
            !reads.contains(&n.as_str())
                && !vars::EVERY_SERVICE.contains(&n.as_str())
                && !renamed.iter().any(|r| r.old == n || r.new == n)
                && !is_tool_variable(n)
        })
        .collect()
}

/// The `"BERTH_…"` string literals in the Rust sources under `dir`: the names a crate reads, for a
/// test that checks each one is declared in the crate's `VARS` (or is a `RENAMED` name).
pub fn names_in_sources(dir: &std::path::Path) -> std::collections::BTreeSet<String> {
    fn walk(dir: &std::path::Path, out: &mut std::collections::BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs")
                && let Ok(text) = std::fs::read_to_string(&path)
            {
                for piece in text.split("\"BERTH_").skip(1) {
                    let end = piece
                        .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                        .unwrap_or(piece.len());
                    if piece[end..].starts_with('"') && end > 0 {
                        out.insert(format!("BERTH_{}", &piece[..end]));
                    }
                }
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    walk(dir, &mut out);
    out
}

/// A configuration error: which variable, what was wrong.
/// Shown as `configuration: VAR="value" problem`, or `configuration: VAR problem` when there is no
/// value worth showing (an unknown name, an empty value); the problem never repeats the value.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {var}{} {problem}", shown(value))]
pub struct ConfigError {
    /// The variable.
    pub var: String,
    /// What it was set to (never printed for secrets: those are not parsed here).
    pub value: String,
    /// The rule it broke.
    pub problem: String,
}

fn shown(value: &str) -> String {
    if value.is_empty() {
        String::new()
    } else {
        format!("={value:?}")
    }
}

/// The variables a service was started with.
#[derive(Debug, Clone, Default)]
pub struct Env(BTreeMap<String, String>);

impl Env {
    /// The process environment: its `BERTH_*` and `OTEL_*` variables, and those named in `others`,
    /// the variables of other programs a service reads (the registry's detection inputs, say:
    /// `KUBERNETES_SERVICE_HOST`). Each service declares its own; the kit knows none of them.
    pub fn from_process(others: &[&str]) -> Self {
        Env(std::env::vars()
            .filter(|(k, _)| {
                k.starts_with("BERTH_") || k.starts_with("OTEL_") || others.contains(&k.as_str())
            })
            .collect())
    }

    /// A map of variables, for tests and for `berth up`.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Env(pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect())
    }

    /// Applies `renamed` ([`Renamed`]): a retired name's value moves to the new name (warning once),
    /// both set is refused, and the old name is dropped, so what reads the settings sees only new
    /// names and applying it again changes nothing.
    pub fn migrate(mut self, renamed: &[Renamed]) -> Result<Env, ConfigError> {
        for r in renamed {
            let new = self.get(r.new).map(str::to_string);
            let old = self.get(r.old).map(str::to_string);
            if let Some(value) = r.resolve(new.as_deref(), old.as_deref())? {
                self.0.insert(r.new.to_string(), value);
            }
            self.0.remove(r.old);
        }
        Ok(self)
    }

    /// The names set, for checks over the whole environment.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Sets a variable (builder style).
    pub fn with(mut self, key: &str, value: impl Into<String>) -> Self {
        self.0.insert(key.to_string(), value.into());
        self
    }

    /// The raw value, if set and not empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The value parsed as `T`, or `default` when unset.
    pub fn parse_or<T: FromStr>(&self, key: &str, default: T) -> Result<T, ConfigError>
    where
        T::Err: fmt::Display,
    {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|e: T::Err| ConfigError {
                var: key.to_string(),
                value: v.to_string(),
                problem: e.to_string(),
            }),
        }
    }

    /// A duration (`250ms`, `30s`, `5m`, `1h`; a bare number only as `0`), or `default` when unset.
    pub fn duration_or(&self, key: &str, default: Duration) -> Result<Duration, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => parse_duration(v).ok_or_else(|| ConfigError {
                var: key.to_string(),
                value: v.to_string(),
                problem: format!(
                    "is not a duration: expected {}",
                    domain::duration::DURATION_FORM
                ),
            }),
        }
    }

    /// A byte size (`1048576`, `1Mi`, `10M`), or `default` when unset.
    pub fn bytes_or(&self, key: &str, default: u64) -> Result<u64, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse::<domain::Quantity>()
                .map(|q| q.bytes())
                .map_err(|e| ConfigError {
                    var: key.to_string(),
                    value: v.to_string(),
                    problem: e.message,
                }),
        }
    }

    /// A secret value, wrapped so it cannot be printed.
    pub fn secret(&self, key: &str) -> Option<SecretString> {
        self.get(key).map(SecretString::new)
    }

    /// Whether a variable is set at all (even empty), for detection rules.
    pub fn is_set(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }
}

/// Parses `250ms`, `30s`, `5m`, `1h` or a bare `0` (domain's one duration form).
pub use domain::duration::{DURATION_FORM, parse_duration};

pub use domain::SecretString;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_internal_token_file_is_read_or_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("internal-token");
        let env = || Env::default().with(vars::INTERNAL_TOKEN_FILE, path.display().to_string());
        // Unset: nothing changes.
        let plain = resolve_internal_token_file(Env::default()).unwrap();
        assert!(plain.get(vars::INTERNAL_TOKEN).is_none());
        // Missing: made, private, and every later reader gets the same credential.
        let first = resolve_internal_token_file(env()).unwrap();
        let made = first.get(vars::INTERNAL_TOKEN).unwrap().to_string();
        assert_eq!(made.len(), 64, "two UUIDs in hex");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = resolve_internal_token_file(env()).unwrap();
        assert_eq!(again.get(vars::INTERNAL_TOKEN), Some(made.as_str()));
        assert_eq!(
            HttpConfig::from_env(&again)
                .unwrap()
                .internal_token
                .unwrap()
                .expose(),
            made
        );
        // No staging file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // Services starting together agree on one credential.
        let other = dir.path().join("raced");
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let other = other.clone();
                std::thread::spawn(move || {
                    let env =
                        Env::default().with(vars::INTERNAL_TOKEN_FILE, other.display().to_string());
                    resolve_internal_token_file(env)
                        .unwrap()
                        .get(vars::INTERNAL_TOKEN)
                        .unwrap()
                        .to_string()
                })
            })
            .collect();
        let tokens: std::collections::BTreeSet<String> =
            handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(tokens.len(), 1, "{tokens:?}");
    }

    #[test]
    fn an_internal_token_file_must_be_the_only_source_and_not_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "  \n").unwrap();
        let env = Env::default().with(vars::INTERNAL_TOKEN_FILE, path.display().to_string());
        let e = resolve_internal_token_file(env.clone()).unwrap_err();
        assert_eq!(e.var, vars::INTERNAL_TOKEN_FILE);
        assert!(e.problem.contains("empty"), "{e}");
        let e = resolve_internal_token_file(env.with(vars::INTERNAL_TOKEN, "x")).unwrap_err();
        assert!(e.problem.contains(vars::INTERNAL_TOKEN), "{e}");
        // A given file's content is trimmed of the newline editors add.
        std::fs::write(&path, "s3cret\n").unwrap();
        let env = Env::default().with(vars::INTERNAL_TOKEN_FILE, path.display().to_string());
        let got = resolve_internal_token_file(env).unwrap();
        assert_eq!(got.get(vars::INTERNAL_TOKEN), Some("s3cret"));
    }

    const READS: &[&str] = &["BERTH_INTERNAL_TOKEN", "BERTH_LISTEN", "DOCKER_HOST"];
    const RENAMED: &[Renamed] = &[
        Renamed::milliseconds("BERTH_THING_TIMEOUT_MS", "BERTH_THING_TIMEOUT"),
        Renamed::same("BERTH_OLD_NAME", "BERTH_NEW_NAME"),
    ];

    #[test]
    fn an_unknown_name_is_refused_with_the_nearest_known_one_and_never_its_value() {
        let env = Env::from_pairs([("BERTH_INTERNAL_TOKN", "s3cret")]);
        let e = check_names(&env, READS, RENAMED).unwrap_err();
        assert_eq!(e.var, "BERTH_INTERNAL_TOKN");
        let text = e.to_string();
        assert!(
            text.contains("did you mean BERTH_INTERNAL_TOKEN?"),
            "{text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
        assert!(
            text.starts_with("configuration: BERTH_INTERNAL_TOKN is not"),
            "{text}"
        );
        // A new name of a rename is a candidate too.
        let e =
            check_names(&Env::from_pairs([("BERTH_NEW_NAM", "x")]), READS, RENAMED).unwrap_err();
        assert!(e.problem.contains("did you mean BERTH_NEW_NAME?"), "{e}");
        // Nothing close (a tool's own variable in the caller's shell): a warning naming where the
        // settings are listed, not a refusal and not a guess.
        // Spelled at run time: a test scans this file's literals for names the kit reads.
        let bin_dir = format!("{}_BIN_DIR", "BERTH");
        let warnings = check_names(
            &Env::from_pairs([(bin_dir.as_str(), "/opt/berth/bin")]),
            &[READS, &["BERTH_DATA_DIR"]].concat(),
            RENAMED,
        )
        .unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("BERTH_BIN_DIR is not"),
            "{warnings:?}"
        );
        assert!(
            warnings[0].contains("docs/configuration.md"),
            "{warnings:?}"
        );
        assert!(!warnings[0].contains("/opt/berth"), "{warnings:?}");
    }

    #[test]
    fn known_tool_and_foreign_names_pass() {
        let env = Env::from_pairs([
            ("BERTH_INTERNAL_TOKEN", "t"),
            ("BERTH_THING_TIMEOUT_MS", "1500"),
            ("BERTH_NEW_NAME", "x"),
            // Berth's tools' variables, which CI exports into every process.
            ("BERTH_REQUIRE_DOCKER", "1"),
            ("BERTH_TEST_BIN", "/bin/x"),
            ("BERTH_BENCH_DIR", "/tmp"),
            ("BERTH_PY_SEED", "1"),
            ("BERTH_URL", "http://127.0.0.1:8080"),
            ("BERTH_TOKEN", ""),
            ("BERTH_BLESS_OPENAPI", "1"),
            ("BERTH_UPDATE_PACTS", "1"),
            // Not Berth's.
            ("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
            ("DOCKER_HOST", ""),
        ]);
        check_names(&env, READS, RENAMED).unwrap();
    }

    #[test]
    fn an_empty_berth_value_is_refused() {
        for var in ["BERTH_INTERNAL_TOKEN", "BERTH_LISTEN", "BERTH_NEW_NAME"] {
            let e = check_names(&Env::from_pairs([(var, "")]), READS, RENAMED).unwrap_err();
            assert_eq!(e.var, var);
            assert_eq!(
                e.to_string(),
                format!(
                    "configuration: {var} is set to the empty string: give it a value, or unset it for the default"
                )
            );
        }
    }

    #[test]
    fn a_renamed_variable_is_read_for_one_release_and_refused_beside_the_new_one() {
        // The old name alone: carried to the new one, in the new form, and dropped.
        let env = Env::from_pairs([("BERTH_THING_TIMEOUT_MS", "1500"), ("BERTH_OLD_NAME", "v")])
            .migrate(RENAMED)
            .unwrap();
        assert_eq!(env.get("BERTH_THING_TIMEOUT"), Some("1500ms"));
        assert_eq!(
            env.duration_or("BERTH_THING_TIMEOUT", Duration::ZERO)
                .unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(env.get("BERTH_NEW_NAME"), Some("v"));
        assert!(!env.is_set("BERTH_THING_TIMEOUT_MS") && !env.is_set("BERTH_OLD_NAME"));
        // Applying it again changes nothing (`berth up` and tests read configurations twice).
        let again = env.clone().migrate(RENAMED).unwrap();
        assert_eq!(again.get("BERTH_THING_TIMEOUT"), Some("1500ms"));
        // The new name alone is untouched.
        let env = Env::from_pairs([("BERTH_THING_TIMEOUT", "2s")])
            .migrate(RENAMED)
            .unwrap();
        assert_eq!(env.get("BERTH_THING_TIMEOUT"), Some("2s"));
        // Both: refused, naming both.
        let e = Env::from_pairs([
            ("BERTH_THING_TIMEOUT_MS", "1500"),
            ("BERTH_THING_TIMEOUT", "2s"),
        ])
        .migrate(RENAMED)
        .unwrap_err();
        assert_eq!(e.var, "BERTH_THING_TIMEOUT_MS");
        assert!(e.problem.contains("set only BERTH_THING_TIMEOUT"), "{e}");
        // An old milliseconds value that is no number.
        let e = Env::from_pairs([("BERTH_THING_TIMEOUT_MS", "2s")])
            .migrate(RENAMED)
            .unwrap_err();
        assert!(e.problem.contains("milliseconds"), "{e}");
        // The same mechanism for a flag: the new one's value, or the old one's converted.
        let flag = Renamed::milliseconds("--pending-ms", "--pending");
        assert_eq!(
            flag.resolve(Some("2s"), None).unwrap().as_deref(),
            Some("2s")
        );
        assert_eq!(
            flag.resolve(None, Some("250")).unwrap().as_deref(),
            Some("250ms")
        );
        assert_eq!(flag.resolve(None, None).unwrap(), None);
        assert!(flag.resolve(Some("2s"), Some("250")).is_err());
    }

    #[test]
    fn a_duration_needs_its_unit_and_a_refusal_shows_the_value_once() {
        for ok in ["0", "0s", "250ms", "30s", "5m", "1h"] {
            Env::from_pairs([(vars::REQUEST_TIMEOUT, ok)])
                .duration_or(vars::REQUEST_TIMEOUT, Duration::ZERO)
                .unwrap();
        }
        let e = Env::from_pairs([(vars::REQUEST_TIMEOUT, "30000")])
            .duration_or(vars::REQUEST_TIMEOUT, Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "configuration: BERTH_REQUEST_TIMEOUT=\"30000\" is not a duration: expected {}",
                domain::duration::DURATION_FORM
            )
        );
        assert_eq!(e.matches("30000").count(), 1, "{e}");
    }

    #[test]
    fn every_variable_the_kit_reads_is_declared() {
        let declared: Vec<&str> = vars::EVERY_SERVICE
            .iter()
            .chain(vars::ORCHESTRATOR_LIMITS)
            .chain(crate::watch::vars::ALL)
            .copied()
            .collect();
        let found = names_in_sources(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src"
        )));
        // The names the tests above make up, and the tools'.
        const MADE_UP: &[&str] = &[
            "BERTH_THING_TIMEOUT_MS",
            "BERTH_THING_TIMEOUT",
            "BERTH_OLD_NAME",
            "BERTH_NEW_NAME",
            "BERTH_NEW_NAM",
            "BERTH_INTERNAL_TOKN",
            "BERTH_WHATEVER",
        ];
        let undeclared: Vec<_> = found
            .iter()
            .map(String::as_str)
            .filter(|n| !declared.contains(n) && !is_tool_variable(n) && !MADE_UP.contains(n))
            .collect();
        assert!(
            undeclared.is_empty(),
            "read but not declared: {undeclared:?}"
        );
        assert!(
            found.contains("BERTH_LISTEN"),
            "the scan finds names: {found:?}"
        );
    }

    #[test]
    fn defaults_apply_with_no_variables() {
        let c = HttpConfig::from_env(&Env::default()).unwrap();
        assert_eq!(c.request_timeout, Duration::from_secs(30));
        assert_eq!(c.body_limit, 1 << 20);
        assert!(c.internal_token.is_none());
        assert_eq!(listen_addr(&Env::default(), 8081).unwrap().port(), 8081);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let env = Env::from_pairs([(vars::REQUEST_TIMEOUT, "soon"), (vars::BODY_LIMIT, "1Mi")]);
        let e = HttpConfig::from_env(&env).unwrap_err().to_string();
        assert!(e.contains("BERTH_REQUEST_TIMEOUT=\"soon\""), "{e}");
        let env = Env::from_pairs([(vars::BODY_LIMIT, "lots")]);
        let e = HttpConfig::from_env(&env).unwrap_err().to_string();
        assert!(e.contains("BERTH_BODY_LIMIT"), "{e}");
        assert_eq!(
            HttpConfig::from_env(&Env::from_pairs([(vars::BODY_LIMIT, "2Mi")]))
                .unwrap()
                .body_limit,
            2 << 20
        );
    }

    #[test]
    fn orchestrator_limits_default_to_the_data_dir_and_the_local_socket() {
        let l = orchestrator_limits(&Env::default().with(vars::DATA_DIR, "/srv/b/./x/..")).unwrap();
        assert_eq!(l.local_roots, ["/srv/b/volumes"]);
        assert_eq!(
            l.docker_endpoints,
            [domain::orchestrator::DEFAULT_DOCKER_HOST]
        );
        let l = orchestrator_limits(
            &Env::default()
                .with(vars::DATA_DIR, "/srv/b")
                .with(vars::LOCAL_BASE_PATH, "/mnt/vols/")
                .with(vars::DOCKER_HOST, "tcp://engine:2376"),
        )
        .unwrap();
        assert_eq!(l.local_roots, ["/srv/b/volumes", "/mnt/vols"]);
        assert_eq!(
            l.docker_endpoints,
            [
                domain::orchestrator::DEFAULT_DOCKER_HOST,
                "tcp://engine:2376"
            ]
        );
        let l = orchestrator_limits(
            &Env::default()
                .with(vars::LOCAL_ROOTS, "/a, //b/./c/")
                .with(vars::DOCKER_ENDPOINTS, "tcp://e:1/,unix:///run/d.sock")
                .with(vars::DOCKER_HOST, "tcp://engine:2376"),
        )
        .unwrap();
        assert_eq!(l.local_roots, ["/a", "/b/c"]);
        assert_eq!(l.docker_endpoints, ["tcp://e:1", "unix:///run/d.sock"]);
        for (var, value) in [
            (vars::LOCAL_ROOTS, "/"),
            (vars::LOCAL_ROOTS, " , "),
            (vars::DOCKER_ENDPOINTS, "http://e:1"),
        ] {
            let e = orchestrator_limits(&Env::default().with(var, value)).unwrap_err();
            assert_eq!(e.var, var, "{e}");
        }
    }
}
