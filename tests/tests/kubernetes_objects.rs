//! Every object Berth sends a Kubernetes cluster is a valid object of the Kubernetes version
//! k8s-openapi is pinned to, by the official schemas (`kubernetes-validate --strict`, which CI also
//! holds the manifests to): facts from outside, so a mistake the stand-in API server shares with
//! the backend cannot pass (issue 31).

use berth_tests::{Stack, python::tools_venv_or_skip};
use kube_standin::StandIn;
use serde_json::json;

/// The Kubernetes minor version of `k8s-openapi`'s feature in the workspace's Cargo.toml.
const KUBERNETES_VERSION: &str = "1.33.0";

#[tokio::test]
async fn every_claim_berth_sends_is_valid_by_the_official_schemas() {
    let Some(venv) = tools_venv_or_skip("the Kubernetes schema check") else {
        return;
    };
    let standin = StandIn::start(&["berth-volumes"]).await;
    let stack = Stack::spawn(&[("BERTH_KUBERNETES_SERVERS", standin.url.as_str())]).await;
    // Every shape of claim the config can ask for: defaults, a class, every access mode, Block.
    let configs = [
        json!({"server": standin.url, "namespace": "berth-volumes"}),
        json!({"server": standin.url, "namespace": "berth-volumes", "storageClassName": "fast.ssd",
            "accessModes": ["ReadWriteMany", "ReadOnlyMany", "ReadWriteOncePod"], "volumeMode": "Block"}),
    ];
    for (i, config) in configs.iter().enumerate() {
        let orchestrator = format!("cluster-{i}");
        let answer = stack
            .call(
                "PUT",
                &format!("/v1/orchestrators/{orchestrator}"),
                Some("tok-admin"),
            )
            .json(&json!({"kind": "kubernetes", "config": config}))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 201, "{}", answer.text().await.unwrap());
        let answer = stack
            .call("POST", "/v1/volumes", Some("tok-admin"))
            .json(
                &json!({"name": format!("v-{i}.data"), "namespace": "team-a", "capacity": "1536Mi",
                "orchestrator": orchestrator, "labels": {"app.example.com/tier": "db"}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 201, "{}", answer.text().await.unwrap());
    }
    let sent = standin.sent();
    assert_eq!(sent.len(), configs.len(), "{sent:#?}");
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<_> = sent
        .iter()
        .enumerate()
        .map(|(i, object)| {
            let path = dir.path().join(format!("claim-{i}.json"));
            std::fs::write(&path, serde_json::to_vec_pretty(object).unwrap()).unwrap();
            path
        })
        .collect();
    let out = std::process::Command::new(venv.join("bin/kubernetes-validate"))
        .args(["--strict", "--kubernetes-version", KUBERNETES_VERSION])
        .args(&files)
        .output()
        .expect("kubernetes-validate runs");
    assert!(
        out.status.success(),
        "a claim Berth sent is not a valid Kubernetes {KUBERNETES_VERSION} object:\n{}{}\n{sent:#?}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
