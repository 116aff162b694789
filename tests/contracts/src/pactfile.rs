//! Where pacts live, and the check that keeps the committed ones equal to what consumers do now.
//!
//! A consumer test writes its pact into a fresh temporary directory (never into `pacts/`, which the
//! provider tests read at the same time), then calls [`check`]. With `BERTH_UPDATE_PACTS=1` the
//! fresh pact replaces the committed one; otherwise a difference fails the test with the first
//! lines that differ and the command that refreshes the file.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Set to `1` to write fresh pacts over the committed ones.
pub const UPDATE_VAR: &str = "BERTH_UPDATE_PACTS";

/// The command that refreshes every committed pact.
pub const REFRESH: &str = "BERTH_UPDATE_PACTS=1 cargo test -p berth-contracts consumer";

/// The directory of committed pacts (`tests/contracts/pacts`).
pub fn committed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pacts")
}

/// The file name Pact gives the pact between `consumer` and `provider`.
pub fn file_name(consumer: &str, provider: &str) -> String {
    format!("{consumer}-{provider}.json")
}

/// The committed pact file between `consumer` and `provider`.
pub fn committed(consumer: &str, provider: &str) -> PathBuf {
    committed_dir().join(file_name(consumer, provider))
}

/// Fails unless the Pact libraries were told not to report usage (the workspace's
/// `.cargo/config.toml` sets it for every cargo command). Running a test binary by hand without it
/// would make them try to reach a web service.
pub fn no_tracking() {
    assert_eq!(
        std::env::var("PACT_DO_NOT_TRACK").as_deref(),
        Ok("true"),
        "PACT_DO_NOT_TRACK=true must be set (run through cargo, which reads .cargo/config.toml)"
    );
}

/// Reads a pact file as JSON.
pub fn read(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read the pact {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the pact {} is not JSON: {e}", path.display()))
}

/// The parts of a pact that say what the consumer relies on: everything but the library versions
/// that wrote it, so upgrading Pact alone does not fail the check.
fn contract_of(pact: &Value) -> Value {
    let mut pact = pact.clone();
    if let Some(meta) = pact.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("pactRust");
    }
    pact
}

/// Compares the pact the consumer test just wrote into `written` with the committed one, or
/// replaces the committed one when [`UPDATE_VAR`] is `1`.
pub fn check(written: &Path, consumer: &str, provider: &str) {
    let name = file_name(consumer, provider);
    let fresh = read(&written.join(&name));
    let target = committed(consumer, provider);
    let pretty = |v: &Value| serde_json::to_string_pretty(v).expect("JSON prints") + "\n";
    if std::env::var(UPDATE_VAR).as_deref() == Ok("1") {
        std::fs::create_dir_all(committed_dir()).expect("pacts directory");
        std::fs::write(&target, pretty(&fresh)).expect("write the committed pact");
        return;
    }
    if !target.exists() {
        panic!(
            "there is no committed pact {name}; write it with `{REFRESH}` and commit tests/contracts/pacts/"
        );
    }
    let old = contract_of(&read(&target));
    let new = contract_of(&fresh);
    if old != new {
        panic!(
            "the consumer {consumer} no longer does what its committed pact with {provider} says \
             (tests/contracts/pacts/{name}):\n{}\nIf the change is meant, refresh the pact with \
             `{REFRESH}`, check `git diff tests/contracts/pacts`, and commit it: the provider's \
             test then verifies the new contract.",
            first_difference(&pretty(&old), &pretty(&new))
        );
    }
}

/// The first differing lines of two texts, with a little context, as `-`/`+` lines.
pub fn first_difference(old: &str, new: &str) -> String {
    let old: Vec<&str> = old.lines().collect();
    let new: Vec<&str> = new.lines().collect();
    let first = old
        .iter()
        .zip(&new)
        .position(|(a, b)| a != b)
        .unwrap_or(old.len().min(new.len()));
    let from = first.saturating_sub(3);
    let mut out = String::new();
    for line in &old[from..first] {
        out.push_str(&format!("  {line}\n"));
    }
    for line in old.iter().skip(first).take(8) {
        out.push_str(&format!("- {line}\n"));
    }
    for line in new.iter().skip(first).take(8) {
        out.push_str(&format!("+ {line}\n"));
    }
    out
}

/// Every interaction of a pact file, as JSON.
pub fn interactions(pact: &Value) -> Vec<Value> {
    pact.get("interactions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_difference_shows_context_and_both_sides() {
        let d = first_difference("a\nb\nc\nd\n", "a\nb\nX\nd\n");
        assert!(d.starts_with("  a\n  b\n- c\n- d\n+ X\n+ d\n"), "{d}");
    }

    #[test]
    fn library_versions_are_not_part_of_the_contract() {
        let a = serde_json::json!({"metadata": {"pactRust": {"consumer": "1"}, "pactSpecification": {"version": "4.0"}}});
        let b = serde_json::json!({"metadata": {"pactRust": {"consumer": "2"}, "pactSpecification": {"version": "4.0"}}});
        assert_eq!(contract_of(&a), contract_of(&b));
    }
}
