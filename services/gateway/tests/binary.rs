//! The `gateway` binary's command line: help, version, healthcheck, and unknown arguments.

#[test]
fn the_binary_answers_help_version_and_healthcheck_without_serving() {
    service_kit::testing::check_service_binary(env!("CARGO_BIN_EXE_gateway"), "gateway");
}

/// Runs the gateway binary in `data_dir` until it logs that it listens, then stops it; returns its
/// log.
fn start_and_stop(data_dir: &std::path::Path, create_admin_token: bool) -> String {
    let create = create_admin_token.to_string();
    start_and_stop_with(data_dir, &[("BERTH_CREATE_ADMIN_TOKEN", create.as_str())])
}

/// Starts the binary with `env` added, reads its log until it listens, and stops it.
fn start_and_stop_with(data_dir: &std::path::Path, env: &[(&str, &str)]) -> String {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gateway"))
        .env("BERTH_LISTEN", "127.0.0.1:0")
        .env("BERTH_DATA_DIR", data_dir)
        .envs(env.iter().copied())
        .env("BERTH_LOG", "info")
        .env_remove("BERTH_LOG_FORMAT")
        .env_remove("BERTH_TOKENS_FILE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the gateway binary starts");
    let mut log = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        if line.contains("gateway listening") {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    log
}

#[test]
fn a_first_start_with_create_admin_token_logs_one_admin_token_once() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    // Off (the default): no tokens file is made, as before.
    let log = start_and_stop(dir.path(), false);
    assert!(!log.contains("admin token"), "{log}");
    assert!(!tokens.exists());
    // On: the first start makes one admin token and shows it.
    let log = start_and_stop(dir.path(), true);
    let token = log
        .split("admin token: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no admin token in the log:\n{log}"))
        .to_string();
    let store = gateway::auth::TokenStore::load(&tokens).unwrap();
    assert_eq!(
        store.authenticate(&token, |e| e.allows(gateway::routes::Scope::Admin)),
        Some(true)
    );
    let written = std::fs::read_to_string(&tokens).unwrap();
    assert!(!written.contains(&token), "only the hash is kept");
    // A later start keeps that file and shows no token.
    let log = start_and_stop(dir.path(), true);
    assert!(!log.contains("admin token"), "{log}");
    assert_eq!(std::fs::read_to_string(&tokens).unwrap(), written);
}

/// Issue 17: a misspelled variable (here the internal credential's) stops the gateway at start, with
/// exit code 2 and a message naming it and the nearest known name, never its value; a retired name
/// still starts it, warning once.
#[test]
fn a_misspelled_variable_stops_the_start_and_a_retired_one_warns() {
    let dir = tempfile::tempdir().unwrap();
    // A start with one more variable set: its exit code and what it printed.
    let start_with = |var: &str, value: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gateway"))
            .env("BERTH_LISTEN", "127.0.0.1:0")
            .env("BERTH_DATA_DIR", dir.path())
            .env(var, value)
            .output()
            .expect("the gateway binary runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = start_with("BERTH_INTERNAL_TOKN", "s3cret-credential");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("BERTH_INTERNAL_TOKN"), "{stderr}");
    assert!(
        stderr.contains("did you mean BERTH_INTERNAL_TOKEN?"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret-credential"), "{stderr}");
    // Empty is refused too: `BERTH_RATE_LIMIT_RPS=` is no setting.
    let (code, stderr) = start_with("BERTH_RATE_LIMIT_RPS", "");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("BERTH_RATE_LIMIT_RPS is set to the empty string"),
        "{stderr}"
    );
    // A log setting with a typo is refused too, naming it (it was ignored, or exit 1).
    for (var, value) in [
        ("BERTH_LOG_FORMAT", "jsn"),
        ("BERTH_LOG", "nonsense==="),
        ("BERTH_LOG", "warning"),
        ("BERTH_LOG", "info,inof"),
    ] {
        let (code, stderr) = start_with(var, value);
        assert_eq!(code, Some(2), "{var}: {stderr}");
        assert!(stderr.contains(var), "{stderr}");
    }
    // A value that is no rate is refused as an unknown name is, with exit code 2, naming it.
    let (code, stderr) = start_with("BERTH_RATE_LIMIT_RPS", "-5");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("BERTH_RATE_LIMIT_RPS") && stderr.contains("0 turns the limit off"),
        "{stderr}"
    );

    // The retired name: it starts, and says once what to set instead.
    let log = start_and_stop_with(dir.path(), &[("BERTH_GATEWAY_WORKERS", "2")]);
    assert_eq!(
        log.matches("BERTH_GATEWAY_WORKERS is deprecated").count(),
        1,
        "{log}"
    );
    assert!(log.contains("set BERTH_WORKERS instead"), "{log}");
}

#[test]
fn gateway_token_refuses_a_misspelled_variable_as_a_start_does() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gateway"))
        .args(["token", "create", "--admin", "--name", "ops"])
        .env("BERTH_DATA_DIR", dir.path())
        .env("BERTH_TOKENS_FLIE", dir.path().join("elsewhere"))
        .output()
        .expect("the gateway binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("did you mean BERTH_TOKENS_FILE?"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no token is minted");
    assert!(!dir.path().join("tokens").exists());
}

/// Issue 32, point 11: a `BERTH_*` name that is no near miss of a setting (a tool's own, in the
/// caller's shell) is warned about, not refused.
#[test]
fn an_unknown_variable_that_is_no_near_miss_only_warns() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gateway"))
        .args(["token", "create", "--admin", "--name", "ops"])
        .env("BERTH_DATA_DIR", dir.path())
        .env("BERTH_BIN_DIR", "/opt/berth/bin")
        .output()
        .expect("the gateway binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: BERTH_BIN_DIR is not a variable this program reads"),
        "{stderr}"
    );
    assert!(!stderr.contains("/opt/berth"), "{stderr}");
    assert!(dir.path().join("tokens").exists(), "the token was minted");
}
