//! The `berth` commands that talk to a running stack through the gateway: the clap command tree,
//! the typed clients' calls, and what they print. It links no server: `berth up`, backup and the
//! tokens file are `berth-stack`'s, and the `berth` binary sits above both.
//!
//! # Layout
//! - [`args`]: the whole clap command tree (the stack's commands too: parsing them needs no server),
//!   and [`args::options_anywhere`], kubectl's global flags before the command.
//! - this file: [`run`] (a client command, dispatched), [`CliError`] and its exit codes and hints,
//!   [`Ctx`] (the checked connection), reading YAML/JSON input files, and [`until`], the one loop
//!   every `--wait` runs.
//! - [`machine`], [`volume`], [`orchestrator`]: one module per command family.
//! - [`objects`]: what the machine controller keeps: `get`, `delete`, `scale`, `rollout status`,
//!   following the server's watch. [`apply`]: `apply -f` of every kind, checked before it writes.
//! - [`watch`]: `--watch` of volumes and orchestrators, printing what changed.
//! - [`output`]: tables, JSON, YAML; sizes and ages for people. [`jsonpath`]: `-o jsonpath=`.
//!
//! Exit codes: 0 done, [`EXIT_REFUSED`] (1), [`EXIT_USAGE`] (2), [`EXIT_FAILED`] (3).

pub mod apply;
pub mod args;
pub mod jsonpath;
pub mod machine;
pub mod objects;
pub mod orchestrator;
pub mod output;
pub mod volume;
pub mod watch;

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use client::{ClientError, ClientOptions, ServiceClient};
use domain::SecretString;
use domain::{Code, Status};

use crate::args::{Command, Connection, GetCommand, MachineCommand, VolumeName};

/// Exit code of a request the server (or the CLI, checking the same rules first) refused: not found,
/// invalid, not allowed. Retrying the same command will not help.
pub const EXIT_REFUSED: u8 = 1;
/// Exit code of a command line that cannot be run as written: unknown flags, conflicting options, an
/// unreadable file, no token. The same code clap uses for its own usage errors.
pub const EXIT_USAGE: u8 = 2;
/// Exit code of a server that failed, could not be reached, asked to come back later (429, 503, a VM
/// not initialised yet), or did not finish within `--timeout`. Retrying may help.
pub const EXIT_FAILED: u8 = 3;

/// Why a command failed; decides the exit code and the one line printed.
#[derive(Debug)]
pub enum CliError {
    /// The command line cannot be run as written.
    Usage(String),
    /// Found by the CLI itself: a value the server would refuse (InvalidArgument), a wait that gave
    /// up (DeadlineExceeded), a volume that ended Failed (Internal).
    Local(Status),
    /// The gateway (or whatever answered at `--server`) refused or failed the call, or could not be
    /// reached.
    Call(ClientError),
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        CliError::Call(e)
    }
}

/// What the hints in an error line may refer to.
#[derive(Debug, Clone, Default)]
pub struct HintContext {
    /// The gateway URL the command used.
    pub server: Option<String>,
    /// What `--wait` would wait for in this command (`until it is gone`), when it has one and was not
    /// given it.
    pub wait_for: Option<&'static str>,
}

impl CliError {
    /// The exit code: [`EXIT_REFUSED`], [`EXIT_USAGE`] or [`EXIT_FAILED`].
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::Local(s) => {
                if retry_may_help(s.code) {
                    EXIT_FAILED
                } else {
                    EXIT_REFUSED
                }
            }
            CliError::Call(e) => match e.http_status {
                // A VM not running yet is "come back later", though its status is a 409; a
                // bootstrap that ended for good is not.
                Some(_) if e.code() == Code::Uninitialized && !bootstrap_ended(e) => EXIT_FAILED,
                // What the server said decides: 4xx refused, except "too slow" and "too many".
                Some(s) if (400..500).contains(&s) && s != 408 && s != 429 => EXIT_REFUSED,
                // A 429 without Retry-After is a full capacity or quota, not a rate limit: waiting
                // does not cure it.
                Some(429) if e.retry_after.is_none() => EXIT_REFUSED,
                Some(_) => EXIT_FAILED,
                None => {
                    if retry_may_help(e.code()) {
                        EXIT_FAILED
                    } else {
                        EXIT_REFUSED
                    }
                }
            },
        }
    }

    /// The one line printed for this error: code name, message, request id, and what to do about it
    /// where the CLI can tell.
    pub fn line(&self, context: &HintContext) -> String {
        match self {
            CliError::Usage(m) => format!("error: {m}"),
            CliError::Local(s) => format!("error: {}: {}", s.code.name(), s.message),
            CliError::Call(e) => {
                let rid = e
                    .request_id
                    .as_deref()
                    .map(|r| format!(" (request id: {r})"))
                    .unwrap_or_default();
                let mut line = format!("error: {}: {}{rid}", e.code().name(), e.status.message);
                if let Some(hint) = hint(e, context) {
                    line.push_str(" — ");
                    line.push_str(&hint);
                }
                line
            }
        }
    }
}

/// Whether `e` says a machine's bootstrap ended and will never run again.
fn bootstrap_ended(e: &ClientError) -> bool {
    e.status
        .message
        .contains(domain::machine::BOOTSTRAP_RUNS_ONCE)
}

/// Whether the same call later might succeed.
fn retry_may_help(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
            | Code::Internal
            | Code::Unknown
            | Code::DataLoss
    )
}

/// What the caller can do about `e`, when the CLI can tell.
fn hint(e: &ClientError, context: &HintContext) -> Option<String> {
    let server = context.server.as_deref().unwrap_or("the gateway");
    match e.http_status {
        // Every answer of every Berth service carries a request id (header or problem body); one
        // without is from something else listening at that address.
        Some(status) if e.request_id.is_none() => Some(format!(
            "{server} answered HTTP {status} without a Berth request id, so it is not a Berth \
             gateway: check --server/BERTH_URL"
        )),
        // The machine driver's answer when the cloud refused the class's access key: its own
        // message says what to fix, and it is not the caller's Berth token.
        Some(401)
            if e.status
                .message
                .contains(domain::machine::CLOUD_KEY_REFUSED) =>
        {
            None
        }
        Some(401)
            if e.status
                .message
                .contains(domain::problem::INTERNAL_CREDENTIAL_REQUIRED) =>
        {
            Some(format!(
                "{server} is one of Berth's services, not the gateway: point --server/BERTH_URL at \
                 the gateway (`berth up` serves it on its --port-base, 8080 by default)"
            ))
        }
        Some(401) => Some(
            "the gateway did not accept the token from --token/BERTH_TOKEN (unknown, revoked or \
             expired: `berth token list` says which); `berth up` prints an admin token on its first \
             start, and `berth token create --admin --data-dir <dir>` \
             adds a new one"
                .into(),
        ),
        // Its own message says to delete the machine.
        Some(_) if e.code() == Code::Uninitialized && bootstrap_ended(e) => None,
        Some(_) if e.code() == Code::Uninitialized => Some(
            "retry once the VM runs (`berth machine create --wait` returns when it does)".into(),
        ),
        Some(403) => Some(
            "the token lacks the scope this needs, or may not act in this namespace (or cluster-wide); \
             make one with `berth token create --scopes … --namespaces …`"
                .into(),
        ),
        // A full capacity or quota: its message says what to do.
        Some(429) if e.retry_after.is_none() => None,
        Some(429 | 503) => {
            let after = e
                .retry_after
                .map(|d| format!("retry in {}s", d.as_secs().max(1)))
                .unwrap_or_else(|| "retry shortly".into());
            Some(match context.wait_for {
                Some(what) => format!("{after}, or add --wait to keep retrying {what}"),
                None => after,
            })
        }
        None if e.code() == Code::Unavailable && e.status.message.contains(client::HOST_UNRESOLVED) => {
            Some(format!(
                "the host in {server} does not resolve: check the name in --server/BERTH_URL"
            ))
        }
        // `berth up` and the images serve plain HTTP: TLS to one fails as if nothing answered.
        None if e.code() == Code::Unavailable && server.starts_with("https://") => Some(format!(
            "no TLS connection could be made to {server}: is the stack running (`berth up`), and \
             does the gateway there serve HTTPS? `berth up` serves plain http:// (a TLS proxy in \
             front of it serves https)"
        )),
        None if e.code() == Code::Unavailable => Some(format!(
            "nothing answered at {server}: is the stack running (`berth up`), and is \
             --server/BERTH_URL right?"
        )),
        // The API's paths are added to --server: one with a path of its own (`…/v1`) misses them.
        Some(404) if server_has_path(server) && e.status.message.contains("no route") => {
            Some(format!(
                "{server} has a path: give the gateway's address alone (http://host:port), the \
                 CLI adds the API's paths to it"
            ))
        }
        _ => None,
    }
}

/// Whether a server URL goes past its host and port (`http://h:1/v1`).
fn server_has_path(server: &str) -> bool {
    server
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('/'))
        .is_some_and(|(_, path)| !path.is_empty())
}

/// The checked connection to the gateway of one command.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The gateway's base URL, normalised (`http://host:port`).
    pub server: String,
    /// How long one call may take (`--request-timeout`); a watch's streams end before it.
    pub request_timeout: std::time::Duration,
    client: ServiceClient,
}

impl Ctx {
    /// Checks the connection options: a URL the CLI can use (a bare `host:port` means http), and a
    /// token (every gateway route needs one).
    pub fn new(connection: &Connection) -> Result<Ctx, CliError> {
        let server = normalise_server(&connection.server)?;
        let Some(token) = connection.token.as_deref().filter(|t| !t.is_empty()) else {
            return Err(CliError::Usage(
                "no token: set BERTH_TOKEN or pass --token (`berth up` prints an admin token on \
                 its first start; `berth token create --admin --data-dir <dir>` adds a new one)"
                    .into(),
            ));
        };
        let client = ServiceClient::new(
            &server,
            ClientOptions {
                timeout: connection.request_timeout,
                bearer: Some(SecretString::new(token)),
                attempts: 3,
                propagation: None,
            },
        );
        Ok(Ctx {
            server,
            client,
            request_timeout: connection.request_timeout,
        })
    }

    /// The shared client for the typed ones.
    pub fn client(&self) -> ServiceClient {
        self.client.clone()
    }
}

/// `--server` as a base URL: `http://` added to a bare `host:port`, anything but http(s) refused.
/// The text is echoed in errors only once it is known to carry no password.
pub fn normalise_server(text: &str) -> Result<String, CliError> {
    let usage = |why: &str| CliError::Usage(format!("--server/BERTH_URL: {why}"));
    let text = text.trim();
    if text.is_empty() {
        return Err(usage(
            "is empty; give the gateway's URL, like http://127.0.0.1:8080",
        ));
    }
    for scheme in ["http:", "https:"] {
        if text.starts_with(scheme) && !text.contains("://") {
            return Err(usage(&format!(
                "{text:?} has a scheme without `//`; write it {scheme}//host:port"
            )));
        }
    }
    let with_scheme = if text.contains("://") {
        text.to_string()
    } else {
        format!("http://{text}")
    };
    let url = reqwest::Url::parse(&with_scheme)
        .map_err(|_| usage("is not a URL like http://127.0.0.1:8080 (or 127.0.0.1:8080)"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(usage(
            "must not carry a user or password; pass credentials with --token/BERTH_TOKEN",
        ));
    }
    if !matches!(url.scheme(), "http" | "https") {
        return Err(usage(&format!(
            "{text:?} is not an http:// or https:// URL (like http://127.0.0.1:8080)"
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(usage(&format!("{text:?} names no host")));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(usage(&format!(
            "{text:?} must not have a query or fragment"
        )));
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

/// Splits `namespace/name`, taking the namespace from `-n` (or `default`) when the name has none.
/// Both at once must agree: `ns/name -n other` is refused rather than one silently winning.
pub fn split_name(name: &str, namespace: Option<&str>) -> Result<(String, String), CliError> {
    match name.split_once('/') {
        Some((ns, n)) => match namespace {
            Some(flag) if flag != ns => Err(CliError::Usage(format!(
                "{name:?} names namespace {ns:?} but -n/--namespace says {flag:?}; give one of them"
            ))),
            _ => Ok((ns.to_string(), n.to_string())),
        },
        None => Ok((
            namespace
                .unwrap_or(domain::volume::DEFAULT_NAMESPACE)
                .to_string(),
            name.to_string(),
        )),
    }
}

/// The YAML or JSON documents of a file (`---` separates several), empty ones skipped.
pub fn read_structured(path: &Path) -> Result<Vec<serde_json::Value>, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    parse_structured(&path.display().to_string(), &text)
}

/// The documents of YAML or JSON `text` (several YAML documents separated by `---`), read from
/// `source` (a file's name, or standard input).
pub fn parse_structured(source: &str, text: &str) -> Result<Vec<serde_json::Value>, CliError> {
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = <serde_json::Value as serde::Deserialize>::deserialize(doc)
            .map_err(|e| CliError::Usage(format!("{source}: not YAML or JSON: {e}")))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// Decodes one document; the error names what it should have been and the field, never a value.
pub fn decode<T: serde::de::DeserializeOwned>(
    what: &str,
    value: serde_json::Value,
) -> Result<T, CliError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let why = inner.to_string();
        // serde's messages quote the offending value for some errors ("invalid value: string
        // \"x\""); keep only what was expected.
        let why = why
            .split_once(", expected ")
            .map(|(_, expected)| format!("expected {expected}"))
            .unwrap_or(why);
        if path == "." {
            CliError::Usage(format!("{what}: {why}"))
        } else {
            CliError::Usage(format!("{what}: {path}: {why}"))
        }
    })
}

/// How often a `--wait` looks again when the server gives no `Retry-After`.
pub const POLL: Duration = Duration::from_millis(500);

/// One look of a `--wait`.
pub enum Step<T> {
    /// Finished, with this result.
    Done(T),
    /// Not yet: the state seen (said once on stderr when it changes) and when to look again.
    Pending {
        /// What the thing is doing now.
        state: String,
        /// When to look again.
        after: Duration,
    },
}

/// A failed look as a [`Step`]: a 503 or 429 (the server saying "not now") is pending for as long as
/// its `Retry-After` asks; any other failure ends the wait.
pub fn not_now<T>(e: ClientError) -> Result<Step<T>, CliError> {
    if matches!(e.http_status, Some(429 | 503)) {
        Ok(Step::Pending {
            after: e.retry_after.unwrap_or(POLL),
            state: e.status.message,
        })
    } else {
        Err(e.into())
    }
}

/// Looks with `step` until it is done or `timeout` has passed, sleeping as each look asks; says on
/// stderr what it is waiting for whenever that changes.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut step: F) -> Result<T, CliError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Step<T>, CliError>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_state = String::new();
    loop {
        let (state, after) = match step().await? {
            Step::Done(v) => return Ok(v),
            Step::Pending { state, after } => (state, after),
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(CliError::Local(Status::new(
                Code::DeadlineExceeded,
                format!(
                    "gave up waiting for {what} after {}: {state} (a longer --timeout waits longer)",
                    humanise(timeout)
                ),
            )));
        }
        if state != last_state {
            eprintln!("waiting for {what}: {state}");
            last_state = state;
        }
        // Never past the deadline, so the last look happens in time to report it.
        tokio::time::sleep(after.min(deadline - now)).await;
    }
}

fn humanise(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else if secs > 0 {
        format!("{secs}s")
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Runs a command that reaches the gateway (every command but `up`, `completions`, `token`,
/// `backup` and `restore`, which the `berth` binary runs itself), noting in `context` what its
/// error line's hints may refer to.
pub async fn run(command: &Command, context: &mut HintContext) -> Result<(), CliError> {
    match command {
        Command::Machine(group) => {
            context.wait_for = match &group.command {
                MachineCommand::Create { wait, .. } if !wait.wait => Some("until it runs"),
                MachineCommand::Delete { wait, .. } if !wait.wait => Some("until it is gone"),
                _ => None,
            };
            connected(&group.connection, context, |ctx| async move {
                crate::machine::run(&ctx, &group.format, &group.command).await
            })
            .await
        }
        Command::Volume(group) => {
            // No `--wait` hint: a volume's `--wait` waits for Ready once the add is accepted; it
            // does not repeat an add that was refused (a full orchestrator's 429, say).
            connected(&group.connection, context, |ctx| async move {
                crate::volume::run(&ctx, &group.format, &group.command).await
            })
            .await
        }
        Command::Orchestrator(group) => {
            connected(&group.connection, context, |ctx| async move {
                crate::orchestrator::run(&ctx, &group.format, &group.command).await
            })
            .await
        }
        Command::Get(group) => {
            connected(&group.connection, context, |ctx| async move {
                get(&ctx, group.format.output(), &group.command).await
            })
            .await
        }
        Command::Apply(group) => {
            connected(&group.connection, context, |ctx| async move {
                crate::apply::apply(&ctx, &group.command).await
            })
            .await
        }
        Command::Delete(group) => {
            if !group.command.wait.wait {
                context.wait_for = Some("until it is gone");
            }
            connected(&group.connection, context, |ctx| async move {
                crate::objects::delete(&ctx, group.format.output(), &group.command).await
            })
            .await
        }
        Command::Scale(group) => {
            connected(&group.connection, context, |ctx| async move {
                let args = &group.command;
                crate::objects::scale(&ctx, group.format.output(), &args.object, args.replicas)
                    .await
            })
            .await
        }
        Command::Rollout(group) => {
            connected(&group.connection, context, |ctx| async move {
                match &group.command {
                    args::RolloutCommand::Status { object, timeout } => {
                        crate::objects::rollout_status(&ctx, object, *timeout).await
                    }
                }
            })
            .await
        }
        Command::Up(_)
        | Command::Completions { .. }
        | Command::Token(_)
        | Command::Backup { .. }
        | Command::Restore { .. } => Err(CliError::Usage(
            "this command does not reach a gateway; the berth binary runs it".into(),
        )),
    }
}

/// Checks the connection options, then runs `command` with them.
async fn connected<F, Fut>(
    connection: &args::Connection,
    context: &mut HintContext,
    command: F,
) -> Result<(), CliError>
where
    F: FnOnce(Ctx) -> Fut,
    Fut: Future<Output = Result<(), CliError>>,
{
    let ctx = Ctx::new(connection)?;
    context.server = Some(ctx.server.clone());
    command(ctx).await
}

/// `berth get KIND [NAME]`: a name shows one, no name lists.
async fn get(ctx: &Ctx, output: args::Output, command: &GetCommand) -> Result<(), CliError> {
    use domain::resources::Kind;
    match command {
        GetCommand::Machines { name, query }
        | GetCommand::Machinesets { name, query }
        | GetCommand::Machinedeployments { name, query }
        | GetCommand::Machineclasses { name, query }
        | GetCommand::Secrets { name, query } => {
            let kind = match command {
                GetCommand::Machines { .. } => Kind::Machine,
                GetCommand::Machinesets { .. } => Kind::MachineSet,
                GetCommand::Machinedeployments { .. } => Kind::MachineDeployment,
                GetCommand::Machineclasses { .. } => Kind::MachineClass,
                _ => Kind::Secret,
            };
            crate::objects::get(ctx, output, kind, name.as_deref(), query).await
        }
        GetCommand::Volumes { name, query } => {
            let storage = client::storage::Client::new(ctx.client());
            match name {
                Some(name) => {
                    if query.all_namespaces || query.selector.is_some() || query.limit.is_some() {
                        return Err(CliError::Usage(
                            "-A, -l and --limit select a list; with a NAME, give only -n".into(),
                        ));
                    }
                    let volume = VolumeName {
                        name: name.clone(),
                        namespace: query.namespace.clone(),
                    };
                    crate::volume::get(&storage, &volume, query.watch, output).await
                }
                None => crate::volume::list(&storage, query, output).await,
            }
        }
        GetCommand::Orchestrators { name, watch } => {
            let registry = client::registry::Client::new(ctx.client());
            match name {
                Some(name) => crate::orchestrator::get(&registry, name, *watch, output).await,
                None => crate::orchestrator::list(&registry, *watch, output).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_with_a_path_is_told_apart() {
        assert!(server_has_path("http://127.0.0.1:8080/v1"));
        assert!(!server_has_path("http://127.0.0.1:8080"));
        assert!(!server_has_path("http://127.0.0.1:8080/"));
    }

    #[test]
    fn a_bare_host_and_port_means_http() {
        assert_eq!(
            normalise_server("127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            normalise_server("localhost:9000").unwrap(),
            "http://localhost:9000"
        );
        assert_eq!(
            normalise_server("https://berth.example/").unwrap(),
            "https://berth.example"
        );
        let refused = |s: &str| match normalise_server(s) {
            Err(CliError::Usage(m)) => m,
            other => panic!("{s}: {other:?}"),
        };
        assert!(refused("ftp://x").contains("http://"));
        let m = refused("http://me:hunter2@x");
        assert!(!m.contains("hunter2"), "a password is never echoed: {m}");
    }

    #[test]
    fn a_namespace_in_the_name_and_a_different_flag_are_refused() {
        assert_eq!(split_name("ns/a", None).unwrap(), ("ns".into(), "a".into()));
        assert_eq!(
            split_name("ns/a", Some("ns")).unwrap(),
            ("ns".into(), "a".into())
        );
        assert_eq!(
            split_name("a", Some("x")).unwrap(),
            ("x".into(), "a".into())
        );
        assert_eq!(
            split_name("a", None).unwrap(),
            ("default".into(), "a".into())
        );
        assert!(matches!(
            split_name("ns/a", Some("other")),
            Err(CliError::Usage(_))
        ));
    }

    #[test]
    fn a_cloud_key_refusal_is_not_hinted_as_the_callers_token() {
        let context = HintContext {
            server: None,
            wait_for: None,
        };
        let refused = |message: &str| ClientError {
            status: domain::Status::new(Code::Unauthenticated, message),
            http_status: Some(401),
            request_id: Some("r".into()),
            retry_after: None,
        };
        let token = hint(&refused("no bearer token"), &context).unwrap();
        assert!(token.contains("--token/BERTH_TOKEN"), "{token}");
        let cloud = refused(&format!(
            "InvalidAccessKeyId: ECS refused the cloud access key in the request's secret, {}",
            domain::machine::CLOUD_KEY_REFUSED
        ));
        assert_eq!(hint(&cloud, &context), None);
    }

    #[test]
    fn a_service_port_and_an_ended_bootstrap_are_told_as_such() {
        let context = HintContext {
            server: Some("http://127.0.0.1:8083".into()),
            wait_for: None,
        };
        let answer = |code, http, message: &str| ClientError {
            status: domain::Status::new(code, message),
            http_status: Some(http),
            request_id: Some("r".into()),
            retry_after: None,
        };
        let service = answer(
            Code::Unauthenticated,
            401,
            domain::problem::INTERNAL_CREDENTIAL_REQUIRED,
        );
        let said = hint(&service, &context).unwrap();
        assert!(said.contains("not the gateway"), "{said}");
        assert!(!said.contains("token"), "{said}");

        let not_yet = answer(Code::Uninitialized, 409, "the VM is Starting");
        assert_eq!(CliError::Call(not_yet.clone()).exit_code(), EXIT_FAILED);
        assert!(
            hint(&not_yet, &context)
                .unwrap()
                .contains("retry once the VM runs")
        );
        let ended = answer(
            Code::Uninitialized,
            409,
            &format!(
                "the bootstrap failed with exit code 3; {}: delete the machine",
                domain::machine::BOOTSTRAP_RUNS_ONCE
            ),
        );
        assert_eq!(CliError::Call(ended.clone()).exit_code(), EXIT_REFUSED);
        assert_eq!(hint(&ended, &context), None);
    }

    #[test]
    fn decode_errors_name_the_field_not_the_value() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct P {
            replicas: u32,
        }
        let e = decode::<P>("profile", serde_json::json!({"replicas": "s3cret"})).unwrap_err();
        let CliError::Usage(m) = e else {
            panic!("{e:?}")
        };
        assert!(m.contains("replicas") && !m.contains("s3cret"), "{m}");
    }
}
