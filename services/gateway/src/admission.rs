//! The gateway's shared state, and the checks a proxied call passes before it is forwarded: a token
//! is presented, known and unexpired, within its rate, and scoped for the route. Failed
//! authentications are limited per caller address as well, so guessing tokens is slow. A call
//! refused for its scope still counts toward its token's rate: otherwise a token could probe routes
//! it may not use as fast as the gateway answers.
//!
//! An admitted call carries its token's [`Forwarded`] identity (name and namespaces) in its
//! extensions; the forwarder sets the services' headers from it and from nothing the caller sent.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::header;
use domain::Code;
use service_kit::ApiError;
use service_kit::tenancy::Namespaces;

use crate::auth::{Forwarded, Remembered, TokenEntry, TokenStore};
use crate::limits::{FailureLimiter, InFlight, InFlightCall, RateLimiter, count_refusal};
use crate::openapi::OpenApiCache;
use crate::proxy::{Forwarder, Upstream};
use crate::routes::{Scope, UpstreamId};

/// What the gateway's handlers share.
pub(crate) struct Gateway {
    /// In [`UpstreamId::ALL`] order.
    pub(crate) upstreams: Vec<Upstream>,
    pub(crate) forwarder: Forwarder,
    pub(crate) tokens: Arc<TokenStore>,
    /// Per token; `None` when off.
    pub(crate) limiter: Option<RateLimiter>,
    /// Failed authentications per caller address; `None` when off.
    pub(crate) failures: Option<FailureLimiter>,
    /// Calls in flight per token; `None` when off.
    pub(crate) in_flight: Option<InFlight>,
    pub(crate) openapi: OpenApiCache,
}

impl Gateway {
    pub(crate) fn upstream(&self, id: UpstreamId) -> &Upstream {
        &self.upstreams[id.index()]
    }

    /// The token checks for a call from `peer` to `template`, which needs `scope`, in order:
    /// present, known, within its rate, scoped. `memory` is what its connection remembers of the last
    /// token it presented. What an admitted call forwards as its caller's identity.
    pub(crate) fn admit(
        &self,
        request: &Request,
        (scope, template): (Scope, &'static str),
        peer: IpAddr,
        memory: &mut Option<Remembered>,
    ) -> Result<(Forwarded, Option<InFlightCall>), ApiError> {
        let mut credentials = request.headers().get_all(header::AUTHORIZATION).iter();
        let first = credentials.next();
        // Two credentials: which one a component reads first is a guess the gateway does not make.
        if credentials.next().is_some() {
            return Err(ApiError::from_code(
                Code::InvalidArgument,
                "authorization: give one Authorization header, not several",
            ));
        }
        let presented = first.and_then(|v| v.to_str().ok()).and_then(bearer_token);
        let admitted = match presented {
            None => Err(ApiError::from_code(
                Code::Unauthenticated,
                "a bearer token is required (Authorization: Bearer <token>)",
            )),
            Some(token) => self
                .tokens
                .authenticate_remembering(token, memory, |entry| {
                    self.authorize(entry, request, scope, template)
                })
                .unwrap_or_else(|| {
                    Err(ApiError::from_code(
                        Code::Unauthenticated,
                        "the bearer token is not known, or has expired",
                    ))
                }),
        };
        match admitted {
            Err(refusal) if refusal.status().code == Code::Unauthenticated => {
                Err(match self.limit_failures(peer) {
                    Some(limited) => {
                        count_refusal("auth_failures_limited");
                        limited
                    }
                    None => {
                        count_refusal("unauthenticated");
                        refusal
                    }
                })
            }
            other => other,
        }
    }

    /// A 429 in place of a 401 once `peer` has failed to authenticate too often.
    fn limit_failures(&self, peer: IpAddr) -> Option<ApiError> {
        let wait = self.failures.as_ref()?.check(&peer).err()?;
        Some(
            ApiError::from_code(
                Code::ResourceExhausted,
                "too many calls without a valid token from this address",
            )
            .with_retry_after(wait),
        )
    }

    /// The checks on a known token: within its rate (every call it makes counts, refused ones too),
    /// scoped.
    fn authorize(
        &self,
        entry: &TokenEntry,
        request: &Request,
        scope: Scope,
        template: &'static str,
    ) -> Result<(Forwarded, Option<InFlightCall>), ApiError> {
        if let Some(limiter) = &self.limiter
            && let Err(wait) = limiter.check(entry.identity())
        {
            count_refusal("rate_limited");
            return Err(ApiError::from_code(
                Code::ResourceExhausted,
                format!("token {:?} is over its rate limit", entry.name),
            )
            .with_retry_after(wait));
        }
        let refusal = if !entry.allows(scope) {
            Some(format!(
                "token {:?} lacks the scope {scope} that {} {template} needs",
                entry.name,
                service_kit::metrics::method_label(request.method()),
            ))
        } else if scope.needs_cluster_wide() && entry.namespaces != Namespaces::All {
            // A line written by hand can pair metrics:read with namespaces; what it reads is
            // every namespace's, so such a token reads none of it.
            Some(format!(
                "token {:?} acts only in namespaces {}, and {template} counts every namespace's \
                 calls together: it needs a cluster-wide token",
                entry.name, entry.namespaces
            ))
        } else {
            None
        };
        if let Some(refusal) = refusal {
            count_refusal("forbidden");
            service_kit::tenancy::audit_refused(
                &entry.name,
                &entry.namespaces,
                request.method(),
                template,
                403,
            );
            return Err(ApiError::from_code(Code::PermissionDenied, refusal));
        }
        let call = match &self.in_flight {
            None => None,
            Some(in_flight) => Some(in_flight.enter(&entry.in_flight).ok_or_else(|| {
                count_refusal("in_flight");
                ApiError::from_code(
                    Code::ResourceExhausted,
                    format!(
                        "token {:?} has {} calls in flight, as many as BERTH_TOKEN_MAX_IN_FLIGHT allows; wait for one to finish",
                        entry.name,
                        in_flight.cap()
                    ),
                )
                .with_retry_after(std::time::Duration::from_secs(1))
            })?),
        };
        Ok((entry.forwarded().clone(), call))
    }
}

impl Gateway {
    /// What ends a stream `request` opens: its token's grant ending ([`TokenStore::grant_ends`]).
    pub(crate) fn grant_ends(&self, request: &Request) -> Option<crate::auth::GrantEnds> {
        let value = request
            .headers()
            .get(header::AUTHORIZATION)?
            .to_str()
            .ok()?;
        Some(self.tokens.grant_ends(bearer_token(value)?))
    }
}

/// The token of an `Authorization: Bearer <token>` value; the scheme is case-insensitive (RFC 9110
/// §11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for value in ["Bearer t", "bearer t", "BEARER t", "bEaReR   t "] {
            assert_eq!(bearer_token(value), Some("t"), "{value}");
        }
        for value in ["Basic t", "Bearer", "Bearer ", "Bearert", ""] {
            assert_eq!(bearer_token(value), None, "{value}");
        }
    }
}
