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

/// The metric names and the `by (...)` labels a PromQL expression uses (functions, keywords and
/// label names inside `{...}` are not metric names).
fn promql_names(expr: &str) -> (Vec<String>, Vec<String>) {
    const WORDS: [&str; 8] = [
        "sum",
        "by",
        "rate",
        "histogram_quantile",
        "le",
        "without",
        "on",
        "max",
    ];
    let without_matchers: String = {
        let mut out = String::new();
        let mut depth = 0;
        for c in expr.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ if depth > 0 => {}
                c => out.push(c),
            }
        }
        out
    };
    let mut metrics = Vec::new();
    let mut labels = Vec::new();
    let mut rest = without_matchers.as_str();
    while let Some(at) = rest.find("by (") {
        let after = &rest[at + 4..];
        let end = after.find(')').unwrap();
        labels.extend(after[..end].split(',').map(|l| l.trim().to_string()));
        rest = &after[end..];
    }
    for word in without_matchers.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        let is_name = word.starts_with(|c: char| c.is_ascii_lowercase());
        if is_name && !WORDS.contains(&word) && !labels.iter().any(|l| l == word) {
            metrics.push(
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| word.strip_suffix(s))
                    .unwrap_or(word)
                    .to_string(),
            );
        }
    }
    (metrics, labels.into_iter().filter(|l| l != "le").collect())
}

/// Every series the Grafana dashboard in deploy/ queries is on a Berth page, and every label it
/// groups by is one that series carries (issue 32, point 2): a renamed metric or a mistyped label
/// fails here rather than drawing an empty panel.
#[tokio::test]
async fn the_grafana_dashboard_queries_only_series_berth_serves() {
    let stack = Stack::spawn(&[]).await;
    // Traffic for every family the dashboard draws: HTTP through the gateway, and a machine call
    // (the driver's and the ECS client's series).
    for (method, path, token, body) in [
        ("GET", "/v1/kinds", Scope::OrchestratorsRead, None),
        // A refusal: the gateway's refusal series.
        ("GET", "/v1/volumes", Scope::Admin, None),
        (
            "POST",
            "/v1/machines:create",
            Scope::MachinesWrite,
            Some(berth_tests::machine_request("m-dashboard")),
        ),
    ] {
        let mut call = stack.call(method, path, Some(token_for(token)));
        if let Some(body) = body {
            call = call.json(&body);
        }
        if path == "/v1/volumes" {
            // Sent without its token.
            call = stack.call(method, path, None);
        }
        let answer = call.send().await.unwrap();
        let refused = path == "/v1/volumes";
        assert_eq!(
            answer.status().is_success(),
            !refused,
            "{path}: {}",
            answer.text().await.unwrap()
        );
    }
    // A family whose series appear only with their event (a retried ECS call) is not on a page
    // yet: it must at least be declared, by that name, in the sources.
    let sources: String = ["crates", "services"]
        .iter()
        .flat_map(|dir| walk_rs(&berth_tests::python::workspace().join(dir)))
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect();
    let mut pages = String::new();
    for url in [
        &stack.gateway,
        &stack.registry,
        &stack.storage_ops,
        &stack.machine_driver,
    ] {
        let mut page = metrics_page(url).await;
        if url == &stack.storage_ops {
            for _ in 0..100 {
                if page.contains("berth_storage_reconcile_runs_total ") {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                page = metrics_page(url).await;
            }
        }
        pages.push_str(&page);
    }
    let help = described(&pages);
    let path = berth_tests::python::workspace().join("deploy/observability/grafana-dashboard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 10, "{} panels", panels.len());
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let (metrics, labels) = promql_names(expr);
            assert!(!metrics.is_empty(), "{expr}: no metric found in it");
            for metric in &metrics {
                assert!(
                    help.contains(&metric.as_str()) || sources.contains(&format!("\"{metric}\"")),
                    "the dashboard queries {metric} ({expr}), which no page describes and no source declares"
                );
                for label in &labels {
                    let carried = pages.lines().any(|l| {
                        l.starts_with(metric.as_str()) && l.contains(&format!("{label}=\""))
                    });
                    // A family with no series yet (no retry happened) cannot be checked; one with
                    // series must carry the label.
                    let sampled = pages
                        .lines()
                        .any(|l| l.starts_with(metric.as_str()) && !l.starts_with('#'));
                    assert!(carried || !sampled, "{expr}: {metric} has no label {label}");
                }
            }
        }
    }
}

/// Every `.rs` file under `dir`.
fn walk_rs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk_rs(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}
