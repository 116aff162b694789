//! The checks of a list's watch parameters (`timeoutSeconds`, `resourceVersion`): apart because
//! a list runs them whether or not it watches, so a bad one is refused either way.

use domain::Status;

use super::MAX_WATCH;
use crate::ApiError;

/// `timeoutSeconds`, checked on the list (1 to 1800, as the most a watch streams).
pub fn check_timeout(timeout_seconds: Option<u64>) -> Result<(), ApiError> {
    if timeout_seconds.is_some_and(|t| !(1..=MAX_WATCH.as_secs()).contains(&t)) {
        return Err(ApiError::new(Status::invalid_query(
            "timeoutSeconds",
            "must be from 1 to 1800",
        )));
    }
    Ok(())
}

/// `resourceVersion` as a watch takes it: `None` (absent, empty or `0`) to start with every
/// current object, else the version to stream changes after.
pub fn parse_resource_version(text: Option<&str>) -> Result<Option<u64>, ApiError> {
    let refused = || {
        ApiError::new(Status::invalid_query(
            "resourceVersion",
            "must be a version a list or an event answered (digits, no leading zero)",
        ))
    };
    match text {
        None | Some("" | "0") => Ok(None),
        // Digits only, as versions are written: `u64`'s parser would also take a sign (`+3`) or
        // a leading zero (`03`), which would make two spellings of one version.
        Some(text) if !text.bytes().all(|b| b.is_ascii_digit()) || text.starts_with('0') => {
            Err(refused())
        }
        // All digits and still refused: say so, not that it is not digits (a break-it finding).
        Some(text) => text.parse::<u64>().map(Some).map_err(|_| {
            ApiError::new(Status::invalid_query(
                "resourceVersion",
                format!(
                    "is larger than any version there can be (at most {}); use one a list or an event answered",
                    u64::MAX
                ),
            ))
        }),
    }
}
