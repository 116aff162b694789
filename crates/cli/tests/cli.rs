//! The CLI against a real `berth up`: table and JSON output, and exit codes (0 ok, 2 refused, 3 server
//! or unreachable).

mod common;

use common::{Stack, berth_with, stderr, stdout};

#[test]
fn volumes_and_orchestrators_through_the_cli() {
    let stack = Stack::start();
    // Under the data directory's volumes/: the directory the stack allows by default.
    let base_path = stack.data.path().join("volumes/cli");
    let base_path = base_path.to_str().unwrap();

    // Register a local orchestrator under the test's own directory (whatever the registry detected).
    let out = stack.berth(&[
        "orchestrator",
        "register",
        "local-test",
        "--kind",
        "local",
        "--config",
        &format!("basePath={base_path}"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    let header = table.lines().next().unwrap();
    assert!(
        header.starts_with("NAME") && header.contains("KIND") && header.contains("STORAGE-OPS"),
        "{table}"
    );
    assert!(
        table.lines().nth(1).unwrap().starts_with("local-test"),
        "{table}"
    );

    let out = stack.berth(&["orchestrator", "list", "-o", "json"]);
    assert!(out.status.success());
    let list: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let items = list["items"].as_array().unwrap();
    assert!(items.iter().any(|o| o["name"] == "local-test"));
    assert_eq!(
        items.iter().filter(|o| o["default"] == true).count(),
        1,
        "the detected orchestrator is the default: {list}"
    );

    let out = stack.berth(&["orchestrator", "kinds"]);
    assert!(stdout(&out).contains("local"), "{}", stdout(&out));

    // Create a volume and wait for it.
    let out = stack.berth(&[
        "volume",
        "create",
        "data",
        "--capacity",
        "64Mi",
        "--orchestrator",
        "local-test",
        "-l",
        "app=db",
        "--wait",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(lines[0].starts_with("NAMESPACE   NAME"), "{table}");
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        &cells[..5],
        &["default", "data", "64Mi", "local-test", "Ready"],
        "{table}"
    );
    // The columns line up: every cell starts where its header does.
    let phase_at = lines[0].find("PHASE").unwrap();
    assert_eq!(&lines[1][phase_at..phase_at + 5], "Ready", "{table}");

    let out = stack.berth(&["volume", "get", "default/data", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["status"]["phase"], "Ready");
    assert_eq!(v["spec"]["capacityBytes"], 64 << 20);

    let out = stack.berth(&["volume", "list", "-l", "app=db", "-o", "yaml"]);
    assert!(stdout(&out).contains("name: data"), "{}", stdout(&out));
    let out = stack.berth(&["volume", "list", "-l", "app=web", "-o", "json"]);
    let empty: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(empty["items"], serde_json::json!([]));

    let out = stack.berth(&["volume", "stats", "data"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("64.0 MiB"), "{}", stdout(&out));

    // Refusals exit 2 with one line naming the code and the request id.
    let out = stack.berth(&["volume", "get", "missing"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: NotFound: ") && err.contains("(request id: "),
        "{err}"
    );

    let out = stack.berth(&["volume", "create", "Bad_Name", "--capacity", "1Gi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("error: InvalidArgument: name: "),
        "{}",
        stderr(&out)
    );

    let out = berth_with(&stack.url, None, &["volume", "list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("error: Unauthenticated: "),
        "{}",
        stderr(&out)
    );

    // An unreachable server exits 3.
    let out = berth_with("http://127.0.0.1:9", Some("x"), &["volume", "list"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("error: Unavailable: "),
        "{}",
        stderr(&out)
    );

    let out = stack.berth(&["volume", "delete", "data"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("deleted"));
    let out = stack.berth(&["volume", "delete", "data", "-o", "json"]);
    let r: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(r["deleted"], false);

    let out = stack.berth(&["orchestrator", "delete", "local-test"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = stack.berth(&["orchestrator", "get", "local-test"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("'local-test' is not a registered orchestration provider"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn tokens_and_completions_work_offline() {
    let out = berth_with(
        "http://127.0.0.1:9",
        None,
        &[
            "token",
            "create",
            "--scopes",
            "volumes:read,volumes:write",
            "--name",
            "ci",
            "-o",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let token = v["token"].as_str().unwrap();
    let line = v["tokensFileLine"].as_str().unwrap();
    assert!(
        line.starts_with("ci sha256:") && line.ends_with(" volumes:read,volumes:write"),
        "{line}"
    );
    assert!(!line.contains(token), "the file line holds only the hash");

    let out = berth_with(
        "http://127.0.0.1:9",
        None,
        &["token", "create", "--scopes", "root"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown scope"), "{}", stderr(&out));

    for shell in ["bash", "zsh", "fish"] {
        let out = berth_with("http://127.0.0.1:9", None, &["completions", shell]);
        assert!(out.status.success());
        assert!(stdout(&out).contains("berth"), "{shell}");
    }
}

#[test]
fn machines_through_the_cli_against_the_embedded_emulator() {
    let stack = Stack::start();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/machine.yaml"
    ))
    .unwrap();
    let manifest = example
        .replace("EMULATOR_ACCESS_KEY_ID", &stack.emulator_key.0)
        .replace("EMULATOR_ACCESS_KEY_SECRET", &stack.emulator_key.1);
    let file = stack.data.path().join("machine.yaml");
    std::fs::write(&file, manifest).unwrap();
    let f = file.to_str().unwrap();

    let out = stack.berth(&["machine", "create", "-f", f]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        table.lines().next().unwrap().starts_with("PROVIDER-ID"),
        "{table}"
    );
    let provider_id = table
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert!(provider_id.starts_with("cn-shanghai.i-"), "{table}");

    // Creating again adopts the same VM.
    let out = stack.berth(&["machine", "create", "-f", f, "-o", "json"]);
    let again: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(again["providerID"], provider_id.as_str());

    let out = stack.berth(&["machine", "status", "-f", f, "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(status["providerID"], provider_id.as_str());

    let out = stack.berth(&["machine", "list", "-f", f, "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(list["machineList"][&provider_id], "worker-1", "{list}");

    // The instance is Pending for about a second: deleting it then is "retry soon" (exit 3), after
    // which the delete goes through.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let out = stack.berth(&["machine", "delete", "-f", f]);
        if out.status.success() {
            break;
        }
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        assert!(
            stderr(&out).starts_with("error: Unavailable: "),
            "{}",
            stderr(&out)
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the VM never became deletable"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let out = stack.berth(&["machine", "status", "-f", f]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("error: NotFound: "),
        "{}",
        stderr(&out)
    );

    // A file without a Secret is refused before any call.
    let bare = stack.data.path().join("bare.yaml");
    std::fs::write(&bare, "kind: MachineClass\nprovider: Alicloud\n").unwrap();
    let out = stack.berth(&["machine", "list", "-f", bare.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no Secret"), "{}", stderr(&out));
}
