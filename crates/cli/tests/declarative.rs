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
    // kubectl's forms: KIND/NAME, and several kinds at once.
    let slashed: serde_json::Value = serde_json::from_str(&ok(
        &stack,
        &["get", &format!("machine/{}", first[0]), "-o", "json"],
    ))
    .unwrap();
    assert_eq!(slashed["metadata"]["uid"], one["metadata"]["uid"]);
    let both = ok(&stack, &["get", "md,mcc", "-o", "name"]);
    assert_eq!(
        both.lines().collect::<Vec<_>>(),
        ["machinedeployment/workers", "machineclass/demo-class"],
        "{both}"
    );
    let watched = stack.berth(&["get", "md,mcc", "--watch"]);
    assert_eq!(watched.status.code(), Some(2), "{}", stderr(&watched));
    assert!(stderr(&watched).contains("one kind at a time"));
    // Several kinds as JSON: one List, which applies back.
    let listed: serde_json::Value =
        serde_json::from_str(&ok(&stack, &["get", "md,mcc", "-o", "json"])).unwrap();
    assert_eq!(listed["kind"], "List", "{listed}");
    let kinds: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["MachineDeployment", "MachineClass"]);
    // The part after `/` is a name, never an option: the token goes nowhere else.
    let sneaky = stack.berth(&["get", "md/--server=http://127.0.0.1:9"]);
    assert_eq!(sneaky.status.code(), Some(2), "{}", stderr(&sneaky));
    assert!(stderr(&sneaky).contains("does not start with `-`"));
    // Every kind is checked before any prints.
    let half = stack.berth(&["get", "md,nosuchkind"]);
    assert_eq!(half.status.code(), Some(2));
    assert_eq!(stdout(&half), "", "nothing printed before the refusal");
    let tables = ok(&stack, &["get", "md,mcc"]);
    assert_eq!(
        tables.lines().filter(|l| l.starts_with("NAME")).count(),
        2,
        "{tables}"
    );
    assert!(
        tables.contains("\n\nNAME"),
        "a blank line between: {tables}"
    );
    assert!(
        one["status"]["providerID"]
            .as_str()
            .unwrap()
            .starts_with("cn-shanghai.i-")
    );
    // The same file again changes nothing.
    let again = ok(&stack, &["apply", "-f", f]);
    assert!(again.lines().all(|l| l.ends_with("unchanged")), "{again}");
    // With -o, the objects as written: a List of several, which applies back as it is.
    let written: serde_json::Value =
        serde_json::from_str(&ok(&stack, &["apply", "-f", f, "-o", "json"])).unwrap();
    assert_eq!(written["kind"], "List", "{written}");
    let kinds: Vec<&str> = written["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    // A class that exists goes after the deployments it rolls (their strategy first).
    assert_eq!(kinds, ["Secret", "MachineDeployment", "MachineClass"]);
    assert!(
        written["items"][0].get("data").is_none(),
        "values are never shown"
    );
    assert_eq!(
        ok(&stack, &["apply", "-f", f, "-o", "name"])
            .lines()
            .collect::<Vec<_>>(),
        [
            "secret/demo-cloud",
            "machinedeployment/workers",
            "machineclass/demo-class"
        ]
    );
    let scaled: serde_json::Value = serde_json::from_str(&ok(
        &stack,
        &["scale", "md/workers", "--replicas", "2", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(scaled["spec"]["replicas"], 2, "{scaled}");
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
    assert_eq!(
        applied.lines().collect::<Vec<_>>(),
        [
            "secret/demo-cloud unchanged",
            "machinedeployment/workers configured",
            "machineclass/demo-class configured"
        ],
        "the deployment (its replicas, its strategy) before the class whose change rolls it"
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
    // A misspelt field reaches the server, which refuses it by name (apply dropped a misspelt
    // metadata field, and said "unchanged" of a secret's `stringdata`: a break-it finding).
    let typo = printed_file.with_file_name("typo.yaml");
    let printed_secret = ok(&stack, &["get", "secret", "demo-cloud", "-o", "yaml"]);
    for (file, body, field) in [
        (
            "md",
            ok(&stack, &["get", "md", "workers", "-o", "yaml"]).replacen(
                "replicas:",
                "replcas:",
                1,
            ),
            "spec.replcas: not a field it has; did you mean replicas?",
        ),
        (
            "secret",
            format!("{printed_secret}stringdata:\n  alicloudAccessKeyID: x\n"),
            "stringdata: not a field it has; did you mean stringData?",
        ),
        (
            "secret metadata",
            printed_secret.replacen("metadata:\n", "metadata:\n  labells:\n    a: b\n", 1),
            "metadata.labells: not a field it has",
        ),
        (
            "new secret",
            printed_secret.replacen("name: demo-cloud", "name: another-cloud", 1)
                + "stringDatta:\n  alicloudAccessKeyID: x\n",
            "stringDatta: not a field it has; did you mean stringData?",
        ),
    ] {
        std::fs::write(&typo, body).unwrap();
        let out = stack.berth(&["apply", "-f", typo.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{file}: {}", stderr(&out));
        assert!(stderr(&out).contains(field), "{file}: {}", stderr(&out));
    }
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
    // Delete and wait: machines, then the deployment. With the secret wrong, the VMs cannot be
    // deleted: a wait that gives up names the machines and why, not only the finalizers; once the
    // secret is right again, the delete goes on.
    let secret = |key_secret: &str| {
        format!(
            "apiVersion: berth.io/v1\nkind: Secret\nmetadata:\n  name: demo-cloud\nstringData:\n  alicloudAccessKeyID: {}\n  alicloudAccessKeySecret: {key_secret}\n",
            stack.emulator_key.0
        )
    };
    let secret_file = stack.data.path().join("secret.yaml");
    std::fs::write(&secret_file, secret("not-the-key")).unwrap();
    ok(&stack, &["apply", "-f", secret_file.to_str().unwrap()]);
    let out = stack.berth(&["delete", "md", "workers", "--wait", "--timeout", "10s"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("machines whose last operation failed: workers-"),
        "{}",
        stderr(&out)
    );
    std::fs::write(&secret_file, secret(&stack.emulator_key.1)).unwrap();
    ok(&stack, &["apply", "-f", secret_file.to_str().unwrap()]);
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
