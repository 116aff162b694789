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
//! ```text
//! hostile-suite [--bin-dir DIR]
//! ```
//!
//! Closes with `hostile-suite: N passed, N failed` (a scenario a line).

use std::path::Path;
use std::time::{Duration, Instant};

use berth_tests::processes::{Credentials, ProcessStack, Service};
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
