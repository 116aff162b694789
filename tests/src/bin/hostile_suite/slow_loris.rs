//! The slow loris: 64 connections per target sending a request head a byte every 500 ms, while
//! ordinary calls beside them must still be answered; each must be closed within the head limit.
//!
//! Apart because it is the one scenario about time rather than content: it holds connections open
//! together and watches them, where the other attacks send one request and read one answer.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::tally::Tally;
use crate::{HEAD_LIMIT, Target};

pub(crate) async fn slow_loris(targets: &[Target], t: &mut Tally) {
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
