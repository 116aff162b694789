//! The HTTP client: one [`Ecs`] per process, one cheap [`EcsClient`] per (region, credentials).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::config::{EcsConfig, SignatureVersion};
use crate::credentials::Credentials;
use crate::endpoint::Region;
use metric_families::{Counter, DurationHistogram, Family};

use crate::error::{EcsApiError, Error, parse_time_left};
use crate::model::{
    DescribeDisks, DescribeInstances, DescribeNetworkInterfaces, Disk, Instance, NetworkInterface,
    Page, RunInstances, RunInstancesResponse, wire,
};
use crate::params::Params;
use crate::ratelimit::{RateLimiters, TokenBucket};
use crate::sign;

/// The ECS API version every action here belongs to.
pub const API_VERSION: &str = "2014-05-26";

/// Pages fetched by one `describe_all_*` call before it gives up: a guard against an endpoint that
/// keeps returning tokens (1 000 pages of 100 is 100 000 resources).
const MAX_PAGES: usize = 1000;

/// Histogram of one HTTP attempt's duration, by `action`.
pub const METRIC_DURATION: &str = "berth_ecs_request_duration_seconds";
/// Counter of HTTP attempts, by `action` and `result` (`ok` or the ECS error code / failure kind).
pub const METRIC_REQUESTS: &str = "berth_ecs_requests_total";
/// Counter of retries, by `action` and `reason`.
pub const METRIC_RETRIES: &str = "berth_ecs_retries_total";

static ATTEMPT_DURATION: Family<DurationHistogram> = Family::new(
    METRIC_DURATION,
    "Time one HTTP attempt to ECS took, by action.",
    &["action"],
);
static ATTEMPTS: Family<Counter> = Family::new(
    METRIC_REQUESTS,
    "HTTP attempts to ECS by action and result (ok, or the ECS error code or failure kind).",
    &["action", "result"],
);
static RETRIES: Family<Counter> = Family::new(
    METRIC_RETRIES,
    "Retried ECS calls by action and reason.",
    &["action", "reason"],
);

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

    /// RunInstances for one instance. A `ClientToken` is always sent (the request's, or a fresh one
    /// reused by this call's own retries), so a retry after a lost answer cannot create a second VM.
    pub async fn run_instances(
        &self,
        req: &RunInstances,
        deadline: Instant,
    ) -> Result<RunInstancesResponse, Error> {
        if req.image_id.is_empty() || req.instance_type.is_empty() {
            return Err(Error::InvalidRequest(
                "RunInstances needs ImageId and InstanceType".into(),
            ));
        }
        let token = match &req.client_token {
            Some(t) if t.is_empty() || t.len() > 64 || !t.is_ascii() => {
                return Err(Error::InvalidRequest(
                    "ClientToken must be 1 to 64 ASCII characters".into(),
                ));
            }
            Some(t) => t.clone(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let params = req.to_params(self.region(), &token);
        let body: wire::RunInstancesBody =
            self.call_typed("RunInstances", params, deadline).await?;
        Ok(RunInstancesResponse {
            request_id: body.request_id,
            instance_ids: body.instance_id_sets.instance_id_set,
            order_id: body.order_id.filter(|s| !s.is_empty()),
            client_token: token,
        })
    }

    /// One page of DescribeInstances.
    pub async fn describe_instances(
        &self,
        filter: &DescribeInstances,
        deadline: Instant,
    ) -> Result<Page<Instance>, Error> {
        if filter.instance_ids.len() > 100 {
            return Err(Error::InvalidRequest(
                "DescribeInstances takes at most 100 InstanceIds per call".into(),
            ));
        }
        let body: wire::DescribeInstancesBody = self
            .call_typed(
                "DescribeInstances",
                filter.to_params(self.region()),
                deadline,
            )
            .await?;
        Ok(Page {
            items: body
                .instances
                .instance
                .into_iter()
                .map(Into::into)
                .collect(),
            next_token: wire::token(body.next_token),
            request_id: body.request_id,
        })
    }

    /// Every instance matching `filter`, following `NextToken` (100 a page). More than 100
    /// `instance_ids` are looked up 100 at a time.
    pub async fn describe_all_instances(
        &self,
        filter: &DescribeInstances,
        deadline: Instant,
    ) -> Result<Vec<Instance>, Error> {
        let chunks: Vec<Vec<String>> = if filter.instance_ids.is_empty() {
            vec![Vec::new()]
        } else {
            filter.instance_ids.chunks(100).map(<[_]>::to_vec).collect()
        };
        let mut all = Vec::new();
        for ids in chunks {
            let mut f = DescribeInstances {
                instance_ids: ids,
                next_token: None,
                ..filter.clone()
            };
            self.collect_pages("DescribeInstances", &mut all, |token| {
                f.next_token = token;
                self.describe_instances_owned(f.clone(), deadline)
            })
            .await?;
        }
        Ok(all)
    }

    async fn describe_instances_owned(
        &self,
        f: DescribeInstances,
        deadline: Instant,
    ) -> Result<Page<Instance>, Error> {
        self.describe_instances(&f, deadline).await
    }

    /// DeleteInstance. `force = true` releases a Running instance directly (MCM's behaviour);
    /// `false` requires it to be Stopped. Returns ECS's request id. A missing instance is an error
    /// with [`Error::is_not_found`]; delete callers usually treat that as done.
    pub async fn delete_instance(
        &self,
        instance_id: &str,
        force: bool,
        deadline: Instant,
    ) -> Result<String, Error> {
        let mut p = Params::new();
        p.set("InstanceId", instance_id).set("Force", force);
        self.call_request_id("DeleteInstance", p, deadline).await
    }

    /// StartInstance (Stopped → Starting → Running). Returns ECS's request id.
    pub async fn start_instance(
        &self,
        instance_id: &str,
        deadline: Instant,
    ) -> Result<String, Error> {
        let mut p = Params::new();
        p.set("InstanceId", instance_id);
        self.call_request_id("StartInstance", p, deadline).await
    }

    /// StopInstance (Running → Stopping → Stopped). Returns ECS's request id.
    pub async fn stop_instance(
        &self,
        instance_id: &str,
        force_stop: bool,
        deadline: Instant,
    ) -> Result<String, Error> {
        let mut p = Params::new();
        p.set("InstanceId", instance_id)
            .set("ForceStop", force_stop);
        self.call_request_id("StopInstance", p, deadline).await
    }

    /// One page of DescribeDisks.
    pub async fn describe_disks(
        &self,
        filter: &DescribeDisks,
        deadline: Instant,
    ) -> Result<Page<Disk>, Error> {
        let body: wire::DescribeDisksBody = self
            .call_typed("DescribeDisks", filter.to_params(self.region()), deadline)
            .await?;
        Ok(Page {
            items: body.disks.disk.into_iter().map(Into::into).collect(),
            next_token: wire::token(body.next_token),
            request_id: body.request_id,
        })
    }

    /// Every disk matching `filter`, following `NextToken`.
    pub async fn describe_all_disks(
        &self,
        filter: &DescribeDisks,
        deadline: Instant,
    ) -> Result<Vec<Disk>, Error> {
        let mut all = Vec::new();
        let mut f = filter.clone();
        self.collect_pages("DescribeDisks", &mut all, |token| {
            f.next_token = token;
            let f = f.clone();
            async move { self.describe_disks(&f, deadline).await }
        })
        .await?;
        Ok(all)
    }

    /// DeleteDisk (the disk must be detached, `Available`). Returns ECS's request id.
    pub async fn delete_disk(&self, disk_id: &str, deadline: Instant) -> Result<String, Error> {
        let mut p = Params::new();
        p.set("DiskId", disk_id);
        self.call_request_id("DeleteDisk", p, deadline).await
    }

    /// One page of DescribeNetworkInterfaces.
    pub async fn describe_network_interfaces(
        &self,
        filter: &DescribeNetworkInterfaces,
        deadline: Instant,
    ) -> Result<Page<NetworkInterface>, Error> {
        let body: wire::DescribeNicsBody = self
            .call_typed(
                "DescribeNetworkInterfaces",
                filter.to_params(self.region()),
                deadline,
            )
            .await?;
        Ok(Page {
            items: body
                .network_interface_sets
                .network_interface_set
                .into_iter()
                .map(Into::into)
                .collect(),
            next_token: wire::token(body.next_token),
            request_id: body.request_id,
        })
    }

    /// Every network interface matching `filter`, following `NextToken`.
    pub async fn describe_all_network_interfaces(
        &self,
        filter: &DescribeNetworkInterfaces,
        deadline: Instant,
    ) -> Result<Vec<NetworkInterface>, Error> {
        let mut all = Vec::new();
        let mut f = filter.clone();
        self.collect_pages("DescribeNetworkInterfaces", &mut all, |token| {
            f.next_token = token;
            let f = f.clone();
            async move { self.describe_network_interfaces(&f, deadline).await }
        })
        .await?;
        Ok(all)
    }

    /// DeleteNetworkInterface (the interface must be detached, `Available`). Returns the request id.
    pub async fn delete_network_interface(
        &self,
        network_interface_id: &str,
        deadline: Instant,
    ) -> Result<String, Error> {
        let mut p = Params::new();
        p.set("RegionId", self.region())
            .set("NetworkInterfaceId", network_interface_id);
        self.call_request_id("DeleteNetworkInterface", p, deadline)
            .await
    }

    /// ModifyDiskAttribute's `DeleteWithInstance`: whether the disk is released with the instance it
    /// is attached to. Returns ECS's request id.
    pub async fn set_disk_delete_with_instance(
        &self,
        disk_id: &str,
        delete_with_instance: bool,
        deadline: Instant,
    ) -> Result<String, Error> {
        let mut p = Params::new();
        p.set("RegionId", self.region())
            .set("DiskId", disk_id)
            .set("DeleteWithInstance", delete_with_instance);
        self.call_request_id("ModifyDiskAttribute", p, deadline)
            .await
    }

    /// Any action, for what the typed methods do not cover: signs, sends, retries and returns the
    /// answer's JSON. `params` are the action's own; the common ones are added here.
    pub async fn call(
        &self,
        action: &str,
        params: Params,
        deadline: Instant,
    ) -> Result<serde_json::Value, Error> {
        self.call_typed(action, params, deadline).await
    }

    async fn collect_pages<T, F, Fut>(
        &self,
        action: &str,
        out: &mut Vec<T>,
        mut fetch: F,
    ) -> Result<(), Error>
    where
        F: FnMut(Option<String>) -> Fut,
        Fut: Future<Output = Result<Page<T>, Error>>,
    {
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let page = fetch(token.clone()).await?;
            out.extend(page.items);
            match page.next_token {
                None => return Ok(()),
                // A token that does not move would loop forever.
                Some(next) if Some(&next) == token.as_ref() => {
                    return Err(Error::Decode {
                        action: action.to_owned(),
                        http_status: 200,
                        message: "NextToken repeated the previous page's token".into(),
                    });
                }
                Some(next) => token = Some(next),
            }
        }
        Err(Error::Decode {
            action: action.to_owned(),
            http_status: 200,
            message: format!("more than {MAX_PAGES} pages"),
        })
    }

    async fn call_request_id(
        &self,
        action: &str,
        params: Params,
        deadline: Instant,
    ) -> Result<String, Error> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Body {
            #[serde(default)]
            request_id: String,
        }
        let b: Body = self.call_typed(action, params, deadline).await?;
        Ok(b.request_id)
    }

    /// The retry loop around [`EcsClient::attempt`].
    async fn call_typed<T: DeserializeOwned>(
        &self,
        action: &str,
        params: Params,
        deadline: Instant,
    ) -> Result<T, Error> {
        let span = tracing::debug_span!("ecs", action, region = %self.region);
        self.call_with_retries(action, params, deadline)
            .instrument(span)
            .await
    }

    async fn call_with_retries<T: DeserializeOwned>(
        &self,
        action: &str,
        params: Params,
        deadline: Instant,
    ) -> Result<T, Error> {
        let policy = &self.shared.config.retry;
        let mut counted_failures = 0u32;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::DeadlineExceeded {
                    action: action.to_owned(),
                });
            }
            if let Some(limiter) = &self.limiter
                && !limiter.acquire(deadline).await
            {
                return Err(Error::DeadlineExceeded {
                    action: action.to_owned(),
                });
            }
            let now = Instant::now();
            let timeout = self
                .shared
                .config
                .request_timeout
                .min(deadline.saturating_duration_since(now));
            let started = std::time::Instant::now();
            let result = self.attempt::<T>(action, &params, timeout).await;
            let elapsed = started.elapsed();
            let label = match &result {
                Ok(_) => "ok".to_owned(),
                Err(e) => e.metric_result(),
            };
            // A series lookup takes a lock: nothing next to an HTTP round trip to ECS.
            ATTEMPT_DURATION.series(&[action]).record(elapsed);
            ATTEMPTS.series(&[action, &label]).increment(1);
            let err = match result {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            // An attempt cut short by the caller's deadline is the deadline's doing, not ECS's.
            if matches!(err, Error::Timeout { .. }) && Instant::now() >= deadline {
                return Err(Error::DeadlineExceeded {
                    action: action.to_owned(),
                });
            }
            if !err.is_retryable() {
                return Err(err);
            }
            // Throttling is ECS saying "later", not "broken": it does not use up attempts.
            if !err.is_throttling() {
                counted_failures += 1;
                if counted_failures >= policy.max_attempts {
                    return Err(err);
                }
            }
            let backoff = policy.backoff(attempt);
            let wait = backoff.max(err.retry_after().unwrap_or_default());
            if Instant::now() + wait >= deadline {
                // Waiting cannot help: report what actually went wrong, not the deadline.
                return Err(err);
            }
            let reason = err.metric_result();
            tracing::debug!(
                action,
                attempt,
                reason = %reason,
                request_id = err.request_id().unwrap_or(""),
                wait_ms = wait.as_millis() as u64,
                "retrying ECS call"
            );
            RETRIES.series(&[action, &reason]).increment(1);
            tokio::time::sleep(wait).await;
        }
    }

    /// One signed HTTP attempt.
    async fn attempt<T: DeserializeOwned>(
        &self,
        action: &str,
        params: &Params,
        timeout: Duration,
    ) -> Result<T, Error> {
        let request = self.build(action, params)?;
        let exchange = async {
            let resp = request.send().await?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = resp.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        };
        let (status, headers, body) = match tokio::time::timeout(timeout, exchange).await {
            Err(_) => {
                return Err(Error::Timeout {
                    action: action.to_owned(),
                    after: timeout,
                });
            }
            Ok(Err(e)) if e.is_timeout() => {
                return Err(Error::Timeout {
                    action: action.to_owned(),
                    after: timeout,
                });
            }
            Ok(Err(e)) => {
                return Err(Error::Transport {
                    action: action.to_owned(),
                    message: error_chain(&e.without_url()),
                });
            }
            Ok(Ok(x)) => x,
        };
        if (200..300).contains(&status) {
            return serde_json::from_slice(&body).map_err(|e| Error::Decode {
                action: action.to_owned(),
                http_status: status,
                message: format!("not the expected JSON: {e}"),
            });
        }
        Err(decode_error(action, status, &headers, &body))
    }

    /// Signs the call ([`sign_call`]) and builds the HTTP request.
    fn build(&self, action: &str, params: &Params) -> Result<reqwest::RequestBuilder, Error> {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let timestamp = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let call = sign_call(
            self.shared.config.signature,
            &self.host,
            &self.credentials,
            action,
            params,
            &nonce,
            &timestamp,
        );
        let mut req = self
            .shared
            .http
            .post(format!("{}{}", self.endpoint, call.path_and_query));
        for (k, v) in &call.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        Ok(req.body(call.body))
    }
}

/// One signed ECS call, as [`EcsClient`] sends it (always a POST).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedCall {
    /// What follows the endpoint: `/`, or `/?<canonical query>`.
    pub path_and_query: String,
    /// The headers, lower-case names, in the order they are sent.
    pub headers: Vec<(String, String)>,
    /// The body: V1's form, V3's empty one.
    pub body: String,
}

/// Signs one call: V1 as a POST form (every parameter, common ones and `Signature` included, in the
/// body, so long user data never hits URL limits); V3 as the SDKs send it, parameters in the query,
/// an empty body, and the signature in `Authorization`. Pure (the nonce and the timestamp,
/// `%Y-%m-%dT%H:%M:%SZ` in UTC, are the caller's), so the fuzz targets hold exactly what the client
/// sends against the emulator's independent verifier.
pub fn sign_call(
    version: SignatureVersion,
    host: &str,
    creds: &Credentials,
    action: &str,
    params: &Params,
    nonce: &str,
    timestamp: &str,
) -> SignedCall {
    match version {
        SignatureVersion::V1 => {
            let mut all: BTreeMap<String, String> = params.as_map().clone();
            // `Signature` is the protocol's: a parameter of that name would be signed, then
            // replaced by the signature, and the verifier (which signs all but it) would refuse.
            all.remove("Signature");
            for (k, v) in [
                ("Action", action),
                ("Version", API_VERSION),
                ("Format", "JSON"),
                ("AccessKeyId", creds.access_key_id()),
                ("SignatureMethod", "HMAC-SHA1"),
                ("SignatureVersion", "1.0"),
                ("SignatureNonce", nonce),
                ("Timestamp", timestamp),
            ] {
                all.insert(k.to_owned(), v.to_owned());
            }
            if let Some(token) = creds.security_token() {
                all.insert("SecurityToken".into(), token.expose().to_owned());
            }
            let signature = sign::v1_signature("POST", &all, creds.access_key_secret().expose());
            all.insert("Signature".into(), signature);
            SignedCall {
                path_and_query: "/".to_owned(),
                headers: vec![
                    ("host".to_owned(), host.to_owned()),
                    (
                        "content-type".to_owned(),
                        "application/x-www-form-urlencoded".to_owned(),
                    ),
                    ("accept".to_owned(), "application/json".to_owned()),
                ],
                body: sign::canonical_query(&all),
            }
        }
        SignatureVersion::V3 => {
            let payload_hash = sign::sha256_hex(b"");
            let mut headers: BTreeMap<String, String> = BTreeMap::new();
            headers.insert("host".into(), host.to_owned());
            headers.insert("x-acs-action".into(), action.to_owned());
            headers.insert("x-acs-version".into(), API_VERSION.into());
            headers.insert("x-acs-date".into(), timestamp.to_owned());
            headers.insert("x-acs-signature-nonce".into(), nonce.to_owned());
            headers.insert("x-acs-content-sha256".into(), payload_hash.clone());
            if let Some(token) = creds.security_token() {
                headers.insert("x-acs-security-token".into(), token.expose().to_owned());
            }
            let parts = sign::V3Parts {
                method: "POST",
                path: "/",
                query: params.as_map(),
                headers: &headers,
                payload_hash: &payload_hash,
            };
            let authorization = sign::v3_authorization(
                &parts,
                creds.access_key_id(),
                creds.access_key_secret().expose(),
            );
            let query = sign::canonical_query(params.as_map());
            let path_and_query = if query.is_empty() {
                "/".to_owned()
            } else {
                format!("/?{query}")
            };
            let mut sent = vec![
                ("accept".to_owned(), "application/json".to_owned()),
                ("authorization".to_owned(), authorization),
            ];
            sent.extend(headers);
            SignedCall {
                path_and_query,
                headers: sent,
                body: String::new(),
            }
        }
    }
}

/// An error's message with its sources, e.g. "error sending request: connection refused".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// Decodes `{RequestId, HostId, Code, Message, Recommend}` (either case), or says why it could not.
fn decode_error(action: &str, status: u16, headers: &http::HeaderMap, body: &[u8]) -> Error {
    let v: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => {
            // Never echo a non-JSON body: a proxy's error page could reflect the request.
            return Error::Decode {
                action: action.to_owned(),
                http_status: status,
                message: "error answer is not JSON".into(),
            };
        }
    };
    let field = |a: &str, b: &str| {
        v.get(a)
            .or_else(|| v.get(b))
            .and_then(|x| x.as_str())
            .map(str::to_owned)
    };
    let Some(code) = field("Code", "code") else {
        return Error::Decode {
            action: action.to_owned(),
            http_status: status,
            message: "error answer has no Code".into(),
        };
    };
    let retry_after = ["x-ratelimit-user-api", "x-ratelimit-user"]
        .iter()
        .filter_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
        .find_map(parse_time_left);
    Error::Api(Box::new(EcsApiError {
        action: action.to_owned(),
        code,
        message: field("Message", "message").unwrap_or_default(),
        request_id: field("RequestId", "requestId").unwrap_or_default(),
        recommend: field("Recommend", "recommend"),
        http_status: status,
        retry_after,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

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
