//! How long a call to the API server may take, and what its answers mean in Berth's codes: apart
//! because every call goes through it, and it is where the server's words are kept from callers.

use std::time::Duration;

use domain::Code;

use crate::backend::BackendError;

/// How long one call to the API server may take: a hung server is answered 503 well within a
/// caller's deadline (the kit's default request timeout is 30 s).
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// One call to the API server, bounded by [`CALL_TIMEOUT`], its failure in Berth's words.
pub(super) async fn call<T>(
    verb: &str,
    namespace: &str,
    future: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, BackendError> {
    match tokio::time::timeout(CALL_TIMEOUT, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(api_error(verb, namespace, &e)),
        // 503 with Retry-After rather than 504: the caller's call did not run out of time, the API
        // server's did, and the same call may well succeed in a moment.
        Err(_) => Err(BackendError::new(
            Code::Unavailable,
            format!(
                "the Kubernetes API server did not answer {verb} persistentvolumeclaims within {}s",
                CALL_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// What the API server's answer (or its absence) means for a Berth caller. The message names the
/// verb, resource and namespace, never the server, a token or a CA: those go to the log only.
pub fn api_error(verb: &str, namespace: &str, e: &kube::Error) -> BackendError {
    let kube::Error::Api(status) = e else {
        return BackendError::new(
            Code::Unavailable,
            "the Kubernetes API server could not be reached",
        )
        .with_detail(e.to_string());
    };
    // A server that is not an API server may answer with no Status at all: its code is then all.
    let said = if status.message.is_empty() {
        format!("HTTP {}", status.code)
    } else {
        status.message.clone()
    };
    let code = match (status.code, status.reason.as_str()) {
        // A ResourceQuota refusal is a 403 whose message says "exceeded quota: <name>, ...".
        (403, _) if said.contains("exceeded quota") => {
            return BackendError::new(
                Code::ResourceExhausted,
                format!("the Kubernetes namespace {namespace:?} is over its quota: {said}"),
            );
        }
        // The resize admission plugin's refusal: the class (or a static PV) cannot expand.
        (403, _) if said.contains("can be resized") => {
            return BackendError::new(
                Code::FailedPrecondition,
                format!(
                    "the claim cannot grow: its StorageClass does not allow expansion (allowVolumeExpansion), or it was not provisioned dynamically ({said})"
                ),
            );
        }
        (403, _) => {
            return BackendError::new(
                Code::FailedPrecondition,
                format!(
                    "Berth may not {verb} persistentvolumeclaims in Kubernetes namespace {namespace:?}: its service account needs a Role allowing it (RBAC refused the call)"
                ),
            )
            .with_detail(said);
        }
        (401, _) => {
            return BackendError::new(
                Code::FailedPrecondition,
                "the Kubernetes API server did not accept Berth's credentials",
            )
            .with_detail(said);
        }
        // A delete's 404 is a claim already gone (its caller takes it so); any other verb's is the
        // namespace missing, or no API server at that address: the set-up's, never the volume's.
        (404, _) if verb == "delete" => Code::NotFound,
        (404, _) => {
            return BackendError::new(
                Code::FailedPrecondition,
                format!(
                    "the Kubernetes API server answered 404 to {verb} persistentvolumeclaims in namespace {namespace:?}: the namespace does not exist, or the server is not a Kubernetes API server"
                ),
            )
            .with_detail(said);
        }
        (409, "AlreadyExists") => Code::AlreadyExists,
        (409, _) => Code::Aborted,
        (400 | 422, _) => Code::InvalidArgument,
        (429, _) => Code::Unavailable,
        (504, _) => Code::DeadlineExceeded,
        _ => Code::Unavailable,
    };
    BackendError::new(
        code,
        format!("Kubernetes refused to {verb} the claim: {said}"),
    )
}
