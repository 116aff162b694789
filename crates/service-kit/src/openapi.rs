//! What every service's OpenAPI document states beyond its handlers' own annotations: the answers
//! the shared stack gives on any route, in the media type it really sends.
//!
//! The handlers' `#[utoipa::path]` annotations document what each handler decides. The stack
//! ([`crate::middleware`], [`crate::extract`], [`crate::query`]) answers on every route as well: a
//! missing internal credential (401), an oversized body (413), a body that is not JSON (415), a
//! panic (500), the service's own time limit (504). [`complete`] adds those to every operation that
//! does not state them, as shared `components/responses` so each is written once, and makes every
//! error answer `application/problem+json` (utoipa writes `application/json` for any body; the
//! stack never sends that on an error). 429 and 503 answers carry `Retry-After`
//! ([`crate::error::ApiError`] always sets it there), so it is declared on each of them.

use serde_json::{Map, Value, json};

use crate::error::PROBLEM_JSON;

/// The shared `Retry-After` header's name under `components/headers`.
pub const RETRY_AFTER_HEADER: &str = "RetryAfter";

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
        "The body is not sent as Content-Type: application/json (code 3)",
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

/// A shared problem+json response with `description`, with `Retry-After` when `retry_after`.
pub fn problem_response(description: &str, retry_after: bool) -> Value {
    let mut response = json!({
        "description": description,
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    });
    if retry_after {
        response["headers"] = json!({"Retry-After": retry_after_ref()});
    }
    response
}

fn retry_after_ref() -> Value {
    json!({"$ref": format!("#/components/headers/{RETRY_AFTER_HEADER}")})
}

/// The shared `Retry-After` header.
pub fn retry_after_header() -> Value {
    json!({
        "description": "Whole seconds to wait before calling again",
        "schema": {"type": "integer", "minimum": 1},
    })
}

/// Whether an HTTP status (as a document key) carries `Retry-After`.
pub fn sends_retry_after(status: &str) -> bool {
    matches!(status, "429" | "503")
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
                    shared.insert(
                        name.to_string(),
                        problem_response(description, sends_retry_after(status)),
                    );
                }
            }
        }
        components
            .entry("headers")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .map(|h| h.insert(RETRY_AFTER_HEADER.to_string(), retry_after_header()));
    }
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
/// with `Retry-After` on 429 and 503. Shared (`$ref`) responses are written right where defined.
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
    if sends_retry_after(status) {
        let headers = response.entry("headers").or_insert_with(|| json!({}));
        if let Some(headers) = headers.as_object_mut()
            && !headers.contains_key("Retry-After")
        {
            headers.insert("Retry-After".to_string(), retry_after_ref());
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
    }
}
