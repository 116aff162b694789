//! The `Docker` provider: a machine is a container, as in Cluster API's Docker provider (CAPD) and
//! Gardener's local provider, so machine lifecycles can be exercised without a cloud.
//!
//! - The container is named after the machine (also its host name, which becomes the node name) and
//!   labelled with the class's cluster and role and the machine's name and UID (`berth.io/*`).
//!   CreateMachine adopts the container carrying the machine's UID; a create that loses the race for
//!   the name finds the winner's container with the same labels and adopts it too, so however many
//!   identical calls race, one container is made. A name held by another machine is AlreadyExists.
//! - The secret's `userData` is written into the container at `/var/lib/berth/user-data` before it
//!   starts, through the Engine's archive API (no shell needed in the image). With `bootstrap: exec`
//!   it is then executed once with `docker exec`: the exec's id is recorded before the exec starts,
//!   and its exit code once it has finished, so no later call runs it again and every call can tell
//!   where it got to. GetMachineStatus answers Uninitialized (17) until it has completed;
//!   InitializeMachine runs one that is still pending and waits for it.
//! - Nothing a machine writes is control data: the machine is root in its container and may write
//!   anything there. So the bootstrap's records are not files in the container (as they were) but
//!   two Docker volumes the driver creates and never mounts, `berth-bootstrap-<container id>` (label
//!   `berth.io/bootstrap-exec`) and `...-exit` (label `berth.io/bootstrap-exit`): only the driver
//!   writes them, they outlive a driver or Engine restart (the Engine forgets execs), and creating
//!   one is atomic (a second create answers the first volume, so the first recorded exec wins).
//!   Every id that goes into an Engine path is checked to be 64 hex digits first, an exec is
//!   believed only if the Engine says it belongs to the container, and the one read from a
//!   container left (an earlier driver's exit-code file, for containers it made) is stat-checked
//!   and bounded to a few bytes.
//! - Every lookup is scoped to the class's cluster and role labels and to the machine's name (and
//!   UID when given); a providerID only says where to look (`docker:///<name>`): a container it
//!   names for another machine, role or namespace is answered as a missing one.
//! - The Engine copies an image's labels onto its containers, so an image carrying a key under a
//!   reserved prefix (`com.docker.*`, `berth.io/*` but the labels the driver sets over it) is
//!   refused (412) rather than trusted; the driver reads no label it did not set itself.
//! - The Engine is the one the secret's `dockerHost` names, if the operator allows it
//!   ([`settings::Settings`]), else `DOCKER_HOST`, else the local socket. An Engine that does not answer
//!   is Unavailable; its other refusals keep their meaning (a missing image is FailedPrecondition
//!   naming it; nothing is pulled unless the class says `pull: IfNotPresent`).
//!
//! Bootstraps of one container are serialised within a driver process; two driver replicas sharing
//! an Engine could still both start a pending bootstrap of the same container in the same instant
//! (as two CAPD controllers could), which is why the driver runs as one replica.
//!
//! # Layout
//! - [`settings`]: what the operator allows (Engines, host directories, registries, privileges).
//! - [`spec`]: the provider spec, its validation, and the names of labels, files and provider ids.
//! - [`archive`]: the one-file tar archives the Engine's archive API speaks.
//! - this file: [`Docker`], the [`Provider`] implementation.

pub mod archive;
pub mod settings;
pub mod spec;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker as Engine;
use bollard::errors::Error as BollardError;
use bollard::exec::{CreateExecOptions, StartExecOptions};
use bollard::models::{
    ContainerInspectResponse, ContainerUpdateBody, MountType, RestartPolicy, RestartPolicyNameEnum,
    VolumeCreateRequest,
};
use bollard::query_parameters::{
    ContainerArchiveInfoOptions, CreateContainerOptions, CreateImageOptions,
    DownloadFromContainerOptions, ListContainersOptions, RemoveContainerOptions,
    RemoveVolumeOptions, StopContainerOptions, UploadToContainerOptions,
};
use domain::machine::{
    Condition, CreateMachineResponse, DeleteMachineResponse, GetMachineStatusResponse,
    InitializeMachineResponse, ListMachinesRequest, MachineClass, MachineRequest, NodeAddress,
    PersistentVolumeSpec, Secret,
};
use domain::{Code, Status};
use futures::StreamExt as _;
use tokio::sync::OnceCell;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::provider::{Listed, NAMESPACE_STAMP, Provider, request_namespace, stamped_namespace};
use settings::Settings;
use spec::{
    Bootstrap, ImageRef, LABEL_MACHINE, LABEL_RECORD_EXEC, LABEL_RECORD_EXIT, LABEL_RECORD_OF,
    LABEL_RECORDS, LABEL_ROLE, LABEL_UID, LEGACY_EXIT_PATH, Plan, ProviderSpec, Pull, Record, SPEC,
    Scope, USER_DATA_PATH,
};

/// The provider's name (`MachineClass.provider`).
pub const NAME: &str = "Docker";

/// How long InitializeMachine leaves itself, after waiting for a bootstrap, to answer.
const ANSWER_MARGIN: Duration = Duration::from_secs(1);
/// The longest pause between two looks at a running bootstrap.
const POLL_MAX: Duration = Duration::from_millis(500);
/// How long the driver keeps following a bootstrap it started, to record its exit code.
const WATCH_LIMIT: Duration = Duration::from_secs(3600);
/// The largest file read back from a container (an earlier driver's exit-code file: a few bytes).
const MAX_READ: usize = 64;
/// The user data's mode: owner-only, since it usually holds a bootstrap token; executable whatever
/// the class says now, so a class that moves to `bootstrap: exec` later can still run it.
const USER_DATA_MODE: u32 = 0o700;
/// How long a create that found its machine's name taken waits for the container holding it to
/// show.
const NAME_SETTLE: Duration = Duration::from_secs(3);

/// What went wrong talking to an Engine. Callers turn it into a [`Status`] ([`EngineError::to_status`])
/// unless they give the answer a meaning of their own (a 409 on create is a race to adopt, say).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No answer: the Engine is down, unreachable or too slow.
    #[error("the Docker Engine does not answer ({doing})")]
    Unreachable {
        /// What the driver was doing.
        doing: String,
        /// The client's error.
        #[source]
        source: BollardError,
    },
    /// The Engine answered with an error.
    #[error("the Docker Engine answered HTTP {status} to {doing}: {message}")]
    Answered {
        /// What the driver was doing.
        doing: String,
        /// The HTTP status (500 for an error reported mid-stream).
        status: u16,
        /// The Engine's message.
        message: String,
    },
    /// The Engine answered something the client could not read.
    #[error("the Docker Engine's answer to {doing} could not be read")]
    Unreadable {
        /// What the driver was doing.
        doing: String,
        /// The client's error.
        #[source]
        source: BollardError,
    },
}

impl EngineError {
    /// Classifies a client error.
    pub fn new(doing: impl Into<String>, e: BollardError) -> Self {
        let doing = doing.into();
        match e {
            BollardError::DockerResponseServerError {
                status_code,
                message,
            } => EngineError::Answered {
                doing,
                status: status_code,
                message: printable(&message),
            },
            BollardError::DockerStreamError { error } => EngineError::Answered {
                doing,
                status: 500,
                message: printable(&error),
            },
            e @ (BollardError::JsonDataError { .. }
            | BollardError::JsonSerdeError { .. }
            | BollardError::APIVersionParseError {}) => {
                EngineError::Unreadable { doing, source: e }
            }
            source => EngineError::Unreachable { doing, source },
        }
    }

    /// The Engine's HTTP status, when it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            EngineError::Answered { status, .. } => Some(*status),
            _ => None,
        }
    }

    fn message(&self) -> &str {
        match self {
            EngineError::Answered { message, .. } => message,
            _ => "",
        }
    }

    /// What the caller sees. A client-side refusal (4xx) keeps the Engine's words; anything that may
    /// carry the Engine's internals (its address, its paths) stays in the driver's log, since a 5xx
    /// never names an internal host or path.
    pub fn to_status(&self) -> Status {
        match self {
            EngineError::Unreachable { doing, .. } => {
                tracing::warn!(error = %self, cause = %error_chain(self), "Docker Engine unreachable");
                Status::unavailable(format!(
                    "the Docker Engine does not answer ({doing}); retry"
                ))
            }
            EngineError::Unreadable { doing, .. } => {
                tracing::warn!(error = %self, cause = %error_chain(self), "Docker Engine answer unreadable");
                Status::internal(format!(
                    "the Docker Engine's answer to {doing} could not be read"
                ))
            }
            EngineError::Answered {
                doing,
                status,
                message,
            } => match status {
                400 => Status::new(
                    Code::InvalidArgument,
                    format!("{SPEC}: the Docker Engine refused {doing}: {message}"),
                ),
                404 => Status::not_found(format!("{doing}: {message}")),
                409 => Status::unavailable(format!(
                    "the Docker Engine is busy with the container ({doing}): {message}; retry"
                )),
                _ => {
                    tracing::warn!(error = %self, "Docker Engine failed");
                    Status::internal(format!(
                        "the Docker Engine failed {doing} (HTTP {status}); the machine driver's log has its message"
                    ))
                }
            },
        }
    }
}

/// The Engine's words without control characters (C0, DEL, C1), each replaced by a space: they
/// may repeat what a spec or a machine wrote (a path, an argument), and reach callers and logs.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// An error with its causes, for logs.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// How far a container's bootstrap got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootstrapState {
    /// The class asks for none.
    NotRequested,
    /// Not run yet.
    Pending,
    /// An exec was made for it but never started (a driver stopped between the two steps).
    Unstarted(String),
    /// Running as this exec.
    Running(String),
    /// Finished with exit code 0.
    Completed,
    /// Finished with this exit code.
    Failed(i64),
    /// Started as this exec, whose result the Engine no longer knows and nobody recorded.
    Lost(String),
    /// Left by an earlier driver (no [`LABEL_RECORDS`]) without an exit code it wrote that can be
    /// read: whether it ran is not known, so it is never run.
    Unknown,
}

impl BootstrapState {
    /// Why a machine in this state is not initialised (for Uninitialized answers).
    fn reason(&self, name: &str) -> String {
        match self {
            BootstrapState::NotRequested | BootstrapState::Completed => {
                format!("the bootstrap of machine {name:?} has completed")
            }
            BootstrapState::Pending | BootstrapState::Unstarted(_) => format!(
                "the bootstrap of machine {name:?} has not run yet; InitializeMachine runs it"
            ),
            BootstrapState::Running(exec) => format!(
                "the bootstrap of machine {name:?} is running (exec {})",
                short(exec)
            ),
            BootstrapState::Failed(code) => format!(
                "the bootstrap of machine {name:?} failed with exit code {code}; {}: delete the machine to try again",
                domain::machine::BOOTSTRAP_RUNS_ONCE
            ),
            BootstrapState::Lost(exec) => format!(
                "the bootstrap of machine {name:?} (exec {}) ended without a recorded exit code; {}: delete the machine to try again",
                short(exec),
                domain::machine::BOOTSTRAP_RUNS_ONCE
            ),
            BootstrapState::Unknown => format!(
                "the bootstrap of machine {name:?} was left by an earlier driver without a result this driver can read; it is never run again: delete the machine and create it anew"
            ),
        }
    }

    /// The answer for a machine in this state that is not initialised: Uninitialized while the
    /// driver knows where the bootstrap got to; FailedPrecondition when it cannot know (only the
    /// operator can settle it, by recreating the machine).
    fn refusal(&self, name: &str) -> Status {
        let code = match self {
            BootstrapState::Unknown => Code::FailedPrecondition,
            _ => Code::Uninitialized,
        };
        Status::new(code, self.reason(name))
    }

    fn is_done(&self) -> bool {
        matches!(
            self,
            BootstrapState::NotRequested | BootstrapState::Completed
        )
    }
}

/// The first 12 characters of a Docker id, as the CLI shows them (the whole text when it has no
/// character boundary there: whatever it is, it is not an Engine id).
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// The Docker provider plugin.
pub struct Docker {
    settings: Settings,
    operation_timeout: Duration,
    /// One connected client per Engine address, made on first use.
    engines: Mutex<HashMap<String, Arc<OnceCell<Engine>>>>,
    /// One lock per container whose bootstrap is being looked after.
    bootstrap_locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    /// Held from the check of a container's mounts against every other machine's
    /// ([`Docker::check_neighbours`]) until the Engine has made or started it, so two creates or
    /// starts cannot both pass the check before either container shows.
    mount_gate: tokio::sync::Mutex<()>,
}

/// A bind mount: its host source and whether it is writable.
type Bind = (String, bool);

/// Why machine mounts `own` may not sit beside another machine's mounts `other` on one Engine, if
/// they may not: a machine with a writable mount could replace a directory on the way to a mount
/// source strictly inside it with a symbolic link, and the Engine would follow that link when it
/// next starts the other machine (the check before a start and the start itself are two steps, so
/// the link can win the race between them). Equal sources are fine: nobody can replace a mount's
/// own root from inside it.
fn crossing(own: &[Bind], other: &[Bind]) -> Option<String> {
    own.iter().find_map(|(mine, mine_writable)| {
        other.iter().find_map(|(theirs, theirs_writable)| {
            if mine == theirs {
                None
            } else if *theirs_writable && settings::is_within(mine, theirs) {
                Some(format!(
                    "hostPath {mine:?} lies inside another machine's writable mount on this Docker Engine"
                ))
            } else if *mine_writable && settings::is_within(theirs, mine) {
                Some(format!(
                    "hostPath {mine:?} is writable and holds another machine's mount on this Docker Engine"
                ))
            } else {
                None
            }
        })
    })
}

impl std::fmt::Debug for Docker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Docker")
            .field("settings", &self.settings)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

/// What a CreateMachine's checks make of its request ([`Docker::checked_create`]).
struct Checked {
    /// The Engine's address.
    host: String,
    plan: Plan,
    /// The user data to write into the container, if any.
    user_data: Option<Vec<u8>>,
}

/// A request's Engine and scope.
struct Target {
    engine: Engine,
    /// The Engine's address: for lock keys only, never logged (it may come from a secret).
    host: String,
    scope: Scope,
}

/// A container as the driver reads it.
#[derive(Debug, Clone)]
struct Container {
    id: String,
    name: String,
    labels: HashMap<String, String>,
    running: bool,
    state: String,
    exit_code: Option<i64>,
    hostname: String,
    addresses: Vec<NodeAddress>,
    /// The host directories it mounts (bind mounts' sources), each with whether it is writable.
    binds: Vec<Bind>,
    /// Whether the Engine restarts it by itself (any restart policy but `no`).
    engine_restarts: bool,
}

impl Container {
    fn from_inspect(c: ContainerInspectResponse) -> Self {
        let name = c
            .name
            .as_deref()
            .unwrap_or_default()
            .trim_start_matches('/')
            .to_owned();
        let config = c.config.unwrap_or_default();
        let host_config = c.host_config.unwrap_or_default();
        let engine_restarts = host_config
            .restart_policy
            .and_then(|p| p.name)
            .is_some_and(|p| {
                !matches!(p, RestartPolicyNameEnum::NO | RestartPolicyNameEnum::EMPTY)
            });
        let binds = host_config
            .mounts
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.typ == Some(MountType::BIND))
            .filter_map(|m| Some((m.source?, !m.read_only.unwrap_or(false))))
            .collect();
        let state = c.state.unwrap_or_default();
        let hostname = config
            .hostname
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| name.clone());
        let mut networks: Vec<_> = c
            .network_settings
            .and_then(|n| n.networks)
            .unwrap_or_default()
            .into_iter()
            .collect();
        networks.sort_by(|a, b| a.0.cmp(&b.0));
        let mut addresses: Vec<NodeAddress> = networks
            .into_iter()
            .flat_map(|(_, n)| [n.ip_address, n.global_ipv6_address])
            .flatten()
            .filter(|a| !a.is_empty())
            .map(|address| NodeAddress {
                kind: "InternalIP".into(),
                address,
            })
            .collect();
        addresses.dedup();
        addresses.push(NodeAddress {
            kind: "Hostname".into(),
            address: hostname.clone(),
        });
        Container {
            id: c.id.unwrap_or_default(),
            name,
            labels: config.labels.unwrap_or_default(),
            running: state.running.unwrap_or(false),
            state: state
                .status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "unknown".into()),
            exit_code: state.exit_code,
            hostname,
            addresses,
            binds,
            engine_restarts,
        }
    }

    fn provider_id(&self) -> String {
        spec::provider_id(&self.name)
    }

    /// The namespace stamped on the container ([`NAMESPACE_STAMP`]; none: `default`).
    fn namespace(&self) -> &str {
        stamped_namespace(self.labels.get(NAMESPACE_STAMP).map(String::as_str))
    }
}

/// Reads one small file out of a container; `None` when it does not exist, or is anything but a
/// regular file of at most [`MAX_READ`] bytes. Whatever is in a container was written by the
/// machine, so the size is checked before anything is downloaded, and the download is cut off past
/// the bound all the same (the file may grow between the two).
async fn read_small_file(
    engine: &Engine,
    id: &str,
    path: &str,
) -> Result<Option<Vec<u8>>, EngineError> {
    let doing = || format!("reading {path} in container {}", short(id));
    let stat = engine
        .get_container_archive_info(
            id,
            Some(ContainerArchiveInfoOptions {
                path: path.to_owned(),
            }),
        )
        .await;
    let stat = match stat {
        Ok(headers) => headers,
        Err(BollardError::DockerResponseServerError {
            status_code: 404, ..
        }) => return Ok(None),
        Err(e) => return Err(EngineError::new(doing(), e)),
    };
    // A directory, link, device... has mode bits above the permission ones.
    let small_regular = (0..=MAX_READ as i64).contains(&stat.size) && stat.file_mode & !0o7777 == 0;
    if !small_regular {
        return Ok(None);
    }
    let mut stream = engine.download_from_container(
        id,
        Some(DownloadFromContainerOptions {
            path: path.to_owned(),
        }),
    );
    let mut tar = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => tar.extend_from_slice(&bytes),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(None),
            Err(e) => return Err(EngineError::new(doing(), e)),
        }
        if tar.len() > MAX_READ + 4096 {
            return Ok(None);
        }
    }
    Ok(archive::first_file(&tar).filter(|f| f.len() <= MAX_READ))
}

/// Writes one file into a container (root-owned, with `mode`), making its directories.
async fn write_file(
    engine: &Engine,
    id: &str,
    path: &str,
    mode: u32,
    contents: &[u8],
) -> Result<(), Status> {
    let tar = archive::single_file(path, mode, contents)
        .map_err(|e| Status::internal(format!("writing {path}: {e}")))?;
    engine
        .upload_to_container(
            id,
            Some(UploadToContainerOptions {
                path: "/".to_owned(),
                ..UploadToContainerOptions::default()
            }),
            bollard::body_full(tar.into()),
        )
        .await
        .map_err(|e| {
            EngineError::new(format!("writing {path} in container {}", short(id)), e).to_status()
        })
}

/// A container or exec id the Engine gave, checked before it goes into an Engine API path.
fn checked_id<'a>(id: &'a str, what: &str) -> Result<&'a str, Status> {
    if spec::is_engine_id(id) {
        Ok(id)
    } else {
        tracing::warn!(
            what,
            "the Docker Engine gave an id that is not 64 hex digits"
        );
        Err(Status::internal(format!(
            "the Docker Engine gave {what} an id that is not 64 lower-case hex digits"
        )))
    }
}

/// The labels of a bootstrap record of container `id`, if it exists.
async fn read_record(
    engine: &Engine,
    id: &str,
    record: Record,
) -> Result<Option<HashMap<String, String>>, Status> {
    let name = spec::bootstrap_record(checked_id(id, "a container")?, record);
    match engine.inspect_volume(&name).await {
        Ok(v) => Ok(Some(v.labels)),
        Err(BollardError::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(e) => Err(EngineError::new("reading a bootstrap record", e).to_status()),
    }
}

/// Makes a bootstrap record of container `id` with `label = value`, unless one exists: the Engine
/// answers a create of an existing volume with that volume, unchanged, so the first record made
/// wins and every caller reads back the same labels.
async fn make_record(
    engine: &Engine,
    id: &str,
    record: Record,
    label: &str,
    value: &str,
) -> Result<HashMap<String, String>, Status> {
    let name = spec::bootstrap_record(checked_id(id, "a container")?, record);
    engine
        .create_volume(VolumeCreateRequest {
            name: Some(name),
            labels: Some(HashMap::from([
                (LABEL_RECORD_OF.to_owned(), id.to_owned()),
                (label.to_owned(), value.to_owned()),
            ])),
            ..VolumeCreateRequest::default()
        })
        .await
        .map(|v| v.labels)
        .map_err(|e| EngineError::new("recording the bootstrap", e).to_status())
}

/// Removes container `id`'s bootstrap records (after the container).
async fn remove_records(engine: &Engine, id: &str) -> Result<(), Status> {
    let id = checked_id(id, "a container")?;
    for record in [Record::Exited, Record::Started] {
        let removed = engine
            .remove_volume(
                &spec::bootstrap_record(id, record),
                None::<RemoveVolumeOptions>,
            )
            .await;
        gone_is_done(removed, || "removing a bootstrap record".to_owned())?;
    }
    Ok(())
}

/// Records a finished bootstrap's exit code, so its result outlives the Engine's memory of the exec.
async fn record_exit(engine: &Engine, id: &str, code: i64) -> Result<(), Status> {
    make_record(
        engine,
        id,
        Record::Exited,
        LABEL_RECORD_EXIT,
        &code.to_string(),
    )
    .await
    .map(|_| ())
}

/// The state an exit code means.
fn finished(code: Option<i64>) -> BootstrapState {
    match code {
        Some(0) => BootstrapState::Completed,
        Some(code) => BootstrapState::Failed(code),
        None => BootstrapState::Lost(String::new()),
    }
}

/// How far the container's bootstrap got, from the driver's records and the Engine's exec record. A
/// result the Engine knows but nobody recorded yet is recorded now.
///
/// Nothing in the container is read (it is the machine's, and a machine may write anything there),
/// except for a container an earlier driver made: there the old exit file, at most a few bytes
/// parsed as a number, says how its bootstrap ended; its exec id is never read.
///
/// The exit record is only ever made after the started one, so either may be read first: `settled`
/// reads the exit record first (one look for a machine long bootstrapped, as status calls mostly
/// see), otherwise the started one (one look for a bootstrap not started yet).
async fn bootstrap_state(
    engine: &Engine,
    c: &Container,
    settled: bool,
) -> Result<BootstrapState, Status> {
    let exited = |labels: HashMap<String, String>| {
        finished(
            labels
                .get(LABEL_RECORD_EXIT)
                .and_then(|code| code.parse().ok()),
        )
    };
    if settled && let Some(labels) = read_record(engine, &c.id, Record::Exited).await? {
        return Ok(exited(labels));
    }
    let Some(started) = read_record(engine, &c.id, Record::Started).await? else {
        return legacy_state(engine, c).await;
    };
    if !settled && let Some(labels) = read_record(engine, &c.id, Record::Exited).await? {
        return Ok(exited(labels));
    }
    let Some(exec_id) = started
        .get(LABEL_RECORD_EXEC)
        .filter(|e| spec::is_engine_id(e))
        .cloned()
    else {
        return Ok(BootstrapState::Lost(String::new()));
    };
    match engine.inspect_exec(&exec_id).await {
        // An exec of another container is not this bootstrap, whatever recorded it.
        Ok(x) if x.container_id.as_deref() != Some(c.id.as_str()) => {
            Ok(BootstrapState::Lost(exec_id))
        }
        Ok(x) if x.running == Some(true) => Ok(BootstrapState::Running(exec_id)),
        Ok(x) => match x.exit_code {
            Some(code) => {
                record_exit(engine, &c.id, code).await?;
                Ok(finished(Some(code)))
            }
            None => Ok(BootstrapState::Unstarted(exec_id)),
        },
        Err(BollardError::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(BootstrapState::Lost(exec_id)),
        Err(e) => Err(EngineError::new("inspecting the bootstrap's exec", e).to_status()),
    }
}

/// The bootstrap state of a container without records: Pending for one this driver made; for one an
/// earlier driver made (no [`LABEL_RECORDS`]), the exit code that driver wrote in it, read as data
/// only (a regular file of a few digits), else Unknown, never Pending: the file is in the machine's
/// hands, and a machine that removed it or replaced it with a link must not get its bootstrap run
/// again. The code read is the machine's own word (it could have written a 0); that fakes nothing
/// a machine could not fake anyway, since its bootstrap runs inside it, as root.
async fn legacy_state(engine: &Engine, c: &Container) -> Result<BootstrapState, Status> {
    if c.labels.contains_key(LABEL_RECORDS) {
        return Ok(BootstrapState::Pending);
    }
    let exit = read_small_file(engine, &c.id, LEGACY_EXIT_PATH)
        .await
        .map_err(|e| e.to_status())?;
    let code: Option<i64> = exit.and_then(|exit| {
        std::str::from_utf8(&exit)
            .ok()
            .map(str::trim)
            .filter(|t| t.len() <= 20)
            .and_then(|t| t.parse().ok())
    });
    Ok(code.map_or(BootstrapState::Unknown, |code| finished(Some(code))))
}

/// Follows a bootstrap this driver started until it ends, and records its exit code, so the result
/// is kept even if nobody asks before the Engine forgets the exec.
fn watch(engine: Engine, id: String, exec_id: String) {
    tokio::spawn(
        async move {
            let give_up = Instant::now() + WATCH_LIMIT;
            let mut pause = Duration::from_millis(50);
            while Instant::now() < give_up {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
                match engine.inspect_exec(&exec_id).await {
                    Ok(x) if x.running == Some(true) => {}
                    Ok(x) => {
                        if let Some(code) = x.exit_code {
                            tracing::info!(exit_code = code, "bootstrap finished");
                            if let Err(e) = record_exit(&engine, &id, code).await {
                                tracing::debug!(error = %e, "bootstrap result not recorded; the next status call records it");
                            }
                        }
                        return;
                    }
                    // The container is gone, or the Engine is away: a later call settles it.
                    Err(_) => return,
                }
            }
        }
        .instrument(tracing::debug_span!("docker.bootstrap_watch")),
    );
}

impl Docker {
    /// A provider with these operator settings; `operation_timeout` bounds each driver call.
    pub fn new(settings: Settings, operation_timeout: Duration) -> Self {
        Docker {
            settings,
            operation_timeout,
            engines: Mutex::default(),
            bootstrap_locks: Mutex::default(),
            mount_gate: tokio::sync::Mutex::default(),
        }
    }

    /// The client of the Engine at `host`, connected (and the API version agreed) on first use.
    async fn engine(&self, host: &str) -> Result<Engine, Status> {
        let cell = self
            .engines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(host.to_owned())
            .or_default()
            .clone();
        let timeout = self.operation_timeout.as_secs().max(1);
        cell.get_or_try_init(|| async {
            let engine = if host.starts_with("unix://") {
                Engine::connect_with_unix(host, timeout, bollard::API_DEFAULT_VERSION)
            } else {
                Engine::connect_with_http(host, timeout, bollard::API_DEFAULT_VERSION)
            }
            .map_err(|e| EngineError::new("connecting", e).to_status())?;
            engine
                .negotiate_version()
                .await
                .map_err(|e| EngineError::new("agreeing on the API version", e).to_status())
        })
        .await
        .cloned()
    }

    /// The request's Engine and the class's scope. `secret` may name the Engine. Everything about
    /// the request's shape is checked before the Engine is chosen (the spec, its scope, bootstrap
    /// and grace period, and `extra`), so a malformed request is a 400 even on a driver whose
    /// Engine is unusable (412) or down (503).
    /// The namespace's machines on one Engine: every container Berth made carries the machine
    /// label; `default` also holds those made before the namespace stamp, so the stamp is checked
    /// here, not by the Engine.
    async fn machines_on(&self, engine: &Engine, namespace: &str) -> Result<Vec<Listed>, Status> {
        let listed_containers = engine
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([(
                    "label".to_owned(),
                    vec![LABEL_MACHINE.to_owned()],
                )])),
                ..ListContainersOptions::default()
            }))
            .await
            .map_err(|e| EngineError::new("listing the namespace's containers", e).to_status())?;
        // Another stack's machines are not this one's to count (BERTH_DOCKER_INSTANCE).
        let instance = self.settings.instance.as_ref();
        Ok(listed_containers
            .into_iter()
            .filter_map(|c| c.labels)
            .filter(|labels| labels.get(spec::LABEL_INSTANCE) == instance)
            .filter_map(|labels| listed_machine(&labels))
            .filter(|m| m.namespace == namespace)
            .collect())
    }

    async fn target(
        &self,
        class: &MachineClass,
        secret: &Secret,
        extra: impl FnOnce(&ProviderSpec) -> Result<(), Status>,
    ) -> Result<(Target, ProviderSpec), Status> {
        spec::check_class_name(class)?;
        let spec = ProviderSpec::decode(&class.provider_spec)?;
        let scope = Scope {
            instance: self.settings.instance.clone(),
            ..spec.scope()?
        };
        spec.bootstrap()?;
        spec.stop_grace()?;
        extra(&spec)?;
        let host = self.engine_address(secret)?;
        let engine = self.engine(&host).await?;
        Ok((
            Target {
                engine,
                host,
                scope,
            },
            spec,
        ))
    }

    fn engine_address(&self, secret: &Secret) -> Result<String, Status> {
        let named = secret.get_str(spec::SECRET_DOCKER_HOST)?;
        self.settings.engine_for(named.as_deref())
    }

    /// Runs one driver call within the operation timeout.
    async fn bounded<T>(
        &self,
        what: String,
        call: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        tokio::time::timeout(self.operation_timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(Status::new(
                    Code::DeadlineExceeded,
                    format!(
                        "{what} did not finish within {:?}; retry",
                        self.operation_timeout
                    ),
                ))
            })
    }

    /// A CreateMachine's checks that need no Engine call, in the order it answers them: the
    /// request's shape first (400), then what this driver's settings refuse (412): the Engine it
    /// names or the default one, then the spec's registry, privileges, mounts (each in the
    /// machine's namespace's directory).
    fn checked_create(&self, req: &MachineRequest) -> Result<Checked, Status> {
        let spec = ProviderSpec::decode(&req.machine_class.provider_spec)?;
        let bootstrap = spec.bootstrap()?;
        let user_data = spec::user_data(&req.secret, bootstrap);
        let host = self.engine_address(&req.secret);
        let plan = spec.plan(
            &self.settings,
            host.as_ref().is_ok_and(|h| h.starts_with("unix://")),
        );
        if let Some(e) = [
            plan.as_ref().err(),
            user_data.as_ref().err(),
            host.as_ref().err(),
        ]
        .into_iter()
        .flatten()
        .find(|e| e.code == Code::InvalidArgument)
        {
            return Err(e.clone());
        }
        let (host, plan, user_data) = (host?, plan?, user_data?);
        let namespace = request_namespace(req);
        for (i, m) in plan.mounts.iter().enumerate() {
            if let Err(rule) = self.settings.confine_to_namespace(&m.host_path, namespace) {
                return Err(Status::new(
                    Code::FailedPrecondition,
                    format!("{SPEC}.mounts[{i}].hostPath: {rule}"),
                ));
            }
        }
        Ok(Checked {
            host,
            plan,
            user_data,
        })
    }

    /// The container named `name`, if it exists (exactly that name: the Engine would also take an
    /// id prefix).
    async fn by_name(&self, t: &Target, name: &str) -> Result<Option<Container>, Status> {
        match t.engine.inspect_container(name, None).await {
            Ok(c) => {
                let c = Container::from_inspect(c);
                Ok((c.name == name).then_some(c))
            }
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(e) => Err(EngineError::new(format!("inspecting container {name}"), e).to_status()),
        }
    }

    /// The container of the cluster made for machine `name` with UID `uid`.
    async fn by_owner(
        &self,
        t: &Target,
        name: &str,
        uid: &str,
    ) -> Result<Option<Container>, Status> {
        let mut labels = t.scope.label_filters();
        labels.push(format!("{LABEL_MACHINE}={name}"));
        if !uid.is_empty() {
            labels.push(format!("{LABEL_UID}={uid}"));
        }
        let listed = t
            .engine
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([("label".to_owned(), labels)])),
                ..ListContainersOptions::default()
            }))
            .await
            .map_err(|e| {
                EngineError::new(format!("listing the containers of machine {name}"), e).to_status()
            })?;
        let ids: Vec<String> = listed
            .into_iter()
            .filter(|c| {
                c.labels
                    .as_ref()
                    .is_some_and(|l| t.scope.holds(l) && l.get(LABEL_UID).is_some_and(|u| u == uid))
            })
            .filter_map(|c| c.id)
            .collect();
        match ids.as_slice() {
            [] => Ok(None),
            [id] => self.by_id(t, id).await,
            many => Err(Status::new(
                Code::OutOfRange,
                format!(
                    "multiple containers back machine {name:?}: [{}]",
                    many.iter().map(|i| short(i)).collect::<Vec<_>>().join(" ")
                ),
            )),
        }
    }

    /// The container with this id, if it (still) exists.
    async fn by_id(&self, t: &Target, id: &str) -> Result<Option<Container>, Status> {
        match t.engine.inspect_container(id, None).await {
            Ok(c) => Ok(Some(Container::from_inspect(c))),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(e) => {
                Err(EngineError::new(format!("inspecting container {}", short(id)), e).to_status())
            }
        }
    }

    /// The container backing the machine: the one `spec.providerID` names (within the cluster), else,
    /// when `by_owner_too`, the one made for the machine's name and UID.
    async fn find(
        &self,
        t: &Target,
        req: &MachineRequest,
        name: &str,
        uid: &str,
        by_owner_too: bool,
    ) -> Result<Option<Container>, Status> {
        // Another namespace's, role's or machine's container is answered as one that does not
        // exist: a providerID only says where to look, never whose the container is.
        let namespace = request_namespace(req);
        let label = |c: &Container, key: &str| c.labels.get(key).cloned().unwrap_or_default();
        let ours = |c: &Container| {
            t.scope.holds(&c.labels)
                && label(c, LABEL_ROLE) == t.scope.role
                && label(c, LABEL_MACHINE) == name
                && (uid.is_empty() || label(c, LABEL_UID) == uid)
                && c.namespace() == namespace
        };
        let provider_id = req.machine.spec.provider_id.as_str();
        if !provider_id.is_empty() {
            let named = spec::decode_provider_id(provider_id)?;
            let found = self.by_name(t, named).await?.filter(ours);
            if found.is_some() || !by_owner_too {
                return Ok(found);
            }
        }
        Ok(self.by_owner(t, name, uid).await?.filter(ours))
    }

    /// Makes the machine's container, or adopts the one made for it already (found by its UID, or
    /// holding its name with its labels after a create race). Pulls a missing image only when the
    /// class allows it.
    async fn create_or_adopt(
        &self,
        t: &Target,
        plan: &Plan,
        name: &str,
        uid: &str,
        namespace: &str,
    ) -> Result<(Container, bool), Status> {
        if let Some(c) = self.by_owner(t, name, uid).await? {
            if c.namespace() != namespace {
                return Err(name_taken(name));
            }
            return Ok((c, false));
        }
        self.check_network(t, plan).await?;
        let own: Vec<Bind> = plan
            .mounts
            .iter()
            .map(|m| (m.host_path.clone(), !m.read_only))
            .collect();
        // Held until the container exists, so the next create's check sees it.
        let _gate = if own.is_empty() {
            None
        } else {
            let gate = self.mount_gate.lock().await;
            self.check_neighbours(t, None, &own).await?;
            Some(gate)
        };
        let container = spec::container_name(namespace, name, t.scope.instance.as_deref());
        let mut body = plan.container(name, uid);
        body.labels
            .get_or_insert_default()
            .insert(NAMESPACE_STAMP.to_owned(), namespace.to_owned());
        let mut pulled = false;
        loop {
            self.check_image_labels(t, &plan.image).await?;
            let made = t
                .engine
                .create_container(
                    Some(CreateContainerOptions {
                        name: Some(container.clone()),
                        ..CreateContainerOptions::default()
                    }),
                    body.clone(),
                )
                .await
                .map_err(|e| EngineError::new(format!("creating container {container}"), e));
            let e = match made {
                Ok(made) => {
                    return match self.by_id(t, &made.id).await? {
                        Some(c) => Ok((c, true)),
                        None => Err(Status::unavailable(format!(
                            "container {container} was removed right after it was created; retry"
                        ))),
                    };
                }
                Err(e) => e,
            };
            match e.status() {
                // The name is taken: by a create of this machine that won the race (adopt it), or by
                // another machine (one name is one machine).
                Some(409) => {
                    return match self.holder_of(t, &container).await? {
                        Some(c)
                            if t.scope.holds(&c.labels)
                                && c.labels.get(LABEL_MACHINE).map(String::as_str)
                                    == Some(name)
                                && c.labels.get(LABEL_UID).map(String::as_str) == Some(uid)
                                && c.namespace() == namespace =>
                        {
                            Ok((c, false))
                        }
                        Some(_) => Err(name_taken(name)),
                        None => Err(Status::unavailable(format!(
                            "the name of container {container} is held but no container shows it (being removed?); retry"
                        ))),
                    };
                }
                Some(404) if !pulled => {
                    if self.image_exists(t, &plan.image).await? {
                        // Not the image: the Engine misses something else the spec names (a network).
                        return Err(Status::new(
                            Code::FailedPrecondition,
                            format!(
                                "{SPEC}: the Docker Engine cannot create container {container}: {}",
                                e.message()
                            ),
                        ));
                    }
                    if plan.pull == Pull::Never {
                        return Err(Status::new(
                            Code::FailedPrecondition,
                            format!(
                                "{SPEC}.image: image {:?} is not on the Docker Engine; load it there, or set {SPEC}.pull: IfNotPresent to pull it",
                                plan.image.reference
                            ),
                        ));
                    }
                    self.pull(t, &plan.image).await?;
                    pulled = true;
                }
                Some(404) => {
                    return Err(Status::new(
                        Code::FailedPrecondition,
                        format!(
                            "{SPEC}: the Docker Engine cannot create container {container} after pulling {:?}: {}",
                            plan.image.reference,
                            e.message()
                        ),
                    ));
                }
                _ => return Err(e.to_status()),
            }
        }
    }

    /// Refuses an image carrying a label the driver or the Docker tools read as theirs
    /// ([`spec::foreign_image_label`]): the Engine would copy it onto the machine's container. A
    /// missing image passes (the create that follows says so, or pulls it and looks again).
    async fn check_image_labels(&self, t: &Target, image: &ImageRef) -> Result<(), Status> {
        let labels = match t.engine.inspect_image(&image.reference).await {
            Ok(i) => i.config.and_then(|c| c.labels).unwrap_or_default(),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(()),
            Err(e) => {
                return Err(
                    EngineError::new(format!("inspecting image {:?}", image.reference), e)
                        .to_status(),
                );
            }
        };
        match spec::foreign_image_label(&labels) {
            None => Ok(()),
            Some(key) => Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "{SPEC}.image: image {:?} carries label {key:?}, whose prefix is reserved for the driver and the Docker tools; build the image without it",
                    image.reference
                ),
            )),
        }
    }

    async fn image_exists(&self, t: &Target, image: &ImageRef) -> Result<bool, Status> {
        match t.engine.inspect_image(&image.reference).await {
            Ok(_) => Ok(true),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(false),
            Err(e) => Err(
                EngineError::new(format!("inspecting image {:?}", image.reference), e).to_status(),
            ),
        }
    }

    /// Pulls `image` (its `latest` tag when it names neither tag nor digest: a bare name would pull
    /// every tag).
    async fn pull(&self, t: &Target, image: &ImageRef) -> Result<(), Status> {
        let reference = image.pullable();
        tracing::info!(image = %reference, "pulling a missing image (pull: IfNotPresent)");
        let mut progress = t.engine.create_image(
            Some(CreateImageOptions {
                from_image: Some(reference.clone()),
                ..CreateImageOptions::default()
            }),
            None,
            None,
        );
        while let Some(step) = progress.next().await {
            if let Err(e) = step {
                let e = EngineError::new(format!("pulling image {reference:?}"), e);
                return Err(match e {
                    EngineError::Answered { message, .. } => Status::new(
                        Code::FailedPrecondition,
                        format!(
                            "{SPEC}.image: image {:?} is not on the Docker Engine and pulling it failed: {message}",
                            image.reference
                        ),
                    ),
                    other => other.to_status(),
                });
            }
        }
        Ok(())
    }

    /// Writes the user data into the container unless it is there already: MCM substitutes a fresh
    /// bootstrap token on every CreateMachine, but the machine keeps the one it booted with.
    async fn ensure_user_data(&self, t: &Target, c: &Container, data: &[u8]) -> Result<(), Status> {
        match t
            .engine
            .get_container_archive_info(
                &c.id,
                Some(ContainerArchiveInfoOptions {
                    path: USER_DATA_PATH.to_owned(),
                }),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(e) => {
                return Err(EngineError::new(
                    format!("looking for the user data in container {}", c.name),
                    e,
                )
                .to_status());
            }
        }
        write_file(&t.engine, &c.id, USER_DATA_PATH, USER_DATA_MODE, data).await
    }

    /// Starts the container unless it runs, after checking every host directory it mounts again
    /// ([`Settings::recheck_mount`]): the machine may have planted a symbolic link on the way to one
    /// since it last started (see [`Plan::restart_policy`]).
    async fn ensure_running(&self, t: &Target, c: &Container) -> Result<(), Status> {
        if !c.binds.is_empty() && c.engine_restarts {
            // Made by an earlier driver, which let the Engine restart every machine: from now on
            // only the driver starts this one, after its checks.
            t.engine
                .update_container(
                    &c.id,
                    ContainerUpdateBody {
                        restart_policy: Some(RestartPolicy {
                            name: Some(RestartPolicyNameEnum::NO),
                            maximum_retry_count: None,
                        }),
                        ..ContainerUpdateBody::default()
                    },
                )
                .await
                .map_err(|e| {
                    EngineError::new(
                        format!("updating the restart policy of container {}", c.name),
                        e,
                    )
                    .to_status()
                })?;
        }
        if c.running {
            return Ok(());
        }
        // Held until the Engine has started it, so no other create or start passes its own check
        // in between.
        let _gate = if c.binds.is_empty() {
            None
        } else {
            let gate = self.mount_gate.lock().await;
            self.check_neighbours(t, Some(&c.id), &c.binds).await?;
            Some(gate)
        };
        let local = t.host.starts_with("unix://");
        for (source, _) in &c.binds {
            if let Err(rule) = self.settings.recheck_mount(source, local) {
                tracing::warn!(container = %c.name, %rule, "a mount source failed its check; the machine is not started");
                return Err(Status::new(
                    Code::FailedPrecondition,
                    format!(
                        "machine {:?} is not started: its mount {rule}; the machine must be deleted, or the host directory put back",
                        c.name
                    ),
                ));
            }
        }
        let Err(e) = t.engine.start_container(&c.id, None).await else {
            return Ok(());
        };
        let e = EngineError::new(format!("starting container {}", c.name), e);
        if e.status() != Some(404) {
            return Err(e.to_status());
        }
        // Either the container went away meanwhile, or it exists and something it needs does not.
        match self.by_id(t, &c.id).await? {
            Some(_) => Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "{SPEC}: the Docker Engine cannot start container {}: {}",
                    c.name,
                    e.message()
                ),
            )),
            None => Err(Status::unavailable(format!(
                "container {} was removed while it was being started; retry",
                c.name
            ))),
        }
    }

    /// Removes a container this call created and could not start (with its records, if any). A
    /// failure here is only logged: the caller answers the start's error, and the container, made
    /// for the machine's UID, is adopted (and removed by DeleteMachine) like any other.
    async fn undo_create(&self, t: &Target, c: &Container) {
        let removed = t
            .engine
            .remove_container(
                &c.id,
                Some(RemoveContainerOptions {
                    v: true,
                    force: true,
                    ..RemoveContainerOptions::default()
                }),
            )
            .await;
        let outcome = gone_is_done(removed, || format!("removing container {}", c.name));
        match outcome.and(remove_records(&t.engine, &c.id).await) {
            Ok(()) => {
                tracing::info!(container = %short(&c.id), "container removed: its first start failed");
            }
            Err(e) => {
                tracing::warn!(container = %short(&c.id), error = %e.message, "a container whose first start failed was not removed");
            }
        }
    }

    /// Refuses mounts `own` (of container `own_id`, when it exists) that cross another Berth
    /// container's on the Engine ([`crossing`]), whatever its cluster or namespace: a host
    /// directory is shared by every machine of the Engine. The caller holds the mount gate.
    async fn check_neighbours(
        &self,
        t: &Target,
        own_id: Option<&str>,
        own: &[Bind],
    ) -> Result<(), Status> {
        let listed = t
            .engine
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([(
                    "label".to_owned(),
                    vec![LABEL_MACHINE.to_owned()],
                )])),
                ..ListContainersOptions::default()
            }))
            .await
            .map_err(|e| {
                EngineError::new("listing the machines' containers to check mounts", e).to_status()
            })?;
        for c in listed {
            if own_id.is_some_and(|id| c.id.as_deref() == Some(id)) {
                continue;
            }
            let other: Vec<Bind> = c
                .mounts
                .unwrap_or_default()
                .into_iter()
                .filter(|m| m.typ.as_deref() == Some("bind"))
                .filter_map(|m| Some((m.source?, m.rw.unwrap_or(true))))
                .collect();
            if let Some(rule) = crossing(own, &other) {
                return Err(Status::new(
                    Code::FailedPrecondition,
                    format!(
                        "{SPEC}.mounts: {rule}: a machine could replace the way to the other's source with a symbolic link; use separate directories, or mount the outer one read-only"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The container holding `name` after a create was refused because the name is taken. The
    /// Engine reserves a name a moment before the container that takes it can be inspected, so a
    /// create that lost the race looks again briefly before concluding nothing holds it.
    async fn holder_of(&self, t: &Target, name: &str) -> Result<Option<Container>, Status> {
        let give_up = Instant::now() + NAME_SETTLE;
        let mut pause = Duration::from_millis(10);
        loop {
            if let Some(c) = self.by_name(t, name).await? {
                return Ok(Some(c));
            }
            if Instant::now() + pause > give_up {
                return Ok(None);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// FailedPrecondition when the spec names a network the Engine does not have (checked before
    /// the container is made, so a refused create leaves nothing behind).
    async fn check_network(&self, t: &Target, plan: &Plan) -> Result<(), Status> {
        let Some(network) = &plan.network else {
            return Ok(());
        };
        match t.engine.inspect_network(network, None).await {
            Ok(_) => Ok(()),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Err(Status::new(
                Code::FailedPrecondition,
                format!("{SPEC}.network: the Docker Engine has no network {network:?}"),
            )),
            Err(e) => {
                Err(EngineError::new(format!("inspecting network {network:?}"), e).to_status())
            }
        }
    }

    /// The lock that serialises the bootstrap of one container within this process.
    async fn bootstrap_lock(&self, t: &Target, id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let key = format!("{}#{id}", t.host);
        let lock = {
            let mut locks = self
                .bootstrap_locks
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            locks.retain(|_, l| l.strong_count() > 0);
            match locks.get(&key).and_then(Weak::upgrade) {
                Some(l) => l,
                None => {
                    let l = Arc::new(tokio::sync::Mutex::new(()));
                    locks.insert(key, Arc::downgrade(&l));
                    l
                }
            }
        };
        lock.lock_owned().await
    }

    /// Starts the bootstrap unless it has run (or is running): the exec's id is recorded (in a
    /// record only the driver makes) before the exec starts, so no later call starts a second one.
    async fn run_bootstrap(&self, t: &Target, c: &Container) -> Result<BootstrapState, Status> {
        let _serialised = self.bootstrap_lock(t, &c.id).await;
        let exec_id = match bootstrap_state(&t.engine, c, false).await? {
            BootstrapState::Pending => {
                let exec = t
                    .engine
                    .create_exec(
                        &c.id,
                        CreateExecOptions {
                            cmd: Some(vec![USER_DATA_PATH.to_owned()]),
                            user: Some("0".to_owned()),
                            working_dir: Some("/".to_owned()),
                            attach_stdout: Some(false),
                            attach_stderr: Some(false),
                            ..CreateExecOptions::default()
                        },
                    )
                    .await
                    .map_err(|e| {
                        let e = EngineError::new(
                            format!("preparing the bootstrap of container {}", c.name),
                            e,
                        );
                        match e.status() {
                            Some(409) => Status::new(
                                Code::Uninitialized,
                                format!(
                                    "container {} is not running, so its bootstrap cannot run: {}",
                                    c.name,
                                    e.message()
                                ),
                            ),
                            _ => e.to_status(),
                        }
                    })?;
                let ours = checked_id(&exec.id, "the bootstrap's exec")?;
                let claimed =
                    make_record(&t.engine, &c.id, Record::Started, LABEL_RECORD_EXEC, ours).await?;
                if claimed.get(LABEL_RECORD_EXEC).map(String::as_str) == Some(ours) {
                    exec.id
                } else {
                    // Another driver recorded its exec first: that one is the bootstrap (ours is
                    // never started, and goes with the container).
                    match bootstrap_state(&t.engine, c, false).await? {
                        BootstrapState::Unstarted(exec_id) => exec_id,
                        other => return Ok(other),
                    }
                }
            }
            BootstrapState::Unstarted(exec_id) => exec_id,
            settled => return Ok(settled),
        };
        let started = t
            .engine
            .start_exec(
                &exec_id,
                Some(StartExecOptions {
                    detach: true,
                    ..StartExecOptions::default()
                }),
            )
            .await;
        match started {
            Ok(_) => {}
            // Started by someone else meanwhile: just as good.
            Err(BollardError::DockerResponseServerError {
                status_code: 409, ..
            }) => {}
            Err(e) => {
                // The Engine records an exit code when it cannot even start the program (a missing
                // interpreter, say): that is a failed bootstrap, not an Engine failure.
                let after = bootstrap_state(&t.engine, c, false).await?;
                if matches!(after, BootstrapState::Failed(_) | BootstrapState::Completed) {
                    return Ok(after);
                }
                return Err(EngineError::new(
                    format!("starting the bootstrap of container {}", c.name),
                    e,
                )
                .to_status());
            }
        }
        tracing::info!(container = %c.name, exec = %short(&exec_id), "bootstrap started");
        watch(t.engine.clone(), c.id.clone(), exec_id.clone());
        Ok(BootstrapState::Running(exec_id))
    }

    /// The conditions of a container whose bootstrap is `bootstrap`, after CAPD's.
    fn conditions(c: &Container, bootstrap: &BootstrapState) -> Vec<Condition> {
        let condition = |kind: &str, ok: bool, reason: &str, message: String| Condition {
            kind: kind.to_owned(),
            status: if ok { "True" } else { "False" }.to_owned(),
            reason: reason.to_owned(),
            message,
            last_transition_time: None,
        };
        let (boot_reason, boot_message) = match bootstrap {
            BootstrapState::NotRequested => (
                "NotRequested",
                "the class asks for no bootstrap (bootstrap: none)".to_owned(),
            ),
            BootstrapState::Completed => (
                "Completed",
                "the user data ran once and exited 0".to_owned(),
            ),
            other => ("NotCompleted", other.reason(&c.name)),
        };
        let ready_message = if c.running {
            "the container is running".to_owned()
        } else {
            match c.exit_code {
                Some(code) => format!("the container is {} (exit code {code})", c.state),
                None => format!("the container is {}", c.state),
            }
        };
        let ready = c.running && bootstrap.is_done();
        vec![
            condition(
                "ContainerProvisioned",
                true,
                "Provisioned",
                format!("container {} ({})", c.name, short(&c.id)),
            ),
            condition(
                "BootstrapCompleted",
                bootstrap.is_done(),
                boot_reason,
                boot_message,
            ),
            condition(
                "Ready",
                ready,
                if ready { "Ready" } else { "NotReady" },
                ready_message,
            ),
        ]
    }

    fn missing(name: &str) -> Status {
        Status::not_found(format!("no Docker container backs machine {name:?}"))
    }
}

impl ImageRef {
    /// The reference to pull: with `:latest` when it names neither a tag nor a digest.
    fn pullable(&self) -> String {
        let last = self.reference.rsplit('/').next().unwrap_or_default();
        if self.reference.contains('@') || last.contains(':') {
            self.reference.clone()
        } else {
            format!("{}:latest", self.reference)
        }
    }
}

#[async_trait]
impl Provider for Docker {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> String {
        "Docker Engine: each machine is a container (after Cluster API's Docker provider)".into()
    }

    fn check_create(&self, req: &MachineRequest) -> Result<(), Status> {
        spec::machine_name(&req.machine)?;
        spec::machine_uid(&req.machine)?;
        spec::check_names(req)?;
        self.checked_create(req).map(|_| ())
    }

    async fn create_machine(&self, req: &MachineRequest) -> Result<CreateMachineResponse, Status> {
        let name = spec::machine_name(&req.machine)?;
        let uid = spec::machine_uid(&req.machine)?;
        spec::check_names(req)?;
        let span = tracing::info_span!("docker.create_machine", machine = %name);
        let call = async {
            let Checked {
                host,
                plan,
                user_data,
            } = self.checked_create(req)?;
            let namespace = request_namespace(req);
            let t = Target {
                engine: self.engine(&host).await?,
                host,
                scope: plan.scope.clone(),
            };
            let (c, created) = self
                .create_or_adopt(&t, &plan, &name, &uid, namespace)
                .await?;
            if created {
                tracing::info!(container = %short(&c.id), "container created");
            } else {
                tracing::info!(container = %short(&c.id), "existing container adopted");
            }
            // Written before the container first starts, so its own init finds it at boot.
            if let Some(data) = &user_data {
                if created {
                    write_file(&t.engine, &c.id, USER_DATA_PATH, USER_DATA_MODE, data).await?;
                } else {
                    self.ensure_user_data(&t, &c, data).await?;
                }
            }
            if let Err(e) = self.ensure_running(&t, &c).await {
                // A container that never ran is undone with its create, so a corrected spec
                // makes a fresh one rather than adopting this one.
                if created {
                    self.undo_create(&t, &c).await;
                }
                return Err(e);
            }
            let bootstrap = match plan.bootstrap {
                Bootstrap::None => BootstrapState::NotRequested,
                Bootstrap::Exec => self.run_bootstrap(&t, &c).await?,
            };
            let c = self.by_id(&t, &c.id).await?.ok_or_else(|| {
                Status::unavailable(format!("container {name} was removed meanwhile; retry"))
            })?;
            let state = match &bootstrap {
                BootstrapState::NotRequested => "no bootstrap".to_owned(),
                other if other.is_done() => "bootstrap completed".to_owned(),
                other => other.reason(&name),
            };
            Ok(CreateMachineResponse {
                provider_id: c.provider_id(),
                node_name: c.hostname.clone(),
                last_known_state: format!(
                    "container {} ({}) {} and {}; {state}",
                    c.name,
                    short(&c.id),
                    if created { "created" } else { "adopted" },
                    c.state
                ),
                addresses: c.addresses,
            })
        };
        self.bounded(format!("CreateMachine for machine {name:?}"), call)
            .instrument(span)
            .await
    }

    async fn initialize_machine(
        &self,
        req: &MachineRequest,
    ) -> Result<InitializeMachineResponse, Status> {
        let name = spec::machine_name(&req.machine)?;
        let uid = spec::machine_uid(&req.machine)?;
        spec::check_names(req)?;
        // Read by the lookup after the Engine is chosen; its shape is checked first.
        spec::check_provider_id(&req.machine)?;
        let deadline = Instant::now() + self.operation_timeout;
        let span = tracing::info_span!("docker.initialize_machine", machine = %name);
        let call = async {
            let (t, spec) = self
                .target(&req.machine_class, &req.secret, |spec| {
                    spec::user_data(&req.secret, spec.bootstrap()?).map(|_| ())
                })
                .await?;
            let bootstrap = spec.bootstrap()?;
            let user_data = spec::user_data(&req.secret, bootstrap)?;
            let c = self
                .find(&t, req, &name, &uid, true)
                .await?
                .ok_or_else(|| Self::missing(&name))?;
            let answer = |c: &Container| InitializeMachineResponse {
                provider_id: c.provider_id(),
                node_name: c.hostname.clone(),
                addresses: c.addresses.clone(),
            };
            if let Some(data) = &user_data {
                self.ensure_user_data(&t, &c, data).await?;
            }
            // Also without a bootstrap: a machine with mounts is started by the driver only
            // (after its checks), and this is one of the two calls that start it.
            self.ensure_running(&t, &c).await?;
            if bootstrap == Bootstrap::None {
                return Ok(answer(&c));
            }
            let mut state = self.run_bootstrap(&t, &c).await?;
            // Wait for it while there is time to answer; MCM asks again soon otherwise.
            let mut pause = Duration::from_millis(20);
            while matches!(state, BootstrapState::Running(_))
                && Instant::now() + pause + ANSWER_MARGIN < deadline
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(POLL_MAX);
                state = bootstrap_state(&t.engine, &c, false).await?;
            }
            if !state.is_done() {
                return Err(state.refusal(&name));
            }
            tracing::info!("bootstrap completed");
            Ok(answer(&c))
        };
        self.bounded(format!("InitializeMachine for machine {name:?}"), call)
            .instrument(span)
            .await
    }

    async fn delete_machine(&self, req: &MachineRequest) -> Result<DeleteMachineResponse, Status> {
        let name = spec::machine_name(&req.machine)?;
        let uid = spec::machine_uid(&req.machine)?;
        spec::check_names(req)?;
        // Read by the lookup after the Engine is chosen; its shape is checked first.
        spec::check_provider_id(&req.machine)?;
        let span = tracing::info_span!("docker.delete_machine", machine = %name);
        let call = async {
            let (t, spec) = self
                .target(&req.machine_class, &req.secret, |_| Ok(()))
                .await?;
            let grace = spec.stop_grace()?;
            // With a providerID, only that container: the orphan collector sends a live machine's
            // name with an orphan's id, and the live machine's container must survive.
            let Some(c) = self.find(&t, req, &name, &uid, false).await? else {
                let mut answer = self.nothing_to_delete(&name);
                // The name's container in the caller's own namespace made for another UID: said,
                // so a caller that sent no UID (or a stale one) does not take a running container
                // for gone (a break-it finding). Other namespaces' are never looked at.
                if req.machine.spec.provider_id.is_empty() {
                    let named = spec::container_name(
                        request_namespace(req),
                        &name,
                        t.scope.instance.as_deref(),
                    );
                    let held = self.by_name(&t, &named).await?.is_some_and(|c| {
                        t.scope.holds(&c.labels)
                            && c.labels.get(LABEL_MACHINE).is_some_and(|m| m == &name)
                            && c.namespace() == request_namespace(req)
                    });
                    if held {
                        answer
                            .last_known_state
                            .push_str(&crate::provider::held_by_another(&name, "container"));
                    }
                }
                return Ok(answer);
            };
            // Leave time to remove it after the grace period, within the call's own limit.
            let budget = self.operation_timeout.as_secs().saturating_sub(2) / 2;
            let grace = i64::from(grace).min(i64::try_from(budget).unwrap_or(i64::MAX));
            let stopped = t
                .engine
                .stop_container(
                    &c.id,
                    Some(StopContainerOptions {
                        t: i32::try_from(grace).ok(),
                        ..StopContainerOptions::default()
                    }),
                )
                .await;
            gone_is_done(stopped, || format!("stopping container {}", c.name))?;
            let removed = t
                .engine
                .remove_container(
                    &c.id,
                    Some(RemoveContainerOptions {
                        v: true,
                        force: true,
                        ..RemoveContainerOptions::default()
                    }),
                )
                .await;
            gone_is_done(removed, || format!("removing container {}", c.name))?;
            remove_records(&t.engine, &c.id).await?;
            tracing::info!(container = %short(&c.id), "container removed");
            Ok(DeleteMachineResponse {
                last_known_state: format!(
                    "container {} ({}) stopped (grace period {grace}s) and removed with its anonymous volumes",
                    c.name,
                    short(&c.id)
                ),
            })
        };
        self.bounded(format!("DeleteMachine for machine {name:?}"), call)
            .instrument(span)
            .await
    }

    async fn get_machine_status(
        &self,
        req: &MachineRequest,
    ) -> Result<GetMachineStatusResponse, Status> {
        let name = spec::machine_name(&req.machine)?;
        let uid = spec::machine_uid(&req.machine)?;
        spec::check_names(req)?;
        // Read by the lookup after the Engine is chosen; its shape is checked first.
        spec::check_provider_id(&req.machine)?;
        let span = tracing::debug_span!("docker.get_machine_status", machine = %name);
        let call = async {
            let (t, spec) = self
                .target(&req.machine_class, &req.secret, |_| Ok(()))
                .await?;
            let bootstrap = spec.bootstrap()?;
            let c = self
                .find(&t, req, &name, &uid, true)
                .await?
                .ok_or_else(|| Self::missing(&name))?;
            let state = match bootstrap {
                Bootstrap::None => BootstrapState::NotRequested,
                Bootstrap::Exec => bootstrap_state(&t.engine, &c, true).await?,
            };
            if !state.is_done() {
                return Err(state.refusal(&name));
            }
            Ok(GetMachineStatusResponse {
                provider_id: c.provider_id(),
                node_name: c.hostname.clone(),
                conditions: Self::conditions(&c, &state),
                addresses: c.addresses,
            })
        };
        self.bounded(format!("GetMachineStatus for machine {name:?}"), call)
            .instrument(span)
            .await
    }

    async fn machines(
        &self,
        req: &ListMachinesRequest,
    ) -> Result<BTreeMap<String, Listed>, Status> {
        let call = async {
            let (t, _) = self
                .target(&req.machine_class, &req.secret, |_| Ok(()))
                .await?;
            let listed = t
                .engine
                .list_containers(Some(ListContainersOptions {
                    all: true,
                    filters: Some(HashMap::from([(
                        "label".to_owned(),
                        t.scope
                            .label_filters()
                            .into_iter()
                            .chain([format!("{LABEL_ROLE}={}", t.scope.role)])
                            .collect(),
                    )])),
                    ..ListContainersOptions::default()
                }))
                .await
                .map_err(|e| EngineError::new("listing the class's containers", e).to_status())?;
            Ok(listed
                .into_iter()
                .filter(|c| c.labels.as_ref().is_some_and(|l| t.scope.holds(l)))
                .filter_map(|c| {
                    let name = c.names?.first()?.trim_start_matches('/').to_owned();
                    Some((spec::provider_id(&name), listed_machine(&c.labels?)?))
                })
                .collect())
        };
        self.bounded("ListMachines".to_owned(), call).await
    }

    async fn namespace_machines(
        &self,
        req: &MachineRequest,
        namespace: &str,
    ) -> Result<Vec<Listed>, Status> {
        let call = async {
            let (t, _) = self
                .target(&req.machine_class, &req.secret, |_| Ok(()))
                .await?;
            // The quota is the namespace's, not one Engine's: counted on every Engine a secret may
            // name (a break-it finding: counted on one, a tenant went on on the next). The
            // request's own Engine must answer; another that cannot be reached holds nothing a
            // create could add to now, and is left out with a warning.
            let mut hosts: std::collections::BTreeSet<String> = self.settings.allowed_hosts.clone();
            if let Ok(default) = &self.settings.default_host {
                hosts.insert(default.clone());
            }
            hosts.remove(&t.host);
            let mut machines = self.machines_on(&t.engine, namespace).await?;
            for host in hosts {
                let listed = match self.engine(&host).await {
                    Ok(engine) => self.machines_on(&engine, namespace).await,
                    Err(e) => Err(e),
                };
                match listed {
                    Ok(more) => machines.extend(more),
                    Err(e) => {
                        tracing::warn!(engine = %host, error = %e.message, "machine quota: an allowed Docker Engine could not be counted")
                    }
                }
            }
            Ok(machines)
        };
        self.bounded("counting the namespace's machines".to_owned(), call)
            .await
    }

    fn missing(&self, machine_name: &str) -> Status {
        Self::missing(machine_name)
    }

    fn nothing_to_delete(&self, machine_name: &str) -> DeleteMachineResponse {
        DeleteMachineResponse {
            last_known_state: format!(
                "no Docker container backs machine {machine_name}; nothing to delete"
            ),
        }
    }

    fn volume_id(&self, pv: &PersistentVolumeSpec) -> Option<String> {
        pv.csi
            .as_ref()
            .filter(|csi| {
                csi.driver == spec::VOLUME_CSI_DRIVER && spec::is_volume_name(&csi.volume_handle)
            })
            .map(|csi| csi.volume_handle.clone())
    }
}

/// A container's machine as ListMachines and the machine quota see it, from its labels.
fn listed_machine(labels: &HashMap<String, String>) -> Option<Listed> {
    Some(Listed {
        name: labels.get(LABEL_MACHINE)?.clone(),
        namespace: stamped_namespace(labels.get(NAMESPACE_STAMP).map(String::as_str)).to_owned(),
        uid: labels.get(LABEL_UID).cloned().unwrap_or_default(),
    })
}

/// CreateMachine's AlreadyExists when the name's container is another machine's: it says only
/// that the name is taken, never whose it is (another tenant's UID, cluster or labels).
fn name_taken(name: &str) -> Status {
    Status::new(
        Code::AlreadyExists,
        format!("the name {name:?} is taken on the Docker Engine; one name is one machine"),
    )
}

/// The outcome of an Engine call that makes a container go away: a 404 (it is gone already) is as
/// good as done; any other failure is answered as what `doing` says.
fn gone_is_done(
    outcome: Result<(), BollardError>,
    doing: impl FnOnce() -> String,
) -> Result<(), Status> {
    match outcome {
        Ok(())
        | Err(BollardError::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(e) => Err(EngineError::new(doing(), e).to_status()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::machine::{CsiVolumeSource, PersistentVolumeSpec};

    #[test]
    fn engine_errors_keep_client_refusals_and_hide_engine_internals() {
        let answered = |status: u16, message: &str| {
            EngineError::new(
                "creating container m-1",
                BollardError::DockerResponseServerError {
                    status_code: status,
                    message: message.into(),
                },
            )
            .to_status()
        };
        let s = answered(400, "invalid mount config");
        assert_eq!(s.code, Code::InvalidArgument);
        assert!(s.message.contains("invalid mount config"));
        // The Engine's words may repeat a spec's bytes: no control character reaches the caller.
        let s = answered(400, "bad path \"/x\u{1b}[31m\n\u{85}y\"");
        assert!(!s.message.chars().any(char::is_control), "{s:?}");
        assert!(s.message.contains("/x [31m  y"), "{s:?}");
        assert_eq!(answered(404, "no such container").code, Code::NotFound);
        assert_eq!(answered(409, "removal in progress").code, Code::Unavailable);
        let s = answered(
            500,
            "error at /var/lib/docker/overlay2/abc: unix:///run/x.sock",
        );
        assert_eq!(s.code, Code::Internal);
        assert!(!s.message.contains("/var/lib/docker"), "{}", s.message);
        let s = EngineError::new(
            "connecting",
            BollardError::IOError {
                err: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "/secret/path/docker.sock missing",
                ),
            },
        )
        .to_status();
        assert_eq!(s.code, Code::Unavailable);
        assert!(!s.message.contains("/secret/path"), "{}", s.message);
        assert!(s.message.contains("does not answer"));
    }

    #[test]
    fn a_mount_may_not_lie_strictly_inside_another_machines_writable_one() {
        let w = |p: &str| (p.to_owned(), true);
        let r = |p: &str| (p.to_owned(), false);
        // Inside another's writable mount, or writable around another's: refused either way.
        assert!(crossing(&[r("/m/root/w")], &[w("/m/root")]).is_some());
        assert!(crossing(&[w("/m/root")], &[r("/m/root/w")]).is_some());
        assert!(crossing(&[w("/m/root/w")], &[w("/m/root")]).is_some());
        // Equal sources, read-only outer ones, and neighbours are fine.
        assert_eq!(crossing(&[w("/m/root")], &[w("/m/root")]), None);
        assert_eq!(crossing(&[r("/m/root/w")], &[r("/m/root")]), None);
        assert_eq!(crossing(&[r("/m/root")], &[r("/m/root/w")]), None);
        assert_eq!(crossing(&[w("/m/root")], &[w("/m/rooted")]), None);
        assert_eq!(crossing(&[w("/m/a")], &[]), None);
        let e = crossing(&[r("/m/root/w")], &[w("/m/root")]).unwrap();
        assert!(
            e.contains("lies inside another machine's writable mount"),
            "{e}"
        );
    }

    #[test]
    fn bootstrap_states_explain_themselves() {
        assert!(BootstrapState::Completed.is_done());
        assert!(BootstrapState::NotRequested.is_done());
        for s in [
            BootstrapState::Pending,
            BootstrapState::Unstarted("e".into()),
            BootstrapState::Running("0123456789abcdef".into()),
            BootstrapState::Failed(3),
            BootstrapState::Lost("e".into()),
            BootstrapState::Unknown,
        ] {
            assert!(!s.is_done());
            assert!(s.reason("m-1").contains("\"m-1\""), "{s:?}");
            let code = if s == BootstrapState::Unknown {
                Code::FailedPrecondition
            } else {
                Code::Uninitialized
            };
            assert_eq!(s.refusal("m").code, code, "{s:?}");
        }
        assert!(
            BootstrapState::Failed(3)
                .reason("m")
                .contains("exit code 3")
        );
        assert!(
            BootstrapState::Running("0123456789abcdef".into())
                .reason("m")
                .contains("exec 0123456789ab)")
        );
    }

    #[test]
    fn pulls_name_a_tag() {
        let image = |r: &str| spec::parse_image(r).unwrap().pullable();
        assert_eq!(image("alpine"), "alpine:latest");
        assert_eq!(image("localhost:5000/a/b"), "localhost:5000/a/b:latest");
        assert_eq!(image("localhost:5000/a/b:v1"), "localhost:5000/a/b:v1");
        assert_eq!(
            image("a@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
            "a@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        );
    }

    #[tokio::test]
    async fn volume_ids_are_docker_volume_names_of_the_berth_csi_driver() {
        let d = Docker::new(Settings::default(), Duration::from_secs(5));
        let csi = |driver: &str, handle: &str| PersistentVolumeSpec {
            csi: Some(CsiVolumeSource {
                driver: driver.into(),
                volume_handle: handle.into(),
                ..CsiVolumeSource::default()
            }),
            ..PersistentVolumeSpec::default()
        };
        let req = domain::machine::GetVolumeIdsRequest {
            pv_specs: vec![
                csi(spec::VOLUME_CSI_DRIVER, "berth-default-data-1a2b3c4d"),
                csi("diskplugin.csi.alibabacloud.com", "d-1"),
                csi(spec::VOLUME_CSI_DRIVER, "../etc"),
                PersistentVolumeSpec::default(),
            ],
        };
        let ids = d.get_volume_ids(&req).await.unwrap().volume_ids;
        assert_eq!(ids, ["berth-default-data-1a2b3c4d"]);
    }
}
