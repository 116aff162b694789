//! Starting the real `berth` binary's `up` on free ports, and running CLI commands against it.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A port base whose ports B..=B+10 are all free right now.
pub fn free_port_base() -> u16 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        ^ std::process::id();
    for i in 0..500u32 {
        let base = 20_000 + ((seed.wrapping_add(i * 7919)) % 40_000) as u16;
        if (0..=10).all(|p| TcpListener::bind(("127.0.0.1", base + p)).is_ok()) {
            return base;
        }
    }
    panic!("no free port range found");
}

/// A running `berth up`.
pub struct Stack {
    pub child: Child,
    pub base: u16,
    pub url: String,
    pub admin_token: String,
    pub emulator_key: (String, String),
    pub lines: mpsc::Receiver<String>,
    pub banner: Vec<String>,
    pub data: tempfile::TempDir,
    stopped: bool,
}

impl Stack {
    /// Starts `berth up` and waits for the banner's last line.
    pub fn start() -> Stack {
        let data = tempfile::tempdir().unwrap();
        Self::start_in(data)
    }

    /// Starts `berth up` on an existing data directory.
    pub fn start_in(data: tempfile::TempDir) -> Stack {
        let base = free_port_base();
        let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["up", "--port-base", &base.to_string(), "--data-dir"])
            .arg(data.path())
            .env("BERTH_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut banner = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("berth up printed no full banner: {banner:#?}"));
            let done = line.starts_with("The gateway is the front door");
            banner.push(line);
            if done {
                break;
            }
        }
        let find = |prefix: &str| {
            banner
                .iter()
                .find_map(|l| l.strip_prefix(prefix).map(str::to_string))
        };
        Stack {
            base,
            url: format!("http://127.0.0.1:{base}"),
            admin_token: find("admin token: ").unwrap_or_default(),
            emulator_key: (
                find("emulator access key id: ").expect("emulator id line"),
                find("emulator access key secret: ").expect("emulator secret line"),
            ),
            child,
            lines: rx,
            banner,
            data,
            stopped: false,
        }
    }

    /// Runs `berth <args>` against this stack with its admin token.
    pub fn berth(&self, args: &[&str]) -> Output {
        berth_with(&self.url, Some(&self.admin_token), args)
    }

    /// Stops with SIGINT and returns the exit status and the rest of stdout.
    pub fn stop(mut self) -> (std::process::ExitStatus, Vec<String>, tempfile::TempDir) {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        self.stopped = true;
        // The reader thread ends at EOF, so everything printed until exit is in the channel.
        let rest: Vec<String> = self.lines.iter().collect();
        let data = std::mem::replace(&mut self.data, tempfile::tempdir().unwrap());
        (exit, rest, data)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the `berth` binary with a server and token.
pub fn berth_with(url: &str, token: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_berth"));
    cmd.args(args)
        .env("BERTH_URL", url)
        .env_remove("BERTH_TOKEN");
    if let Some(t) = token {
        cmd.env("BERTH_TOKEN", t);
    }
    cmd.output().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
