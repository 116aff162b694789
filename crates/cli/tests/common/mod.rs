//! Starting the real `berth` binary's `up` on free ports, running CLI commands against it, and a
//! scripted stand-in server for answers a real stack does not give on demand.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// The binary under test: `BERTH_TEST_BIN` when set (to run these tests against another build, such
/// as the one before a fix), else this package's.
pub fn bin() -> String {
    std::env::var("BERTH_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_berth").to_string())
}

/// A port base whose ports B..=B+10 are all free right now, all below Linux's ephemeral range
/// (32768 and up by default): a port there can be taken at any moment by some process's outgoing
/// connection, between this check and `up` binding it (a test saw its gateway port so taken).
pub fn free_port_base() -> u16 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        ^ std::process::id();
    for i in 0..500u32 {
        let base = 20_000 + ((seed.wrapping_add(i * 7919)) % 12_000) as u16;
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
    /// stderr's lines, when `configure` piped it.
    pub stderr_lines: Option<mpsc::Receiver<String>>,
    pub banner: Vec<String>,
    pub data: tempfile::TempDir,
    stopped: bool,
}

/// The line that ends `berth up`'s banner.
pub const BANNER_END: &str = "The gateway is the front door";

impl Stack {
    /// Starts `berth up` and waits for the banner's last line.
    pub fn start() -> Stack {
        let data = tempfile::tempdir().unwrap();
        Self::start_in(data)
    }

    /// Starts `berth up` on an existing data directory.
    pub fn start_in(data: tempfile::TempDir) -> Stack {
        Self::start_with(data, |_| {})
    }

    /// Starts `berth up` on an existing data directory, with the command changed by `configure`.
    pub fn start_with(data: tempfile::TempDir, configure: impl FnOnce(&mut Command)) -> Stack {
        let base = free_port_base();
        let mut cmd = up_command(base, data.path());
        configure(&mut cmd);
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let rx = lines_of(child.stdout.take().unwrap());
        let stderr_lines = child.stderr.take().map(lines_of);
        let mut banner = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("berth up printed no full banner: {banner:#?}"));
            let done = line.starts_with(BANNER_END);
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
            stderr_lines,
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
        interrupt(&self.child);
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

/// `berth up` on these ports and data, quiet logs, stderr inherited (set it otherwise to read it).
pub fn up_command(base: u16, data: &std::path::Path) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(["up", "--port-base", &base.to_string(), "--data-dir"])
        .arg(data)
        .env("BERTH_LOG", "warn")
        .env_remove("BERTH_DATA_DIR")
        .stderr(Stdio::inherit());
    cmd
}

/// The lines of a child's output, read on a thread, as they come.
pub fn lines_of(out: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Sends SIGINT (what Ctrl-C sends) to a child.
pub fn interrupt(child: &Child) {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits for the first line `wanted` accepts, failing after `within`.
pub fn expect_line(
    rx: &mpsc::Receiver<String>,
    within: Duration,
    wanted: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if wanted(&line) => return line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no such line within {within:?}; saw {seen:#?}"),
        }
    }
}

/// Runs the `berth` binary with a server and token.
pub fn berth_with(url: &str, token: Option<&str>, args: &[&str]) -> Output {
    berth_command(url, token, args).output().unwrap()
}

/// The `berth` command with a server and token, not yet run.
pub fn berth_command(url: &str, token: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env("BERTH_URL", url)
        .env_remove("BERTH_TOKEN")
        .env_remove("NO_COLOR");
    if let Some(t) = token {
        cmd.env("BERTH_TOKEN", t);
    }
    cmd
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Retries `check` until it returns `Some`, for at most `within`.
pub fn eventually<T>(within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "no success within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One request a [`FakeServer`] saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub method: String,
    pub path: String,
}

/// A scripted HTTP/1.1 server on a free port: each request is answered by `respond(method, path, n)`
/// (n counts the requests to that path from 0) with a whole raw response, and the connection closed.
pub struct FakeServer {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

pub fn fake_server(respond: impl Fn(&str, &str, usize) -> String + Send + 'static) -> FakeServer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let mut length = 0usize;
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                    break;
                }
                if let Some((k, v)) = header.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let mut parts = request_line.split_whitespace();
            let method = parts.next().unwrap_or_default().to_string();
            let path = parts.next().unwrap_or_default().to_string();
            let n = {
                let mut log = log.lock().unwrap();
                let n = log.iter().filter(|s| s.path == path).count();
                log.push(Seen {
                    at: Instant::now(),
                    method: method.clone(),
                    path: path.clone(),
                });
                n
            };
            let _ = stream.write_all(respond(&method, &path, n).as_bytes());
        }
    });
    FakeServer { url, seen }
}

/// A raw HTTP/1.1 response that closes the connection.
pub fn http_response(status: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    out
}

/// A Berth-style problem+json answer.
pub fn problem(
    status: u16,
    title: &str,
    code: u32,
    detail: &str,
    extra: &[(&str, &str)],
) -> String {
    let body = serde_json::json!({
        "type": "about:blank", "title": title, "status": status, "detail": detail,
        "code": code, "requestId": "fake-request-1",
    })
    .to_string();
    let mut headers = vec![
        ("content-type", "application/problem+json"),
        ("x-request-id", "fake-request-1"),
    ];
    headers.extend_from_slice(extra);
    http_response(&format!("{status} {title}"), &headers, &body)
}

/// A 200 JSON answer with a request id.
pub fn ok_json(value: serde_json::Value) -> String {
    http_response(
        "200 OK",
        &[
            ("content-type", "application/json"),
            ("x-request-id", "fake-request-2"),
        ],
        &value.to_string(),
    )
}
