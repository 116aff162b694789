//! `/docs` in a real browser: the page loads from the gateway alone, lists every operation of the
//! merged OpenAPI document, a `#token=…&try=<op>` link opens that operation with the token filled in
//! and sends nothing, and a click on "Try it out" then gets a 200. Headless Chromium (Debian's
//! `chromium-headless-shell` or `chromium`) drives it; where neither is installed the test says so
//! and skips, unless `BERTH_REQUIRE_BROWSER=1` (which `.ci/run` sets once it has installed one).

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use berth_tests::{Stack, token_for};
use gateway::routes::Scope;
use serde_json::{Value, json};
use service_kit::testing::eventually;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::sync::Mutex;

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
async fn the_docs_page_lists_every_operation_opens_a_try_link_without_sending_and_tries_on_a_click()
{
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
    let token = token_for(Scope::OrchestratorsRead);
    let url = format!("{}/docs#token={token}&try=list_kinds", stack.gateway);
    let profile = tempfile::tempdir().unwrap();
    let cdp = Arc::new(Mutex::new(Cdp::launch(&chromium, profile.path())));
    let session = {
        let mut c = cdp.lock().await;
        let target = c
            .call(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let attached = c
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target["targetId"], "flatten": true}),
            )
            .await;
        let session = attached["sessionId"].as_str().unwrap().to_owned();
        // Every fetch the page starts is noted before it is made, so "none on load" is read from
        // the page itself rather than guessed from timing.
        c.call(Some(&session), "Page.enable", json!({})).await;
        c.call(
            Some(&session),
            "Page.addScriptToEvaluateOnNewDocument",
            json!({"source": "window.__fetches = []; const realFetch = window.fetch; window.fetch = (...a) => { window.__fetches.push(String(a[0])); return realFetch(...a); };"}),
        )
        .await;
        c.call(Some(&session), "Page.navigate", json!({"url": url}))
            .await;
        session
    };
    let eval = |expression: &'static str| {
        let (cdp, session) = (Arc::clone(&cdp), session.clone());
        async move {
            // While the page is still loading its context may not exist yet: no value then.
            let answer = cdp
                .lock()
                .await
                .try_call(
                    Some(&session),
                    "Runtime.evaluate",
                    json!({"expression": expression, "returnByValue": true}),
                )
                .await;
            answer.map_or(Value::Null, |a| a["result"]["value"].clone())
        }
    };
    let listed = eventually(
        "the page lists its operations",
        Duration::from_secs(30),
        || async {
            eval("document.body.dataset.operations || null")
                .await
                .as_str()
                .map(str::to_owned)
        },
    )
    .await;
    assert_eq!(
        listed,
        operations.to_string(),
        "the page lists every operation"
    );
    // Issue 32, point 14: each operation shows what it takes and every answer, with their fields,
    // as the document states them (here AddStorage's body, its 201 and its 409).
    let add = &doc["paths"]["/v1/volumes"]["post"];
    let fields_of = |schema: &Value| -> Vec<String> {
        let name = schema["$ref"]
            .as_str()
            .unwrap()
            .trim_start_matches("#/components/schemas/");
        let mut fields: Vec<String> = doc["components"]["schemas"][name]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        fields.sort();
        fields
    };
    let mut codes: Vec<String> = add["responses"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    codes.sort();
    let shown = eval(
        "(() => { const d = document.querySelector('details[data-operation=\"add_storage\"]'); \
         const names = (selector) => [...d.querySelectorAll(selector)].map((l) => l.dataset.field).sort(); \
         return {codes: [...d.querySelectorAll('.response')].map((r) => r.dataset.code).sort(), \
         body: names('.body > ul.fields > li'), \
         made: names('.response[data-code=\"201\"] > ul.fields > li'), \
         conflict: names('.response[data-code=\"409\"] > ul.fields > li'), \
         unauthenticated: names('.response[data-code=\"401\"] > ul.fields > li'), \
         text: d.querySelector('.reference').textContent}; })()",
    )
    .await;
    assert_eq!(shown["codes"], json!(codes), "every answer: {shown}");
    assert_eq!(
        shown["body"],
        json!(fields_of(
            &add["requestBody"]["content"]["application/json"]["schema"]
        )),
        "{shown}"
    );
    assert_eq!(
        shown["made"],
        json!(fields_of(
            &add["responses"]["201"]["content"]["application/json"]["schema"]
        )),
        "{shown}"
    );
    // A problem's fields, for an answer stated in place (409) and for one the document states once
    // and refers to (401, `#/components/responses/…`).
    for code in ["conflict", "unauthenticated"] {
        let fields = shown[code].as_array().unwrap();
        assert!(
            fields.contains(&json!("code")) && fields.contains(&json!("detail")),
            "{code}: a problem's fields: {shown}"
        );
    }
    assert!(
        shown["text"].as_str().unwrap().contains("capacity *"),
        "a required field is marked: {shown}"
    );

    // A PATCH takes only a merge patch: its try sends one (it sent no body and no type: 415).
    let patch = eval(
        "(() => { const a = document.querySelector('details[data-operation=\"patchNamespacedSecret\"] textarea'); \
         return a ? a.dataset.mediaType : null; })()",
    )
    .await;
    assert_eq!(patch, json!("application/merge-patch+json"));

    // The fragment filled the token in and opened the operation, and sent nothing.
    let opened = eval(
        "(() => { const d = document.querySelector('details[data-operation=\"list_kinds\"]'); \
         return {open: d.open, token: document.getElementById('token').value, \
         result: d.querySelector('.result').textContent, \
         statuses: document.querySelectorAll('[data-status]').length, \
         fetches: window.__fetches, location: location.href}; })()",
    )
    .await;
    assert_eq!(
        opened["fetches"],
        json!(["/openapi.json"]),
        "a #try link sends no request on load, only the page's own document: {opened}"
    );
    assert_eq!(opened["open"], true, "{opened}");
    assert_eq!(opened["token"], token, "{opened}");
    assert_eq!(opened["result"], "", "nothing was tried on load: {opened}");
    assert_eq!(opened["statuses"], 0, "{opened}");
    assert!(
        !opened["location"].as_str().unwrap().contains(token),
        "the fragment is cleared: {opened}"
    );

    // A click on "Try it out" sends the call, with the token, and shows its 200.
    eval("document.querySelector('details[data-operation=\"list_kinds\"] button').click(), true")
        .await;
    let status = eventually(
        "the tried call answers",
        Duration::from_secs(30),
        || async {
            eval("(document.querySelector('[data-status]') || {}).dataset?.status || null")
                .await
                .as_str()
                .map(str::to_owned)
        },
    )
    .await;
    assert_eq!(
        status, "200",
        "trying GET /v1/kinds with the token got a 200"
    );
    assert_eq!(
        eval("window.__fetches").await,
        json!(["/openapi.json", "/v1/kinds"]),
        "exactly one call, on the click"
    );
    cdp.lock().await.close().await;
}

/// A headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
/// JSON messages ended by NUL, commands on its fd 3, answers and events on its fd 4), so a test can
/// look at the page and click in it without a WebSocket client.
struct Cdp {
    child: tokio::process::Child,
    commands: tokio::process::ChildStdin,
    answers: BufReader<tokio::process::ChildStdout>,
    next_id: u64,
}

impl Cdp {
    fn launch(chromium: &str, profile: &std::path::Path) -> Cdp {
        // The shell hands the browser our stdin as fd 3 and our stdout as fd 4.
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null"#)
            .arg(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-pipe",
                &format!("--user-data-dir={}", profile.display()),
                "about:blank",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the browser starts");
        Cdp {
            commands: child.stdin.take().unwrap(),
            answers: BufReader::new(child.stdout.take().unwrap()),
            child,
            next_id: 0,
        }
    }

    /// Sends one command (to the browser, or to a page's `session`) and returns its result,
    /// skipping the events that arrive meanwhile; panics on an error answer.
    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.try_call(session, method, params)
            .await
            .unwrap_or_else(|error| panic!("{method}: {error}"))
    }

    /// [`Cdp::call`], with an error answer returned (a page's script evaluated while it navigates).
    async fn try_call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).await.unwrap();
        self.commands.flush().await.unwrap();
        let read = async {
            loop {
                let mut frame = Vec::new();
                let n = self.answers.read_until(0, &mut frame).await.unwrap();
                assert!(n > 0, "the browser closed the pipe during {method}");
                frame.pop();
                let answer: Value = serde_json::from_slice(&frame).unwrap();
                if answer["id"] == id {
                    return match answer.get("error") {
                        None => Ok(answer["result"].clone()),
                        Some(error) => Err(error.clone()),
                    };
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .unwrap_or_else(|_| panic!("{method}: no answer within 30 s"))
    }

    async fn close(&mut self) {
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            self.try_call(None, "Browser.close", json!({})),
        )
        .await;
        let _ = self.child.kill().await;
    }
}
