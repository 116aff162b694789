//! Detection: which orchestrator kind the registry's own environment implies (maya's
//! `DetectOrchProviderFromEnv`).
//!
//! Rules, first match wins: `KUBERNETES_SERVICE_HOST` set → kubernetes; `NOMAD_ADDR` set → nomad; a
//! Docker Engine answering `GET /_ping` (at `DOCKER_HOST`, else the local socket) → docker; otherwise
//! local. Two deliberate departures from maya: a variable set to the empty string counts as unset (the
//! shell idiom for unsetting), and `NOMAD_ADDR` must be the variable's exact name, not a substring of
//! any variable or value (maya matched `MY_CUSTOM_NOMAD_ADDR` and even values containing the text).
//!
//! The Engine probe is a trait object on the config so tests decide what "reachable" means instead of
//! depending on whether the machine running them has Docker.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use domain::OrchestratorKind;
use domain::orchestrator::{DEFAULT_DOCKER_HOST, Detection, DetectionRule, validate_docker_host};
use service_kit::Env;
use service_kit::config::UnusableDockerHost;

/// The variable that says the registry runs inside a Kubernetes pod.
pub const KUBERNETES_SERVICE_HOST: &str = "KUBERNETES_SERVICE_HOST";
/// The variable that points at a Nomad agent.
pub const NOMAD_ADDR: &str = "NOMAD_ADDR";
/// The variable that points at a Docker Engine (Docker's own convention).
pub const DOCKER_HOST: &str = "DOCKER_HOST";

/// The environment detection reads, captured once at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DetectionEnv {
    /// `KUBERNETES_SERVICE_HOST`, when set and not empty.
    pub kubernetes_service_host: Option<String>,
    /// `NOMAD_ADDR`, when set and not empty.
    pub nomad_addr: Option<String>,
    /// `DOCKER_HOST`, when set and not empty.
    pub docker_host: Option<String>,
}

impl DetectionEnv {
    /// Reads the three variables from `env`.
    pub fn from_env(env: &Env) -> Self {
        let get = |k: &str| env.get(k).map(str::to_string);
        DetectionEnv {
            kubernetes_service_host: get(KUBERNETES_SERVICE_HOST),
            nomad_addr: get(NOMAD_ADDR),
            docker_host: get(DOCKER_HOST),
        }
    }

    /// The Engine address to probe and to register a detected `docker` orchestrator with: `DOCKER_HOST`
    /// normalised, or the local socket. `Err` says why a `DOCKER_HOST` cannot be used (an `ssh://` one,
    /// say, which Berth does not speak).
    pub fn docker_host(&self) -> Result<String, UnusableDockerHost> {
        match &self.docker_host {
            None => Ok(DEFAULT_DOCKER_HOST.to_string()),
            Some(h) => {
                validate_docker_host(DOCKER_HOST, h).map_err(|s| UnusableDockerHost::new(s.message))
            }
        }
    }
}

/// Says whether a Docker Engine answers at an address (`unix:///path` or `tcp://host:port`).
pub trait EngineProbe: Send + Sync + fmt::Debug {
    /// `true` when the Engine at `host` answered `GET /_ping` with 200.
    fn ping<'a>(&'a self, host: &'a str) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>>;
}

/// The real probe: `GET /_ping` over the socket, answered within `timeout`.
#[derive(Debug, Clone, Copy)]
pub struct PingProbe {
    /// How long connecting plus answering may take.
    pub timeout: Duration,
}

impl EngineProbe for PingProbe {
    fn ping<'a>(&'a self, host: &'a str) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(async move {
            match docker_engine::ping(host, self.timeout).await {
                Ok(()) => true,
                Err(why) => {
                    tracing::debug!(host, why, "no Docker Engine");
                    false
                }
            }
        })
    }
}

/// A probe with a fixed answer, for tests and for starting without probing.
#[derive(Debug, Clone, Copy)]
pub struct FixedProbe(pub bool);

impl EngineProbe for FixedProbe {
    fn ping<'a>(&'a self, _host: &'a str) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(std::future::ready(self.0))
    }
}

/// Applies the rules to `env`, probing the Engine only when the variables decided nothing.
pub async fn detect(env: &DetectionEnv, probe: &dyn EngineProbe) -> Detection {
    if env.kubernetes_service_host.is_some() {
        return Detection {
            kind: OrchestratorKind::Kubernetes,
            rule: DetectionRule::KubernetesServiceHost,
            reason: format!("{KUBERNETES_SERVICE_HOST} is set"),
        };
    }
    if env.nomad_addr.is_some() {
        return Detection {
            kind: OrchestratorKind::Nomad,
            rule: DetectionRule::NomadAddr,
            reason: format!("{NOMAD_ADDR} is set"),
        };
    }
    let why_not_docker = match env.docker_host() {
        Ok(host) => {
            if probe.ping(&host).await {
                return Detection {
                    kind: OrchestratorKind::Docker,
                    rule: DetectionRule::DockerEngine,
                    reason: format!("a Docker Engine answered GET /_ping at {host}"),
                };
            }
            format!("no Docker Engine answered GET /_ping at {host}")
        }
        Err(why) => format!("the Docker Engine was not probed ({why})"),
    };
    Detection {
        kind: OrchestratorKind::Local,
        rule: DetectionRule::Fallback,
        reason: format!(
            "neither {KUBERNETES_SERVICE_HOST} nor {NOMAD_ADDR} is set, and {why_not_docker}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rules_apply_in_order() {
        let all = DetectionEnv {
            kubernetes_service_host: Some("10.0.0.1".into()),
            nomad_addr: Some("http://nomad:4646".into()),
            docker_host: None,
        };
        assert_eq!(
            detect(&all, &FixedProbe(true)).await.kind,
            OrchestratorKind::Kubernetes
        );
        let nomad = DetectionEnv {
            kubernetes_service_host: None,
            ..all.clone()
        };
        assert_eq!(
            detect(&nomad, &FixedProbe(true)).await.rule,
            DetectionRule::NomadAddr
        );
        let none = DetectionEnv::default();
        assert_eq!(
            detect(&none, &FixedProbe(true)).await.kind,
            OrchestratorKind::Docker
        );
        let d = detect(&none, &FixedProbe(false)).await;
        assert_eq!(d.kind, OrchestratorKind::Local);
        assert!(d.reason.contains(DEFAULT_DOCKER_HOST), "{}", d.reason);
    }

    #[tokio::test]
    async fn empty_variables_count_as_unset() {
        let env = Env::default()
            .with(KUBERNETES_SERVICE_HOST, "")
            .with(NOMAD_ADDR, "");
        assert_eq!(DetectionEnv::from_env(&env), DetectionEnv::default());
    }

    #[tokio::test]
    async fn an_unusable_docker_host_is_not_probed() {
        let env = DetectionEnv {
            docker_host: Some("ssh://me@box".into()),
            ..DetectionEnv::default()
        };
        let d = detect(&env, &FixedProbe(true)).await;
        assert_eq!(d.rule, DetectionRule::Fallback);
        assert!(d.reason.contains("not probed"), "{}", d.reason);
    }

    #[tokio::test]
    async fn the_real_probe_speaks_http_to_a_socket() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        use tokio::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 256];
            let n = s.read(&mut buf).await.unwrap();
            assert!(buf[..n].starts_with(b"GET /_ping HTTP/1.1\r\n"));
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK")
                .await
                .unwrap();
        });
        let probe = PingProbe {
            timeout: Duration::from_secs(5),
        };
        assert!(probe.ping(&format!("tcp://{addr}")).await);
        // Nothing listens on a port just released.
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gone = closed.local_addr().unwrap();
        drop(closed);
        assert!(!probe.ping(&format!("tcp://{gone}")).await);
        assert!(!probe.ping("unix:///nonexistent/docker.sock").await);
    }
}
