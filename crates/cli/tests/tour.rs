//! The README's quick tour, run as a newcomer runs it (issue 32, point 13): every command of its
//! blocks after `berth up`, in order, in bash from the repository's root, against a fresh `berth up`
//! with the tour's placeholders filled from the banner (the admin token, the emulator's key, the
//! gateway's URL) and its `/tmp/` files in a directory of the test's own. Every command must exit 0,
//! and no curl may print a problem. Twice, each on a fresh stack: what the first run left behind (a
//! container, a Docker volume, the local image) must not trip the second.
//!
//! The Docker machine needs a Docker Engine and the image `examples/local-image.sh` makes from a
//! static busybox; without either the test skips, saying why, and `BERTH_REQUIRE_DOCKER=1` makes
//! that a failure (CI installs Debian's `busybox-static`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Stack, bin};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The tour's commands after `berth up`: one entry per command, its `\`-continued lines joined,
/// comments and blank lines left out.
fn tour_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let tour = readme
        .split("## Quick tour")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a Quick tour section");
    let mut commands = Vec::new();
    for (i, block) in tour.split("```sh\n").skip(1).enumerate() {
        let block = block.split("```").next().unwrap_or_default();
        if i == 0 {
            assert!(
                block.contains("berth -- up"),
                "the first block starts the stack"
            );
            continue;
        }
        let mut command = String::new();
        for line in block.lines() {
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            command.push_str(line);
            command.push('\n');
            if !line.trim_end().ends_with('\\') {
                commands.push(std::mem::take(&mut command));
            }
        }
    }
    assert!(
        commands.len() >= 20,
        "{} commands in the tour",
        commands.len()
    );
    commands
}

/// Whether the tour's Docker machine can run here: an Engine, and the local image made.
fn docker_machine_possible() -> bool {
    let required = std::env::var("BERTH_REQUIRE_DOCKER").as_deref() == Ok("1");
    let engine = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !engine {
        assert!(
            !required,
            "BERTH_REQUIRE_DOCKER=1 but no Docker Engine answers"
        );
        eprintln!("SKIPPED the quick tour: no Docker Engine answers the docker command");
        return false;
    }
    let made = Command::new(repo_root().join("examples/local-image.sh"))
        .current_dir(repo_root())
        .output()
        .unwrap();
    if !made.status.success() {
        let why = String::from_utf8_lossy(&made.stderr);
        assert!(
            !required,
            "BERTH_REQUIRE_DOCKER=1 but the tour's image could not be made: {why}"
        );
        eprintln!("SKIPPED the quick tour: {why}");
        return false;
    }
    true
}

/// Runs the tour against `stack`; returns the commands that failed, with what they printed.
fn run_tour(stack: &Stack, files: &Path) -> Vec<String> {
    let docker_instance = stack
        .banner
        .iter()
        .find_map(|line| line.strip_prefix("docker instance: "))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the banner names the Docker instance")
        .to_owned();
    let fill = |command: &str| {
        // The tour's own /tmp/ paths first: a checkout under /tmp (CI's clean clone may be one) must
        // not have its binary's path moved into the files directory.
        command
            .replace("/tmp/", &format!("{}/", files.display()))
            .replace("<the admin token>", &stack.admin_token)
            .replace("<emulator access key id>", &stack.emulator_key.0)
            .replace("<emulator access key secret>", &stack.emulator_key.1)
            .replace("<docker instance>", &docker_instance)
            .replace("http://127.0.0.1:8080", &stack.url)
            .replace("./target/release/berth", &bin())
            .replace(
                "<a name from the list>",
                "$($berth get machines -o name | head -1 | cut -d/ -f2)",
            )
    };
    // Assignments carry over to every later command, as in the reader's shell.
    let mut shell_state = String::new();
    let mut failed = Vec::new();
    for command in tour_commands() {
        let command = fill(&command);
        let first = command.trim_start();
        if first.starts_with("export ") || first.starts_with("berth=") || first.starts_with("id=") {
            shell_state.push_str(&command);
            continue;
        }
        let out = Command::new("bash")
            .args(["-c", &format!("set -e\n{shell_state}{command}")])
            .current_dir(repo_root())
            .output()
            .unwrap();
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let problem = first.starts_with("curl ") && printed.contains("\"about:blank\"");
        if !out.status.success() || problem {
            failed.push(format!(
                "{}\n  exit {:?}: {printed}",
                command.trim(),
                out.status.code()
            ));
        }
    }
    failed
}

/// What the tour makes, removed through Berth if a failed run left it (each is a no-op once gone).
fn clean_up(stack: &Stack, files: &Path) {
    let machine = files.join("machine.yaml");
    let docker_machine = repo_root().join("examples/docker-machine.yaml");
    let steps: [Vec<&str>; 5] = [
        vec!["volume", "delete", "data"],
        vec!["volume", "delete", "logs"],
        vec![
            "machine",
            "delete",
            "-f",
            docker_machine.to_str().unwrap(),
            "--wait",
        ],
        vec![
            "machine",
            "delete",
            "-f",
            machine.to_str().unwrap(),
            "--wait",
        ],
        vec!["delete", "md", "workers", "--wait"],
    ];
    for step in steps {
        let _ = stack.berth(&step);
    }
}

#[test]
fn the_quick_tour_runs_twice_without_a_failed_command() {
    if !docker_machine_possible() {
        return;
    }
    for run in 1..=2 {
        let stack = Stack::start();
        let files = tempfile::tempdir().unwrap();
        let failed = run_tour(&stack, files.path());
        if !failed.is_empty() {
            clean_up(&stack, files.path());
        }
        assert!(
            failed.is_empty(),
            "run {run}: {} of the tour's commands failed:\n{}",
            failed.len(),
            failed.join("\n")
        );
        let (exit, _, _) = stack.stop();
        assert!(exit.success(), "run {run}: berth up exited {exit:?}");
    }
}

/// `machine create --wait` waits through a bootstrap that takes seconds: the Docker provider answers
/// GetMachineStatus with a bare Uninitialized while the exec runs, which ended the wait with exit 3
/// (CI saw it in the tour, whose bootstrap is a single echo, when the status came in first).
#[test]
fn create_wait_waits_through_a_slow_bootstrap() {
    if !docker_machine_possible() {
        return;
    }
    let stack = Stack::start();
    let files = tempfile::tempdir().unwrap();
    let example =
        std::fs::read_to_string(repo_root().join("examples/docker-machine.yaml")).unwrap();
    let slow = example.replace("docker-worker-1", "slow-boot-1").replace(
        "    echo \"bootstrapped",
        "    sleep 3\n    echo \"bootstrapped",
    );
    assert!(slow.contains("sleep 3"), "the example's user data changed");
    let file = files.path().join("slow.yaml");
    std::fs::write(&file, slow).unwrap();
    let file = file.to_str().unwrap();
    let created = stack.berth(&[
        "machine",
        "create",
        "-f",
        file,
        "--wait",
        "--timeout",
        "60s",
    ]);
    let deleted = stack.berth(&["machine", "delete", "-f", file, "--wait"]);
    assert!(
        created.status.success(),
        "create --wait: {}{}",
        common::stdout(&created),
        common::stderr(&created)
    );
    assert!(
        common::stdout(&created).contains("BootstrapCompleted=Completed"),
        "{}",
        common::stdout(&created)
    );
    assert!(deleted.status.success(), "{}", common::stderr(&deleted));
    stack.stop();
}
