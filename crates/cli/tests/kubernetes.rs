//! Volumes on Kubernetes as a user drives them (issue 31): `berth up` with the CLI through the
//! gateway, against the stand-in API server (`kube-standin`), and kubectl reading the same stand-in
//! sees exactly the claims Berth says it made.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use common::*;
use kube_standin::{Faults, StandIn};
use serde_json::{Value, json};

const CLAIMS: &str = "berth-volumes";

/// The stand-in on a runtime of its own (these tests drive processes, not async code).
fn standin() -> (tokio::runtime::Runtime, StandIn) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let standin = rt.block_on(StandIn::start(&[CLAIMS]));
    (rt, standin)
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(out)))
}

/// `kubectl get pvc -l <selector> -o json` against the stand-in, when kubectl is installed (CI
/// installs Debian's for kustomize before the tests; BERTH_REQUIRE_KUBECTL=1 fails without it).
fn kubectl_claims(url: &str, selector: &str) -> Option<BTreeSet<String>> {
    let out = match Command::new("kubectl")
        .args([
            "get",
            "pvc",
            "-n",
            CLAIMS,
            "-l",
            selector,
            "-o",
            "json",
            "--server",
            url,
            "--kubeconfig",
            "/dev/null",
        ])
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var("BERTH_REQUIRE_KUBECTL").as_deref() != Ok("1"),
                "BERTH_REQUIRE_KUBECTL=1, but kubectl could not run: {e}"
            );
            eprintln!("skipping the kubectl check: kubectl could not run: {e}");
            return None;
        }
    };
    assert!(out.status.success(), "kubectl: {}", stderr(&out));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    Some(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
            .collect(),
    )
}

#[test]
fn volumes_on_kubernetes_through_the_cli_and_kubectl_sees_what_berth_made() {
    let (rt, standin) = standin();
    let stack = Stack::start_with(tempfile::tempdir().unwrap(), |cmd| {
        cmd.env("BERTH_KUBERNETES_SERVERS", &standin.url);
    });
    let out = stack.berth(&[
        "orchestrator",
        "register",
        "cluster",
        "--kind",
        "kubernetes",
        "-c",
        &format!("server={}", standin.url),
        "-c",
        &format!("namespace={CLAIMS}"),
        "-c",
        "storageClassName=fast",
        "-c",
        r#"accessModes=["ReadWriteOnce"]"#,
        "-o",
        "json",
    ]);
    let registered = json_of(&out);
    assert_eq!(registered["storageOps"], true, "{registered}");

    // Create: Pending, until the cluster binds the claim.
    let made = json_of(&stack.berth(&[
        "volume",
        "create",
        "data",
        "--capacity",
        "1Gi",
        "--orchestrator",
        "cluster",
        "-l",
        "tier=db",
        "-o",
        "json",
    ]));
    assert_eq!(made["status"]["phase"], "Pending", "{made}");
    assert_eq!(made["status"]["location"], format!("{CLAIMS}/default.data"));
    json_of(&stack.berth(&[
        "volume",
        "create",
        "cache",
        "--capacity",
        "512Mi",
        "--orchestrator",
        "cluster",
        "-p",
        "reclaimPolicy=Retain",
        "-o",
        "json",
    ]));

    // --wait says what it waits for, and ends once the claim is bound.
    standin.event(
        CLAIMS,
        "default.data",
        "WaitForFirstConsumer",
        "waiting for first consumer to be created before binding",
    );
    let waiting = berth_command(
        &stack.url,
        Some(&stack.admin_token),
        &[
            "volume",
            "create",
            "data",
            "--capacity",
            "1Gi",
            "--orchestrator",
            "cluster",
            "-l",
            "tier=db",
            "--wait",
            "--timeout",
            "30s",
        ],
    )
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(standin.bind(CLAIMS, "default.data"));
    let waited = waiting.wait_with_output().unwrap();
    assert!(waited.status.success(), "{}", stderr(&waited));
    assert!(
        stderr(&waited).contains("waits for a first consumer"),
        "{}",
        stderr(&waited)
    );
    let read = json_of(&stack.berth(&["volume", "get", "data", "-o", "json"]));
    assert_eq!(read["status"]["phase"], "Ready", "{read}");
    assert!(
        read["status"]["message"]
            .as_str()
            .unwrap()
            .contains("bound to PersistentVolume pvc-")
    );

    // Read, list with a selector, stats.
    let listed = json_of(&stack.berth(&["volume", "list", "-l", "tier=db", "-o", "json"]));
    let names: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["data"]);
    let stats = json_of(&stack.berth(&["volume", "stats", "data", "-o", "json"]));
    assert_eq!(stats["capacityBytes"], 1 << 30, "{stats}");

    // kubectl sees exactly the claims Berth made.
    let berths: BTreeSet<String> = ["default.data", "default.cache"].map(String::from).into();
    if let Some(seen) = kubectl_claims(&standin.url, "app.kubernetes.io/managed-by=berth") {
        assert_eq!(seen, berths);
    }

    // A claim kubectl made under the name Berth would use is never adopted.
    standin
        .put_claim(
            CLAIMS,
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "default.theirs"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .unwrap();
    let clash = stack.berth(&[
        "volume",
        "create",
        "theirs",
        "--capacity",
        "1Gi",
        "--orchestrator",
        "cluster",
    ]);
    assert_eq!(clash.status.code(), Some(1), "{}", stderr(&clash));
    assert!(
        stderr(&clash).contains("not made by Berth"),
        "{}",
        stderr(&clash)
    );
    assert!(standin.claim(CLAIMS, "default.theirs").unwrap()["metadata"]["labels"].is_null());

    // RBAC's refusal names what is missing, and nothing of the server.
    standin.set_faults(Faults {
        denied: BTreeSet::from([("create".to_string(), "persistentvolumeclaims".to_string())]),
        ..Faults::default()
    });
    let refused = stack.berth(&[
        "volume",
        "create",
        "rbac",
        "--capacity",
        "1Gi",
        "--orchestrator",
        "cluster",
    ]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let said = stderr(&refused);
    assert!(
        said.contains("may not create persistentvolumeclaims") && said.contains(CLAIMS),
        "{said}"
    );
    assert!(!said.contains(&standin.url), "{said}");
    standin.set_faults(Faults::default());

    // An API server that hangs, then one that is gone: retryable (exit 3), said without its address.
    standin.set_faults(Faults {
        hang: true,
        ..Faults::default()
    });
    let hung = stack.berth(&[
        "volume",
        "create",
        "hung",
        "--capacity",
        "1Gi",
        "--orchestrator",
        "cluster",
    ]);
    assert_eq!(hung.status.code(), Some(3), "{}", stderr(&hung));
    assert!(
        stderr(&hung).contains("did not answer"),
        "{}",
        stderr(&hung)
    );
    assert!(!stderr(&hung).contains(&standin.url), "{}", stderr(&hung));
    standin.set_faults(Faults::default());

    // Retain (the volume's own reclaim policy) leaves the claim, no longer Berth's; delete removes
    // the other's.
    assert!(stack.berth(&["volume", "delete", "cache"]).status.success());
    let claim = standin.claim(CLAIMS, "default.cache").expect("retained");
    assert!(claim["metadata"]["labels"]["app.kubernetes.io/managed-by"].is_null());
    assert!(
        stack
            .berth(&["volume", "delete", "data", "--wait"])
            .status
            .success()
    );
    assert!(standin.claim(CLAIMS, "default.data").is_none());
    if let Some(seen) = kubectl_claims(&standin.url, "app.kubernetes.io/managed-by=berth") {
        assert!(seen.is_empty(), "{seen:?}");
    }

    let address = standin.url.trim_start_matches("http://").to_string();
    drop(standin);
    let down = stack.berth(&[
        "volume",
        "create",
        "down",
        "--capacity",
        "1Gi",
        "--orchestrator",
        "cluster",
    ]);
    assert_eq!(down.status.code(), Some(3), "{}", stderr(&down));
    assert!(
        stderr(&down).contains("could not be reached"),
        "{}",
        stderr(&down)
    );

    // --wait retries the create as the 503 asks, until the server is back (on the same address),
    // then waits for the claim to be bound.
    let mut late = berth_command(
        &stack.url,
        Some(&stack.admin_token),
        &[
            "volume",
            "create",
            "late",
            "--capacity",
            "1Gi",
            "--orchestrator",
            "cluster",
            "--wait",
            "--timeout",
            "60s",
            "-o",
            "json",
        ],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(&address))
        .unwrap();
    let back = {
        let _in_runtime = rt.enter();
        StandIn::start_on(listener, &[CLAIMS])
    };
    let finished = loop {
        back.bind_pending(CLAIMS);
        if let Some(status) = late.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = late.wait_with_output().unwrap();
    assert!(finished.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("could not be reached"),
        "it said what it waited for: {}",
        stderr(&out)
    );
    let made: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(made["status"]["phase"], "Ready", "{made}");
}
