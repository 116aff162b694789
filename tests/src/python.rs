//! The pinned Python tools some tests run (the OpenAPI 3.1 validator, the Kubernetes schemas), in a
//! venv under the target directory that `tests/python/venv.sh` makes once and keeps.

use std::path::{Path, PathBuf};

/// The workspace's root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

/// The venv holding `tests/python/requirements-openapi.txt`'s tools, made when missing or stale;
/// `Err` says why it cannot be had here (no python3, no PyPI). Under `BERTH_REQUIRE_PYTHON=1` the
/// caller fails then; otherwise it skips saying so.
pub fn tools_venv() -> Result<PathBuf, String> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    let target = if target.is_absolute() {
        target
    } else {
        workspace().join(target)
    };
    let venv = target.join("openapi-venv");
    let setup = std::process::Command::new("bash")
        .arg(workspace().join("tests/python/venv.sh"))
        .arg(&venv)
        .arg(workspace().join("tests/python/requirements-openapi.txt"))
        .output();
    match &setup {
        Err(e) => Err(format!("bash could not run tests/python/venv.sh: {e}")),
        Ok(out) if !out.status.success() => Err(format!(
            "tests/python/venv.sh could not provide the pinned tools: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(_) => Ok(venv),
    }
}

/// The venv, or `None` after saying why `what` is skipped; panics instead under
/// `BERTH_REQUIRE_PYTHON=1`.
pub fn tools_venv_or_skip(what: &str) -> Option<PathBuf> {
    match tools_venv() {
        Ok(venv) => Some(venv),
        Err(why) => {
            assert!(
                std::env::var("BERTH_REQUIRE_PYTHON").as_deref() != Ok("1"),
                "BERTH_REQUIRE_PYTHON=1, but {why}"
            );
            eprintln!("skipping {what}: {why}");
            None
        }
    }
}
