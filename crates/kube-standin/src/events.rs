//! The events list, by field selector. Apart because events are a resource of their own, which
//! the test records and Berth only reads.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State as AxumState};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::cluster::{Shared, lock};
use crate::faults::authorize;
use crate::routes::ListQuery;
use crate::status::{answer, refusal};

pub(crate) async fn list_events(
    AxumState(cluster): AxumState<Shared>,
    Path(namespace): Path<String>,
    Query(query): Query<ListQuery>,
) -> Response {
    let cluster = lock(&cluster);
    answer((|| {
        authorize(&cluster, "list", "events", &namespace, None)?;
        let mut wanted = BTreeMap::new();
        for term in query
            .field_selector
            .as_deref()
            .unwrap_or("")
            .split(',')
            .filter(|t| !t.is_empty())
        {
            let (field, value) = term.split_once('=').ok_or_else(|| {
                refusal(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("invalid field selector {term:?}"),
                    None,
                )
            })?;
            if !["involvedObject.kind", "involvedObject.name", "reason"].contains(&field) {
                return Err(refusal(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("field label not supported: {field}"),
                    None,
                ));
            }
            wanted.insert(field.to_string(), value.to_string());
        }
        let items: Vec<Value> = cluster
            .events
            .iter()
            .filter(|e| e["metadata"]["namespace"] == namespace.as_str())
            .filter(|e| {
                wanted.iter().all(|(field, value)| {
                    let got = match field.as_str() {
                        "reason" => &e["reason"],
                        other => &e["involvedObject"][other.trim_start_matches("involvedObject.")],
                    };
                    got == value.as_str()
                })
            })
            .take(query.limit.filter(|l| *l > 0).unwrap_or(usize::MAX))
            .cloned()
            .collect();
        Ok(json!({"kind": "EventList", "apiVersion": "v1",
            "metadata": {"resourceVersion": cluster.resource_version.to_string()}, "items": items}))
    })())
}
