//! The samples taken every `SAMPLE_EVERY`: each process's RSS and open file descriptors (from
//! `/proc`) and each service's `/metrics` page, and the line printed for each.
//!
//! Apart because it watches the stack from outside, through `/proc` and `/metrics`, and knows
//! nothing of the load: the soak runs beside it, and the checks compare what it saw.

use std::collections::BTreeMap;
use std::time::Duration;

use berth_tests::processes::Service;

use crate::{ADMIN_TOKEN, CALL_TIMEOUT};

/// One service's `/metrics` page: bytes, series (lines that are not comments).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Page {
    pub(crate) bytes: usize,
    pub(crate) series: usize,
}

/// What a sample saw.
pub(crate) struct Sample {
    pub(crate) at: Duration,
    /// Operations completed since the soak began.
    pub(crate) completed: u64,
    /// Operations per second since the previous sample.
    rate: f64,
    /// `VmRSS` in KiB; `None` when the process is gone.
    pub(crate) rss: BTreeMap<Service, Option<u64>>,
    /// Open file descriptors (sockets, files): shown beside RSS, since a leak of either shows there.
    pub(crate) fds: BTreeMap<Service, Option<usize>>,
    pub(crate) metrics: BTreeMap<Service, Option<Page>>,
}

/// `VmRSS` and `VmHWM` of a process, in KiB.
pub(crate) fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

pub(crate) struct Sampler {
    pub(crate) http: reqwest::Client,
    pub(crate) pids: BTreeMap<Service, u32>,
    /// Every service with a `/metrics` page, and its URL.
    pub(crate) pages: Vec<(Service, String)>,
}

impl Sampler {
    /// One sample; also returns the pages' text.
    pub(crate) async fn sample(
        &self,
        at: Duration,
        completed: u64,
        rate: f64,
    ) -> (Sample, Vec<(Service, Result<String, String>)>) {
        let rss = Service::ALL
            .into_iter()
            .map(|s| {
                (
                    s,
                    self.pids.get(&s).and_then(|p| memory_kib(*p)).map(|m| m.0),
                )
            })
            .collect();
        let fds = Service::ALL
            .into_iter()
            .map(|s| {
                let count = self.pids.get(&s).and_then(|p| {
                    std::fs::read_dir(format!("/proc/{p}/fd"))
                        .ok()
                        .map(Iterator::count)
                });
                (s, count)
            })
            .collect();
        let mut metrics = BTreeMap::new();
        let mut texts = Vec::new();
        for (s, url) in &self.pages {
            let text = async {
                let r = self
                    .http
                    .get(format!("{url}/metrics"))
                    // The gateway's page needs a cluster-wide metrics:read token; the services'
                    // ignore it.
                    .bearer_auth(ADMIN_TOKEN)
                    .timeout(CALL_TIMEOUT)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                if !r.status().is_success() {
                    return Err(format!("/metrics answered {}", r.status()));
                }
                r.text().await.map_err(|e| e.to_string())
            }
            .await;
            metrics.insert(
                *s,
                text.as_ref().ok().map(|t| Page {
                    bytes: t.len(),
                    series: t
                        .lines()
                        .filter(|l| !l.is_empty() && !l.starts_with('#'))
                        .count(),
                }),
            );
            texts.push((*s, text));
        }
        (
            Sample {
                at,
                completed,
                rate,
                rss,
                fds,
                metrics,
            },
            texts,
        )
    }
}

pub(crate) fn mib(kib: Option<u64>) -> String {
    kib.map_or("gone".into(), |k| format!("{:.1}", k as f64 / 1024.0))
}

fn bytes(page: Option<Page>) -> String {
    page.map_or("none".into(), |p| p.bytes.to_string())
}

pub(crate) fn print_sample(s: &Sample) {
    print!("{:>5} {:>8.1}", s.at.as_secs(), s.rate);
    for svc in Service::ALL {
        print!(" {:>6}", mib(s.rss[&svc]));
    }
    for svc in Service::ALL.into_iter().filter(|s| *s != Service::Emulator) {
        print!(" {:>8}", bytes(s.metrics[&svc]));
    }
    println!();
}
