//! The HTTP API (docs/design.md, “Orchestrator registry API”), one handler per route, each
//! documented in the OpenAPI document by its `#[utoipa::path]`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::orchestrator::{
    Detection, KindInfo, LocalConfig, OrchestratorLimits, OrchestratorList, RegisterOrchestrator,
};
use domain::{Code, DeleteResult, Orchestrator, OrchestratorKind, Status, names};
use serde_json::{Map, Value, json};
use service_kit::ApiError;
use service_kit::error::Problem;
use service_kit::extract::{Json, Path};
use service_kit::tenancy::Caller;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::detect::{DetectionEnv, EngineProbe, detect};
use crate::store::{Outcome, Precondition, Registration, Store};

/// The longest label accepted (a DNS-1123 subdomain's length: labels are for people and selectors).
const MAX_LABEL_LEN: usize = 253;
/// The longest region accepted.
const MAX_REGION_LEN: usize = 63;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct AppState {
    /// Where registrations may point.
    pub limits: Arc<OrchestratorLimits>,
    /// The database.
    pub store: Store,
    /// The environment detection reads.
    pub detection: Arc<DetectionEnv>,
    /// How detection decides whether a Docker Engine is reachable.
    pub probe: Arc<dyn EngineProbe>,
    /// The operator's limits on watches, and the permits of the open ones.
    pub watch: service_kit::watch::WatchLimits,
}

/// The API routes, with their OpenAPI descriptions.
pub fn routes(state: AppState) -> OpenApiRouter {
    OpenApiRouter::new()
        .routes(routes!(list_orchestrators))
        .routes(routes!(
            get_orchestrator,
            has_orchestrator,
            register_orchestrator,
            deregister_orchestrator
        ))
        .routes(routes!(detect_orchestrator))
        .routes(routes!(default_orchestrator))
        .routes(routes!(list_kinds))
        .with_state(state)
}

/// OpenAPI `links` from a registration's answers to the read, existence check and deregistration of
/// the orchestrator it made, so a client (and schemathesis' stateful phase) can follow them;
/// `If-Match` as the string it is; and each kind's own `config` ([`document_config_per_kind`]).
pub(crate) fn document_links(doc: &mut Value) {
    document_config_per_kind(doc);
    let name = json!({"name": "$request.path.name"});
    let links = json!({
        "GetOrchestrator": {"operationId": "get_orchestrator", "parameters": name, "description": "The orchestrator just registered"},
        "HasOrchestrator": {"operationId": "has_orchestrator", "parameters": name, "description": "Whether it is registered"},
        "DeregisterOrchestrator": {"operationId": "deregister_orchestrator", "parameters": name, "description": "Deregister it"},
    });
    for status in ["200", "201"] {
        if let Some(response) = doc.pointer_mut(&format!(
            "/paths/~1v1~1orchestrators~1{{name}}/put/responses/{status}"
        )) {
            response["links"] = links.clone();
        }
    }
    // An optional header is absent or a string, never `null` (utoipa writes an `Option<String>`
    // as string-or-null, and a client would send the text "null").
    if let Some(parameters) = doc
        .pointer_mut("/paths/~1v1~1orchestrators~1{name}/put/parameters")
        .and_then(Value::as_array_mut)
    {
        for parameter in parameters.iter_mut().filter(|p| p["in"] == "header") {
            parameter["schema"]["type"] = json!("string");
        }
    }
}

/// A registration's `config` is the kind's own (`GET /v1/kinds` lists each kind's schema): one
/// `if kind is K then config is K's` rule per kind, so the document says what `validate_config`
/// checks — a `local` registration needs `basePath`, a `nomad` one takes no keys.
fn document_config_per_kind(doc: &mut Value) {
    let Some(schema) = doc.pointer_mut("/components/schemas/RegisterOrchestrator") else {
        return;
    };
    let rules: Vec<Value> = OrchestratorKind::ALL
        .iter()
        .map(|kind| {
            // The kind's own schema, as `GET /v1/kinds` answers it (a capacity's pattern included).
            let config = kind.config_schema();
            let needs_config = config["required"]
                .as_array()
                .is_some_and(|required| !required.is_empty());
            let then = if needs_config {
                json!({"properties": {"config": config}, "required": ["config"]})
            } else {
                json!({"properties": {"config": {"oneOf": [config, {"type": "null"}]}}})
            };
            json!({
                "if": {"properties": {"kind": {"const": kind.as_str()}}, "required": ["kind"]},
                "then": then,
            })
        })
        .collect();
    schema["allOf"] = Value::Array(rules);
}

/// maya's message for an unknown name, kept word for word.
fn not_registered(name: &str) -> ApiError {
    ApiError::new(Status::not_found(format!(
        "'{name}' is not a registered orchestration provider"
    )))
}

fn valid_name(name: &str) -> Result<(), ApiError> {
    names::validate_dns1123_label("name", name).map_err(ApiError::new)
}

/// The orchestrator a path names: a 400 for a bad name, a 404 in maya's words when none is
/// registered under it.
async fn registered(state: &AppState, name: &str) -> Result<Orchestrator, ApiError> {
    valid_name(name)?;
    state
        .store
        .get(name)
        .await?
        .ok_or_else(|| not_registered(name))
}

fn etag(o: &Orchestrator) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{}\"", o.resource_version))
        .unwrap_or_else(|_| HeaderValue::from_static("\"0\""))
}

fn with_etag(o: Orchestrator, status: StatusCode) -> Response {
    let tag = etag(&o);
    let mut response = (status, Json(o)).into_response();
    response.headers_mut().insert(header::ETAG, tag);
    response
}

/// Registers (or replaces) an orchestrator — maya's `RegisterOrchestrator`, minus its crash on a
/// duplicate: the same body again is a no-op, a different body replaces the registration.
#[utoipa::path(
    put,
    path = "/v1/orchestrators/{name}",
    tag = "orchestrators",
    params(
        ("name" = String, Path, description = "The orchestrator's name, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63),
        ("If-Match" = Option<String>, Header, description = "Only register if the current resourceVersion is one of these (`\"3\"`, `W/\"3\", \"4\"`), or if it exists at all (`*`); else 412", pattern = "^[ \\t]*(\\*|(W/)?(\"[0-9]{1,19}\"|[0-9]{1,19})([ \\t]*,[ \\t]*(W/)?(\"[0-9]{1,19}\"|[0-9]{1,19}))*)[ \\t]*$"),
    ),
    request_body(
        content = RegisterOrchestrator,
        description = "What to register; the example (a nomad orchestrator, which needs no config) succeeds against a fresh `berth up`",
        example = json!({"kind": "nomad", "label": "batch jobs", "region": "eu-1"})
    ),
    responses(
        (status = 201, description = "Registered", body = Orchestrator, headers(("ETag" = String, description = "The resourceVersion, quoted"), ("Location" = String, description = "The orchestrator's path, /v1/orchestrators/{name}"))),
        (status = 200, description = "Replaced, or unchanged when the body was the same", body = Orchestrator, headers(("ETag" = String, description = "The resourceVersion, quoted"))),
        (status = 400, description = "Bad name, kind, config, label or region (code 3), naming the field", body = Problem),
        (status = 403, description = "The caller's token is not cluster-wide: registering orchestrators is cluster-wide (code 7)", body = Problem),
        (status = 409, description = "A local basePath that nests with another local orchestrator's (the same directory, or one inside the other), naming that orchestrator (code 6); or a concurrent change (code 10)", body = Problem),
        (status = 412, description = "If-Match did not hold; or a basePath outside BERTH_LOCAL_ROOTS or a host outside BERTH_DOCKER_ENDPOINTS, naming the field and the setting that would allow it (code 9)", body = Problem),
    )
)]
async fn register_orchestrator(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Result<Response, ApiError> {
    caller.audit_object(name.as_str());
    cluster_wide(&caller)?;
    valid_name(&name)?;
    // Every check of the request's shape (400) before what depends on this host's set-up (412): a
    // malformed If-Match is the caller's mistake whatever the body asks for.
    let precondition = parse_if_match(&headers)?;
    let want = parse_registration(&body, &state.limits)?;
    if want.kind == OrchestratorKind::Local {
        let base_path = LocalConfig::from_config(&want.config)?.base_path;
        let limits = state.limits.clone();
        // A few file-system calls: off the async threads, like every other.
        tokio::task::spawn_blocking(move || check_links(&base_path, &limits))
            .await
            .map_err(ApiError::internal)??;
    }
    let (orchestrator, outcome) = state
        .store
        .register(&name, &want, precondition.as_ref())
        .await?;
    match outcome {
        Outcome::Created => {
            tracing::info!(name, kind = %orchestrator.kind, default = orchestrator.default, "Registered '{name}' as orchestration provider");
            let mut response = with_etag(orchestrator, StatusCode::CREATED);
            if let Ok(location) = HeaderValue::from_str(&format!("/v1/orchestrators/{name}")) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            Ok(response)
        }
        Outcome::Replaced => {
            tracing::info!(name, kind = %orchestrator.kind, default = orchestrator.default, version = orchestrator.resource_version, "Replaced orchestration provider '{name}'");
            Ok(with_etag(orchestrator, StatusCode::OK))
        }
        Outcome::Unchanged => Ok(with_etag(orchestrator, StatusCode::OK)),
    }
}

/// Reads a registration body field by field, so each refusal names the field it is about, and holds
/// what it points at to the operator's limits (by its text: links are [`check_links`]'s).
///
/// Public so the fuzz targets (`fuzz/`) run exactly the checks RegisterOrchestrator runs.
pub fn parse_registration(
    body: &Value,
    limits: &OrchestratorLimits,
) -> Result<Registration, ApiError> {
    const FIELDS: [&str; 5] = ["kind", "label", "region", "config", "default"];
    let empty = Map::new();
    let map = match body {
        Value::Object(map) => map,
        _ => {
            return Err(Status::invalid(
                "body",
                "must be a JSON object {kind, label?, region?, config?, default?}",
            )
            .into());
        }
    };
    if let Some(key) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Status::invalid(
            key,
            format!(
                "is not a field of a registration; the fields are {}",
                FIELDS.join(", ")
            ),
        )
        .into());
    }
    let kind = match map.get("kind") {
        Some(Value::String(s)) => OrchestratorKind::parse_field("kind", s)?,
        None | Some(Value::Null) => {
            return Err(Status::invalid(
                "kind",
                "is required: one of local, docker, kubernetes, nomad",
            )
            .into());
        }
        Some(_) => return Err(Status::invalid("kind", "must be a string").into()),
    };
    let text = |field: &str, max: usize| -> Result<String, ApiError> {
        match map.get(field) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) if s.chars().count() > max => Err(Status::invalid(
                field,
                format!("is {} characters long; at most {max}", s.chars().count()),
            )
            .into()),
            Some(Value::String(s)) if s.chars().any(char::is_control) => {
                Err(Status::invalid(field, "must not contain control characters").into())
            }
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(Status::invalid(field, "must be a string").into()),
        }
    };
    let label = text("label", MAX_LABEL_LEN)?;
    let region = text("region", MAX_REGION_LEN)?;
    let config = kind.validate_config(Some(map.get("config").unwrap_or(&Value::Object(empty))))?;
    let default = match map.get("default") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err(Status::invalid("default", "must be true or false").into()),
    };
    // Last: every field's shape is the caller's 400 first; then what the operator allows (412).
    limits.check(kind, &config)?;
    Ok(Registration {
        kind,
        label,
        region,
        config,
        default,
    })
}

/// A `basePath` under a root by its text must stay under it through any symbolic link already on
/// this host. (Storage-ops checks again where it makes the directories, right before it does.)
fn check_links(base_path: &str, limits: &OrchestratorLimits) -> Result<(), ApiError> {
    service_kit::paths::check_within(std::path::Path::new(base_path), &limits.local_roots)
        .map_err(|escape| {
            // Where it leads is the host's business: logged, not answered.
            tracing::info!(base_path, error = ?escape, "a basePath that leaves the allowed roots");
            // Like the lexical check, the operator's set-up refuses it: a precondition (412).
            ApiError::new(Status::new(
                Code::FailedPrecondition,
                format!(
                    "config.basePath: {base_path:?} {escape}; an operator allows more with {}",
                    domain::orchestrator::LOCAL_ROOTS_SETTING
                ),
            ))
        })?;
    Ok(())
}

/// `If-Match`: `*`, or a list of (possibly weak) quoted resourceVersions.
fn parse_if_match(headers: &HeaderMap) -> Result<Option<Precondition>, ApiError> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::new(Status::invalid(
            "If-Match",
            "must be * or a quoted resourceVersion such as \"3\"",
        ))
    };
    let text = value.to_str().map_err(|_| bad())?.trim();
    if text == "*" {
        return Ok(Some(Precondition::Exists));
    }
    let versions = text
        .split(',')
        .map(|tag| {
            let tag = tag.trim();
            let tag = tag.strip_prefix("W/").unwrap_or(tag);
            let tag = tag
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(tag);
            tag.parse::<u64>().map_err(|_| bad())
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Precondition::Versions(versions)))
}

/// One orchestrator — maya's `GetOrchestrator`.
#[utoipa::path(
    get,
    path = "/v1/orchestrators/{name}",
    tag = "orchestrators",
    params(("name" = String, Path, description = "The orchestrator's name, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
    responses(
        (status = 200, description = "The orchestrator", body = Orchestrator, headers(("ETag" = String, description = "The resourceVersion, quoted"))),
        (status = 400, description = "Not a DNS-1123 label (code 3)", body = Problem),
        (status = 404, description = "'<name>' is not a registered orchestration provider (code 5)", body = Problem),
    )
)]
async fn get_orchestrator(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let o = registered(&state, &name).await?;
    Ok(with_etag(o, StatusCode::OK))
}

/// Whether a name is registered — maya's `HasOrchestrator`. No body either way.
#[utoipa::path(
    head,
    path = "/v1/orchestrators/{name}",
    tag = "orchestrators",
    params(("name" = String, Path, description = "The orchestrator's name, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
    responses(
        (status = 200, description = "Registered", headers(("ETag" = String, description = "The resourceVersion, quoted"))),
        (status = 400, description = "Not a DNS-1123 label (code 3); a HEAD answer has no body"),
        (status = 404, description = "Not registered (code 5); a HEAD answer has no body"),
    )
)]
async fn has_orchestrator(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let o = registered(&state, &name).await?;
    Ok((StatusCode::OK, [(header::ETAG, etag(&o))]).into_response())
}

/// Orchestrators serve every namespace, so only a cluster-wide caller may register or remove one;
/// reads need only the gateway's scope.
fn cluster_wide(caller: &Caller) -> Result<(), ApiError> {
    if caller.namespaces.is_cluster_wide() {
        Ok(())
    } else {
        Err(ApiError::from_code(
            Code::PermissionDenied,
            "registering orchestrators is cluster-wide: use a cluster-wide token",
        ))
    }
}

/// Deregisters an orchestrator; 200 whether or not it was registered, saying which.
#[utoipa::path(
    delete,
    path = "/v1/orchestrators/{name}",
    tag = "orchestrators",
    params(("name" = String, Path, description = "The orchestrator's name, a DNS-1123 label", pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", min_length = 1, max_length = 63)),
    responses(
        (status = 200, description = "`deleted` says whether it was registered", body = DeleteResult),
        (status = 400, description = "Not a DNS-1123 label (code 3)", body = Problem),
        (status = 403, description = "The caller's token is not cluster-wide: registering orchestrators is cluster-wide (code 7)", body = Problem),
    )
)]
async fn deregister_orchestrator(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<DeleteResult>, ApiError> {
    caller.audit_object(name.as_str());
    cluster_wide(&caller)?;
    valid_name(&name)?;
    let deleted = state.store.deregister(&name).await?;
    if deleted {
        tracing::info!(name, "Deregistered orchestration provider '{name}'");
    }
    Ok(Json(DeleteResult { deleted }))
}

/// The query of the list.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Stream changes (newline-delimited JSON events) instead of answering a list.
    watch: Option<bool>,
    /// With `watch`: the version to stream changes after (the list's `metadata.resourceVersion`);
    /// absent or `0`, every orchestrator is sent as ADDED first. Too old: 410.
    #[param(pattern = "^(0|[1-9][0-9]{0,19})?$")]
    resource_version: Option<String>,
    /// With `watch`: how long to stream, in seconds (at most 1800, the default).
    #[param(minimum = 1, maximum = 1800)]
    timeout_seconds: Option<u64>,
    /// Accepted for Kubernetes clients; BOOKMARK heartbeats are always sent.
    allow_watch_bookmarks: Option<bool>,
}

/// Every registered orchestrator, sorted by name; with `watch=true`, their changes as they happen.
#[utoipa::path(
    get,
    path = "/v1/orchestrators",
    tag = "orchestrators",
    params(ListQuery),
    responses(
        (status = 200, description = "`items` is `[]` when none is registered; with watch=true a stream of newline-delimited events `{type, object}` (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR)", content((OrchestratorList = "application/json"), (Value = "application/x-ndjson"))),
        (status = 400, description = "A bad resourceVersion or timeoutSeconds (code 3)", body = Problem),
        (status = 410, description = "watch: the resourceVersion is older than the changes kept; list again (code 11)", body = Problem),
        (status = 429, description = "watch: too many watches open (code 8)", body = Problem),
    )
)]
async fn list_orchestrators(
    State(state): State<AppState>,
    draining: service_kit::watch::Draining,
    service_kit::extract::Query(query): service_kit::extract::Query<ListQuery>,
) -> Result<Response, ApiError> {
    use service_kit::watch;
    watch::check_timeout(query.timeout_seconds)?;
    let from = watch::parse_resource_version(query.resource_version.as_deref())?;
    if !query.watch.unwrap_or(false) {
        let (items, version) = state.store.list_at().await?;
        return Ok(Json(OrchestratorList {
            metadata: Some(domain::resources::ListMeta {
                resource_version: version.to_string(),
            }),
            items,
        })
        .into_response());
    }
    let _ = query.allow_watch_bookmarks;
    let permit = watch::admit(&state.watch, "orchestrator registry")?;
    // Registrations are cluster-wide: every caller that may list them may watch them.
    let started = state
        .store
        .feed()
        .start("", from, true, || async {
            let (items, version) = state.store.list_at().await?;
            let added = items
                .iter()
                .map(|o| serde_json::to_value(o).unwrap_or_default())
                .collect();
            Ok((added, version))
        })
        .await?;
    Ok(watch::stream(
        watch::Watch {
            draining,
            started,
            scope: String::new(),
            filter: watch::Filter::everything(),
            kind: "Orchestrator",
            timeout_seconds: query.timeout_seconds,
        },
        &state.watch,
        permit,
    ))
}

/// The default orchestrator: the one storage-ops uses when a volume names none.
#[utoipa::path(
    get,
    path = "/v1/orchestrators:default",
    tag = "orchestrators",
    responses(
        (status = 200, description = "The default orchestrator", body = Orchestrator, headers(("ETag" = String, description = "The resourceVersion, quoted"))),
        (status = 404, description = "No orchestrator is the default (code 5)", body = Problem),
    )
)]
async fn default_orchestrator(State(state): State<AppState>) -> Result<Response, ApiError> {
    match state.store.default_orchestrator().await? {
        Some(o) => Ok(with_etag(o, StatusCode::OK)),
        None => Err(ApiError::new(Status::not_found(
            "no orchestrator is the default; register one with \"default\": true",
        ))),
    }
}

/// The kind the registry's environment implies and the rule that decided it — maya's
/// `DetectOrchProviderFromEnv`. Evaluated on every call (the Docker Engine may come and go).
#[utoipa::path(
    get,
    path = "/v1/orchestrators:detect",
    tag = "orchestrators",
    responses((status = 200, description = "The detected kind and the rule that decided it", body = Detection))
)]
async fn detect_orchestrator(State(state): State<AppState>) -> Json<Detection> {
    Json(detect(&state.detection, state.probe.as_ref()).await)
}

/// The kinds the registry can build, with whether they support StorageOps and their config schema.
#[utoipa::path(
    get,
    path = "/v1/kinds",
    tag = "kinds",
    responses((status = 200, description = "Every kind, with its config schema", body = Vec<KindInfo>))
)]
async fn list_kinds() -> Json<Vec<KindInfo>> {
    Json(
        OrchestratorKind::ALL
            .into_iter()
            .map(OrchestratorKind::info)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn registrations_name_the_bad_field() {
        let limits = OrchestratorLimits {
            local_roots: vec!["/srv".into()],
            docker_endpoints: vec![domain::orchestrator::DEFAULT_DOCKER_HOST.into()],
            kubernetes_servers: Vec::new(),
            in_cluster: false,
        };
        for (body, field) in [
            (json!([]), "body:"),
            (json!({}), "kind: is required"),
            (json!({"kind": 1}), "kind: must be a string"),
            (json!({"kind": "swarm"}), "kind: \"swarm\" is not a known"),
            (
                json!({"kind": "nomad", "colour": "red"}),
                "colour: is not a field",
            ),
            (
                json!({"kind": "nomad", "label": 5}),
                "label: must be a string",
            ),
            (
                json!({"kind": "nomad", "region": "x".repeat(64)}),
                "region: is 64 characters",
            ),
            (
                json!({"kind": "nomad", "default": "yes"}),
                "default: must be true or false",
            ),
            (
                json!({"kind": "local", "config": {"basePath": "/"}}),
                "config.basePath:",
            ),
            (
                json!({"kind": "local", "config": {"basePath": "/etc"}}),
                "config.basePath: \"/etc\" is not under",
            ),
            (
                json!({"kind": "local", "config": {"basePath": "/srv", "capacity": "0"}}),
                "config.capacity: \"0\" must be more than 0 bytes",
            ),
            (
                json!({"kind": "local", "config": {"basePath": "/srv", "capacity": "000"}}),
                "config.capacity: \"000\" must be more than 0 bytes",
            ),
            (
                json!({"kind": "docker", "config": {"host": "tcp://h:1"}}),
                "config.host: \"tcp://h:1\" is not a Docker Engine",
            ),
        ] {
            let e = parse_registration(&body, &limits).unwrap_err();
            assert!(
                e.status().message.starts_with(field),
                "{body}: {}",
                e.status().message
            );
        }
    }

    /// The registration's documented example is one the registry takes, and `GET /v1/kinds`'
    /// `configSchema.capacity` carries the document's capacity pattern.
    #[test]
    fn the_documented_example_registers_and_kinds_carry_the_capacity_pattern() {
        let limits = OrchestratorLimits {
            local_roots: vec!["/srv".into()],
            docker_endpoints: vec![],
            kubernetes_servers: Vec::new(),
            in_cluster: false,
        };
        let example = json!({"kind": "nomad", "label": "batch jobs", "region": "eu-1"});
        let want = parse_registration(&example, &limits).unwrap();
        assert_eq!(
            (want.label.as_str(), want.region.as_str()),
            ("batch jobs", "eu-1")
        );
        let local = OrchestratorKind::Local.info();
        assert_eq!(
            local.config_schema["properties"]["capacity"]["pattern"],
            domain::schema::CAPACITY
        );
    }

    #[test]
    fn if_match_forms() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::IF_MATCH, HeaderValue::from_str(v).unwrap());
            parse_if_match(&m)
        };
        assert_eq!(h("*").unwrap(), Some(Precondition::Exists));
        assert_eq!(
            h("\"3\", W/\"4\"").unwrap(),
            Some(Precondition::Versions(vec![3, 4]))
        );
        assert_eq!(h("7").unwrap(), Some(Precondition::Versions(vec![7])));
        assert!(h("\"x\"").is_err());
        assert_eq!(parse_if_match(&HeaderMap::new()).unwrap(), None);
    }
}
