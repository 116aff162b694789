//! The store's errors and the answer each is: apart because the mapping from SQLite's failures to
//! the API's codes is a decision of its own, read by every caller of the store.

use domain::{Code, Status};
use service_kit::ApiError;

/// A store failure, turned into the right answer by `From<StoreError> for ApiError`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An `If-Match` precondition did not hold (412, code 9).
    #[error("{0}")]
    PreconditionFailed(String),
    /// The database refused a write for a constraint (409, code 10: a concurrent change).
    #[error("constraint violated: {0}")]
    Conflict(sqlx::Error),
    /// The database stayed locked past the busy timeout (503, code 14).
    #[error("database busy: {0}")]
    Busy(sqlx::Error),
    /// The registration breaks a rule about other registrations (409, code 6): the status names
    /// the field, the other orchestrator and the rule.
    #[error("{}", .0.message)]
    Clash(Status),
    /// Anything else (500).
    #[error("database: {0}")]
    Db(sqlx::Error),
    /// A row that does not decode (500).
    #[error("corrupt row for {name:?}: {why}")]
    Corrupt {
        /// The row's name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &e {
            if db.is_unique_violation() || db.is_check_violation() {
                return StoreError::Conflict(e);
            }
            // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with or without an extended code.
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
            StoreError::PreconditionFailed(message) => {
                ApiError::new(Status::new(Code::FailedPrecondition, message))
            }
            StoreError::Clash(status) => ApiError::new(status),
            StoreError::Conflict(cause) => ApiError::from_code(
                Code::Aborted,
                "the registration conflicted with a concurrent change; retry it",
            )
            .with_cause(cause),
            StoreError::Busy(cause) => ApiError::from_code(
                Code::Unavailable,
                "the registry database is busy; retry shortly",
            )
            .with_cause(cause),
            e @ (StoreError::Db(_) | StoreError::Corrupt { .. }) => ApiError::internal(e),
        }
    }
}
