//! Service-to-service calls: one pooled reqwest client that stamps every request with the current
//! `traceparent`, the request's `x-request-id` and a bearer credential, so a call that crosses three
//! services is one trace and one request id in all their logs.
//!
//! [`inject_propagation`] is the part the typed client (crate `client`, which does not link this kit)
//! is handed by the services that build one: `client::Propagation::new(inject_propagation)`.

use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};

use crate::config::SecretString;
use crate::{request_id, telemetry};

/// A pooled HTTP client for calls to other services.
#[derive(Clone, Debug)]
pub struct HttpClient {
    inner: reqwest::Client,
    bearer: Option<SecretString>,
}

impl HttpClient {
    /// A client whose calls time out after `timeout` and carry `bearer` (the internal credential, or a
    /// user's token in the CLI).
    pub fn new(timeout: Duration, bearer: Option<SecretString>) -> Self {
        let inner = client::pooled_http_client(timeout);
        HttpClient { inner, bearer }
    }

    /// Starts a request with the propagation headers already set.
    pub fn request(
        &self,
        method: reqwest::Method,
        url: impl reqwest::IntoUrl,
    ) -> reqwest::RequestBuilder {
        self.inner
            .request(method, url)
            .headers(self.propagation_headers())
    }

    /// The headers every outgoing call carries.
    pub fn propagation_headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        inject_propagation(&mut headers);
        if let Some(token) = &self.bearer
            && let Ok(mut v) = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
        {
            v.set_sensitive(true);
            headers.insert(AUTHORIZATION, v);
        }
        headers
    }

    /// The underlying client, for the rare call that needs it bare.
    pub fn inner(&self) -> &reqwest::Client {
        &self.inner
    }
}

/// Adds the current trace context (`traceparent`) and the current request's `x-request-id` to
/// `headers`: what every service-to-service call carries.
pub fn inject_propagation(headers: &mut HeaderMap) {
    telemetry::inject_context(headers);
    if let Some(id) = request_id::current_header() {
        headers.insert(request_id::X_REQUEST_ID.clone(), id);
    }
}
