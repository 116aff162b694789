//! What the logic can fail with, typed, so that the HTTP answer (code, detail, `Retry-After`) is
//! decided once, at the API layer (`From<OpsError> for ApiError` in `api.rs`).

use client::ClientError;
use domain::{Status, VolumePhase};

use crate::backend::BackendError;
use crate::store::StoreError;

/// A failed StorageOps call. Each variant's doc names the code it is answered with; its `Display` is
/// the detail the caller reads.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// The store refused or failed: `AlreadyExists`, `ResourceExhausted`, `Unavailable` while
    /// stopping, `Internal` for a database failure.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The registry failed: `Unavailable`, with its `Retry-After`. The detail says that it failed and
    /// how, never where it is (an internal host and port) or what it said; the cause goes to the log.
    #[error(
        "the orchestrator registry is unavailable ({}); nothing was changed, retry later",
        .0.public_reason()
    )]
    RegistryDown(ClientError),
    /// The profile names an orchestrator the registry does not know: `FailedPrecondition` (the
    /// name is well formed; what is missing is a registration, state the schema cannot know).
    #[error("orchestrator: '{0}' is not a registered orchestration provider")]
    UnknownOrchestrator(String),
    /// No orchestrator named and no default registered: `FailedPrecondition`.
    #[error(
        "the profile names no orchestrator and the registry has no default one; name one, or register one with default: true"
    )]
    NoDefaultOrchestrator,
    /// The orchestrator's kind has no StorageOps: `FailedPrecondition`.
    #[error("orchestrator {name:?} is of kind {kind}, which has no StorageOps")]
    NoStorageOps {
        /// The orchestrator.
        name: String,
        /// Its kind.
        kind: domain::OrchestratorKind,
    },
    /// This service may not (or cannot) use the orchestrator's backend: the backend's own status.
    #[error("{0}")]
    BackendRefused(Status),
    /// The volume is there with another spec: `AlreadyExists`, the differences listed.
    #[error(
        "volume {namespace}/{name} already exists with a different spec: {}; it was left as it is",
        differences.join("; ")
    )]
    SpecConflict {
        /// The volume's namespace.
        namespace: String,
        /// The volume's name.
        name: String,
        /// How the asked spec differs, field by field.
        differences: Vec<String>,
    },
    /// The volume is being deleted: `Aborted`.
    #[error("volume {namespace}/{name} is being deleted; add it again once the delete is done")]
    BeingDeleted {
        /// The volume's namespace.
        namespace: String,
        /// The volume's name.
        name: String,
    },
    /// A patch of a volume being deleted: `Aborted`.
    #[error("volume {namespace}/{name} is being deleted and can no longer be changed")]
    PatchOfDeleting {
        /// The volume's namespace.
        namespace: String,
        /// The volume's name.
        name: String,
    },
    /// The row went away while the backend worked on it: `Aborted`.
    #[error("volume {namespace}/{name} was removed meanwhile")]
    RemovedMeanwhile {
        /// The volume's namespace.
        namespace: String,
        /// The volume's name.
        name: String,
    },
    /// The backend failed to make the volume: the backend's code.
    #[error(
        "volume {namespace}/{name} failed: {}; it is kept as Failed (GET shows it, the same AddStorage retries it, DeleteStorage removes it)",
        cause.message
    )]
    ProvisionFailed {
        /// The volume's namespace.
        namespace: String,
        /// The volume's name.
        name: String,
        /// The backend's failure.
        cause: BackendError,
    },
    /// The backend failed to remove the volume's object: the backend's code.
    #[error(
        "deleting volume {namespace}/{name} failed: {}; it stays Deleting and the reconciler retries",
        cause.message
    )]
    DeleteFailed {
        /// The volume's namespace.
        namespace: String,
        /// The volume's name.
        name: String,
        /// The backend's failure.
        cause: BackendError,
    },
    /// No such volume: `NotFound`.
    #[error("volume {namespace}/{name} not found")]
    NotFound {
        /// The volume's namespace.
        namespace: String,
        /// The volume's name.
        name: String,
    },
    /// The volume is not Ready, so it has no usage: `FailedPrecondition`.
    #[error("volume {namespace}/{name} is {phase}, not Ready; it has no usage to measure")]
    NotReady {
        /// The volume's namespace.
        namespace: String,
        /// The volume's name.
        name: String,
        /// Its phase.
        phase: VolumePhase,
    },
    /// The volume is Ready but its backend object is gone: `DataLoss`.
    #[error(
        "volume {namespace}/{name} is Ready but its backend object is gone: {}",
        cause.message
    )]
    ObjectGone {
        /// The volume's namespace.
        namespace: String,
        /// The volume's name.
        name: String,
        /// The backend's failure.
        cause: BackendError,
    },
    /// The backend could not measure the volume: the backend's code and words.
    #[error("{}", .0.message)]
    Usage(BackendError),
    /// The task doing the work failed (a panic): `Internal`.
    #[error("the task doing the work failed")]
    Task(#[from] tokio::task::JoinError),
}
