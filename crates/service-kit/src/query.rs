//! One rule for query parameters on every route: a route takes exactly the query parameters its
//! OpenAPI operation declares, and any other is a 400 naming it.
//!
//! The rule is read from the service's own OpenAPI document, so a handler needs no wiring (a route
//! that never reads its query refuses `?bogus=1` like one whose `Query` type denies unknown fields),
//! and the document cannot promise parameters the service refuses or hide ones it accepts. Routes
//! that are not in the document (`/healthz`, `/readyz`, `/metrics`, `/openapi.json`) take none.
//! [`crate::app::ServiceApp`] applies it to every route it serves.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use domain::Status;
use utoipa::openapi::OpenApi;

use crate::error::ApiError;

/// The longest parameter name a refusal repeats.
const MAX_NAME_CHARS: usize = 64;

/// The query parameters each operation of a document declares, by method and path template.
#[derive(Debug, Clone, Default)]
pub struct DeclaredQuery {
    operations: HashMap<(Method, String), Vec<String>>,
}

impl DeclaredQuery {
    /// The query parameters `doc` declares for each of its operations (path-level ones included).
    pub fn from_openapi(doc: &OpenApi) -> Self {
        // Read through the document's JSON form: it is what callers see, whatever utoipa's types.
        let json = serde_json::to_value(doc).unwrap_or_default();
        let mut operations = HashMap::new();
        let Some(paths) = json.get("paths").and_then(|p| p.as_object()) else {
            return DeclaredQuery { operations };
        };
        for (template, item) in paths {
            let shared = query_names(item.get("parameters"));
            let Some(item) = item.as_object() else {
                continue;
            };
            for (method, operation) in item {
                let Ok(method) = Method::from_bytes(method.to_ascii_uppercase().as_bytes()) else {
                    continue;
                };
                // `parameters`, `summary` and the like sit beside the operations; only objects are
                // operations.
                if !operation.is_object() {
                    continue;
                }
                let mut names = shared.clone();
                for name in query_names(operation.get("parameters")) {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
                operations.insert((method, template.clone()), names);
            }
        }
        DeclaredQuery { operations }
    }

    /// Checks the query of a `method` call to the route `template`: `Ok` when every parameter is one
    /// the operation declares, or when the document has no such operation but the path is in it
    /// (the router answers 405 then). A route the document does not know takes no parameters.
    pub fn check(&self, method: &Method, template: &str, query: &str) -> Result<(), Status> {
        let declared = match self.declared(method, template) {
            Some(names) => names,
            None if self.knows_path(template) => return Ok(()),
            None => &[],
        };
        let names = form_names(query);
        let Some(unknown) = names.iter().find(|n| !declared.iter().any(|d| d == *n)) else {
            return Ok(());
        };
        let takes = if declared.is_empty() {
            "none".to_string()
        } else {
            declared.join(", ")
        };
        let shown = shorten(unknown);
        Err(Status::invalid(
            &shown,
            format!("is not a query parameter of {method} {template}; it takes {takes}"),
        ))
    }

    /// The names `method` on `template` declares; a HEAD the document does not describe is its GET.
    fn declared(&self, method: &Method, template: &str) -> Option<&[String]> {
        let key = |m: &Method| (m.clone(), template.to_string());
        self.operations
            .get(&key(method))
            .or_else(|| {
                (method == Method::HEAD)
                    .then(|| self.operations.get(&key(&Method::GET)))
                    .flatten()
            })
            .map(Vec::as_slice)
    }

    fn knows_path(&self, template: &str) -> bool {
        self.operations.keys().any(|(_, t)| t == template)
    }
}

/// The names of the `in: query` parameters of an OpenAPI `parameters` list.
fn query_names(parameters: Option<&serde_json::Value>) -> Vec<String> {
    parameters
        .and_then(|p| p.as_array())
        .into_iter()
        .flatten()
        .filter(|p| p.get("in").and_then(|i| i.as_str()) == Some("query"))
        .filter_map(|p| p.get("name").and_then(|n| n.as_str()).map(str::to_string))
        .collect()
}

/// The parameter names of a query string, percent- and `+`-decoded as a form decoder reads them.
fn form_names(query: &str) -> Vec<String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let name = pair.split_once('=').map_or(pair, |(n, _)| n);
            percent_decode(&name.replace('+', " "))
        })
        .collect()
}

/// `%XX` decoded; anything that is not a valid escape is kept as written.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A caller's parameter name as a refusal repeats it: at most [`MAX_NAME_CHARS`], no control
/// characters, and something visible when it is empty.
fn shorten(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(MAX_NAME_CHARS)
        .collect();
    match (clean.is_empty(), name.chars().count() > MAX_NAME_CHARS) {
        (true, _) => "(a parameter without a name)".to_string(),
        (false, true) => format!("{clean}…"),
        (false, false) => clean,
    }
}

/// States in `doc` the 400 this rule answers, on every operation that states none yet, so the
/// document lists every status each route can give.
pub fn document_refusals(doc: &mut OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
    for item in doc.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.options,
            &mut item.head,
            &mut item.patch,
            &mut item.trace,
        ];
        for operation in operations.into_iter().flatten() {
            operation
                .responses
                .responses
                .entry("400".to_string())
                .or_insert_with(|| {
                    RefOr::T(
                        ResponseBuilder::new()
                            .description(
                                "A query parameter this operation does not declare (code 3), naming it",
                            )
                            .content(
                                crate::error::PROBLEM_JSON,
                                ContentBuilder::new()
                                    .schema(Some(Ref::from_schema_name("Problem")))
                                    .build(),
                            )
                            .build(),
                    )
                });
        }
    }
}

/// The middleware: refuses a matched route's call whose query names an undeclared parameter.
pub async fn refuse_undeclared(
    State(declared): State<Arc<DeclaredQuery>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(query) = request.uri().query().filter(|q| !q.is_empty()) {
        let template = request
            .extensions()
            .get::<MatchedPath>()
            .map_or_else(|| request.uri().path(), MatchedPath::as_str);
        if let Err(status) = declared.check(request.method(), template, query) {
            return ApiError::new(status).into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_decoded_like_a_form_decoder_would() {
        assert_eq!(
            form_names("a=1&b&%63=3&d+e=4&&f%2"),
            ["a", "b", "c", "d e", "f%2"]
        );
        assert_eq!(shorten(""), "(a parameter without a name)");
        assert_eq!(shorten(&"x".repeat(70)), format!("{}…", "x".repeat(64)));
        assert_eq!(shorten("a\nb"), "a?b");
    }
}
