//! Declarative machines through the built `berth` binary against a real `berth up` (issue 33):
//! apply the example deployment, follow its roll, read machines by name, scale, roll a class
//! change, re-apply what `get -o yaml` printed, delete and wait; exit codes of the mistakes.

mod common;

use std::time::{Duration, Instant};

use common::{Stack, stderr, stdout};

fn manifest(stack: &Stack) -> std::path::PathBuf {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/machine-deployment.yaml"
    ))
    .unwrap();
    let text = example
        .replace("EMULATOR_ACCESS_KEY_ID", &stack.emulator_key.0)
        .replace("EMULATOR_ACCESS_KEY_SECRET", &stack.emulator_key.1);
    let file = stack.data.path().join("machine-deployment.yaml");
    std::fs::write(&file, text).unwrap();
    file
}

fn ok(stack: &Stack, args: &[&str]) -> String {
    let out = stack.berth(args);
    assert!(
        out.status.success(),
        "berth {args:?}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

fn machine_names(stack: &Stack) -> Vec<String> {
    ok(stack, &["get", "machines", "-o", "name"])
        .lines()
        .map(|l| l.trim_start_matches("machine/").to_string())
        .collect()
}

fn until(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_machine_deployment_through_the_cli() {
    let stack = Stack::start();
    let file = manifest(&stack);
    let f = file.to_str().unwrap();
    let applied = ok(&stack, &["apply", "-f", f]);
    assert_eq!(
        applied.lines().collect::<Vec<_>>(),
        [
            "secret/demo-cloud created",
            "machineclass/demo-class created",
            "machinedeployment/workers created"
        ],
        "{applied}"
    );
    let rolled = ok(
        &stack,
        &["rollout", "status", "md/workers", "--timeout", "2m"],
    );
    assert!(
        rolled
            .trim_end()
            .ends_with("machinedeployment \"workers\" successfully rolled out"),
        "{rolled}"
    );
    let table = ok(&stack, &["get", "machines"]);
    assert_eq!(
        table.lines().filter(|l| l.contains("Running")).count(),
        3,
        "{table}"
    );
    assert!(table.lines().next().unwrap().starts_with("NAME"), "{table}");
    let first = machine_names(&stack);
    // A machine by its name alone.
    let one: serde_json::Value =
        serde_json::from_str(&ok(&stack, &["machine", "get", &first[0], "-o", "json"])).unwrap();
    assert_eq!(one["status"]["phase"], "Running", "{one}");
    assert!(
        one["status"]["providerID"]
            .as_str()
            .unwrap()
            .starts_with("cn-shanghai.i-")
    );
    // The same file again changes nothing.
    let again = ok(&stack, &["apply", "-f", f]);
    assert!(again.lines().all(|l| l.ends_with("unchanged")), "{again}");
    // Scale down.
    assert_eq!(
        ok(&stack, &["scale", "md", "workers", "--replicas", "1"]).trim(),
        "machinedeployment/workers scaled"
    );
    until("one machine left", Duration::from_secs(60), || {
        machine_names(&stack).len() == 1
    });
    // A class change rolls the machines (and the file's replicas, 3, apply again, as kubectl's do).
    let changed = std::fs::read_to_string(&file)
        .unwrap()
        .replace("ecs.g6.large", "ecs.g6.xlarge");
    std::fs::write(&file, changed).unwrap();
    let applied = ok(&stack, &["apply", "-f", f]);
    assert!(
        applied.contains("machineclass/demo-class configured"),
        "{applied}"
    );
    ok(
        &stack,
        &[
            "rollout",
            "status",
            "machinedeployment/workers",
            "--timeout",
            "2m",
        ],
    );
    // Done means done: the status the command ended on was made for the class as changed, with
    // every replica of the new template.
    let class: serde_json::Value =
        serde_json::from_str(&ok(&stack, &["get", "mcc", "demo-class", "-o", "json"])).unwrap();
    let md: serde_json::Value =
        serde_json::from_str(&ok(&stack, &["get", "md", "workers", "-o", "json"])).unwrap();
    assert_eq!(
        md["status"]["observedClassGeneration"], class["metadata"]["generation"],
        "{md}"
    );
    assert_eq!(md["status"]["updatedReplicas"], 3, "{md}");
    // Old machines may still be going (their VMs being deleted); they go.
    until("three rolled machines", Duration::from_secs(60), || {
        let names = machine_names(&stack);
        names.len() == 3 && names.iter().all(|n| !first.contains(n))
    });
    // What get printed applies back, unchanged.
    let printed = ok(&stack, &["get", "md", "workers", "-o", "yaml"]);
    let printed_file = stack.data.path().join("printed.yaml");
    std::fs::write(&printed_file, printed).unwrap();
    let again = ok(&stack, &["apply", "-f", printed_file.to_str().unwrap()]);
    assert_eq!(again.trim(), "machinedeployment/workers unchanged");
    // Mistakes: a missing object is refused (1), a wrong kind is usage (2).
    assert_eq!(
        stack.berth(&["machine", "get", "absent"]).status.code(),
        Some(1)
    );
    assert_eq!(
        stack
            .berth(&["scale", "machine/x", "--replicas", "1"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(stack.berth(&["get", "md", "absent"]).status.code(), Some(1));
    let out = stack.berth(&["delete", "secret", "demo-cloud"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("MachineClass demo-class"),
        "{}",
        stderr(&out)
    );
    // Delete and wait: machines, then the deployment.
    ok(
        &stack,
        &["delete", "md", "workers", "--wait", "--timeout", "2m"],
    );
    assert!(machine_names(&stack).is_empty());
    assert_eq!(
        ok(&stack, &["delete", "md", "workers", "--ignore-not-found"]),
        ""
    );
}
