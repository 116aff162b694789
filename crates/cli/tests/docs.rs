//! The README and `docs/architecture.md` against the code: the README works after a clone (no
//! pointers outside the repository, curl lines that follow `BERTH_URL`), and the architecture
//! document's route table is the gateway's.

mod common;

use common::Stack;

fn repo_file(path: &str) -> String {
    let full = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// Issue 14, point 12: the README sent readers to a design document outside the repository, which
/// a clone does not have. Every document it names must be in the repository.
#[test]
fn the_readme_points_only_inside_the_repository() {
    let readme = repo_file("README.md");
    assert!(
        !readme.contains("../"),
        "README points outside the repository"
    );
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let named: Vec<&str> = readme
        .split(|c: char| c == '`' || c == '(' || c == ')' || c.is_whitespace())
        .filter(|word| word.ends_with(".md") && !word.starts_with("http"))
        .collect();
    assert!(named.contains(&"docs/architecture.md"), "{named:?}");
    for doc in named {
        assert!(
            root.join(doc).is_file(),
            "README names {doc}, which is not in the repository"
        );
    }
    assert!(repo_file("docs/architecture.md").contains("## Routes"));
}

/// Issue 32, point 13: the README's sections moved into `docs/`; every relative link of the README
/// and of those documents leads to a file of the repository (a moved section's `../` and
/// sibling links included).
#[test]
fn every_relative_link_of_the_documents_leads_somewhere() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut documents = vec![root.join("README.md"), root.join("deploy/README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            documents.push(path);
        }
    }
    let mut links = 0;
    for document in &documents {
        let text = std::fs::read_to_string(document).unwrap();
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = rest[..end].split('#').next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            links += 1;
            let resolved = document.parent().unwrap().join(target);
            assert!(
                resolved.exists(),
                "{} links to {target}, which is not there",
                document.display()
            );
        }
    }
    assert!(links >= 10, "{links} relative links read");
}

/// What a clone must not be sent to: the team's design file and research notes live beside the
/// repository, never in it. Spelt in pieces, so this file does not name them itself.
const OUTSIDE_DOCUMENTS: [&str; 5] = [
    concat!("DESIGN", ".md"),
    concat!("reference/", "mcm.md"),
    concat!("reference/", "maya.md"),
    concat!("reference/", "seeds/"),
    concat!("..", "/shared"),
];

/// Where the code and the documents a user reads live.
const DOCUMENTED_TREES: [&str; 8] = [
    "crates",
    "services",
    "tests",
    "deploy",
    "docs",
    "README.md",
    "BENCHMARKS.md",
    "RELIABILITY.md",
];

/// The files of [`DOCUMENTED_TREES`]: the tracked ones and the new ones git does not ignore (`git
/// ls-files`, so a citation is caught before its file is added), or, where there is no git checkout
/// (an unpacked source archive), every file under them but `target/` and hidden ones.
fn documented_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let tracked = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
        ])
        .args(DOCUMENTED_TREES)
        .output();
    if let Ok(out) = tracked
        && out.status.success()
        && !out.stdout.is_empty()
    {
        return out
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| root.join(String::from_utf8_lossy(p).as_ref()))
            .collect();
    }
    fn walk(path: &std::path::Path, files: &mut Vec<std::path::PathBuf>) {
        if path.is_file() {
            files.push(path.to_path_buf());
            return;
        }
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name == "target" || name.starts_with('.') {
                continue;
            }
            walk(&entry.path(), files);
        }
    }
    let mut files = Vec::new();
    for tree in DOCUMENTED_TREES {
        walk(&root.join(tree), &mut files);
    }
    files
}

/// House issue, item 4: comments and documents cited the design file and the research notes that
/// live outside the repository, which a clone never has. What they relied on is in
/// `docs/design.md` now, and nothing a user can read points outside again.
#[test]
fn no_file_cites_documents_outside_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let files = documented_files(&root);
    assert!(
        files.iter().any(|f| f.ends_with("docs/design.md")),
        "docs/design.md is not among the {} files read",
        files.len()
    );
    let mut found = Vec::new();
    for file in &files {
        // A tracked file deleted in the working tree has nothing to say.
        let Ok(bytes) = std::fs::read(file) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        for (n, line) in text.lines().enumerate() {
            for outside in OUTSIDE_DOCUMENTS {
                if line.contains(outside) {
                    let shown = file.strip_prefix(&root).unwrap_or(file).display();
                    found.push(format!("{shown}:{}: {outside}", n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite docs/design.md or docs/architecture.md instead:\n{}",
        found.join("\n")
    );
}

/// Issue 14, point 12: the tour's curl lines named `http://127.0.0.1:8080`, so `--port-base` meant
/// editing them; they follow `$BERTH_URL` now, which the tour sets once.
#[test]
fn the_readme_tour_follows_berth_url() {
    let readme = repo_file("README.md");
    let tour = readme
        .split("## Quick tour")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a Quick tour section");
    let mut curls = 0;
    let lines: Vec<&str> = tour.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.contains("http://") || line.contains("https://") {
            assert!(
                line.trim_start().starts_with("export BERTH_URL="),
                "a fixed address outside `export BERTH_URL=`: {line}"
            );
        }
        if line.trim_start().starts_with("curl ") {
            curls += 1;
            // A command may continue over `\`-ended lines; its URL is somewhere in them.
            let mut command = String::new();
            for part in &lines[i..] {
                command.push_str(part);
                if !part.trim_end().ends_with('\\') {
                    break;
                }
            }
            assert!(command.contains("\"$BERTH_URL/v1/"), "{command}");
        }
    }
    assert!(curls >= 4, "the tour shows curl: {curls}");
}

/// One row of the architecture document's route table: method, path, service, scope.
fn documented_routes() -> Vec<(String, String, String, String)> {
    let doc = repo_file("docs/architecture.md");
    doc.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // "", method, path, service, scope, what, ""
            if cells.len() < 6 || !cells[2].starts_with("`/v1/") {
                return None;
            }
            let unquote = |c: &str| c.trim_matches('`').to_string();
            Some((
                unquote(cells[1]),
                unquote(cells[2]),
                cells[3].to_string(),
                unquote(cells[4]),
            ))
        })
        .collect()
}

#[test]
fn the_documented_routes_are_the_gateways() {
    use gateway::routes::{Classified, classify};
    let routes = documented_routes();
    assert!(routes.len() >= 20, "{routes:?}");
    for (method, path, service, scope) in &routes {
        // A concrete path for the template: every `{x}` becomes `x`.
        let concrete: String = path.replace(['{', '}'], "");
        let method = axum_method(method);
        match classify(&method, &concrete) {
            Classified::Route(info) => {
                assert_eq!(info.template, path, "{method} {path}");
                assert_eq!(info.upstream.name(), service, "{method} {path}");
                assert_eq!(info.scope.as_str(), scope, "{method} {path}");
            }
            other => panic!("{method} {path} is documented but the gateway says {other:?}"),
        }
    }
}

fn axum_method(m: &str) -> http::Method {
    m.parse().unwrap_or_else(|_| panic!("{m} is not a method"))
}

/// Every operation in the running gateway's merged OpenAPI document is in the route table, and the
/// other way round.
#[tokio::test]
async fn the_route_table_lists_every_operation_the_stack_serves() {
    let stack = Stack::start();
    let openapi: serde_json::Value = reqwest::get(format!("{}/openapi.json", stack.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut served = std::collections::BTreeSet::new();
    for (path, item) in openapi["paths"].as_object().expect("paths") {
        if !path.starts_with("/v1/") {
            continue;
        }
        for method in item.as_object().unwrap().keys() {
            // HEAD is documented with its GET.
            if matches!(method.as_str(), "get" | "put" | "post" | "delete" | "patch") {
                served.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let documented: std::collections::BTreeSet<(String, String)> = documented_routes()
        .into_iter()
        .map(|(m, p, _, _)| (m, p))
        .collect();
    assert_eq!(
        served, documented,
        "left: served by the stack; right: in docs/architecture.md"
    );
}
