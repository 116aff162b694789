//! The configuration's tests: token files, name checks, renames, durations, defaults, limits.
//!
//! A file of its own because it outgrew the module it tests; it tests the parts together, as a
//! binary uses them, so it sits beside `mod.rs` rather than split among the parts.

use std::time::Duration;

use super::*;

#[test]
fn an_internal_token_file_is_read_or_made_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("internal-token");
    let env = || Env::default().with(vars::INTERNAL_TOKEN_FILE, path.display().to_string());
    // Unset: nothing changes.
    let plain = resolve_internal_token_file(Env::default()).unwrap();
    assert!(plain.get(vars::INTERNAL_TOKEN).is_none());
    // Missing: made, private, and every later reader gets the same credential.
    let first = resolve_internal_token_file(env()).unwrap();
    let made = first.get(vars::INTERNAL_TOKEN).unwrap().to_string();
    assert_eq!(made.len(), 64, "two UUIDs in hex");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let again = resolve_internal_token_file(env()).unwrap();
    assert_eq!(again.get(vars::INTERNAL_TOKEN), Some(made.as_str()));
    assert_eq!(
        HttpConfig::from_env(&again)
            .unwrap()
            .internal_token
            .unwrap()
            .expose(),
        made
    );
    // No staging file is left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    // Services starting together agree on one credential.
    let other = dir.path().join("raced");
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let other = other.clone();
            std::thread::spawn(move || {
                let env =
                    Env::default().with(vars::INTERNAL_TOKEN_FILE, other.display().to_string());
                resolve_internal_token_file(env)
                    .unwrap()
                    .get(vars::INTERNAL_TOKEN)
                    .unwrap()
                    .to_string()
            })
        })
        .collect();
    let tokens: std::collections::BTreeSet<String> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(tokens.len(), 1, "{tokens:?}");
}

#[test]
fn an_internal_token_file_must_be_the_only_source_and_not_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    std::fs::write(&path, "  \n").unwrap();
    let env = Env::default().with(vars::INTERNAL_TOKEN_FILE, path.display().to_string());
    let e = resolve_internal_token_file(env.clone()).unwrap_err();
    assert_eq!(e.var, vars::INTERNAL_TOKEN_FILE);
    assert!(e.problem.contains("empty"), "{e}");
    let e = resolve_internal_token_file(env.with(vars::INTERNAL_TOKEN, "x")).unwrap_err();
    assert!(e.problem.contains(vars::INTERNAL_TOKEN), "{e}");
    // A given file's content is trimmed of the newline editors add.
    std::fs::write(&path, "s3cret\n").unwrap();
    let env = Env::default().with(vars::INTERNAL_TOKEN_FILE, path.display().to_string());
    let got = resolve_internal_token_file(env).unwrap();
    assert_eq!(got.get(vars::INTERNAL_TOKEN), Some("s3cret"));
}

const READS: &[&str] = &["BERTH_INTERNAL_TOKEN", "BERTH_LISTEN", "DOCKER_HOST"];
const RENAMED: &[Renamed] = &[
    Renamed::milliseconds("BERTH_THING_TIMEOUT_MS", "BERTH_THING_TIMEOUT"),
    Renamed::same("BERTH_OLD_NAME", "BERTH_NEW_NAME"),
];

#[test]
fn an_unknown_name_is_refused_with_the_nearest_known_one_and_never_its_value() {
    let env = Env::from_pairs([("BERTH_INTERNAL_TOKN", "s3cret")]);
    let e = check_names(&env, READS, RENAMED).unwrap_err();
    assert_eq!(e.var, "BERTH_INTERNAL_TOKN");
    let text = e.to_string();
    assert!(
        text.contains("did you mean BERTH_INTERNAL_TOKEN?"),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");
    assert!(
        text.starts_with("configuration: BERTH_INTERNAL_TOKN is not"),
        "{text}"
    );
    // A new name of a rename is a candidate too.
    let e = check_names(&Env::from_pairs([("BERTH_NEW_NAM", "x")]), READS, RENAMED).unwrap_err();
    assert!(e.problem.contains("did you mean BERTH_NEW_NAME?"), "{e}");
    // Nothing close (a tool's own variable in the caller's shell): a warning naming where the
    // settings are listed, not a refusal and not a guess.
    // Spelled at run time: a test scans this file's literals for names the kit reads.
    let bin_dir = format!("{}_BIN_DIR", "BERTH");
    let warnings = check_names(
        &Env::from_pairs([(bin_dir.as_str(), "/opt/berth/bin")]),
        &[READS, &["BERTH_DATA_DIR"]].concat(),
        RENAMED,
    )
    .unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("BERTH_BIN_DIR is not"),
        "{warnings:?}"
    );
    assert!(
        warnings[0].contains("docs/configuration.md"),
        "{warnings:?}"
    );
    assert!(!warnings[0].contains("/opt/berth"), "{warnings:?}");
}

#[test]
fn known_tool_and_foreign_names_pass() {
    let env = Env::from_pairs([
        ("BERTH_INTERNAL_TOKEN", "t"),
        ("BERTH_THING_TIMEOUT_MS", "1500"),
        ("BERTH_NEW_NAME", "x"),
        // Berth's tools' variables, which CI exports into every process.
        ("BERTH_REQUIRE_DOCKER", "1"),
        ("BERTH_TEST_BIN", "/bin/x"),
        ("BERTH_BENCH_DIR", "/tmp"),
        ("BERTH_PY_SEED", "1"),
        ("BERTH_URL", "http://127.0.0.1:8080"),
        ("BERTH_TOKEN", ""),
        ("BERTH_BLESS_OPENAPI", "1"),
        ("BERTH_UPDATE_PACTS", "1"),
        // Not Berth's.
        ("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
        ("DOCKER_HOST", ""),
    ]);
    check_names(&env, READS, RENAMED).unwrap();
}

#[test]
fn an_empty_berth_value_is_refused() {
    for var in ["BERTH_INTERNAL_TOKEN", "BERTH_LISTEN", "BERTH_NEW_NAME"] {
        let e = check_names(&Env::from_pairs([(var, "")]), READS, RENAMED).unwrap_err();
        assert_eq!(e.var, var);
        assert_eq!(
            e.to_string(),
            format!(
                "configuration: {var} is set to the empty string: give it a value, or unset it for the default"
            )
        );
    }
}

#[test]
fn a_renamed_variable_is_read_for_one_release_and_refused_beside_the_new_one() {
    // The old name alone: carried to the new one, in the new form, and dropped.
    let env = Env::from_pairs([("BERTH_THING_TIMEOUT_MS", "1500"), ("BERTH_OLD_NAME", "v")])
        .migrate(RENAMED)
        .unwrap();
    assert_eq!(env.get("BERTH_THING_TIMEOUT"), Some("1500ms"));
    assert_eq!(
        env.duration_or("BERTH_THING_TIMEOUT", Duration::ZERO)
            .unwrap(),
        Duration::from_millis(1500)
    );
    assert_eq!(env.get("BERTH_NEW_NAME"), Some("v"));
    assert!(!env.is_set("BERTH_THING_TIMEOUT_MS") && !env.is_set("BERTH_OLD_NAME"));
    // Applying it again changes nothing (`berth up` and tests read configurations twice).
    let again = env.clone().migrate(RENAMED).unwrap();
    assert_eq!(again.get("BERTH_THING_TIMEOUT"), Some("1500ms"));
    // The new name alone is untouched.
    let env = Env::from_pairs([("BERTH_THING_TIMEOUT", "2s")])
        .migrate(RENAMED)
        .unwrap();
    assert_eq!(env.get("BERTH_THING_TIMEOUT"), Some("2s"));
    // Both: refused, naming both.
    let e = Env::from_pairs([
        ("BERTH_THING_TIMEOUT_MS", "1500"),
        ("BERTH_THING_TIMEOUT", "2s"),
    ])
    .migrate(RENAMED)
    .unwrap_err();
    assert_eq!(e.var, "BERTH_THING_TIMEOUT_MS");
    assert!(e.problem.contains("set only BERTH_THING_TIMEOUT"), "{e}");
    // An old milliseconds value that is no number.
    let e = Env::from_pairs([("BERTH_THING_TIMEOUT_MS", "2s")])
        .migrate(RENAMED)
        .unwrap_err();
    assert!(e.problem.contains("milliseconds"), "{e}");
    // The same mechanism for a flag: the new one's value, or the old one's converted.
    let flag = Renamed::milliseconds("--pending-ms", "--pending");
    assert_eq!(
        flag.resolve(Some("2s"), None).unwrap().as_deref(),
        Some("2s")
    );
    assert_eq!(
        flag.resolve(None, Some("250")).unwrap().as_deref(),
        Some("250ms")
    );
    assert_eq!(flag.resolve(None, None).unwrap(), None);
    assert!(flag.resolve(Some("2s"), Some("250")).is_err());
}

#[test]
fn a_duration_needs_its_unit_and_a_refusal_shows_the_value_once() {
    for ok in ["0", "0s", "250ms", "30s", "5m", "1h"] {
        Env::from_pairs([(vars::REQUEST_TIMEOUT, ok)])
            .duration_or(vars::REQUEST_TIMEOUT, Duration::ZERO)
            .unwrap();
    }
    let e = Env::from_pairs([(vars::REQUEST_TIMEOUT, "30000")])
        .duration_or(vars::REQUEST_TIMEOUT, Duration::ZERO)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!(
            "configuration: BERTH_REQUEST_TIMEOUT=\"30000\" is not a duration: expected {}",
            domain::duration::DURATION_FORM
        )
    );
    assert_eq!(e.matches("30000").count(), 1, "{e}");
}

#[test]
fn every_variable_the_kit_reads_is_declared() {
    let declared: Vec<&str> = vars::EVERY_SERVICE
        .iter()
        .chain(vars::ORCHESTRATOR_LIMITS)
        .chain(crate::watch::vars::ALL)
        .copied()
        .collect();
    let found = names_in_sources(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src"
    )));
    // The names the tests above make up, and the tools'.
    const MADE_UP: &[&str] = &[
        "BERTH_THING_TIMEOUT_MS",
        "BERTH_THING_TIMEOUT",
        "BERTH_OLD_NAME",
        "BERTH_NEW_NAME",
        "BERTH_NEW_NAM",
        "BERTH_INTERNAL_TOKN",
        "BERTH_WHATEVER",
    ];
    let undeclared: Vec<_> = found
        .iter()
        .map(String::as_str)
        .filter(|n| !declared.contains(n) && !is_tool_variable(n) && !MADE_UP.contains(n))
        .collect();
    assert!(
        undeclared.is_empty(),
        "read but not declared: {undeclared:?}"
    );
    assert!(
        found.contains("BERTH_LISTEN"),
        "the scan finds names: {found:?}"
    );
}

#[test]
fn defaults_apply_with_no_variables() {
    let c = HttpConfig::from_env(&Env::default()).unwrap();
    assert_eq!(c.request_timeout, Duration::from_secs(30));
    assert_eq!(c.body_limit, 1 << 20);
    assert!(c.internal_token.is_none());
    assert_eq!(listen_addr(&Env::default(), 8081).unwrap().port(), 8081);
}

#[test]
fn bad_values_name_the_variable() {
    let env = Env::from_pairs([(vars::REQUEST_TIMEOUT, "soon"), (vars::BODY_LIMIT, "1Mi")]);
    let e = HttpConfig::from_env(&env).unwrap_err().to_string();
    assert!(e.contains("BERTH_REQUEST_TIMEOUT=\"soon\""), "{e}");
    let env = Env::from_pairs([(vars::BODY_LIMIT, "lots")]);
    let e = HttpConfig::from_env(&env).unwrap_err().to_string();
    assert!(e.contains("BERTH_BODY_LIMIT"), "{e}");
    assert_eq!(
        HttpConfig::from_env(&Env::from_pairs([(vars::BODY_LIMIT, "2Mi")]))
            .unwrap()
            .body_limit,
        2 << 20
    );
}

#[test]
fn orchestrator_limits_default_to_the_data_dir_and_the_local_socket() {
    let l = orchestrator_limits(&Env::default().with(vars::DATA_DIR, "/srv/b/./x/..")).unwrap();
    assert_eq!(l.local_roots, ["/srv/b/volumes"]);
    assert_eq!(
        l.docker_endpoints,
        [domain::orchestrator::DEFAULT_DOCKER_HOST]
    );
    let l = orchestrator_limits(
        &Env::default()
            .with(vars::DATA_DIR, "/srv/b")
            .with(vars::LOCAL_BASE_PATH, "/mnt/vols/")
            .with(vars::DOCKER_HOST, "tcp://engine:2376"),
    )
    .unwrap();
    assert_eq!(l.local_roots, ["/srv/b/volumes", "/mnt/vols"]);
    assert_eq!(
        l.docker_endpoints,
        [
            domain::orchestrator::DEFAULT_DOCKER_HOST,
            "tcp://engine:2376"
        ]
    );
    let l = orchestrator_limits(
        &Env::default()
            .with(vars::LOCAL_ROOTS, "/a, //b/./c/")
            .with(vars::DOCKER_ENDPOINTS, "tcp://e:1/,unix:///run/d.sock")
            .with(vars::DOCKER_HOST, "tcp://engine:2376"),
    )
    .unwrap();
    assert_eq!(l.local_roots, ["/a", "/b/c"]);
    assert_eq!(l.docker_endpoints, ["tcp://e:1", "unix:///run/d.sock"]);
    for (var, value) in [
        (vars::LOCAL_ROOTS, "/"),
        (vars::LOCAL_ROOTS, " , "),
        (vars::DOCKER_ENDPOINTS, "http://e:1"),
    ] {
        let e = orchestrator_limits(&Env::default().with(var, value)).unwrap_err();
        assert_eq!(e.var, var, "{e}");
    }
}
