//! The answer to one request: routed (the gateway's own routes, a refused path, a method a route
//! does not take, a proxied call), admitted (token, rate, scope), and forwarded on the worker's pool
//! for its upstream.
//!
//! Apart from the connection handling because it is per request, not per connection: this is where
//! the engine meets HTTP, routing and admission, while the rest of it deals in sockets and tasks.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::Code;
use hyper::body::{Body as _, Incoming};
use service_kit::ApiError;
use tower::ServiceExt;

use crate::routes::{Classified, Scope, check_path, classify};

use super::caller::{Answered, Answering, Busy, Reading};
use super::worker::Worker;

/// The gateway's own metrics page, which only a cluster-wide `metrics:read` token reads.
const METRICS_PATH: &str = "/metrics";

impl Worker {
    /// The answer to one request, as one future: the request moves into it once (each `async fn`
    /// layer would copy it, and the future it awaits, again).
    pub(super) fn answer(
        self: Arc<Self>,
        request: hyper::Request<Incoming>,
        peer: SocketAddr,
        peer_ip: Option<HeaderValue>,
        busy: Busy,
    ) -> impl Future<Output = Result<Response<Answered>, Infallible>> + Send + 'static {
        let answering = Answering::start(&busy.0);
        let mut request = request.map(|body| {
            if body.is_end_stream() {
                Body::new(body)
            } else {
                Body::new(Reading::start(body, &busy.0))
            }
        });
        let path = request.uri().path();
        let route = match check_path(path) {
            Ok(()) => classify(request.method(), path),
            Err(rule) => Classified::Refused(rule),
        };
        // The gateway's counts are every namespace's calls together: a tenant's token must not read
        // them, so the page needs metrics:read on a cluster-wide token (issue 30).
        let own_metrics = path == METRICS_PATH;
        async move {
            let response = match route {
                Classified::NotProxied if own_metrics => {
                    let admitted = {
                        let mut memory = busy.0.token.lock().expect("token memory lock");
                        self.shared.gateway.admit(
                            &request,
                            (Scope::MetricsRead, METRICS_PATH),
                            peer.ip(),
                            &mut memory,
                        )
                    };
                    match admitted {
                        Ok((_identity, _in_flight)) => {
                            request.extensions_mut().insert(ConnectInfo(peer));
                            match self.shared.router.clone().oneshot(request).await {
                                Ok(response) => response,
                                Err(never) => match never {},
                            }
                        }
                        Err(refusal) => {
                            self.shared
                                .stack
                                .handle(request, METRICS_PATH, |_| async move {
                                    refusal.into_response()
                                })
                                .await
                        }
                    }
                }
                Classified::NotProxied => {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    match self.shared.router.clone().oneshot(request).await {
                        Ok(response) => response,
                        Err(never) => match never {},
                    }
                }
                Classified::Refused(rule) => {
                    self.shared
                        .stack
                        .handle(request, "unmatched", |_| async move {
                            ApiError::from_code(Code::InvalidArgument, rule).into_response()
                        })
                        .await
                }
                Classified::MethodNotAllowed { template, allow } => {
                    self.shared
                        .stack
                        .handle(request, template, |_| async move {
                            let mut refusal = ApiError::from_code(
                                Code::InvalidArgument,
                                format!("{template} takes only {allow}"),
                            )
                            .with_http_status(StatusCode::METHOD_NOT_ALLOWED)
                            .into_response();
                            refusal
                                .headers_mut()
                                .insert(header::ALLOW, HeaderValue::from_static(allow));
                            refusal
                        })
                        .await
                }
                Classified::Route(route) => {
                    let gateway = &self.shared.gateway;
                    let caller = &busy.0;
                    let pool = &self.pools[route.upstream.index()];
                    let stopping = self.stop.clone();
                    self.shared
                        .stack
                        .handle(request, route.template, |mut request| async move {
                            let admitted = {
                                let mut memory = caller.token.lock().expect("token memory lock");
                                gateway.admit(
                                    &request,
                                    (route.scope, route.template),
                                    peer.ip(),
                                    &mut memory,
                                )
                            };
                            // Held until the upstream has answered: a call counts against its
                            // token's calls in flight while its body is being sent; a watch's
                            // for as long as its answer streams.
                            let watching = request
                                .uri()
                                .query()
                                .is_some_and(|q| q.split('&').any(|p| p == "watch=true"));
                            let in_flight = match admitted {
                                Ok((identity, in_flight)) => {
                                    request.extensions_mut().insert(identity);
                                    in_flight
                                }
                                Err(refusal) => return refusal.into_response(),
                            };
                            // What ends an admitted watch when its token is revoked or expires:
                            // known from the token the call was admitted with.
                            let grant_ends = watching.then(|| {
                                gateway
                                    .grant_ends(&request)
                                    .unwrap_or_else(|| Box::pin(std::future::pending()))
                            });
                            // The connection's timer is taken for the call and put back after
                            // it; its calls come one at a time, so nobody waits for it.
                            let mut timer =
                                std::mem::take(&mut *caller.timer.lock().expect("timer lock"));
                            let forwarded = gateway
                                .forwarder
                                .forward(
                                    gateway.upstream(route.upstream),
                                    pool,
                                    request,
                                    peer_ip,
                                    &mut timer,
                                )
                                .await;
                            *caller.timer.lock().expect("timer lock") = timer;
                            match forwarded {
                                Ok(response) if let Some(grant_ends) = grant_ends => {
                                    crate::limits::streamed_until_stopping(
                                        response, in_flight, stopping, grant_ends,
                                    )
                                }
                                Ok(response) => response,
                                Err(e) => e.into_response(),
                            }
                        })
                        .await
                }
            };
            drop(busy);
            Ok(response.map(|body| Answered { body, answering }))
        }
    }
}
