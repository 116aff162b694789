//! The HTTP-level attacks: deep JSON, invalid UTF-8, huge heads and garbage, each sent to every
//! operation of every target; and the check after each scenario that every target still answers
//! `/healthz`.
//!
//! Apart because these are the list of what is sent, one request after another, each judged on its
//! own; how the bytes travel is `raw`'s, what counts as due is `tally`'s, and the slow loris (many
//! connections held open at once) is its own file.

use std::time::Duration;

use crate::Target;
use crate::raw::{raw, request};
use crate::tally::Tally;

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

pub(crate) async fn deep_json(targets: &[Target], t: &mut Tally) {
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

pub(crate) async fn invalid_utf8(targets: &[Target], t: &mut Tally) {
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

pub(crate) async fn huge_heads(targets: &[Target], t: &mut Tally) {
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

pub(crate) async fn garbage(targets: &[Target], t: &mut Tally) {
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

pub(crate) async fn all_alive(targets: &[Target], t: &mut Tally) {
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
