//! Following the server's watch of a kind: resuming from the last version seen whenever a stream
//! ends, listing again when that version is gone. Apart because `get --watch` and `rollout status`
//! both follow this one way, and its recovery rules are subtle enough to read alone.

use std::time::Duration;

use client::controller::{Client, WatchEvent};
use domain::resources::Kind;

use super::text;
use crate::{CliError, Ctx};

/// Follows the server's watch of `kind` from `version`, handing each event to `each` until it
/// says stop; resumes after each stream's end from the last version seen, and lists again when
/// that version is gone (410).
pub(super) async fn follow(
    ctx: &Ctx,
    client: &Client,
    kind: Kind,
    namespace: &str,
    selector: Option<&str>,
    mut version: String,
    mut each: impl FnMut(&WatchEvent) -> bool,
) -> Result<(), CliError> {
    // Each stream ends before the client's own per-call limit would cut it.
    let per_stream = ctx
        .request_timeout
        .saturating_sub(Duration::from_secs(5))
        .as_secs()
        .clamp(1, 1800);
    loop {
        let mut watch = match client
            .watch(kind, namespace, selector, Some(&version), per_stream)
            .await
        {
            Ok(w) => w,
            Err(e) if e.http_status == Some(410) => {
                let list = client.list(kind, namespace, selector).await?;
                version = text(&list, "/metadata/resourceVersion").to_string();
                for item in list["items"].as_array().into_iter().flatten() {
                    let event = WatchEvent {
                        event: "MODIFIED".into(),
                        object: item.clone(),
                    };
                    if !each(&event) {
                        return Ok(());
                    }
                }
                continue;
            }
            Err(e) if matches!(e.http_status, Some(429 | 503) | None) => {
                eprintln!("watch: {}; looking again", e.status.message);
                tokio::time::sleep(e.retry_after.unwrap_or(Duration::from_secs(1))).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        loop {
            let event = match watch.next().await {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(e) => {
                    eprintln!("watch: {}; looking again", e.status.message);
                    break;
                }
            };
            let seen = text(&event.object, "/metadata/resourceVersion");
            if !seen.is_empty() {
                version = seen.to_string();
            }
            match event.event.as_str() {
                "BOOKMARK" => {}
                // The watch fell behind: resume from a fresh list.
                "ERROR" => {
                    version = "0".into();
                    break;
                }
                _ => {
                    if !each(&event) {
                        return Ok(());
                    }
                }
            }
        }
        if version == "0" {
            let list = client.list(kind, namespace, selector).await?;
            version = text(&list, "/metadata/resourceVersion").to_string();
        }
    }
}
