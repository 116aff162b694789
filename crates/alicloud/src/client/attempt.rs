//! One signed HTTP attempt: the request built from [`sign_call`]'s output, sent under a timeout,
//! and the answer decoded, as the expected JSON or as ECS's error body.
//!
//! Apart from the retry loop because it knows HTTP and ECS's error shape and nothing of retrying:
//! what one attempt can fail with is decided here, what to do about it in `retry`.

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::EcsClient;
use super::signed_call::sign_call;
use crate::error::{EcsApiError, Error, parse_time_left};
use crate::params::Params;

impl EcsClient {
    /// One signed HTTP attempt.
    pub(super) async fn attempt<T: DeserializeOwned>(
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
pub(super) fn decode_error(
    action: &str,
    status: u16,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Error {
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
