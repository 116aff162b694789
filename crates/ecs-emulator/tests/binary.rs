//! The `ecs-emulator` binary with a state directory, as a compose stack runs it on a volume: killed
//! without warning (SIGKILL, so nothing is flushed on the way out) and started again, it still has
//! its instances.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A port nothing listens on (bound, read and released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// `GET path` over plain HTTP/1.1; the body, if the emulator answered.
fn get(port: u16, path: &str) -> Option<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// The binary on `port`, its account in `dir` (given by the variable, as compose would), seeding
/// `seed` instances into an empty account; returns once it answers.
fn start(port: u16, dir: &std::path::Path, seed: usize) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_ecs-emulator"))
        .args(["--port", &port.to_string()])
        .env("BERTH_ECS_EMULATOR_STATE_DIR", dir)
        .env("BERTH_ECS_EMULATOR_SEED_INSTANCES", seed.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(port, "/healthz").is_none() {
        assert!(Instant::now() < deadline, "the emulator never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn instance_ids(port: u16) -> Vec<String> {
    let body = get(port, "/_emulator/state").expect("the state answers");
    let state: Value = serde_json::from_str(&body).unwrap();
    state["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["InstanceId"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_killed_emulator_with_a_state_dir_comes_back_with_its_instances() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut first = start(port, dir.path(), 3);
    let seeded = instance_ids(port);
    assert_eq!(seeded.len(), 3);
    first.kill().unwrap();
    first.wait().unwrap();

    // Seeding again would have added three more: the account is not empty, so it does not.
    let port = free_port();
    let mut second = start(port, dir.path(), 3);
    assert_eq!(instance_ids(port), seeded);
    second.kill().unwrap();
    second.wait().unwrap();
}

/// The binary's log from its start until it says it listens (or exits), with its account in `dir`
/// and `extra` arguments; it is stopped then.
fn startup_log(dir: &std::path::Path, extra: &[&str]) -> String {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_ecs-emulator"))
        .args(["--port", &free_port().to_string()])
        .args(extra)
        .env("BERTH_ECS_EMULATOR_STATE_DIR", dir)
        .env("BERTH_LOG", "info")
        .env_remove("BERTH_LOG_FORMAT")
        .env_remove("BERTH_ECS_EMULATOR_ACCESS_KEY_ID")
        .env_remove("BERTH_ECS_EMULATOR_ACCESS_KEY_SECRET")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut log = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        // The key, when logged, comes before this line.
        if line.contains("listening") {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    log
}

/// The value after `label` in `log`.
fn logged(log: &str, label: &str) -> Option<String> {
    Some(
        log.split(label)
            .nth(1)?
            .split_whitespace()
            .next()?
            .to_owned(),
    )
}

#[test]
fn with_a_state_dir_and_no_key_flags_the_key_is_made_once_kept_and_logged() {
    let dir = tempfile::tempdir().unwrap();
    let first = startup_log(dir.path(), &[]);
    let id = logged(&first, "emulator access key id: ").expect(&first);
    let secret = logged(&first, "emulator access key secret: ").expect(&first);
    assert!(id.starts_with("LTAI"), "{id}");
    assert_ne!(secret, "emulator-secret");
    // A restart on the same directory accepts the same key, so machine Secrets stay valid.
    let again = startup_log(dir.path(), &[]);
    assert_eq!(logged(&again, "emulator access key id: "), Some(id));
    assert_eq!(logged(&again, "emulator access key secret: "), Some(secret));
    // A key given on the command line wins, and no secret is logged then.
    let given = startup_log(dir.path(), &["--access-key-id", "mine"]);
    assert!(given.contains("access_key_id=mine"), "{given}");
    assert!(!given.contains("emulator access key secret"), "{given}");
}

/// Issue 17: a misspelled variable stops the emulator at start (exit code 2, the nearest known name),
/// and a bare number is no duration.
#[test]
fn a_misspelled_variable_or_a_bare_number_stops_the_start() {
    let run = |var: &str, value: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_ecs-emulator"))
            .args(["--port", &free_port().to_string()])
            .env(var, value)
            .output()
            .expect("the binary runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run("BERTH_ECS_EMULATOR_PENDNG", "1s");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("did you mean BERTH_ECS_EMULATOR_PENDING?"),
        "{stderr}"
    );
    let (code, stderr) = run("BERTH_ECS_EMULATOR_PENDING", "1000");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("BERTH_ECS_EMULATOR_PENDING=\"1000\""),
        "{stderr}"
    );
    assert!(stderr.contains("bare number"), "{stderr}");
    assert_eq!(
        stderr.matches("1000").count(),
        1,
        "the value once: {stderr}"
    );
}
