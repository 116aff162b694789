//! The HTTP client: one [`Ecs`] per process, one cheap [`EcsClient`] per (region, credentials).
//!
//! This file holds [`Ecs`], [`EcsClient`] and what they are made of; the rest is a file per
//! concern: `actions` (the typed actions), `pagination` (following `NextToken`), `retry` (the
//! retry loop and its metrics), `attempt` (one HTTP attempt and error decoding) and `signed_call`
//! (how a call is signed and laid out).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::EcsConfig;
use crate::credentials::Credentials;
use crate::endpoint::Region;
use crate::error::Error;
use crate::ratelimit::{RateLimiters, TokenBucket};

mod actions;
mod attempt;
mod pagination;
mod retry;
mod signed_call;

pub use retry::{METRIC_DURATION, METRIC_REQUESTS, METRIC_RETRIES};
pub use signed_call::{SignedCall, sign_call};

/// The ECS API version every action here belongs to.
pub const API_VERSION: &str = "2014-05-26";

/// The shared part: one pooled HTTP client, the configuration and the rate limiters.
///
/// Build one per process and make an [`EcsClient`] per (region, credentials) with [`Ecs::client`];
/// that is cheap, and every client made from the same `Ecs` shares connections and rate limits.
#[derive(Clone, Debug)]
pub struct Ecs {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    http: reqwest::Client,
    config: EcsConfig,
    limiters: RateLimiters,
}

impl Ecs {
    /// Builds the shared HTTP client.
    pub fn new(config: EcsConfig) -> Result<Self, Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(config.user_agent.clone())
            // ECS never redirects; following one would resend signed parameters elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::InvalidRequest(format!("cannot build the HTTP client: {e}")))?;
        let limiters = RateLimiters::new(config.qps, config.burst);
        Ok(Ecs {
            shared: Arc::new(Shared {
                http,
                config,
                limiters,
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &EcsConfig {
        &self.shared.config
    }

    /// A client for `region` acting with `credentials`. The region is a parsed [`Region`], so the
    /// endpoint is built from validated parts only.
    pub fn client(&self, region: &Region, credentials: Credentials) -> EcsClient {
        let endpoint = crate::endpoint::resolve(region, self.shared.config.endpoint.as_deref());
        let host = authority(&endpoint);
        let limiter = self
            .shared
            .limiters
            .bucket(credentials.access_key_id(), region.as_str());
        let region = region.clone();
        EcsClient {
            shared: self.shared.clone(),
            region,
            endpoint,
            host,
            credentials: Arc::new(credentials),
            limiter,
        }
    }
}

/// `host[:port]` of a base URL, without a default port (what the `Host` header carries).
fn authority(endpoint: &str) -> String {
    let (scheme, rest) = endpoint.split_once("://").unwrap_or(("https", endpoint));
    let auth = rest.split('/').next().unwrap_or(rest);
    let auth = auth.rsplit_once('@').map_or(auth, |(_, a)| a);
    match (scheme, auth.rsplit_once(':')) {
        ("https", Some((h, "443"))) | ("http", Some((h, "80"))) => h.to_owned(),
        _ => auth.to_owned(),
    }
}

/// An ECS client for one region and one set of credentials. Cheap to clone.
///
/// Every action takes a `deadline`: no attempt, backoff or rate-limiter wait runs past it. Retries
/// (throttling, 5xx, timeouts, connection errors, `IncorrectInstanceStatus*`) happen inside; what
/// comes out is the final answer.
#[derive(Clone, Debug)]
pub struct EcsClient {
    shared: Arc<Shared>,
    region: Region,
    endpoint: String,
    host: String,
    credentials: Arc<Credentials>,
    limiter: Option<Arc<TokenBucket>>,
}

/// A deadline `timeout` from now: the usual way to make the `deadline` every action takes.
pub fn deadline_in(timeout: Duration) -> Instant {
    Instant::now() + timeout
}

impl EcsClient {
    /// The region this client acts in.
    pub fn region(&self) -> &str {
        self.region.as_str()
    }

    /// The base URL calls go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The access key id (not secret) this client signs with.
    pub fn access_key_id(&self) -> &str {
        self.credentials.access_key_id()
    }
}

#[cfg(test)]
mod tests {
    use super::attempt::decode_error;
    use super::*;
    use crate::config::SignatureVersion;
    use crate::params::Params;

    /// Seen while writing the `ecs_canonicalise` fuzz target's cross-check (its seed with a
    /// `Signature` parameter): such a parameter was signed, then overwritten by the signature, so
    /// the emulator's verifier refused the call.
    #[test]
    fn a_v1_call_verifies_whatever_its_parameters_are_named() {
        let creds = Credentials::new("id", "secret");
        let mut params = Params::new();
        params
            .set("Signature", "forged")
            .set("RegionId", "cn-shanghai");
        let timestamp = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let call = sign_call(
            SignatureVersion::V1,
            "ecs.aliyuncs.com",
            &creds,
            "DescribeRegions",
            &params,
            "nonce-1",
            &timestamp,
        );
        let mut headers = http::HeaderMap::new();
        for (k, v) in &call.headers {
            headers.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        let (action, got) = ecs_emulator::authenticate_request(
            &http::Method::POST,
            &call.path_and_query.parse().unwrap(),
            &headers,
            call.body.as_bytes(),
            &[ecs_emulator::AccessKey::new("id", "secret")],
            Duration::from_secs(900),
        )
        .unwrap();
        assert_eq!(action, "DescribeRegions");
        assert_eq!(got["RegionId"], "cn-shanghai");
        assert!(!got.contains_key("Signature"));
    }

    #[test]
    fn authority_drops_default_ports_only() {
        assert_eq!(
            authority("https://ecs.cn-shanghai.aliyuncs.com"),
            "ecs.cn-shanghai.aliyuncs.com"
        );
        assert_eq!(authority("https://h:443"), "h");
        assert_eq!(authority("http://h:80/x"), "h");
        assert_eq!(authority("http://127.0.0.1:8090"), "127.0.0.1:8090");
        assert_eq!(authority("http://u:p@h:81"), "h:81");
    }

    #[test]
    fn error_bodies_decode_in_either_case_with_throttling_hint() {
        let mut h = http::HeaderMap::new();
        h.insert(
            "x-ratelimit-user-api",
            "Limit:10,Remain:0,TimeLeft:250,Reset:1".parse().unwrap(),
        );
        let e = decode_error(
            "RunInstances",
            400,
            &h,
            br#"{"RequestId":"r-1","HostId":"ecs.aliyuncs.com","Code":"Throttling.User","Message":"Request was denied due to user flow control.","Recommend":"https://x"}"#,
        );
        assert!(e.is_throttling());
        assert_eq!(e.retry_after(), Some(Duration::from_millis(250)));
        assert_eq!(e.request_id(), Some("r-1"));
        let e = decode_error(
            "X",
            404,
            &h,
            br#"{"requestId":"r","code":"InvalidInstanceId.NotFound","message":"m"}"#,
        );
        assert!(e.is_not_found());
        let e = decode_error("X", 502, &h, b"<html>bad gateway SecurityToken=abc</html>");
        assert!(e.is_retryable());
        assert!(!e.to_string().contains("abc"));
    }

    #[test]
    fn client_debug_never_shows_the_secret() {
        let ecs = Ecs::new(EcsConfig::default()).unwrap();
        let c = ecs.client(
            &Region::parse("cn-shanghai").unwrap(),
            Credentials::new("AKID", "very-secret").with_security_token("sts-token"),
        );
        let text = format!("{c:?}");
        assert!(
            !text.contains("very-secret") && !text.contains("sts-token"),
            "{text}"
        );
        assert_eq!(c.endpoint(), "https://ecs.cn-shanghai.aliyuncs.com");
    }
}
