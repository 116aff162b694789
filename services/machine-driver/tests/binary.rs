//! The `machine-driver` binary's command line: help, version, healthcheck, and unknown arguments.

#[test]
fn the_binary_answers_help_version_and_healthcheck_without_serving() {
    service_kit::testing::check_service_binary(
        env!("CARGO_BIN_EXE_machine-driver"),
        "machine-driver",
    );
}
