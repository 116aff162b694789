//! What `berth up` says once it serves: one line at a time, and the orchestrator lines it asks the
//! registry for. Apart because the banner is what a person reads first; its wording is kept in
//! one place.

use std::time::Duration;

use super::Built;

/// Writes one banner line; a stdout nobody reads (`berth up | head -3`) does not stop the stack.
pub(super) fn say(line: impl AsRef<str>) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(format!("{}\n", line.as_ref()).as_bytes())
        .and_then(|()| out.flush());
}

/// The banner's orchestrator lines: which one new volumes go to, what the registry detects in this
/// environment and why, and how to choose otherwise.
pub(super) async fn orchestrator_lines(built: &Built) -> Vec<String> {
    let registry = client::registry::Client::new(client::ServiceClient::new(
        &built.registry_url,
        client::ClientOptions {
            timeout: Duration::from_secs(5),
            bearer: Some(service_kit::SecretString::new(built.internal_token.clone())),
            attempts: 3,
            propagation: None,
        },
    ));
    let mut lines = Vec::new();
    let default = registry.default_orchestrator().await;
    match &default {
        Ok(o) => lines.push(format!(
            "default orchestrator: {} (kind {}); new volumes go there unless --orchestrator names another",
            o.name, o.kind
        )),
        Err(e) => lines.push(format!("default orchestrator: none ({})", e.status.message)),
    }
    match registry.detect().await {
        Ok(d) => lines.push(format!(
            "  detected kind: {}, because {} (checked in order: KUBERNETES_SERVICE_HOST, NOMAD_ADDR, a Docker Engine, else local directories)",
            d.kind, d.reason
        )),
        Err(e) => lines.push(format!("  detection failed: {}", e.status.message)),
    }
    if !matches!(&default, Ok(o) if o.kind == domain::OrchestratorKind::Local) {
        lines.push(format!(
            "  to keep volumes in local directories instead: berth orchestrator register local --kind local --config basePath={} --default",
            // Its own directory under the default root, as the first-start one is: a second local
            // orchestrator then fits beside it (two base paths may not nest).
            built.data_dir.join("volumes").join("local").display()
        ));
    }
    lines
}
