//! `/docs` in a real browser: the page loads from the gateway alone, lists every operation of the
//! merged OpenAPI document, and "Try it out" with a token gets a 200. Headless Chromium (Debian's
//! `chromium-headless-shell` or `chromium`) drives it; where neither is installed the test says so
//! and skips, unless `BERTH_REQUIRE_BROWSER=1` (which `.ci/run` sets once it has installed one).

use berth_tests::{Stack, token_for};
use gateway::routes::Scope;

fn browser() -> Option<String> {
    if let Ok(path) = std::env::var("BERTH_CHROMIUM") {
        return Some(path);
    }
    ["chromium-headless-shell", "chromium", "chromium-browser"]
        .into_iter()
        .flat_map(|name| {
            ["/usr/bin", "/usr/lib/chromium", "/usr/local/bin"]
                .into_iter()
                .map(move |dir| format!("{dir}/{name}"))
        })
        .find(|path| std::path::Path::new(path).exists())
}

#[tokio::test]
async fn the_docs_page_lists_every_operation_and_tries_one_out_in_a_browser() {
    let stack = Stack::spawn(&[]).await;
    let page = reqwest::get(format!("{}/docs", stack.gateway))
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'self'"),
        "the page loads nothing from elsewhere"
    );
    let html = page.text().await.unwrap();
    assert!(
        html.contains("/docs/app.js") && !html.contains("https://"),
        "{html}"
    );
    let doc: serde_json::Value = reqwest::get(format!("{}/openapi.json", stack.gateway))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let operations: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert!(operations >= 19, "{operations} operations in {doc}");

    let Some(chromium) = browser() else {
        assert!(
            std::env::var("BERTH_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "BERTH_REQUIRE_BROWSER=1 but no Chromium is installed"
        );
        eprintln!(
            "skipping the browser half: no Chromium (apt-get install chromium-headless-shell)"
        );
        return;
    };
    let url = format!(
        "{}/docs#token={}&try=list_kinds",
        stack.gateway,
        token_for(Scope::OrchestratorsRead)
    );
    let profile = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            &format!("--user-data-dir={}", profile.path().display()),
            "--virtual-time-budget=15000",
            "--dump-dom",
            &url,
        ])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(60), output)
        .await
        .expect("the browser finished within 60s")
        .expect("the browser ran");
    let dom = String::from_utf8_lossy(&output.stdout);
    assert!(
        dom.contains(&format!("data-operations=\"{operations}\"")),
        "the page lists all {operations} operations: {dom}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        dom.contains("data-status=\"200\""),
        "trying GET /v1/kinds with the token got a 200: {dom}"
    );
}
