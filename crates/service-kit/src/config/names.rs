//! Which names a binary accepts: the renamed ones ([`Renamed`]), the tools' ([`is_tool_variable`]),
//! the start-up check ([`check_names`]) with its near-miss refusals, and the declaration of a
//! crate's own ([`declare_variables!`](crate::declare_variables) and [`undeclared_names`]).
//!
//! Apart from the parsing of values because it is about the names, not what they hold: the rules
//! by which Berth adds, retires and polices variables, read once when a name is added or retired.

use super::{ConfigError, Env, vars};

/// A variable renamed in this release: the new name is read; the old one still works until the next
/// release, with a warning logged once, and setting both is refused (which one wins would be a
/// guess). Each component lists its own in a `RENAMED` beside its `VARS`; [`Env::migrate`] applies
/// them, and is the one way Berth retires a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renamed {
    /// The name being retired.
    pub old: &'static str,
    /// The name to use.
    pub new: &'static str,
    /// How the old name's value is written.
    pub old_form: OldForm,
}

/// How a retired name's value is written, so it can be carried over to the new name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OldForm {
    /// As the new name takes it.
    Same,
    /// A bare number of milliseconds, where the new name takes a duration (`1500` → `1500ms`).
    Milliseconds,
}

impl Renamed {
    /// A rename whose value is written the same under both names.
    pub const fn same(old: &'static str, new: &'static str) -> Self {
        Renamed {
            old,
            new,
            old_form: OldForm::Same,
        }
    }

    /// A `_MS` name retired for a duration-valued one.
    pub const fn milliseconds(old: &'static str, new: &'static str) -> Self {
        Renamed {
            old,
            new,
            old_form: OldForm::Milliseconds,
        }
    }

    /// The value to use given what the new and the old name (a variable, or a command-line flag:
    /// the emulator's `--pending-ms`) were set to: the new one's, or the old one's in the new form
    /// (the warning logged once per process). Both set, or an old value not in its form, is refused.
    pub fn resolve(
        &self,
        new: Option<&str>,
        old: Option<&str>,
    ) -> Result<Option<String>, ConfigError> {
        match (new, old) {
            (Some(_), Some(v)) => Err(ConfigError {
                var: self.old.to_string(),
                value: v.to_string(),
                problem: format!(
                    "is set together with {}: set only {} ({} is deprecated)",
                    self.new, self.new, self.old
                ),
            }),
            (Some(v), None) => Ok(Some(v.to_string())),
            (None, None) => Ok(None),
            (None, Some(v)) => {
                let carried = match self.old_form {
                    OldForm::Same => v.to_string(),
                    OldForm::Milliseconds => match v.trim().parse::<u64>() {
                        Ok(ms) => format!("{ms}ms"),
                        Err(_) => {
                            return Err(ConfigError {
                                var: self.old.to_string(),
                                value: v.to_string(),
                                problem: format!(
                                    "is not a number of milliseconds (and {} is deprecated: set {} to a duration, like {}=1500ms)",
                                    self.old, self.new, self.new
                                ),
                            });
                        }
                    },
                };
                self.warn_once(&carried);
                Ok(Some(carried))
            }
        }
    }

    /// Says once per process that the old name is on its way out: `berth up` and tests read the
    /// configuration more than once, and the operator needs to hear it once.
    fn warn_once(&self, carried: &str) {
        static WARNED: std::sync::Mutex<std::collections::BTreeSet<&'static str>> =
            std::sync::Mutex::new(std::collections::BTreeSet::new());
        let first = WARNED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(self.old);
        if first {
            tracing::warn!(
                "{} is deprecated and will be removed in the next release: set {} instead (read as {}={carried})",
                self.old,
                self.new,
                self.new
            );
        }
    }
}

/// Whether `name` belongs to one of Berth's tools rather than to a component: the CLI's `BERTH_URL`
/// and `BERTH_TOKEN`, and the variables of the tests, CI and scripts (`BERTH_REQUIRE_*`,
/// `BERTH_TEST_*`, `BERTH_BENCH_*`, `BERTH_PY_*`, `BERTH_E2E_*`, `BERTH_IMAGE_*`, and the few named
/// in [`TOOL_VARIABLES`]). CI exports them and every process it starts inherits them, services
/// included, so every binary lets them through.
pub fn is_tool_variable(name: &str) -> bool {
    TOOL_PREFIXES.iter().any(|p| name.starts_with(p)) || TOOL_VARIABLES.contains(&name)
}

/// The prefixes of Berth's tools' variable families ([`is_tool_variable`]).
pub const TOOL_PREFIXES: &[&str] = &[
    "BERTH_REQUIRE_",
    "BERTH_TEST_",
    "BERTH_BENCH_",
    "BERTH_PY_",
    "BERTH_E2E_",
    "BERTH_IMAGE_",
];

/// Berth's tools' variables outside those families ([`is_tool_variable`]): the CLI's, the OpenAPI
/// and pact tests' "write the new file" switches, the browser test's, the image build's, compose's
/// published address, the Python harness'.
pub const TOOL_VARIABLES: &[&str] = &[
    "BERTH_URL",
    "BERTH_TOKEN",
    "BERTH_BLESS_OPENAPI",
    "BERTH_UPDATE_PACTS",
    "BERTH_CHROMIUM",
    "BERTH_STATIC_TARGET_DIR",
    "BERTH_GATEWAY_PUBLISH",
    "BERTH_NARROW_TOKEN",
    "BERTH_OPENAPI_DOCUMENT",
    "BERTH_EMULATOR_KEY_ID",
    "BERTH_EMULATOR_KEY_SECRET",
];

/// The start-up check every binary runs before it reads a setting. A `BERTH_*` variable that is not
/// in `reads` (what the binary's components read), not a name `renamed` retires and not a tool's
/// ([`is_tool_variable`]) is refused when it is a near miss of a known name (named in the error), so
/// `BERTH_INTERNAL_TOKN` stops the service instead of silently leaving the credential off; any
/// other unknown `BERTH_*` name (a shell's own `BERTH_BIN_DIR`, say) is only warned about: the
/// warnings come back, for the binary to print. A `BERTH_*` variable set to the empty string is
/// refused. The binary then applies `renamed` with [`Env::migrate`] (once logging is up, so the
/// deprecation warnings are seen).
pub fn check_names(
    env: &Env,
    reads: &[&str],
    renamed: &[Renamed],
) -> Result<Vec<String>, ConfigError> {
    let known = |name: &str| {
        reads.contains(&name) || renamed.iter().any(|r| r.old == name || r.new == name)
    };
    let mut warnings = Vec::new();
    for (name, value) in &env.0 {
        if !name.starts_with("BERTH_") || is_tool_variable(name) {
            continue;
        }
        if !known(name) {
            let candidates = reads
                .iter()
                .copied()
                .chain(renamed.iter().map(|r| r.new))
                .filter(|c| c.starts_with("BERTH_"));
            match domain::names::near_miss(name, candidates) {
                Some(near) => {
                    return Err(ConfigError {
                        var: name.clone(),
                        // Never the value: a misspelled credential is still a credential.
                        value: String::new(),
                        problem: format!(
                            "is not a variable this program reads, and its setting would silently keep its default: did you mean {near}?"
                        ),
                    });
                }
                None => warnings.push(format!(
                    "{name} is not a variable this program reads (ignored; docs/configuration.md lists every variable)"
                )),
            }
            continue;
        }
        if value.is_empty() {
            return Err(ConfigError {
                var: name.clone(),
                value: String::new(),
                problem: "is set to the empty string: give it a value, or unset it for the default"
                    .to_string(),
            });
        }
    }
    Ok(warnings)
}

/// Declares the variables a crate reads besides the kit's (`VARS`) and the names it retired
/// (`RENAMED`), and with them the test that keeps the list whole: every `"BERTH_…"` literal in the
/// crate's sources must be declared, the kit's, retired or a tool's ([`undeclared_names`]). One
/// declaration makes both, so no crate carries its own copy of the test.
///
/// ```ignore
/// service_kit::declare_variables! {
///     /// Every variable this service reads besides the kit's.
///     pub const VARS = [env_vars::DB, env_vars::TIMEOUT];
///     /// Its names retired in this release: none.
///     pub const RENAMED = [];
/// }
/// ```
#[macro_export]
macro_rules! declare_variables {
    (
        $(#[$vars_meta:meta])*
        $vars_vis:vis const VARS = [$($var:expr),* $(,)?];
        $(#[$renamed_meta:meta])*
        $renamed_vis:vis const RENAMED = [$($renamed:expr),* $(,)?];
    ) => {
        $(#[$vars_meta])*
        $vars_vis const VARS: &[&str] = &[$($var),*];
        $(#[$renamed_meta])*
        $renamed_vis const RENAMED: &[$crate::config::Renamed] = &[$($renamed),*];

        #[cfg(test)]
        #[test]
        fn every_variable_this_crate_reads_is_declared() {
            let src = ::std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
            let undeclared = $crate::config::undeclared_names(src, VARS, RENAMED);
            assert!(undeclared.is_empty(), "add these to VARS: {undeclared:?}");
        }
    };
}

/// The `"BERTH_…"` literals in the Rust sources under `dir` that are neither in `reads`, nor the
/// kit's ([`vars::EVERY_SERVICE`]), nor names of `renamed`, nor a tool's: what a crate's test
/// asserts is empty, so a variable cannot be read without being declared (and so accepted at
/// start, and listed).
pub fn undeclared_names(dir: &std::path::Path, reads: &[&str], renamed: &[Renamed]) -> Vec<String> {
    names_in_sources(dir)
        .into_iter()
        .filter(|n| {
            !reads.contains(&n.as_str())
                && !vars::EVERY_SERVICE.contains(&n.as_str())
                && !renamed.iter().any(|r| r.old == n || r.new == n)
                && !is_tool_variable(n)
        })
        .collect()
}

/// The `"BERTH_…"` string literals in the Rust sources under `dir`: the names a crate reads, for a
/// test that checks each one is declared in the crate's `VARS` (or is a `RENAMED` name).
pub fn names_in_sources(dir: &std::path::Path) -> std::collections::BTreeSet<String> {
    fn walk(dir: &std::path::Path, out: &mut std::collections::BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs")
                && let Ok(text) = std::fs::read_to_string(&path)
            {
                for piece in text.split("\"BERTH_").skip(1) {
                    let end = piece
                        .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                        .unwrap_or(piece.len());
                    if piece[end..].starts_with('"') && end > 0 {
                        out.insert(format!("BERTH_{}", &piece[..end]));
                    }
                }
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    walk(dir, &mut out);
    out
}
