//! What the cluster is set to refuse, and where a call meets it: the gate every call passes (a hung
//! server, a required token) and RBAC. Apart because a test sets these faults to see Berth's
//! answer to a refusal, and the refusals' wording is the API server's, kept together here.

use std::collections::BTreeSet;

use axum::extract::{Request, State as AxumState};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::cluster::{Cluster, Shared, lock};
use crate::status::{Refusal, failure, refusal};

/// The user the stand-in's RBAC refusals name, as a pod's service account is named.
pub const USER: &str = "system:serviceaccount:berth:storage-ops";

/// What the cluster is set to refuse.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// A bearer token every call must present; `None`: anonymous calls are allowed.
    pub token: Option<String>,
    /// `(verb, resource)` pairs RBAC refuses (`("create", "persistentvolumeclaims")`).
    pub denied: BTreeSet<(String, String)>,
    /// A ResourceQuota on every namespace: the most claims and the most requested bytes.
    pub quota: Option<Quota>,
    /// Every call hangs, never answered (a server that accepted the connection and stalled).
    pub hang: bool,
}

/// A ResourceQuota named [`Quota::name`].
#[derive(Debug, Clone)]
pub struct Quota {
    /// Its name, as the refusal says it.
    pub name: String,
    /// `count/persistentvolumeclaims`.
    pub claims: Option<usize>,
    /// `requests.storage`, in bytes.
    pub storage: Option<u64>,
}

/// Records the call, then the faults every call meets: a hung server, a required token.
pub(crate) async fn gate(
    AxumState(cluster): AxumState<Shared>,
    request: Request,
    next: Next,
) -> Response {
    let (hang, token) = {
        let mut c = lock(&cluster);
        let uri = request.uri();
        c.calls.push(format!(
            "{} {}{}",
            request.method(),
            uri.path(),
            uri.query().map(|q| format!("?{q}")).unwrap_or_default()
        ));
        (c.faults.hang, c.faults.token.clone())
    };
    if hang {
        std::future::pending::<()>().await;
    }
    if let Some(token) = token {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if presented != Some(token.as_str()) {
            return failure(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "Unauthorized".into(),
                None,
            );
        }
    }
    next.run(request).await
}

/// RBAC: whether the verb on the resource is allowed; the refusal as the API server words it.
pub(crate) fn authorize(
    cluster: &Cluster,
    verb: &str,
    resource: &str,
    namespace: &str,
    name: Option<&str>,
) -> Result<(), Refusal> {
    if !cluster
        .faults
        .denied
        .contains(&(verb.to_string(), resource.to_string()))
    {
        return Ok(());
    }
    let subject = match name {
        Some(name) => format!("{resource} {name:?}"),
        None => resource.to_string(),
    };
    Err(refusal(
        StatusCode::FORBIDDEN,
        "Forbidden",
        format!(
            "{subject} is forbidden: User {USER:?} cannot {verb} resource {resource:?} in API group \"\" in the namespace {namespace:?}"
        ),
        name,
    ))
}
