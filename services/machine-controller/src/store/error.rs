//! How the store fails, and the answer each failure becomes. Apart because the API, the
//! reconcilers and the store all speak it, and the mapping to HTTP answers is a rule of its own.

use domain::resources::Kind;
use domain::{Code, Status};
use service_kit::ApiError;

/// A store failure, turned into an answer by `From<StoreError> for ApiError`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The edit refused the change (its status says why).
    #[error("{}", .0.message)]
    Refused(Status),
    /// No such object.
    #[error("{kind} {name:?} not found in namespace {namespace:?}")]
    NotFound {
        /// Kind.
        kind: Kind,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The name is taken.
    #[error("{kind} {name:?} already exists in namespace {namespace:?}")]
    Exists {
        /// Kind.
        kind: Kind,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// A resourceVersion precondition did not hold.
    #[error(
        "{kind} {name:?} is at resourceVersion {current}, not {expected}; read it again and retry"
    )]
    Conflict {
        /// Kind.
        kind: Kind,
        /// Name.
        name: String,
        /// What the caller expected.
        expected: String,
        /// What it is.
        current: u64,
    },
    /// The database stayed locked past the busy timeout.
    #[error("database busy: {0}")]
    Busy(sqlx::Error),
    /// Anything else.
    #[error("database: {0}")]
    Db(sqlx::Error),
    /// The batch this write ran in did not commit (or could not begin): the write did not
    /// happen. Shared by every write of that batch.
    #[error("{0}")]
    Batch(std::sync::Arc<StoreError>),
    /// The store's writer has stopped (the process is ending).
    #[error("the store's writer has stopped")]
    WriterGone,
    /// A row that does not decode.
    #[error("corrupt row for {what}: {why}")]
    Corrupt {
        /// Which object.
        what: String,
        /// What is wrong.
        why: String,
    },
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e {
            let code = db
                .code()
                .and_then(|c| c.parse::<u32>().ok())
                .map(|c| c & 0xff);
            if matches!(code, Some(5 | 6)) {
                return StoreError::Busy(e);
            }
        }
        StoreError::Db(e)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Refused(status) => ApiError::new(status),
            e @ StoreError::NotFound { .. } => ApiError::from_code(Code::NotFound, e.to_string()),
            e @ StoreError::Exists { .. } => {
                ApiError::from_code(Code::AlreadyExists, e.to_string())
            }
            e @ StoreError::Conflict { .. } => ApiError::from_code(Code::Aborted, e.to_string()),
            StoreError::Busy(cause) => ApiError::from_code(
                Code::Unavailable,
                "the controller's database is busy; retry shortly",
            )
            .with_cause(cause),
            StoreError::Batch(cause) if matches!(*cause, StoreError::Busy(_)) => {
                ApiError::from_code(
                    Code::Unavailable,
                    "the controller's database is busy; retry shortly",
                )
                .with_cause(cause)
            }
            StoreError::WriterGone => ApiError::from_code(
                Code::Unavailable,
                "the controller is stopping; retry shortly",
            ),
            e @ (StoreError::Db(_) | StoreError::Corrupt { .. } | StoreError::Batch(_)) => {
                ApiError::internal(e)
            }
        }
    }
}
