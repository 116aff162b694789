//! `berth up` as a user runs it: the real binary, real ports, Ctrl-C to stop.

mod common;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    BANNER_END, Stack, berth_with, bin, eventually, expect_line, free_port_base, lines_of, stderr,
    stdout, up_command,
};

#[tokio::test]
async fn up_starts_every_service_quickly_and_stops_cleanly_on_ctrl_c() {
    let started = Instant::now();
    let stack = Stack::start();
    let base = stack.base;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let ports = [base, base + 1, base + 2, base + 3, base + 10];
    for port in ports {
        let paths: &[&str] = if port == base + 10 {
            &["/healthz"]
        } else {
            &["/healthz", "/readyz"]
        };
        for path in paths {
            let url = format!("http://127.0.0.1:{port}{path}");
            let r = client
                .get(&url)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(r.status(), 200, "{url}");
        }
    }
    // Reported, not asserted: a loaded CI machine must not turn a timing into a flake.
    println!(
        "banner printed and every service ready {:?} after spawn",
        started.elapsed()
    );
    assert!(
        stack.admin_token.starts_with("berth_"),
        "{:#?}",
        stack.banner
    );
    assert!(stack.banner.iter().any(|l| l.contains("SIMULATED")));
    // The banner links the browsable API page.
    let docs = stack
        .banner
        .iter()
        .find_map(|l| l.strip_prefix("api docs: "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no /docs link: {:#?}", stack.banner))
        .to_string();
    assert!(docs.ends_with("/docs"), "{docs}");
    // The token works the moment the banner ends.
    let out = stack.berth(&["orchestrator", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));

    let (exit, rest, data) = stack.stop();
    assert!(exit.success(), "berth up exited with {exit:?}");
    assert!(rest.iter().any(|l| l == "Stopped."), "{rest:?}");
    for port in ports {
        assert!(
            TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} still held after exit"
        );
    }
    let tokens = std::fs::read_to_string(data.path().join("tokens")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(data.path().join("tokens"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(tokens.contains("admin sha256:"));

    // A second start on the same data keeps the token, says where it is without printing it, and
    // says how to get a new one.
    let again = Stack::start_in(data);
    assert!(
        again.admin_token.is_empty(),
        "the admin token is printed only once"
    );
    let line = again
        .banner
        .iter()
        .find(|l| l.starts_with("tokens file: "))
        .unwrap_or_else(|| panic!("{:#?}", again.banner));
    assert!(
        line.contains("berth token create --admin --data-dir "),
        "{line}"
    );
    let (exit, _, _) = again.stop();
    assert!(exit.success());
}

/// Issue 14, point 2: a first start whose ports are taken wrote the admin token's hash and never
/// showed the token; every later start then said it "was printed when it was created".
#[test]
fn a_failed_start_leaves_no_token_and_a_lost_one_is_replaced_from_the_data_dir() {
    let data = tempfile::tempdir().unwrap();
    let base = free_port_base();
    // The gateway's port, the last one `up` binds.
    let busy = TcpListener::bind(("127.0.0.1", base)).unwrap();
    let out = up_command(base, data.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!("127.0.0.1:{base}")),
        "{}",
        stderr(&out)
    );
    assert!(
        !data.path().join("tokens").exists(),
        "a start that failed wrote credentials nobody was shown"
    );
    drop(busy);

    // The next start is a first start: it makes the token and shows it.
    let stack = Stack::start_in(data);
    assert!(
        stack.admin_token.starts_with("berth_"),
        "{:#?}",
        stack.banner
    );

    // Lost it: anyone who can write the data directory makes a new admin token, no gateway needed.
    let data_dir = stack.data.path().to_str().unwrap().to_string();
    let out = berth_with(
        "http://127.0.0.1:9",
        None,
        &[
            "token",
            "create",
            "--admin",
            "--data-dir",
            &data_dir,
            "-o",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let token = v["token"].as_str().unwrap().to_string();
    // The name `admin` is the first start's token's: the new one takes the next free name.
    assert_eq!(v["name"], "admin-2");
    assert!(
        v["tokensFileLine"]
            .as_str()
            .unwrap()
            .starts_with("admin-2 sha256:")
    );
    let tokens = std::fs::read_to_string(stack.data.path().join("tokens")).unwrap();
    assert_eq!(tokens.matches(" admin created=").count(), 2, "{tokens}");
    // The running gateway picks it up within a second or so.
    eventually(Duration::from_secs(10), || {
        berth_with(&stack.url, Some(&token), &["orchestrator", "list"])
            .status
            .success()
            .then_some(())
    });

    let out = berth_with(
        "http://127.0.0.1:9",
        None,
        &["token", "create", "--admin", "--data-dir", "/no/such/dir"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a directory"), "{}", stderr(&out));
}

/// Issue 14, point 10: the banner says which orchestrator new volumes go to, and why that one (a
/// host Docker Engine was used by default without a word); logs written to a pipe or a file carry
/// no colour codes.
#[test]
fn the_banner_names_the_default_orchestrator_and_why_and_piped_logs_have_no_colour() {
    let stack = Stack::start_with(tempfile::tempdir().unwrap(), |cmd| {
        cmd.env("BERTH_LOG", "info").stderr(Stdio::piped());
    });
    let out = stack.berth(&["orchestrator", "detect", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let detected: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let out = stack.berth(&["orchestrator", "list", "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let default = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["default"] == true)
        .expect("a default orchestrator")
        .clone();

    let banner = stack.banner.join("\n");
    let wanted_default = format!(
        "default orchestrator: {} (kind {})",
        default["name"].as_str().unwrap(),
        default["kind"].as_str().unwrap()
    );
    assert!(banner.contains(&wanted_default), "{banner}");
    let wanted_reason = format!(
        "detected kind: {}, because {}",
        detected["kind"].as_str().unwrap(),
        detected["reason"].as_str().unwrap()
    );
    assert!(banner.contains(&wanted_reason), "{banner}");
    if default["kind"] != "local" {
        assert!(
            banner.contains("berth orchestrator register local --kind local"),
            "{banner}"
        );
    }

    // Every call is logged at info; none of those lines may carry an escape sequence.
    let logs = stack.stderr_lines.as_ref().unwrap();
    let line = expect_line(logs, Duration::from_secs(10), |l| l.contains("answered"));
    assert!(!line.contains('\u{1b}'), "{line:?}");
    // Issue 17: `up` no longer probes the gateway with its new admin token until a reload picks it
    // up, which the gateway logged as a row of 401s; the token works from the first call.
    std::thread::sleep(Duration::from_millis(300));
    let unauthenticated: Vec<String> = std::iter::once(line)
        .chain(logs.try_iter())
        .filter(|l| l.contains("status=401"))
        .collect();
    assert!(unauthenticated.is_empty(), "{unauthenticated:#?}");
    let (exit, _, _) = stack.stop();
    assert!(exit.success());
}

/// Issue 14, point 7: `berth up --help` listed --server, --token, --output and --timeout, none of
/// which `up` reads; what it lists, it honours.
#[test]
fn up_takes_only_the_options_it_reads_and_honours_them() {
    let out = Command::new(bin()).args(["up", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = stdout(&out);
    for read in ["--data-dir", "--port-base", "--bind", "BERTH_DATA_DIR"] {
        assert!(help.contains(read), "{read} missing: {help}");
    }
    // A variable's value is not shown: `[env: BERTH_DATA_DIR=]` read as a setting left empty.
    assert!(!help.contains("BERTH_DATA_DIR="), "{help}");
    for ignored in ["--server", "--token", "--output", "--timeout", "BERTH_URL"] {
        assert!(!help.contains(ignored), "{ignored} shown: {help}");
    }
    let out = Command::new(bin())
        .args(["up", "--server", "http://x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // BERTH_DATA_DIR is honoured as --data-dir is.
    let data = tempfile::tempdir().unwrap();
    let base = free_port_base();
    let mut child = Command::new(bin())
        .args(["up", "--port-base", &base.to_string()])
        .env("BERTH_DATA_DIR", data.path())
        .env("BERTH_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    let state = expect_line(&lines, Duration::from_secs(60), |l| {
        l.starts_with("Berth is up.")
    });
    expect_line(&lines, Duration::from_secs(30), |l| {
        l.starts_with(BANNER_END)
    });
    common::interrupt(&child);
    assert!(child.wait().unwrap().success());
    assert!(state.contains(data.path().to_str().unwrap()), "{state}");
    assert!(data.path().join("tokens").exists());
    assert!(data.path().join("registry.db").exists());
}

/// Issue 17: `berth up`, which runs every service in one process, refuses a `BERTH_*` variable none
/// of them reads, with exit code 2 and the nearest known name, before it starts anything.
#[test]
fn up_refuses_a_misspelled_variable_before_starting_anything() {
    let data = tempfile::tempdir().unwrap();
    let out = common::up_command(free_port_base(), data.path())
        .env("BERTH_INTERNAL_TOKN", "s3cret-credential")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("did you mean BERTH_INTERNAL_TOKEN?"), "{err}");
    assert!(!err.contains("s3cret-credential"), "{err}");
    assert!(stdout(&out).is_empty(), "nothing started: {}", stdout(&out));
    assert!(!data.path().join("tokens").exists());
}

/// Issue 32, point 7: a refused value stops `berth up` with exit code 2, as it stops every service
/// binary, naming the variable.
#[test]
fn up_exits_2_on_a_refused_value_as_every_service_does() {
    let data = tempfile::tempdir().unwrap();
    let out = common::up_command(free_port_base(), data.path())
        .env("BERTH_RATE_LIMIT_RPS", "abc")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("BERTH_RATE_LIMIT_RPS"), "{err}");
}

/// A second `berth up` on a data directory a running one holds is refused before it binds or reads
/// anything, naming the running one (a break-it finding: both started, each overwrote the other's
/// state, and machines were lost); a port base that leaves no room above it is the command line's
/// mistake, exit 2, saying the limit.
#[test]
fn one_data_directory_runs_one_stack_and_the_port_base_says_its_limit() {
    let stack = Stack::start();
    let out = common::up_command(0, stack.data.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("another berth up (process "), "{err}");
    assert!(err.contains("another --data-dir"), "{err}");
    let (exit, _, _) = stack.stop();
    assert!(exit.success());

    let data = tempfile::tempdir().unwrap();
    let out = common::up_command(65530, data.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("65525"), "{err}");
}
