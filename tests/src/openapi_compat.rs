//! Breaking changes between two OpenAPI documents: the committed one (what callers were promised)
//! and the served one (what the code says now).
//!
//! A change is breaking when a caller written against the old document can fail against the new one:
//! - an operation is gone;
//! - a response status is gone (a client that handled it gets something it was not told about);
//! - a field is gone, from a request body (the service now refuses it: bodies deny unknown fields)
//!   or from a response (a client reading it finds nothing);
//! - a parameter is gone (undeclared query parameters are refused), or is new and required, or was
//!   optional and is now required;
//! - an enum value is gone, in a request or a response;
//! - a request field was optional and is now required, or a new request field is required.
//!
//! Each is allowed when `info.version` was bumped: the major version once at 1.x, the minor one
//! while 0.x (semver's rule for pre-1.0 versions). Additive changes (new operations, statuses,
//! optional fields, enum values) never need one.
//!
//! Schemas are compared by walking both trees side by side, resolving each document's own `$ref`s
//! (`#/components/...`) and looking through `allOf` (fields of every part) and a nullable
//! `oneOf`/`anyOf` (`T` or `null`, as utoipa writes an `Option<T>`).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde_json::Value;

/// One breaking change: where (a readable location) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breaking {
    /// Where: `POST /v1/volumes request body .labels`, `GET /v1/kinds`.
    pub at: String,
    /// What changed.
    pub what: String,
}

impl std::fmt::Display for Breaking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.what)
    }
}

/// The breaking changes from `old` to `new` that the version does not excuse: empty when there are
/// none, or when `new`'s `info.version` bumps `old`'s enough ([`version_allows_breaking`]).
pub fn unexcused_breaking_changes(old: &Value, new: &Value) -> Vec<Breaking> {
    let version = |doc: &Value| {
        doc.pointer("/info/version")
            .and_then(Value::as_str)
            .unwrap_or("0.0.0")
            .to_string()
    };
    if version_allows_breaking(&version(old), &version(new)) {
        return Vec::new();
    }
    breaking_changes(old, new)
}

/// Whether going from version `old` to `new` may break callers: a higher major version once at 1.x,
/// a higher minor (or major) one while 0.x. Versions that do not parse never allow it.
pub fn version_allows_breaking(old: &str, new: &str) -> bool {
    let parse = |v: &str| -> Option<(u64, u64)> {
        let mut parts = v.trim().trim_start_matches('v').split(['.', '-', '+']);
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    };
    match (parse(old), parse(new)) {
        (Some((old_major, old_minor)), Some((new_major, new_minor))) => {
            new_major > old_major || (old_major == 0 && new_major == 0 && new_minor > old_minor)
        }
        _ => false,
    }
}

/// Every breaking change from `old` to `new`, whatever the versions say.
pub fn breaking_changes(old: &Value, new: &Value) -> Vec<Breaking> {
    let mut walk = Walk {
        old_root: old,
        new_root: new,
        found: Vec::new(),
        seen: HashSet::new(),
    };
    let empty = serde_json::Map::new();
    let old_paths = old
        .get("paths")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let new_paths = new
        .get("paths")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (path, old_item) in old_paths {
        for (method, old_op) in operations(old_item) {
            let at = format!("{} {path}", method.to_uppercase());
            let Some(new_op) = new_paths
                .get(path)
                .and_then(|item| item.get(method))
                .filter(|op| op.is_object())
            else {
                walk.report(&at, "the operation was removed");
                continue;
            };
            walk.parameters(&at, old_item, old_op, &new_paths[path], new_op);
            walk.request_body(&at, old_op, new_op);
            walk.responses(&at, old_op, new_op);
        }
    }
    walk.found
}

/// The methods of a path item that are operations.
fn operations(item: &Value) -> impl Iterator<Item = (&str, &Value)> {
    const METHODS: [&str; 8] = [
        "get", "put", "post", "delete", "options", "head", "patch", "trace",
    ];
    METHODS
        .into_iter()
        .filter_map(move |m| item.get(m).filter(|op| op.is_object()).map(|op| (m, op)))
}

/// Which way a schema's values travel: what may change compatibly differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Direction {
    Request,
    Response,
}

struct Walk<'a> {
    old_root: &'a Value,
    new_root: &'a Value,
    found: Vec<Breaking>,
    /// (old schema, new schema, direction) pairs already compared: recursive schemas end here.
    seen: HashSet<(usize, usize, Direction)>,
}

impl<'a> Walk<'a> {
    fn report(&mut self, at: &str, what: impl Into<String>) {
        self.found.push(Breaking {
            at: at.to_string(),
            what: what.into(),
        });
    }

    /// Follows `$ref`s within `root` (at most a few, so a ref cycle cannot hang the walk).
    fn resolve(root: &'a Value, mut value: &'a Value) -> &'a Value {
        for _ in 0..16 {
            let Some(target) = value.get("$ref").and_then(Value::as_str) else {
                return value;
            };
            let Some(found) = target.strip_prefix('#').and_then(|p| root.pointer(p)) else {
                return value;
            };
            value = found;
        }
        value
    }

    fn parameters(
        &mut self,
        at: &str,
        old_item: &'a Value,
        old_op: &'a Value,
        new_item: &'a Value,
        new_op: &'a Value,
    ) {
        let old = self.parameter_map(self.old_root, old_item, old_op);
        let new = self.parameter_map(self.new_root, new_item, new_op);
        for (key, old_param) in &old {
            let name = format!("{} parameter {}", key.0, key.1);
            match new.get(key) {
                None => self.report(at, format!("the {name} was removed")),
                Some(new_param) => {
                    if !is_required(old_param) && is_required(new_param) {
                        self.report(at, format!("the {name} became required"));
                    }
                    if let (Some(o), Some(n)) = (old_param.get("schema"), new_param.get("schema")) {
                        self.schema(&format!("{at} {name}"), o, n, Direction::Request);
                    }
                }
            }
        }
        for (key, new_param) in &new {
            if !old.contains_key(key) && is_required(new_param) {
                self.report(
                    at,
                    format!("a required {} parameter {} was added", key.0, key.1),
                );
            }
        }
    }

    /// The parameters of an operation (path-level ones included), by (in, name).
    fn parameter_map(
        &self,
        root: &'a Value,
        item: &'a Value,
        op: &'a Value,
    ) -> BTreeMap<(String, String), &'a Value> {
        let mut map = BTreeMap::new();
        for list in [item.get("parameters"), op.get("parameters")] {
            for p in list.and_then(Value::as_array).into_iter().flatten() {
                let p = Self::resolve(root, p);
                let field = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default();
                // Header names are case-insensitive.
                let name = if field("in") == "header" {
                    field("name").to_ascii_lowercase()
                } else {
                    field("name").to_string()
                };
                map.insert((field("in").to_string(), name), p);
            }
        }
        map
    }

    fn request_body(&mut self, at: &str, old_op: &'a Value, new_op: &'a Value) {
        let (Some(old), Some(new)) = (old_op.get("requestBody"), new_op.get("requestBody")) else {
            if old_op.get("requestBody").is_none() && new_op.get("requestBody").is_some() {
                let new = Self::resolve(self.new_root, &new_op["requestBody"]);
                if new.get("required") == Some(&Value::Bool(true)) {
                    self.report(at, "a required request body was added");
                }
            }
            return;
        };
        let old = Self::resolve(self.old_root, old);
        let new = Self::resolve(self.new_root, new);
        if old.get("required") != Some(&Value::Bool(true))
            && new.get("required") == Some(&Value::Bool(true))
        {
            self.report(at, "the request body became required");
        }
        self.content(
            &format!("{at} request body"),
            old,
            new,
            Direction::Request,
            true,
        );
    }

    fn responses(&mut self, at: &str, old_op: &'a Value, new_op: &'a Value) {
        let Some(old) = old_op.get("responses").and_then(Value::as_object) else {
            return;
        };
        let new = new_op.get("responses").and_then(Value::as_object);
        for (status, old_response) in old {
            let Some(new_response) = new.and_then(|n| n.get(status)) else {
                self.report(at, format!("the {status} response was removed"));
                continue;
            };
            let old_response = Self::resolve(self.old_root, old_response);
            let new_response = Self::resolve(self.new_root, new_response);
            self.content(
                &format!("{at} {status} response"),
                old_response,
                new_response,
                Direction::Response,
                false,
            );
        }
    }

    /// Compares the media types of a request body or a response. A media type that is gone from a
    /// request is one the service now refuses; from a response, one a client no longer gets.
    fn content(
        &mut self,
        at: &str,
        old: &'a Value,
        new: &'a Value,
        direction: Direction,
        report_missing: bool,
    ) {
        let Some(old_content) = old.get("content").and_then(Value::as_object) else {
            return;
        };
        for (media, old_media) in old_content {
            match new.pointer(&format!(
                "/content/{}",
                media.replace('~', "~0").replace('/', "~1")
            )) {
                Some(new_media) => {
                    if let (Some(o), Some(n)) = (old_media.get("schema"), new_media.get("schema")) {
                        self.schema(at, o, n, direction);
                    }
                }
                None if report_missing => {
                    self.report(at, format!("the media type {media} is no longer accepted"))
                }
                // A response's media type may change (application/json to
                // application/problem+json is the documents coming to tell the truth); its fields
                // are what clients read, and those are compared when the type stays.
                None => {}
            }
        }
    }

    /// Compares one schema pair, recursing into fields, items and map values.
    fn schema(&mut self, at: &str, old: &'a Value, new: &'a Value, direction: Direction) {
        let old = flatten(self.old_root, old);
        let new = flatten(self.new_root, new);
        let key = (old.identity as usize, new.identity as usize, direction);
        if !self.seen.insert(key) {
            return;
        }
        // Enum values: one that is gone is breaking both ways (a request the service now refuses;
        // a response value a client no longer gets, when the enum is still closed).
        if let (Some(old_enum), Some(new_enum)) = (&old.enumeration, &new.enumeration) {
            for value in old_enum {
                if !new_enum.contains(value) {
                    self.report(at, format!("the enum value {value} was removed"));
                }
            }
        }
        for (name, old_field) in &old.properties {
            let field_at = format!("{at} .{name}");
            match new.properties.get(name) {
                Some(new_field) => self.schema(&field_at, old_field, new_field, direction),
                None => self.report(&field_at, "the field was removed"),
            }
        }
        if direction == Direction::Request {
            for name in &new.required {
                if old.required.contains(name) {
                    continue;
                }
                if old.properties.contains_key(name) {
                    self.report(&format!("{at} .{name}"), "the field became required");
                } else {
                    self.report(&format!("{at} .{name}"), "a required field was added");
                }
            }
        }
        if let (Some(o), Some(n)) = (old.items, new.items) {
            self.schema(&format!("{at}[]"), o, n, direction);
        }
        if let (Some(o), Some(n)) = (old.additional, new.additional) {
            self.schema(&format!("{at}{{*}}"), o, n, direction);
        }
    }
}

fn is_required(parameter: &Value) -> bool {
    parameter.get("required") == Some(&Value::Bool(true))
}

/// What a schema says about its shape, with `$ref`s, `allOf` and nullable unions seen through.
struct Shape<'a> {
    /// Identifies the schema object for cycle detection.
    identity: *const Value,
    properties: BTreeMap<String, &'a Value>,
    required: BTreeSet<String>,
    enumeration: Option<Vec<Value>>,
    items: Option<&'a Value>,
    additional: Option<&'a Value>,
}

fn flatten<'a>(root: &'a Value, schema: &'a Value) -> Shape<'a> {
    let schema = Walk::resolve(root, schema);
    let mut shape = Shape {
        identity: schema as *const Value,
        properties: BTreeMap::new(),
        required: BTreeSet::new(),
        enumeration: None,
        items: None,
        additional: None,
    };
    absorb(root, schema, &mut shape, 0);
    shape
}

fn absorb<'a>(root: &'a Value, schema: &'a Value, shape: &mut Shape<'a>, depth: usize) {
    if depth > 16 {
        return;
    }
    let schema = Walk::resolve(root, schema);
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, field) in props {
            shape.properties.insert(name.clone(), field);
        }
    }
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        shape.required.insert(name.to_string());
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        // `null` in an enum is how a nullable enum is written; it is not a value callers send.
        let values: Vec<Value> = values.iter().filter(|v| !v.is_null()).cloned().collect();
        match &mut shape.enumeration {
            Some(existing) => existing.extend(values),
            None => shape.enumeration = Some(values),
        }
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        shape.items = Some(items);
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        shape.additional = Some(additional);
    }
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        for part in parts {
            absorb(root, part, shape, depth + 1);
        }
    }
    for union in ["oneOf", "anyOf"] {
        if let Some(parts) = schema.get(union).and_then(Value::as_array) {
            let non_null: Vec<&Value> = parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) != Some("null"))
                .collect();
            // `T | null` is T; a union of several shapes is compared no deeper.
            if let [only] = non_null.as_slice() {
                absorb(root, only, shape, depth + 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A small document: one operation with a body, a query parameter, and two responses whose
    /// schemas are `$ref`s.
    fn base() -> Value {
        json!({
            "openapi": "3.1.0",
            "info": {"title": "t", "version": "0.1.0"},
            "paths": {
                "/v1/things": {
                    "post": {
                        "parameters": [
                            {"name": "dryRun", "in": "query", "required": false, "schema": {"type": "boolean"}}
                        ],
                        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ThingRequest"}}}},
                        "responses": {
                            "201": {"description": "made", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
                            "400": {"description": "bad", "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}
                        }
                    },
                    "get": {"responses": {"200": {"description": "all"}}}
                }
            },
            "components": {"schemas": {
                "ThingRequest": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"},
                    "size": {"oneOf": [{"type": "null"}, {"type": "integer"}]},
                    "colour": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/Colour"}]}
                }},
                "Thing": {"allOf": [{"$ref": "#/components/schemas/ThingRequest"}, {"type": "object", "properties": {"uid": {"type": "string"}, "tags": {"type": "array", "items": {"$ref": "#/components/schemas/Tag"}}}}]},
                "Tag": {"type": "object", "properties": {"key": {"type": "string"}, "value": {"type": "string"}}},
                "Colour": {"type": "string", "enum": ["red", "green"]},
                "Problem": {"type": "object", "properties": {"title": {"type": "string"}}}
            }}
        })
    }

    fn changed(edit: impl FnOnce(&mut Value)) -> Vec<String> {
        let old = base();
        let mut new = old.clone();
        edit(&mut new);
        breaking_changes(&old, &new)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn one(found: Vec<String>, expected: &str) {
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].contains(expected), "{found:#?}");
    }

    #[test]
    fn the_same_document_has_no_breaking_change() {
        assert!(breaking_changes(&base(), &base()).is_empty());
    }

    #[test]
    fn a_removed_operation_is_breaking() {
        let found = changed(|d| {
            d["paths"]["/v1/things"]
                .as_object_mut()
                .unwrap()
                .remove("get");
        });
        one(found, "GET /v1/things: the operation was removed");
    }

    #[test]
    fn a_removed_response_status_is_breaking() {
        let found = changed(|d| {
            d["paths"]["/v1/things"]["post"]["responses"]
                .as_object_mut()
                .unwrap()
                .remove("400");
        });
        one(found, "POST /v1/things: the 400 response was removed");
    }

    #[test]
    fn a_removed_response_field_is_breaking_even_through_all_of_and_refs() {
        let found = changed(|d| {
            d["components"]["schemas"]["Tag"]["properties"]
                .as_object_mut()
                .unwrap()
                .remove("value");
        });
        one(found, "POST /v1/things 201 response .tags[] .value");
    }

    #[test]
    fn a_removed_request_field_is_breaking() {
        let found = changed(|d| {
            d["components"]["schemas"]["ThingRequest"]["properties"]
                .as_object_mut()
                .unwrap()
                .remove("size");
        });
        // The request and the response (which includes the request's fields) both lose it.
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found.iter().any(|f| f.contains("request body .size")));
        assert!(found.iter().any(|f| f.contains("201 response .size")));
    }

    #[test]
    fn a_removed_enum_value_is_breaking_through_a_nullable_union() {
        let found = changed(|d| {
            d["components"]["schemas"]["Colour"]["enum"] = json!(["red"]);
        });
        assert!(
            found
                .iter()
                .any(|f| f.contains("request body .colour") && f.contains("\"green\"")),
            "{found:#?}"
        );
    }

    #[test]
    fn an_optional_request_field_made_required_is_breaking() {
        let found = changed(|d| {
            d["components"]["schemas"]["ThingRequest"]["required"] = json!(["name", "size"]);
        });
        one(found, "request body .size: the field became required");
    }

    #[test]
    fn a_new_required_request_field_is_breaking() {
        let found = changed(|d| {
            let request = &mut d["components"]["schemas"]["ThingRequest"];
            request["properties"]["owner"] = json!({"type": "string"});
            request["required"] = json!(["name", "owner"]);
        });
        // The owner also appears, additively, in the response: only the request breaks.
        one(found, "request body .owner: a required field was added");
    }

    #[test]
    fn parameters_removed_or_made_required_are_breaking() {
        let found = changed(|d| {
            d["paths"]["/v1/things"]["post"]["parameters"][0]["required"] = json!(true);
        });
        one(found, "the query parameter dryRun became required");
        let found = changed(|d| {
            d["paths"]["/v1/things"]["post"]["parameters"] = json!([]);
        });
        one(found, "the query parameter dryRun was removed");
        let found = changed(|d| {
            d["paths"]["/v1/things"]["get"]["parameters"] =
                json!([{"name": "If-Match", "in": "header", "required": true}]);
        });
        one(found, "a required header parameter if-match was added");
    }

    #[test]
    fn additive_changes_pass() {
        let found = changed(|d| {
            // A new operation, a new status, a new optional field, a new enum value, a new
            // optional parameter, a new component, and errors moving to problem+json.
            d["paths"]["/v1/other"] = json!({"get": {"responses": {"200": {"description": "x"}}}});
            d["paths"]["/v1/things"]["post"]["responses"]["409"] = json!({"description": "taken"});
            d["components"]["schemas"]["ThingRequest"]["properties"]["note"] =
                json!({"type": "string"});
            d["components"]["schemas"]["Colour"]["enum"] = json!(["red", "green", "blue"]);
            d["paths"]["/v1/things"]["get"]["parameters"] =
                json!([{"name": "limit", "in": "query", "required": false}]);
            d["components"]["schemas"]["Extra"] = json!({"type": "object"});
            d["components"]["schemas"]["ThingRequest"]["properties"]["name"] =
                json!({"type": "string", "pattern": "^[a-z]+$", "maxLength": 63});
        });
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn a_version_bump_excuses_a_breaking_change() {
        let old = base();
        let mut new = old.clone();
        new["paths"]["/v1/things"]
            .as_object_mut()
            .unwrap()
            .remove("get");
        assert_eq!(unexcused_breaking_changes(&old, &new).len(), 1);
        new["info"]["version"] = json!("0.1.1");
        assert_eq!(
            unexcused_breaking_changes(&old, &new).len(),
            1,
            "a patch bump is not enough"
        );
        new["info"]["version"] = json!("0.2.0");
        assert!(unexcused_breaking_changes(&old, &new).is_empty());
    }

    #[test]
    fn version_rules() {
        assert!(version_allows_breaking("0.1.0", "0.2.0"));
        assert!(version_allows_breaking("0.9.3", "1.0.0"));
        assert!(!version_allows_breaking("0.1.0", "0.1.9"));
        assert!(version_allows_breaking("1.4.2", "2.0.0"));
        assert!(!version_allows_breaking("1.4.2", "1.5.0"));
        assert!(!version_allows_breaking("1.0.0", "0.9.0"));
        assert!(!version_allows_breaking("x", "2.0.0"));
    }
}
