//! Detection from an injected environment, and the first start's default.

use std::path::Path;

use domain::OrchestratorKind;
use domain::orchestrator::{DEFAULT_DOCKER_HOST, DetectionRule};
use serde_json::{Value, json};
use service_kit::Env;

use crate::support::*;

#[tokio::test]
async fn detection_follows_each_variable_and_the_first_start_registers_a_default_that_serves_volumes()
 {
    struct Case {
        env: Env,
        docker_up: bool,
        kind: OrchestratorKind,
        rule: DetectionRule,
        /// The first start's default: the detected kind when it can serve volumes, else local.
        registers: OrchestratorKind,
        config: fn(&Path) -> Value,
    }
    let cases = [
        Case {
            env: Env::default().with("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            docker_up: true,
            kind: OrchestratorKind::Kubernetes,
            rule: DetectionRule::KubernetesServiceHost,
            // In a pod, claims in the cluster through the pod's service account (issue 31), in
            // the pod's namespace (none here: the default).
            registers: OrchestratorKind::Kubernetes,
            config: |_| json!({"namespace": "berth-volumes", "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}),
        },
        Case {
            env: Env::default().with("NOMAD_ADDR", "http://127.0.0.1:4646"),
            docker_up: true,
            kind: OrchestratorKind::Nomad,
            rule: DetectionRule::NomadAddr,
            registers: OrchestratorKind::Local,
            config: |dir| json!({"basePath": dir.join("volumes/local").display().to_string()}),
        },
        Case {
            env: Env::default().with("DOCKER_HOST", "tcp://engine:2376"),
            docker_up: true,
            kind: OrchestratorKind::Docker,
            rule: DetectionRule::DockerEngine,
            registers: OrchestratorKind::Docker,
            config: |_| json!({"host": "tcp://engine:2376"}),
        },
        Case {
            env: Env::default(),
            docker_up: true,
            kind: OrchestratorKind::Docker,
            rule: DetectionRule::DockerEngine,
            registers: OrchestratorKind::Docker,
            config: |_| json!({"host": DEFAULT_DOCKER_HOST}),
        },
        Case {
            env: Env::default().with("DOCKER_HOST", "tcp://engine:2376"),
            docker_up: false,
            kind: OrchestratorKind::Local,
            rule: DetectionRule::Fallback,
            registers: OrchestratorKind::Local,
            config: |dir| json!({"basePath": dir.join("volumes/local").display().to_string()}),
        },
        Case {
            env: Env::default().with("BERTH_LOCAL_BASE_PATH", "/var/lib/berth/vols/"),
            docker_up: false,
            kind: OrchestratorKind::Local,
            rule: DetectionRule::Fallback,
            registers: OrchestratorKind::Local,
            config: |_| json!({"basePath": "/var/lib/berth/vols"}),
        },
        // Kubernetes wins over Nomad; an empty variable counts as unset.
        Case {
            env: Env::default()
                .with("NOMAD_ADDR", "http://n:4646")
                .with("KUBERNETES_SERVICE_HOST", "k")
                .with("BERTH_KUBERNETES_NAMESPACE", "team-volumes"),
            docker_up: false,
            kind: OrchestratorKind::Kubernetes,
            rule: DetectionRule::KubernetesServiceHost,
            registers: OrchestratorKind::Kubernetes,
            config: |_| json!({"namespace": "team-volumes", "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}),
        },
        Case {
            env: Env::default().with("KUBERNETES_SERVICE_HOST", ""),
            docker_up: false,
            kind: OrchestratorKind::Local,
            rule: DetectionRule::Fallback,
            registers: OrchestratorKind::Local,
            config: |dir| json!({"basePath": dir.join("volumes/local").display().to_string()}),
        },
    ];
    for case in cases {
        let app = spawn_app_with(case.env.clone(), case.docker_up, None).await;
        let what = format!("{:?}", case.env);
        let d = app.registry.detect().await.unwrap();
        assert_eq!((d.kind, d.rule), (case.kind, case.rule), "{what}");
        assert!(!d.reason.is_empty());
        let raw = app.detect().await;
        assert_eq!(raw.body["kind"], case.kind.as_str());

        let default = app.registry.default_orchestrator().await.unwrap();
        assert_eq!(default.name, case.registers.as_str(), "{what}");
        assert_eq!(default.kind, case.registers, "{what}");
        assert!(default.storage_ops, "{what}: the default can serve volumes");
        assert_eq!(default.config, (case.config)(app.dir.path()), "{what}");
        assert_eq!(app.registry.list().await.unwrap().items.len(), 1, "{what}");
    }
}

#[tokio::test]
async fn the_detected_default_is_registered_only_on_the_very_first_start() {
    let app = spawn_app().await;
    assert_eq!(
        app.registry.default_orchestrator().await.unwrap().name,
        "local"
    );
    app.clear().await;
    let db = app.db_path();
    let dir = app.stop().await;
    assert!(db.exists());

    // A later start, even one whose environment now implies another kind, leaves the operator's
    // (empty) registry alone.
    let again = spawn_app_with(
        Env::default().with("KUBERNETES_SERVICE_HOST", "k"),
        false,
        Some(dir),
    )
    .await;
    assert_eq!(again.list().await.body["items"], json!([]));
    assert_eq!(
        again.detect().await.body["kind"],
        "kubernetes",
        "detection itself is live"
    );
}
