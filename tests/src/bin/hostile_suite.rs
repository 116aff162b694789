//! The hostile-input suite: what a caller who wants to break Berth sends, to the gateway and to every
//! service's own port, ends in a 4xx problem (or a closed connection), never a 5xx, a hang, a crash or
//! a connection held forever.
//!
//! The stack runs as separate processes (`berth_tests::processes`). Every operation of each target is
//! taken from its committed OpenAPI document (`openapi/<service>.json`), so a new route is attacked
//! without this file changing. Scenarios, each against the gateway (with the admin token) and each
//! service (with the internal credential):
//! - deep JSON: arrays and objects nested 100,000 and 10,000 deep in every request body;
//! - invalid UTF-8: in a JSON string of every body, in the path, in a header value;
//! - huge heads: one header of 1 MiB, and 2,000 headers;
//! - garbage: seeded random bytes as every body, and as the request line;
//! - slow loris: 64 connections that send a request head a byte every 500 ms, while ordinary calls
//!   must still be answered within 2 s; every such connection must be closed by the server within
//!   its head/idle limit (5 s here) plus slack.
//!
//! After each scenario every target must still answer `/healthz`.
//!
//! Then the hostile machines (module [`machine`]): a machine driver of its own (in this process,
//! against the local Docker Engine, with a host directory allowed for mounts) and containers that
//! write everything Berth could read back, with every trick: exec ids that walk to another
//! container's start or to the machine's own export (beside a 256 MiB file), a real id of another
//! container's exec, bytes that are not UTF-8, exit codes that are huge, not numbers, a directory
//! or a link; a writable mount around another machine's mount (whose source it could swap); limits
//! asked above the operator's ceilings. Every call must be answered as due (never a 5xx), nothing
//! but the machine's own bootstrap may start, the driver's memory must stay flat, and no mount may
//! reach outside its root. Without an Engine the part is skipped, saying so (and fails under
//! `BERTH_REQUIRE_DOCKER=1`).
//!
//! ```text
//! hostile-suite [--bin-dir DIR]
//! ```
//!
//! Closes with `hostile-suite: N passed, N failed` (a scenario a line).

use std::path::Path;
use std::time::{Duration, Instant};

use berth_tests::processes::{Credentials, ProcessStack, Service};

#[path = "../../../services/machine-driver/tests/support/mod.rs"]
mod support;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ADMIN_TOKEN: &str = "hostile-suite-admin-token";
const INTERNAL_TOKEN: &str = "hostile-suite-internal-credential";
/// How long a request head or an idle connection may take here (set on every process).
const HEAD_LIMIT: Duration = Duration::from_secs(5);
/// How long any one answer may take.
const ANSWER_LIMIT: Duration = Duration::from_secs(10);

/// One process under attack: where it listens, its credential, and the operations its document
/// lists (method, path with parameters filled in, whether it takes a body).
struct Target {
    name: &'static str,
    addr: String,
    token: &'static str,
    operations: Vec<(String, String, bool)>,
}

/// What one scenario saw.
#[derive(Default)]
struct Tally {
    requests: usize,
    /// Answered as due: a 4xx problem, or a 2xx where lawful input allows one.
    as_due: usize,
    closed: usize,
    server_errors: usize,
    wrong: Vec<String>,
}

impl Tally {
    fn wrong(&mut self, what: String) {
        if self.wrong.len() < 50 {
            self.wrong.push(what);
        }
    }

    /// Holds one raw answer to the rules: a 4xx problem+json, or a connection the server closed.
    fn judge(&mut self, target: &Target, what: &str, answer: Result<Answer, String>) {
        self.judge_allowing(target, what, answer, false);
    }

    /// [`Tally::judge`], where `success_allowed` says a 2xx is right too (input that is hostile
    /// but lawful, such as obs-text in a header the service does not read).
    fn judge_allowing(
        &mut self,
        target: &Target,
        what: &str,
        answer: Result<Answer, String>,
        success_allowed: bool,
    ) {
        self.requests += 1;
        match answer {
            Ok(Answer::Closed) => self.closed += 1,
            Ok(Answer::Status(status, _)) if success_allowed && (200..300).contains(&status) => {
                self.as_due += 1;
            }
            Ok(Answer::Status(status, content_type)) => {
                if status >= 500 {
                    self.server_errors += 1;
                    self.wrong(format!("{}: {what}: {status}", target.name));
                } else if !(400..500).contains(&status) {
                    self.wrong(format!(
                        "{}: {what}: {status} where a refusal was due",
                        target.name
                    ));
                } else if !content_type.starts_with("application/problem+json") {
                    self.wrong(format!(
                        "{}: {what}: {status} as {content_type:?}, not problem+json",
                        target.name
                    ));
                } else {
                    self.as_due += 1;
                }
            }
            Err(e) => self.wrong(format!("{}: {what}: {e}", target.name)),
        }
    }
}

/// A raw answer: its status and content type, or the server closing without one.
enum Answer {
    Status(u16, String),
    Closed,
}

/// Sends `request` as it is and reads the answer's head (the server may close instead).
async fn raw(addr: &str, request: &[u8]) -> Result<Answer, String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        // The server may answer (and close) before all of a huge request is written.
        let _ = stream.write_all(request).await;
        let mut head = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    head.extend_from_slice(&buf[..n]);
                    if head.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
        Ok(parse_head(&head))
    };
    tokio::time::timeout(ANSWER_LIMIT, exchange)
        .await
        .map_err(|_| format!("no answer within {ANSWER_LIMIT:?}"))?
}

fn parse_head(head: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let Some(status) = lines
        .next()
        .and_then(|l| l.strip_prefix("HTTP/1.1 "))
        .and_then(|l| l.get(..3))
        .and_then(|s| s.parse().ok())
    else {
        return Answer::Closed;
    };
    let content_type = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    Answer::Status(status, content_type)
}

fn request(target: &Target, method: &str, path: &str, extra: &[u8], body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        target.addr,
        target.token,
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(extra);
    r.extend_from_slice(b"\r\n");
    r.extend_from_slice(body);
    r
}

/// Every operation of `document`, parameters filled with a valid name.
fn operations(document: &Path) -> Result<Vec<(String, String, bool)>, String> {
    let text = std::fs::read_to_string(document).map_err(|e| format!("{document:?}: {e}"))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{document:?}: {e}"))?;
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        let filled: String = path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "hostile" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        for (method, op) in item.as_object().into_iter().flatten() {
            if !matches!(method.as_str(), "get" | "put" | "post" | "delete" | "head") {
                continue;
            }
            ops.push((
                method.to_uppercase(),
                filled.clone(),
                op.get("requestBody").is_some(),
            ));
        }
    }
    Ok(ops)
}

/// Deterministic bytes (xorshift), so a failing input can be made again.
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn fill(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

async fn deep_json(targets: &[Target], t: &mut Tally) {
    let arrays = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let objects = format!("{}1{}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
    let in_a_field = format!(
        "{{\"namespace\":\"x\",\"name\":\"y\",\"labels\":{}}}",
        "[".repeat(50_000)
    );
    for target in targets {
        for (method, path, _) in target.operations.iter().filter(|o| o.2) {
            for (kind, body) in [
                ("arrays 100,000 deep", &arrays),
                ("objects 10,000 deep", &objects),
                ("an unclosed array 50,000 deep in a field", &in_a_field),
            ] {
                let answer = raw(
                    &target.addr,
                    &request(target, method, path, b"", body.as_bytes()),
                )
                .await;
                t.judge(target, &format!("{method} {path} with {kind}"), answer);
            }
        }
    }
}

async fn invalid_utf8(targets: &[Target], t: &mut Tally) {
    for target in targets {
        for (method, path, has_body) in &target.operations {
            if *has_body {
                let body = b"{\"namespace\":\"\xff\xfe\",\"name\":\"\xc3\x28\",\"machine\":{\"metadata\":{\"name\":\"\xed\xa0\x80\"}}}";
                let answer = raw(&target.addr, &request(target, method, path, b"", body)).await;
                t.judge(target, &format!("{method} {path}, body not UTF-8"), answer);
            }
            let bad_path = format!("{path}/%FF%FE");
            let answer = raw(&target.addr, &request(target, method, &bad_path, b"", b"")).await;
            t.judge(target, &format!("{method} {bad_path}"), answer);
            // obs-text in a header value is lawful HTTP: an id that is not text is replaced, so
            // the call may succeed; it must not fail the service.
            let answer = raw(
                &target.addr,
                &request(target, method, path, b"X-Request-Id: \xff\xfe\x80\r\n", b""),
            )
            .await;
            t.judge_allowing(
                target,
                &format!("{method} {path}, a header not UTF-8"),
                answer,
                true,
            );
        }
        // Raw bytes in the request target itself.
        let answer = raw(
            &target.addr,
            b"GET /v1/\xff\xfe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        t.judge(target, "GET with raw non-UTF-8 bytes in the path", answer);
    }
}

async fn huge_heads(targets: &[Target], t: &mut Tally) {
    let one_mib = format!("X-Big: {}\r\n", "a".repeat(1 << 20));
    let many: String = (0..2000).map(|i| format!("X-H{i}: v\r\n")).collect();
    for target in targets {
        let (method, path, _) = &target.operations[0];
        for (kind, extra) in [("a 1 MiB header", &one_mib), ("2,000 headers", &many)] {
            let answer = raw(
                &target.addr,
                &request(target, method, path, extra.as_bytes(), b""),
            )
            .await;
            t.judge(target, &format!("{method} {path} with {kind}"), answer);
        }
    }
}

async fn garbage(targets: &[Target], t: &mut Tally) {
    let mut bytes = Bytes(0x9E37_79B9_7F4A_7C15);
    for target in targets {
        for (method, path, _) in target.operations.iter().filter(|o| o.2) {
            for round in 0..40 {
                let len = (bytes.next() % 4096) as usize;
                let body = bytes.fill(len);
                let answer = raw(&target.addr, &request(target, method, path, b"", &body)).await;
                t.judge(
                    target,
                    &format!("{method} {path} with random body #{round}"),
                    answer,
                );
            }
        }
        for round in 0..40 {
            let len = 1 + (bytes.next() % 512) as usize;
            let mut line = bytes.fill(len);
            line.extend_from_slice(b"\r\n\r\n");
            let answer = raw(&target.addr, &line).await;
            t.judge(target, &format!("random request line #{round}"), answer);
        }
    }
}

async fn slow_loris(targets: &[Target], t: &mut Tally) {
    const CONNECTIONS: usize = 64;
    for target in targets {
        let mut slow = Vec::new();
        for _ in 0..CONNECTIONS {
            match TcpStream::connect(&target.addr).await {
                Ok(s) => slow.push(s),
                Err(e) => {
                    t.wrong(format!("{}: slow connection refused: {e}", target.name));
                    break;
                }
            }
        }
        let head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
        let started = Instant::now();
        let mut open = vec![true; slow.len()];
        let mut sent = 0usize;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .expect("a client");
        // A byte every 500 ms from each connection, and an ordinary call beside them, until every
        // slow connection has been closed or the limit (plus slack) is well past.
        while started.elapsed() < HEAD_LIMIT * 2 + Duration::from_secs(3) && open.contains(&true) {
            let byte = head.get(sent).copied().unwrap_or(b'a');
            sent += 1;
            for (i, stream) in slow.iter_mut().enumerate() {
                if open[i] && stream.write_all(&[byte]).await.is_err() {
                    open[i] = false;
                }
            }
            t.requests += 1;
            match http
                .get(format!("http://{}/healthz", target.addr))
                .send()
                .await
            {
                Ok(r) if r.status().is_success() => {}
                Ok(r) => t.wrong(format!(
                    "{}: an ordinary call beside slow ones: {}",
                    target.name,
                    r.status()
                )),
                Err(e) => t.wrong(format!(
                    "{}: an ordinary call beside slow ones: {e}",
                    target.name
                )),
            }
            // A closed connection shows as a read of 0 bytes (or an answer and then 0).
            for (i, stream) in slow.iter_mut().enumerate() {
                if !open[i] {
                    continue;
                }
                let mut buf = [0u8; 512];
                match tokio::time::timeout(Duration::from_millis(1), stream.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => open[i] = false,
                    _ => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let still_open = open.iter().filter(|o| **o).count();
        t.requests += slow.len();
        t.closed += slow.len() - still_open;
        if still_open > 0 {
            t.wrong(format!(
                "{}: {still_open} of {} slow-loris connections still open after {:?} (limit {HEAD_LIMIT:?})",
                target.name,
                slow.len(),
                started.elapsed()
            ));
        }
    }
}

async fn all_alive(targets: &[Target], t: &mut Tally) {
    let http = reqwest::Client::new();
    for target in targets {
        match http
            .get(format!("http://{}/healthz", target.addr))
            .timeout(Duration::from_secs(5))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => t.wrong(format!("{}: /healthz answered {}", target.name, r.status())),
            Err(e) => t.wrong(format!(
                "{}: /healthz did not answer ({e}): the process is down or stuck",
                target.name
            )),
        }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let bin_dir = match berth_tests::processes::bin_dir_from_args("hostile-suite") {
        Ok(d) => d,
        Err(usage) => {
            eprintln!("{usage}");
            return std::process::ExitCode::from(2);
        }
    };
    let documents = Path::new(env!("CARGO_MANIFEST_DIR")).join("../openapi");
    let data = match tempfile::Builder::new().prefix("berth-hostile-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("hostile-suite: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let credentials = Credentials {
        admin_token: ADMIN_TOKEN.into(),
        internal_token: INTERNAL_TOKEN.into(),
        ecs_key_id: "LTAIhostilesuite".into(),
        ecs_key_secret: "hostile-suite-secret".into(),
    };
    let head_limit = format!("{}s", HEAD_LIMIT.as_secs());
    let settings: Vec<_> = [
        Service::Gateway,
        Service::Registry,
        Service::StorageOps,
        Service::MachineDriver,
        Service::MachineController,
    ]
    .into_iter()
    .map(|s| (s, "BERTH_IDLE_TIMEOUT", head_limit.as_str()))
    .collect();
    let mut stack = match ProcessStack::start(&bin_dir, data.path(), &credentials, &settings).await
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("hostile-suite: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut targets = Vec::new();
    for (service, url) in stack.urls() {
        let (name, document, token) = match service {
            Service::Gateway => ("gateway", "gateway.json", ADMIN_TOKEN),
            Service::Registry => (
                "orchestrator-registry",
                "orchestrator-registry.json",
                INTERNAL_TOKEN,
            ),
            Service::StorageOps => ("storage-ops", "storage-ops.json", INTERNAL_TOKEN),
            Service::MachineDriver => ("machine-driver", "machine-driver.json", INTERNAL_TOKEN),
            Service::MachineController => (
                "machine-controller",
                "machine-controller.json",
                INTERNAL_TOKEN,
            ),
            Service::Emulator => continue,
        };
        let operations = match operations(&documents.join(document)) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("hostile-suite: {e}");
                return std::process::ExitCode::from(2);
            }
        };
        targets.push(Target {
            name,
            addr: url.trim_start_matches("http://").to_string(),
            token,
            operations,
        });
    }

    println!(
        "== hostile suite: hostile input ends in a 4xx problem or a closed connection, never a 5xx"
    );
    println!(
        "{:<36} {:>8} {:>8} {:>7} {:>5} {:>6}",
        "scenario", "requests", "as due", "closed", "5xx", "wrong"
    );
    let (mut passed, mut failed, mut server_errors) = (0, 0, 0);
    let mut report = |name: &str, t: Tally| {
        println!(
            "{name:<36} {:>8} {:>8} {:>7} {:>5} {:>6}",
            t.requests,
            t.as_due,
            t.closed,
            t.server_errors,
            t.wrong.len()
        );
        for w in t.wrong.iter().take(10) {
            println!("      {w}");
        }
        server_errors += t.server_errors;
        if t.wrong.is_empty() {
            passed += 1;
        } else {
            failed += 1;
        }
    };

    let mut t = Tally::default();
    deep_json(&targets, &mut t).await;
    all_alive(&targets, &mut t).await;
    report("deep JSON", t);

    let mut t = Tally::default();
    invalid_utf8(&targets, &mut t).await;
    all_alive(&targets, &mut t).await;
    report("invalid UTF-8", t);

    let mut t = Tally::default();
    huge_heads(&targets, &mut t).await;
    all_alive(&targets, &mut t).await;
    report("huge heads", t);

    let mut t = Tally::default();
    garbage(&targets, &mut t).await;
    all_alive(&targets, &mut t).await;
    report("random bodies and request lines", t);

    let mut t = Tally::default();
    slow_loris(&targets, &mut t).await;
    all_alive(&targets, &mut t).await;
    report("slow loris", t);

    stack.stop().await;

    match machine::Machines::start().await {
        Ok(Some(m)) => {
            let mut t = Tally::default();
            m.planted_state(&mut t).await;
            report("hostile machine: planted state", t);
            let mut t = Tally::default();
            m.symlink_swap(&mut t).await;
            report("hostile machine: symlink swap", t);
            let mut t = Tally::default();
            m.limits(&mut t).await;
            report("hostile machine: limits", t);
            m.finish();
        }
        Ok(None) => println!("hostile machine: SKIPPED (no Docker Engine answers)"),
        Err(e) => {
            let mut t = Tally::default();
            t.wrong(format!("hostile machine: {e}"));
            report("hostile machine", t);
        }
    }

    println!("hostile-suite: 5xx from hostile input: {server_errors}");
    println!("hostile-suite: {passed} passed, {failed} failed");
    if failed == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        let kept = data.keep();
        eprintln!(
            "hostile-suite: kept {} (logs of every service)",
            kept.display()
        );
        std::process::ExitCode::FAILURE
    }
}

/// The hostile machines: containers that write what Berth could read back, against a machine driver
/// of their own.
mod machine {
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::time::Duration;

    use bollard::Docker as Engine;
    use bollard::exec::{CreateExecOptions, StartExecOptions};
    use bollard::models::ContainerCreateBody;
    use bollard::query_parameters::{CreateContainerOptions, UploadToContainerOptions};
    use client::machines::Client;
    use client::{ClientError, ClientOptions, ServiceClient};
    use domain::machine::{Machine, MachineClass, MachineRequest, Secret};
    use machine_driver::docker::archive;
    use serde_json::{Value, json};
    use service_kit::Env;
    use service_kit::testing::{TestServer, eventually};

    use super::Tally;
    use super::support::{RUN_LABEL, Sweep, local_engine, machine_image};

    const SHEBANG: &str = "#!/berth-machine bootstrap\n";
    const WAIT: Duration = Duration::from_secs(60);
    /// How much the driver's memory may grow while machines offer it 256 MiB.
    const GROWTH_LIMIT: u64 = 64 << 20;

    /// The driver, its Engine and the run's names.
    pub(crate) struct Machines {
        engine: Engine,
        client: Client,
        run: String,
        image: String,
        dir: PathBuf,
        _driver: TestServer,
        _sweep: Sweep,
    }

    /// What a call should be answered with.
    #[derive(Clone, Copy)]
    enum Due {
        Ok,
        Status(u16),
    }

    fn judge<T>(t: &mut Tally, what: &str, answer: Result<T, ClientError>, due: Due) {
        t.requests += 1;
        let got = match &answer {
            Ok(_) => 200,
            Err(e) => e.http_status.unwrap_or(0),
        };
        if got >= 500 {
            t.server_errors += 1;
        }
        let want = match due {
            Due::Ok => 200,
            Due::Status(s) => s,
        };
        if got == want {
            t.as_due += 1;
        } else {
            let why = answer.err().map(|e| e.to_string()).unwrap_or_default();
            t.wrong(format!(
                "machine-driver: {what}: {got} where {want} was due {why}"
            ));
        }
    }

    /// This process's resident set, in bytes (the driver runs in it).
    fn rss() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .unwrap_or(0)
            * 1024
    }

    impl Machines {
        /// A driver against the local Engine, or `None` when no Engine answers (an error under
        /// `BERTH_REQUIRE_DOCKER=1`).
        pub(crate) async fn start() -> Result<Option<Self>, String> {
            let Some(engine) = local_engine().await else {
                if std::env::var("BERTH_REQUIRE_DOCKER").as_deref() == Ok("1") {
                    return Err("BERTH_REQUIRE_DOCKER=1 but no Docker Engine answers".into());
                }
                return Ok(None);
            };
            let run = format!("hs{}", std::process::id());
            let dir = std::env::temp_dir().join(format!("berth-hostile-machine-{run}"));
            // Machines mount from their namespace's directory under the allowed root.
            let root = dir.join("allowed");
            std::fs::create_dir_all(root.join("default/shared/data")).map_err(|e| e.to_string())?;
            std::fs::create_dir_all(dir.join("outside")).map_err(|e| e.to_string())?;
            std::fs::write(dir.join("outside/secret"), "host secret\n")
                .map_err(|e| e.to_string())?;
            let sweep = Sweep(run.clone());
            let image = machine_image().await;
            let env = Env::default()
                .with("BERTH_LISTEN", "127.0.0.1:0")
                .with("BERTH_DOCKER_MOUNT_PATHS", root.display().to_string());
            let config = machine_driver::Config::from_env(&env).map_err(|e| e.to_string())?;
            let providers = machine_driver::providers(&config).map_err(|e| e.to_string())?;
            let driver =
                service_kit::testing::spawn(machine_driver::router(&config, providers)).await;
            let client = Client::new(ServiceClient::new(
                &driver.url,
                ClientOptions {
                    timeout: WAIT,
                    ..ClientOptions::default()
                },
            ));
            Ok(Some(Machines {
                engine,
                client,
                run,
                image,
                dir,
                _driver: driver,
                _sweep: sweep,
            }))
        }

        /// Removes the run's host directories (the sweep removes its containers).
        pub(crate) fn finish(self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }

        /// The directory the run's machines (namespace `default`) mount from.
        fn root(&self) -> String {
            self.dir.join("allowed/default").display().to_string()
        }

        fn class(&self, extra: Value) -> MachineClass {
            let mut spec = json!({
                "image": self.image,
                "tags": {format!("kubernetes.io/cluster/{}", self.run): "1", "kubernetes.io/role/worker": "1"},
                "labels": {RUN_LABEL: self.run},
                "stopGracePeriodSeconds": 2,
            });
            for (k, v) in extra.as_object().into_iter().flatten() {
                spec[k] = v.clone();
            }
            MachineClass {
                provider: "Docker".into(),
                provider_spec: spec,
                ..MachineClass::default()
            }
        }

        fn name(&self, n: usize) -> String {
            format!("{}-{n}", self.run)
        }

        fn req(&self, n: usize, class: &MachineClass, user_data: Option<&str>) -> MachineRequest {
            let mut machine = Machine::default();
            machine.metadata.name = self.name(n);
            machine.metadata.uid = format!("uid-{}-{n}", self.run);
            MachineRequest {
                machine,
                machine_class: class.clone(),
                secret: user_data
                    .map(|d| Secret::from_string_data([("userData", d)]))
                    .unwrap_or_default(),
            }
        }

        /// Writes a file into machine `n`'s container, as its own processes could.
        async fn plant(&self, n: usize, path: &str, contents: &[u8]) -> Result<(), String> {
            let tar = archive::single_file(path, 0o644, contents).map_err(|e| e.to_string())?;
            self.engine
                .upload_to_container(
                    &self.name(n),
                    Some(UploadToContainerOptions {
                        path: "/".into(),
                        ..UploadToContainerOptions::default()
                    }),
                    bollard::body_full(tar.into()),
                )
                .await
                .map_err(|e| e.to_string())
        }

        /// Runs a test-machine script in container `name` as one of its own processes; waits for it
        /// to end when `wait`.
        async fn run_in(&self, name: &str, script: &str, wait: bool) -> Result<(), String> {
            let path = "/tmp/hostile-script";
            let tar = archive::single_file(path, 0o755, format!("{SHEBANG}{script}").as_bytes())
                .map_err(|e| e.to_string())?;
            self.engine
                .upload_to_container(
                    name,
                    Some(UploadToContainerOptions {
                        path: "/".into(),
                        ..UploadToContainerOptions::default()
                    }),
                    bollard::body_full(tar.into()),
                )
                .await
                .map_err(|e| e.to_string())?;
            let exec = self
                .engine
                .create_exec(
                    name,
                    CreateExecOptions {
                        cmd: Some(vec!["/berth-machine", "bootstrap", path]),
                        ..CreateExecOptions::default()
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
            self.engine
                .start_exec(
                    &exec.id,
                    Some(StartExecOptions {
                        detach: true,
                        ..StartExecOptions::default()
                    }),
                )
                .await
                .map_err(|e| e.to_string())?;
            if wait {
                eventually("a machine's own process ends", WAIT, || async {
                    let x = self.engine.inspect_exec(&exec.id).await.ok()?;
                    (x.running == Some(false)).then_some(())
                })
                .await;
            }
            Ok(())
        }

        async fn running(&self, name: &str) -> bool {
            self.engine
                .inspect_container(name, None)
                .await
                .ok()
                .and_then(|c| c.state)
                .and_then(|s| s.running)
                .unwrap_or(false)
        }

        /// A container that is nobody's machine (started when `start`).
        async fn bystander(&self, suffix: &str, start: bool) -> Result<String, String> {
            let id = self
                .engine
                .create_container(
                    Some(CreateContainerOptions {
                        name: Some(format!("{}-{suffix}", self.run)),
                        ..CreateContainerOptions::default()
                    }),
                    ContainerCreateBody {
                        image: Some(self.image.clone()),
                        labels: Some(HashMap::from([(RUN_LABEL.to_owned(), self.run.clone())])),
                        ..ContainerCreateBody::default()
                    },
                )
                .await
                .map_err(|e| e.to_string())?
                .id;
            if start {
                self.engine
                    .start_container(&id, None)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(id)
        }

        /// Every file Berth ever read back from a container, planted with every trick, before and
        /// after the bootstrap; the driver's memory, the victims and the bootstrap's single run.
        pub(crate) async fn planted_state(&self, t: &mut Tally) {
            if let Err(e) = self.planted_state_or(t).await {
                t.wrong(format!("machine-driver: planted state: {e}"));
            }
        }

        async fn planted_state_or(&self, t: &mut Tally) -> Result<(), String> {
            let victim = self.bystander("victim", false).await?;
            let bystander = self.bystander("bystander", true).await?;
            // A real, unstarted exec of another container: a well-formed id that is not this
            // machine's.
            let foreign_exec = self
                .engine
                .create_exec(
                    &bystander,
                    CreateExecOptions {
                        cmd: Some(vec!["/berth-machine", "bootstrap", "/nonexistent"]),
                        ..CreateExecOptions::default()
                    },
                )
                .await
                .map_err(|e| e.to_string())?
                .id;
            let plain = self.class(json!({}));
            let exec = self.class(json!({"bootstrap": "exec"}));
            let user_data = format!("{SHEBANG}append /var/lib/berth/runs ran\n");
            let req = self.req(0, &exec, Some(&user_data));
            let made = self
                .client
                .create(&self.req(0, &plain, Some(&user_data)))
                .await;
            judge(t, "CreateMachine of the hostile machine", made, Due::Ok);
            self.run_in(&self.name(0), "fill /big 256\n", true).await?;
            let name = self.name(0);
            let exec_ids: Vec<(&str, Vec<u8>)> = vec![
                (
                    "a walk to another container's start",
                    format!("../v1.23/containers/{victim}/start?").into_bytes(),
                ),
                (
                    "a walk to the machine's own export",
                    format!("../containers/{name}/export?").into_bytes(),
                ),
                (
                    "another container's unstarted exec",
                    foreign_exec.clone().into_bytes(),
                ),
                (
                    "bytes that are not UTF-8",
                    [b"a".as_slice(), &[0xff; 5], &[0xe2, 0x82]].concat(),
                ),
                ("1 MiB", vec![b'a'; 1 << 20]),
                ("an empty file", Vec::new()),
            ];
            let exit_codes: Vec<(&str, Vec<u8>)> = vec![
                ("a claimed success", b"0".to_vec()),
                (
                    "a number no i64 holds",
                    b"99999999999999999999999999".to_vec(),
                ),
                ("not a number", b"zero".to_vec()),
                ("bytes that are not UTF-8", vec![0xff, 0xfe, 0x80]),
                ("1 MiB", vec![b'7'; 1 << 20]),
            ];
            let before = rss();
            for (trick, bytes) in &exec_ids {
                self.plant(0, "/var/lib/berth/bootstrap.exec", bytes)
                    .await?;
                for _ in 0..3 {
                    let status = self.client.status(&req).await;
                    judge(
                        t,
                        &format!("GetMachineStatus, exec file: {trick}"),
                        status,
                        Due::Status(409),
                    );
                }
            }
            for (trick, bytes) in &exit_codes {
                self.plant(0, "/var/lib/berth/bootstrap.exit", bytes)
                    .await?;
                let status = self.client.status(&req).await;
                judge(
                    t,
                    &format!("GetMachineStatus, exit file: {trick}"),
                    status,
                    Due::Status(409),
                );
            }
            // The state files as a directory and as links (to the big file, to a device).
            self.run_in(
                &name,
                "remove /var/lib/berth/bootstrap.exec\nremove /var/lib/berth/bootstrap.exit\nappend /var/lib/berth/bootstrap.exec/x y\nsymlink /big /var/lib/berth/bootstrap.exit\n",
                true,
            )
            .await?;
            let status = self.client.status(&req).await;
            judge(
                t,
                "GetMachineStatus, state files as a directory and a link",
                status,
                Due::Status(409),
            );
            let init = self.client.initialize(&req).await;
            judge(t, "InitializeMachine of the hostile machine", init, Due::Ok);
            let status = self.client.status(&req).await;
            judge(t, "GetMachineStatus after the bootstrap", status, Due::Ok);
            for (trick, bytes) in exec_ids.iter().chain(exit_codes.iter()) {
                let _ = self.run_in(&name, "remove /var/lib/berth/bootstrap.exec\nremove /var/lib/berth/bootstrap.exit\n", true).await;
                self.plant(0, "/var/lib/berth/bootstrap.exec", bytes)
                    .await?;
                self.plant(0, "/var/lib/berth/bootstrap.exit", bytes)
                    .await?;
                let status = self.client.status(&req).await;
                judge(
                    t,
                    &format!("GetMachineStatus after the bootstrap, planted: {trick}"),
                    status,
                    Due::Ok,
                );
                let init = self.client.initialize(&req).await;
                judge(
                    t,
                    &format!("InitializeMachine after the bootstrap, planted: {trick}"),
                    init,
                    Due::Ok,
                );
            }
            let grown = rss().saturating_sub(before);
            println!(
                "      driver memory while a machine offered 256 MiB: {} MiB grown (limit {} MiB)",
                grown >> 20,
                GROWTH_LIMIT >> 20
            );
            t.requests += 1;
            if grown > GROWTH_LIMIT {
                t.wrong(format!(
                    "machine-driver: memory grew by {} MiB",
                    grown >> 20
                ));
            } else {
                t.as_due += 1;
            }
            // Nothing but the machine's own bootstrap ran, once.
            t.requests += 3;
            if self.running(&victim).await {
                t.wrong("machine-driver: the victim container was started".into());
            } else {
                t.as_due += 1;
            }
            match self.engine.inspect_exec(&foreign_exec).await {
                Ok(x) if x.running != Some(true) && x.exit_code.is_none() => t.as_due += 1,
                other => t.wrong(format!(
                    "machine-driver: another container's exec was started: {other:?}"
                )),
            }
            let ran = super::support_file(&self.engine, &name, "/var/lib/berth/runs").await;
            if ran.as_deref() == Some("ran\n") {
                t.as_due += 1;
            } else {
                t.wrong(format!(
                    "machine-driver: the bootstrap ran {ran:?}, not once"
                ));
            }
            let deleted = self.client.delete(&req).await;
            judge(t, "DeleteMachine of the hostile machine", deleted, Due::Ok);
            Ok(())
        }

        /// A machine with a writable mount could swap a directory another machine mounts for a link
        /// to a host directory outside the root, and win the race between the driver's check and the
        /// Engine's start: such neighbours are refused, in one class and across machines, whichever
        /// is created first.
        pub(crate) async fn symlink_swap(&self, t: &mut Tally) {
            if let Err(e) = self.symlink_swap_or(t).await {
                t.wrong(format!("machine-driver: symlink swap: {e}"));
            }
        }

        async fn symlink_swap_or(&self, t: &mut Tally) -> Result<(), String> {
            let r = self.root();
            let nested = self.class(json!({"mounts": [
                {"hostPath": format!("{r}/shared"), "containerPath": "/shared"},
                {"hostPath": format!("{r}/shared/data"), "containerPath": "/data", "readOnly": true}
            ]}));
            let refused = self.client.create(&self.req(1, &nested, None)).await;
            judge(
                t,
                "CreateMachine, a writable mount holding another's source",
                refused,
                Due::Status(400),
            );
            let writer = self.class(json!({"mounts": [{"hostPath": format!("{r}/shared"), "containerPath": "/shared"}]}));
            let reader = self.class(json!({
                "bootstrap": "exec",
                "mounts": [{"hostPath": format!("{r}/shared/data"), "containerPath": "/data", "readOnly": true}]
            }));
            let user_data = format!("{SHEBANG}append /var/lib/berth/runs ran\n");
            let writing = self.req(1, &writer, None);
            let reading = self.req(2, &reader, Some(&user_data));
            let made = self.client.create(&writing).await;
            judge(t, "CreateMachine of the writer", made, Due::Ok);
            for _ in 0..3 {
                let refused = self.client.create(&reading).await;
                judge(
                    t,
                    "CreateMachine of a reader inside the writer's mount",
                    refused,
                    Due::Status(412),
                );
            }
            let deleted = self.client.delete(&writing).await;
            judge(t, "DeleteMachine of the writer", deleted, Due::Ok);
            let made = self.client.create(&reading).await;
            judge(t, "CreateMachine of the reader", made, Due::Ok);
            let refused = self.client.create(&writing).await;
            judge(
                t,
                "CreateMachine of a writer around the reader's mount",
                refused,
                Due::Status(412),
            );
            for req in [&reading, &writing] {
                let deleted = self.client.delete(req).await;
                judge(t, "DeleteMachine", deleted, Due::Ok);
            }
            Ok(())
        }

        /// Limits above the operator's ceilings are refused; a machine gets the ceilings.
        pub(crate) async fn limits(&self, t: &mut Tally) {
            for extra in [
                json!({"cpus": 64}),
                json!({"memory": "64Gi"}),
                json!({"pids": 100000}),
                json!({"network": "host"}),
                json!({"network": "none"}),
                json!({"privileged": true}),
                json!({"labels": {"com.docker.compose.project": "x"}}),
                json!({"image": "a".repeat(100_000)}),
            ] {
                let refused = self
                    .client
                    .create(&self.req(3, &self.class(extra.clone()), None))
                    .await;
                let due = if extra.get("labels").is_some()
                    || extra.get("image").is_some()
                    || extra["network"] == "host"
                {
                    400
                } else {
                    412
                };
                let what: String = extra.to_string().chars().take(60).collect();
                judge(
                    t,
                    &format!("CreateMachine with {what}"),
                    refused,
                    Due::Status(due),
                );
            }
            let made = self
                .client
                .create(&self.req(3, &self.class(json!({})), None))
                .await;
            judge(t, "CreateMachine within the ceilings", made, Due::Ok);
            t.requests += 1;
            match self
                .engine
                .inspect_container(&self.name(3), None)
                .await
                .ok()
                .and_then(|c| c.host_config)
            {
                Some(h)
                    if h.memory == Some(512 << 20)
                        && h.nano_cpus == Some(1_000_000_000)
                        && h.pids_limit == Some(256)
                        && h.cap_drop.as_deref() == Some(&["ALL".to_owned()][..])
                        && h.security_opt.as_deref()
                            == Some(&["no-new-privileges:true".to_owned()][..]) =>
                {
                    t.as_due += 1
                }
                other => t.wrong(format!("machine-driver: the machine's limits: {other:?}")),
            }
            let deleted = self
                .client
                .delete(&self.req(3, &self.class(json!({})), None))
                .await;
            judge(t, "DeleteMachine", deleted, Due::Ok);
        }
    }
}

/// A small file of a container, as text (for the suite's own checks).
async fn support_file(engine: &bollard::Docker, container: &str, path: &str) -> Option<String> {
    use futures::StreamExt as _;
    let mut stream = engine.download_from_container(
        container,
        Some(bollard::query_parameters::DownloadFromContainerOptions { path: path.into() }),
    );
    let mut tar = Vec::new();
    while let Some(chunk) = stream.next().await {
        tar.extend_from_slice(&chunk.ok()?);
        if tar.len() > 1 << 20 {
            return None;
        }
    }
    machine_driver::docker::archive::first_file(&tar)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}
