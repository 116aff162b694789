//! What the registry's environment implies about the orchestrator it runs beside. Apart because
//! it is an answer about the host, not about any registration.

use serde::{Deserialize, Serialize};

use super::OrchestratorKind;

/// Which detection rule decided the kind (checked in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub enum DetectionRule {
    /// `KUBERNETES_SERVICE_HOST` is set (and not empty).
    KubernetesServiceHost,
    /// `NOMAD_ADDR` is set (and not empty).
    NomadAddr,
    /// A Docker Engine answered `GET /_ping` (at `DOCKER_HOST`, else the local socket).
    DockerEngine,
    /// Nothing else matched.
    Fallback,
}

/// `GET /v1/orchestrators:detect`: the kind the registry's environment implies (maya's
/// `DetectOrchProviderFromEnv`) and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Detection {
    /// The detected kind.
    pub kind: OrchestratorKind,
    /// The rule that fired.
    pub rule: DetectionRule,
    /// The rule in words (`KUBERNETES_SERVICE_HOST is set`).
    pub reason: String,
}
