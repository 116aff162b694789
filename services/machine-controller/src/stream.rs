//! A list's `watch=true`: which changes of the store's feed a watch of one kind in one namespace
//! streams (the stream itself, its events, bookmarks and limits, are [`service_kit::watch`]'s).

use axum::response::Response;
use domain::resources::Kind;
use service_kit::ApiError;
use service_kit::tenancy::Caller;
use service_kit::watch::{self, Watch};

use crate::api::{AppState, labels_of};

/// An object's `metadata.labels` as a selector reads them.
fn labels_from(labels: &serde_json::Value) -> domain::Labels {
    serde_json::from_value(labels.clone()).unwrap_or_default()
}

/// Starts a watch of `kind` in `namespace`: every change after `resource_version`, or with none,
/// every current object first.
pub async fn watch(
    state: &AppState,
    caller: &Caller,
    draining: watch::Draining,
    kind: Kind,
    namespace: String,
    selector: domain::Selector,
    query: crate::api::ListQuery,
) -> Result<Response, ApiError> {
    let from = watch::parse_resource_version(query.resource_version.as_deref())?;
    let permit = watch::admit(&state.watch, "machine controller")?;
    let visible = caller.allows(&namespace);
    let store = &state.writer.store;
    // Another namespace's objects are answered as if there were none: the stream stays open and
    // says nothing but bookmarks.
    let started = store
        .feed()
        .start(&namespace, from, visible, || async {
            let (objects, version) = store.list(kind, Some(&namespace)).await?;
            let added = objects
                .into_iter()
                .filter(|o| selector.matches(&labels_of(&o.body)))
                .map(|o| o.body)
                .collect();
            Ok((added, version))
        })
        .await?;
    Ok(watch::stream(
        Watch {
            draining,
            started,
            scope: namespace,
            filter: watch::Filter {
                kind: Box::new(move |k| *k == kind),
                labels: Box::new(move |labels| selector.matches(&labels_from(labels))),
            },
            kind: kind.as_str(),
            timeout_seconds: query.timeout_seconds,
        },
        &state.watch,
        permit,
    ))
}
