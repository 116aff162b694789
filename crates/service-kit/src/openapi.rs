//! What every service's OpenAPI document states beyond its handlers' own annotations: the answers
//! the shared stack gives on any route, in the media type it really sends.
//!
//! The handlers' `#[utoipa::path]` annotations document what each handler decides. The stack
//! ([`crate::middleware`], [`crate::extract`], [`crate::query`]) answers on every route as well: a
//! missing internal credential (401), an oversized body (413), a body that is not JSON (415), a
//! panic (500), the service's own time limit (504). [`complete`] adds those to every operation that
//! does not state them, as shared `components/responses` so each is written once, and makes every
//! error answer `application/problem+json` (utoipa writes `application/json` for any body; the
//! stack never sends that on an error). 429 and 503 answers carry `Retry-After`, and 401 answers
//! `WWW-Authenticate` ([`crate::error::ApiError`] always sets them there), so each is declared where
//! it is sent. A HEAD answer has no body, so a HEAD operation's answers declare none
//! ([`bodiless_head`]): a generated client would otherwise try to parse one.

use serde_json::{Map, Value, json};

use crate::error::PROBLEM_JSON;

/// The shared `Retry-After` header's name under `components/headers`.
pub const RETRY_AFTER_HEADER: &str = "RetryAfter";
/// The shared `WWW-Authenticate` header's name under `components/headers`.
pub const WWW_AUTHENTICATE_HEADER: &str = "WwwAuthenticate";

/// The shared answers of the stack: (status, name under `components/responses`, description,
/// whether only operations with a request body can get it).
const STACK_RESPONSES: [(&str, &str, &str, bool); 5] = [
    (
        "401",
        "ServiceUnauthenticated",
        "The internal credential is missing or wrong (code 16): the service takes calls from the gateway, which adds it",
        false,
    ),
    (
        "413",
        "BodyTooLarge",
        "The body is larger than the service's limit (code 3)",
        true,
    ),
    (
        "415",
        "UnsupportedMediaType",
        "The body is not sent as JSON: Content-Type must be application/json or another application/*+json type (code 3)",
        true,
    ),
    (
        "500",
        "InternalError",
        "An unexpected failure (code 13); the answer carries only the request id, the details are in the service's log",
        false,
    ),
    (
        "504",
        "ServiceTimeout",
        "The call took longer than the service's limit, BERTH_REQUEST_TIMEOUT (code 4)",
        false,
    ),
];

/// The HTTP methods whose path-item members are operations.
pub const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// A `$ref` to a shared response.
pub fn response_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/responses/{name}")})
}

/// A shared problem+json response for `status` with `description`, declaring the headers an
/// answer of that status carries.
pub fn problem_response(status: &str, description: &str) -> Value {
    let mut response = json!({
        "description": description,
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    });
    let headers: Map<String, Value> = headers_sent_with(status).collect();
    if !headers.is_empty() {
        response["headers"] = Value::Object(headers);
    }
    response
}

/// The headers every error answer of `status` carries, as `(name, $ref)`: `Retry-After` on 429 and
/// 503, `WWW-Authenticate` on 401.
fn headers_sent_with(status: &str) -> impl Iterator<Item = (String, Value)> {
    let header = |name: &str, shared: &str| {
        (
            name.to_string(),
            json!({"$ref": format!("#/components/headers/{shared}")}),
        )
    };
    let retry_after =
        matches!(status, "429" | "503").then(|| header("Retry-After", RETRY_AFTER_HEADER));
    let authenticate =
        (status == "401").then(|| header("WWW-Authenticate", WWW_AUTHENTICATE_HEADER));
    retry_after.into_iter().chain(authenticate)
}

/// The shared headers an error answer may carry, by their names under `components/headers`.
pub fn shared_headers() -> [(&'static str, Value); 2] {
    [
        (
            RETRY_AFTER_HEADER,
            json!({
                "description": "Whole seconds to wait before calling again",
                "schema": {"type": "integer", "minimum": 1},
            }),
        ),
        (
            WWW_AUTHENTICATE_HEADER,
            json!({
                "description": "The scheme to authenticate with (RFC 9110): Bearer",
                "schema": {"type": "string"},
                "example": "Bearer realm=\"berth\"",
            }),
        ),
    ]
}

/// Makes every answer of every HEAD operation in `doc` bodiless: a shared (`$ref`) answer is
/// written out with its description and headers only, an inline one loses its `content`.
pub fn bodiless_head(doc: &mut Value) {
    let shared = doc
        .pointer("/components/responses")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for item in paths.values_mut() {
        let Some(head) = item.get_mut("head").and_then(Value::as_object_mut) else {
            continue;
        };
        for response in responses_of(head).values_mut() {
            if let Some(name) = response
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/responses/"))
            {
                *response = shared.get(name).cloned().unwrap_or_else(|| json!({}));
            }
            if let Some(response) = response.as_object_mut() {
                response.remove("content");
                response
                    .entry("description")
                    .or_insert_with(|| json!("An answer with no body (HEAD)"));
            }
        }
    }
}

/// Completes a service's document: the stack's answers on every operation, every error answer as
/// problem+json, `Retry-After` on every 429 and 503.
pub fn complete(doc: &mut Value) {
    let mut used = Vec::new();
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for item in paths.values_mut() {
            for_each_operation(item, |operation| {
                let has_body = operation.get("requestBody").is_some();
                let responses = responses_of(operation);
                for (status, name, _, needs_body) in STACK_RESPONSES {
                    if needs_body && !has_body {
                        continue;
                    }
                    if !responses.contains_key(status) {
                        responses.insert(status.to_string(), response_ref(name));
                        used.push(name);
                    }
                }
                for (status, response) in responses.iter_mut() {
                    tell_the_truth(status, response);
                }
            });
        }
    }
    let components = doc
        .as_object_mut()
        .map(|d| d.entry("components").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut);
    if let Some(components) = components {
        let shared = components
            .entry("responses")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(shared) = shared {
            for (status, name, description, _) in STACK_RESPONSES {
                if used.contains(&name) {
                    shared.insert(name.to_string(), problem_response(status, description));
                }
            }
        }
        if let Some(headers) = components
            .entry("headers")
            .or_insert_with(|| json!({}))
            .as_object_mut()
        {
            headers.extend(shared_headers().map(|(name, h)| (name.to_string(), h)));
        }
    }
    bodiless_head(doc);
}

/// Calls `f` on each operation of a path item.
pub fn for_each_operation(item: &mut Value, mut f: impl FnMut(&mut Map<String, Value>)) {
    let Some(item) = item.as_object_mut() else {
        return;
    };
    for method in METHODS {
        if let Some(operation) = item.get_mut(method).and_then(Value::as_object_mut) {
            f(operation);
        }
    }
}

/// An operation's `responses` map, made if missing.
pub fn responses_of(operation: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let responses = operation.entry("responses").or_insert_with(|| json!({}));
    if !responses.is_object() {
        *responses = json!({});
    }
    responses.as_object_mut().expect("an object, just made")
}

/// An inline error response as the stack really sends it: problem+json (not `application/json`),
/// with `Retry-After` on 429 and 503 and `WWW-Authenticate` on 401. Shared (`$ref`) responses are
/// written right where defined.
pub fn tell_the_truth(status: &str, response: &mut Value) {
    let is_error = status
        .parse::<u16>()
        .map_or(status.starts_with('4') || status.starts_with('5'), |s| {
            s >= 400
        });
    if !is_error || response.get("$ref").is_some() {
        return;
    }
    let Some(response) = response.as_object_mut() else {
        return;
    };
    if let Some(content) = response.get_mut("content").and_then(Value::as_object_mut)
        && let Some(media) = content.remove("application/json")
    {
        content.entry(PROBLEM_JSON).or_insert(media);
    }
    for (name, header) in headers_sent_with(status) {
        let headers = response.entry("headers").or_insert_with(|| json!({}));
        if let Some(headers) = headers.as_object_mut() {
            headers.entry(name).or_insert(header);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_become_problems_and_the_stack_answers_are_stated() {
        let mut doc = json!({
            "paths": {
                "/v1/things": {
                    "post": {
                        "requestBody": {"content": {"application/json": {}}},
                        "responses": {
                            "201": {"description": "made", "content": {"application/json": {"schema": {}}}},
                            "429": {"description": "slow down", "content": {"application/json": {"schema": {}}}},
                            "500": {"description": "the backend failed", "content": {"application/json": {"schema": {}}}}
                        }
                    },
                    "get": {"responses": {"200": {"description": "all"}}}
                }
            }
        });
        complete(&mut doc);
        let post = &doc["paths"]["/v1/things"]["post"]["responses"];
        assert!(post["201"]["content"]["application/json"].is_object());
        assert!(post["429"]["content"][PROBLEM_JSON].is_object());
        assert!(post["429"]["content"]["application/json"].is_null());
        assert_eq!(
            post["429"]["headers"]["Retry-After"]["$ref"],
            "#/components/headers/RetryAfter"
        );
        // The handler's own 500 stays; the stack's answers are added by reference.
        assert_eq!(post["500"]["description"], "the backend failed");
        for status in ["401", "413", "415", "504"] {
            assert!(post[status]["$ref"].is_string(), "{status}");
        }
        let get = &doc["paths"]["/v1/things"]["get"]["responses"];
        assert!(get["413"].is_null() && get["415"].is_null(), "no body");
        assert!(get["500"]["$ref"].is_string());
        let shared = &doc["components"]["responses"];
        assert!(shared["InternalError"]["content"][PROBLEM_JSON].is_object());
        assert!(doc["components"]["headers"][RETRY_AFTER_HEADER].is_object());
        assert_eq!(
            shared["ServiceUnauthenticated"]["headers"]["WWW-Authenticate"]["$ref"],
            "#/components/headers/WwwAuthenticate"
        );
        assert!(doc["components"]["headers"][WWW_AUTHENTICATE_HEADER].is_object());
    }

    /// A HEAD answer has no body: a generated client that expects one fails to parse the answer
    /// (found with openapi-python-client on a 403 to HEAD /v1/orchestrators/{name}).
    #[test]
    fn head_answers_declare_no_body() {
        let mut doc = json!({
            "paths": {
                "/v1/things/{name}": {
                    "head": {"responses": {
                        "200": {"description": "there", "headers": {"ETag": {"schema": {"type": "string"}}}},
                        "404": {"description": "not there", "content": {"application/json": {"schema": {}}}}
                    }},
                    "get": {"responses": {"404": {"description": "not there", "content": {"application/json": {"schema": {}}}}}}
                }
            }
        });
        complete(&mut doc);
        let head = &doc["paths"]["/v1/things/{name}"]["head"]["responses"];
        for (status, response) in head.as_object().unwrap() {
            assert!(response["content"].is_null(), "{status}: {response}");
            assert!(response["$ref"].is_null(), "{status}: {response}");
            assert!(response["description"].is_string(), "{status}");
        }
        assert!(head["200"]["headers"]["ETag"].is_object());
        assert_eq!(
            head["401"]["headers"]["WWW-Authenticate"]["$ref"],
            "#/components/headers/WwwAuthenticate"
        );
        // GET keeps its problem body.
        let get = &doc["paths"]["/v1/things/{name}"]["get"]["responses"];
        assert!(get["404"]["content"][PROBLEM_JSON].is_object());
        assert!(get["401"]["$ref"].is_string());
    }
}
