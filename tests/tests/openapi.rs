//! The committed OpenAPI documents (`openapi/*.json`) against the ones the services serve.
//!
//! - `served_documents_match_the_committed_ones`: every service's `/openapi.json` and the gateway's
//!   merged one, fetched from a stack on port 0, must equal the committed file byte for byte. When
//!   one differs, the test prints where (JSON pointers, old and new values) and the command that
//!   refreshes the files: `BERTH_BLESS_OPENAPI=1 cargo test -p berth-tests --test openapi`.
//! - `no_breaking_change_without_a_version_bump`: the served documents may not remove what the
//!   committed ones promise (operations, statuses, fields, enum values; nor require more), unless
//!   `info.version` was bumped ([`berth_tests::openapi_compat`]). Blessing refuses to rewrite the
//!   files while such a change stands, so the committed promise cannot be quietly dropped.
//! - `committed_documents_are_valid_openapi_3_1`: each committed document passes a real OpenAPI 3.1
//!   validator (Python's openapi-spec-validator, installed by `tests/python/venv.sh` into a venv
//!   under the target directory). Skips, saying why, when Python cannot provide it; fails instead
//!   under `BERTH_REQUIRE_PYTHON=1`.

use std::path::PathBuf;

use berth_tests::Stack;
use berth_tests::openapi_compat::{Breaking, unexcused_breaking_changes};
use serde_json::Value;

/// The command that rewrites the committed documents from the served ones.
const BLESS: &str = "BERTH_BLESS_OPENAPI=1 cargo test -p berth-tests --test openapi";

/// The documents, by their file name under `openapi/` (the service's name; the gateway's is the
/// merged one).
const DOCUMENTS: [&str; 5] = [
    "machine-driver",
    "orchestrator-registry",
    "storage-ops",
    "machine-controller",
    "gateway",
];

use berth_tests::python::workspace;

fn committed_path(name: &str) -> PathBuf {
    workspace().join("openapi").join(format!("{name}.json"))
}

/// A document as committed: pretty-printed, keys sorted, one trailing newline.
fn render(doc: &Value) -> String {
    let mut text = serde_json::to_string_pretty(&sorted(doc)).expect("JSON");
    text.push('\n');
    text
}

/// `value` with every object's keys in order (whatever order the map type keeps).
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sorted(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The served documents, by name, from a fresh stack.
async fn served() -> Vec<(&'static str, Value)> {
    let stack = Stack::spawn(&[]).await;
    let mut docs = Vec::new();
    for name in DOCUMENTS {
        let base = match name {
            "machine-driver" => &stack.machine_driver,
            "orchestrator-registry" => &stack.registry,
            "storage-ops" => &stack.storage_ops,
            "machine-controller" => &stack.machine_controller,
            _ => &stack.gateway,
        };
        let response = reqwest::get(format!("{base}/openapi.json"))
            .await
            .expect("the document answers");
        assert_eq!(response.status(), 200, "{name}'s /openapi.json");
        docs.push((name, response.json().await.expect("JSON")));
    }
    docs
}

fn committed(name: &str) -> Option<Value> {
    let text = std::fs::read_to_string(committed_path(name)).ok()?;
    Some(serde_json::from_str(&text).expect("a committed document is JSON"))
}

/// Where two JSON trees differ, as `<pointer>: <old> → <new>` lines (`-` removed, `+` added).
fn differences(old: &Value, new: &Value, pointer: &str, out: &mut Vec<String>) {
    const SHOWN: usize = 100;
    let short = |v: &Value| {
        let text = v.to_string();
        match text.char_indices().nth(SHOWN) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text,
        }
    };
    let escape = |key: &str| key.replace('~', "~0").replace('/', "~1");
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let at = format!("{pointer}/{}", escape(key));
                match b.get(key) {
                    Some(other) => differences(value, other, &at, out),
                    None => out.push(format!("- {at}: {}", short(value))),
                }
            }
            for (key, value) in b {
                if !a.contains_key(key) {
                    out.push(format!("+ {pointer}/{}: {}", escape(key), short(value)));
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                differences(x, y, &format!("{pointer}/{i}"), out);
            }
        }
        _ if old != new => out.push(format!(
            "~ {}: {} → {}",
            if pointer.is_empty() { "/" } else { pointer },
            short(old),
            short(new)
        )),
        _ => {}
    }
}

/// A readable account of how `new` differs from `old`: at most 40 lines, then a count.
fn diff_report(old: &Value, new: &Value) -> String {
    let mut lines = Vec::new();
    differences(old, new, "", &mut lines);
    let total = lines.len();
    lines.truncate(40);
    if total > 40 {
        lines.push(format!("… and {} more", total - 40));
    }
    lines.join("\n")
}

fn blessing() -> bool {
    std::env::var("BERTH_BLESS_OPENAPI").as_deref() == Ok("1")
}

fn breaking_report(found: &[(&str, Vec<Breaking>)]) -> String {
    found
        .iter()
        .flat_map(|(name, changes)| {
            changes
                .iter()
                .map(move |change| format!("  openapi/{name}.json: {change}"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Per served document, what it breaks of the committed one without a version bump.
fn breaking_changes<'a>(served: &[(&'a str, Value)]) -> Vec<(&'a str, Vec<Breaking>)> {
    served
        .iter()
        .filter_map(|(name, doc)| {
            let old = committed(name)?;
            let found = unexcused_breaking_changes(&old, doc);
            (!found.is_empty()).then_some((*name, found))
        })
        .collect()
}

#[tokio::test]
async fn served_documents_match_the_committed_ones() {
    let served = served().await;
    // Blessing is refused while a change would break callers without a version bump.
    let breaking = breaking_changes(&served);
    if blessing() {
        assert!(
            breaking.is_empty(),
            "refusing to rewrite the committed documents: these changes break callers and \
             info.version was not bumped (the major version at 1.x, the minor one while 0.x; \
             the workspace's version in Cargo.toml):\n{}",
            breaking_report(&breaking)
        );
        std::fs::create_dir_all(workspace().join("openapi")).expect("openapi/");
        for (name, doc) in &served {
            std::fs::write(committed_path(name), render(doc)).expect("write the document");
            eprintln!("wrote openapi/{name}.json");
        }
        return;
    }
    let mut report = Vec::new();
    for (name, doc) in &served {
        let path = committed_path(name);
        let Ok(text) = std::fs::read_to_string(&path) else {
            report.push(format!("openapi/{name}.json does not exist"));
            continue;
        };
        if text == render(doc) {
            continue;
        }
        let old: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let diff = diff_report(&old, doc);
        report.push(if diff.is_empty() {
            format!("openapi/{name}.json differs only in layout (not pretty-printed with sorted keys)")
        } else {
            format!("openapi/{name}.json differs from the served document (- committed, + served):\n{diff}")
        });
    }
    assert!(
        report.is_empty(),
        "the served OpenAPI documents changed:\n\n{}\n\nIf the change is intended, refresh the committed documents with\n  {BLESS}\nand commit openapi/.",
        report.join("\n\n")
    );
}

#[tokio::test]
async fn no_breaking_change_without_a_version_bump() {
    let served = served().await;
    let breaking = breaking_changes(&served);
    assert!(
        breaking.is_empty(),
        "the served documents break what the committed ones promise, and info.version was not \
         bumped (the major version at 1.x, the minor one while 0.x; the workspace's version in \
         Cargo.toml). Either keep what callers rely on, or bump the version and then run\n  {BLESS}\n\n{}",
        breaking_report(&breaking)
    );
}

/// Every response of every committed document has a description (OpenAPI requires one, and
/// generated clients refuse documents without), and no error answer claims `application/json`.
#[test]
fn committed_documents_describe_every_response_and_errors_as_problems() {
    for name in DOCUMENTS {
        let doc =
            committed(name).unwrap_or_else(|| panic!("openapi/{name}.json is missing; {BLESS}"));
        let mut responses: Vec<(String, &Value)> = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item") {
                for (status, response) in op["responses"].as_object().into_iter().flatten() {
                    responses.push((format!("{method} {path} {status}"), response));
                }
            }
        }
        for (shared, response) in doc["components"]["responses"]
            .as_object()
            .into_iter()
            .flatten()
        {
            responses.push((format!("components/responses/{shared}"), response));
        }
        for (at, response) in responses {
            if response.get("$ref").is_some() {
                continue;
            }
            let described = response["description"]
                .as_str()
                .is_some_and(|d| !d.trim().is_empty());
            assert!(described, "{name}: {at} has no description");
            let status = at.rsplit(['/', ' ']).next().unwrap_or_default();
            if status.starts_with('4') || status.starts_with('5') {
                assert!(
                    response["content"]["application/json"].is_null(),
                    "{name}: {at} is an error answered as application/json"
                );
            }
        }
    }
}

#[test]
fn committed_documents_are_valid_openapi_3_1() {
    let Some(venv) = berth_tests::python::tools_venv_or_skip("the OpenAPI validator") else {
        return;
    };
    for name in DOCUMENTS {
        let path = committed_path(name);
        assert!(path.exists(), "openapi/{name}.json is missing; {BLESS}");
        let out = std::process::Command::new(venv.join("bin/openapi-spec-validator"))
            .arg(&path)
            .output()
            .expect("the validator runs");
        assert!(
            out.status.success(),
            "openapi/{name}.json is not valid OpenAPI 3.1:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "openapi/{name}.json: {}",
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
}

/// The gateway merges its upstreams' components by name, so a schema two services both document
/// must be the same in each: otherwise the merged document holds whichever came last, and a
/// client of the gateway is told something one of the services does not do (the controller's
/// MachineClass once replaced the driver's, dropping `required`).
#[test]
fn services_document_a_shared_schema_alike() {
    let services = [
        "machine-driver",
        "orchestrator-registry",
        "storage-ops",
        "machine-controller",
    ];
    let docs: Vec<(&str, Value)> = services
        .iter()
        .map(|name| (*name, committed(name).expect("a committed document")))
        .collect();
    let mut differing = Vec::new();
    for (i, (a, doc_a)) in docs.iter().enumerate() {
        for (b, doc_b) in &docs[i + 1..] {
            let (Some(sa), Some(sb)) = (
                doc_a["components"]["schemas"].as_object(),
                doc_b["components"]["schemas"].as_object(),
            ) else {
                continue;
            };
            for (name, schema) in sa {
                if sb.get(name).is_some_and(|other| other != schema) {
                    differing.push(format!("{name}: {a} and {b}"));
                }
            }
        }
    }
    assert!(
        differing.is_empty(),
        "schemas of one name that the services document differently: {differing:?}"
    );
}
