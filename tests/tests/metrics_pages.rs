//! Under one process (as `berth up` runs them), each service's `/metrics` serves its own series, and
//! every metric on a page has its `# HELP` line.

use berth_tests::{Stack, token_for};
use gateway::routes::Scope;

/// The metric names a page describes with `# HELP`.
fn described(page: &str) -> Vec<&str> {
    page.lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

/// The metric name of each sample line, with a histogram's suffixes taken off.
fn sampled(page: &str) -> Vec<&str> {
    page.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap())
        .map(|n| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| n.strip_suffix(s))
                .unwrap_or(n)
        })
        .collect()
}

/// A page; the gateway's needs a metrics:read token, the services' (reached only inside the stack)
/// none, so the token is sent to all.
async fn metrics_page(url: &str) -> String {
    reqwest::Client::new()
        .get(format!("{url}/metrics"))
        .bearer_auth(token_for(Scope::MetricsRead))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn each_service_serves_its_own_series_each_with_help() {
    let stack = Stack::spawn(&[]).await;
    // Traffic for every service: through the gateway to the registry and storage-ops, and to the
    // driver.
    for path in ["/v1/kinds", "/v1/volumes", "/v1/providers"] {
        let token = match path {
            "/v1/kinds" => token_for(Scope::OrchestratorsRead),
            "/v1/volumes" => token_for(Scope::VolumesRead),
            _ => token_for(Scope::MachinesRead),
        };
        let answer = stack.call("GET", path, Some(token)).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{path}");
    }
    let pages = [
        ("gateway", &stack.gateway),
        ("orchestrator-registry", &stack.registry),
        ("storage-ops", &stack.storage_ops),
        ("machine-driver", &stack.machine_driver),
    ];
    for (service, url) in pages {
        let mut page = metrics_page(url).await;
        if service == "storage-ops" {
            // The reconciler's first pass runs as the service starts; its series appear once it
            // has finished.
            for _ in 0..100 {
                if page.contains("berth_storage_reconcile_runs_total ") {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                page = metrics_page(url).await;
            }
            for name in [
                "berth_storage_reconcile_runs_total ",
                "berth_storage_reconcile_duration_seconds_bucket",
                "berth_storage_orphans 0",
            ] {
                assert!(page.contains(name), "storage-ops: no {name}: {page}");
            }
        }
        for value in page.split("service=\"").skip(1) {
            let value = &value[..value.find('"').unwrap()];
            assert_eq!(value, service, "{service}'s page holds another's series");
        }
        assert!(
            page.contains(&format!("service=\"{service}\"")),
            "{service}'s page holds its own HTTP series: {page}"
        );
        assert_eq!(
            page.contains("berth_gateway_"),
            service == "gateway",
            "{service}: the gateway's upstream metrics are on its page only"
        );
        // Issue 32, point 2: every page says which service and version it is, and the process's
        // standard series.
        assert!(
            page.contains(&format!(
                "berth_build_info{{service=\"{service}\",version=\""
            )),
            "{service}: {page}"
        );
        for name in [
            "process_resident_memory_bytes",
            "process_cpu_seconds_total",
            "process_open_fds",
        ] {
            assert!(
                page.contains(&format!("\n{name} ")),
                "{service}: no {name}: {page}"
            );
        }
        let help = described(&page);
        for name in sampled(&page) {
            assert!(help.contains(&name), "{service}: {name} has no # HELP line");
        }
    }
}
