//! Every service's configuration under `berth up`, and the variables it reads: one process runs
//! them all, so it reads the union of their variables and refuses a name none of them reads.
//! Apart because the rules that tie one service's settings to another's (storage-ops' registry
//! timeout inside the gateway's upstream timeout) are decided here, before anything binds.

use std::time::Duration;

use service_kit::Env;
use service_kit::config::vars;

use super::BoxError;

/// The embedded emulator's lifecycle delays: `BERTH_ECS_EMULATOR_PENDING`, `_STARTING` and
/// `_STOPPING` (durations, `250ms`), as the standalone `ecs-emulator` reads them, each 1s by default
/// so instances move Pending → Starting → Running in a couple of seconds, as a person can follow.
/// A harness that fuzzes the API sets them to 0, so no case finds a machine between states (where
/// the driver's answer is MCM's retry, 503) only because an earlier case made it a moment before.
/// The last release's `_MS` names are carried over by [`stack_variables`]' renames.
pub fn emulator_lifecycle(env: &Env) -> Result<ecs_emulator::Lifecycle, BoxError> {
    let delay = |var: &str| -> Result<u64, BoxError> {
        let d = env.duration_or(var, Duration::from_secs(1))?;
        Ok(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    Ok(ecs_emulator::Lifecycle {
        pending_ms: delay(EMULATOR_LIFECYCLE[0])?,
        starting_ms: delay(EMULATOR_LIFECYCLE[1])?,
        stopping_ms: delay(EMULATOR_LIFECYCLE[2])?,
    })
}

/// The embedded emulator's delays in Pending, Starting and Stopping (the standalone emulator's
/// variables).
pub const EMULATOR_LIFECYCLE: [&str; 3] = [
    ecs_emulator::cli::env_vars::PENDING,
    ecs_emulator::cli::env_vars::STARTING,
    ecs_emulator::cli::env_vars::STOPPING,
];

/// The configuration of each service of one run.
pub struct Configs {
    /// The gateway's.
    pub gateway: gateway::Config,
    /// The registry's.
    pub registry: orchestrator_registry::Config,
    /// Storage-ops', whose registry timeout fits in the gateway's upstream timeout.
    pub storage_ops: storage_ops::Config,
    /// The machine driver's.
    pub machine_driver: machine_driver::Config,
    /// The machine controller's.
    pub machine_controller: machine_controller::Config,
}

/// Reads every service's configuration from its environment. Storage-ops is told how long the
/// gateway waits for it (`BERTH_UPSTREAM_TIMEOUT`, set or the gateway's default), so its registry
/// timeout is derived from that, or, when set to something the gateway would not wait for, refused
/// here: a hung registry must reach callers as storage-ops' 503 with Retry-After, not the gateway's
/// 504.
pub fn configure(
    gateway_env: &Env,
    registry_env: &Env,
    storage_ops_env: &Env,
    machine_driver_env: &Env,
    machine_controller_env: &Env,
) -> Result<Configs, BoxError> {
    let gateway = gateway::Config::from_env(gateway_env)?;
    let storage_ops_env = storage_ops_env.clone().with(
        storage_ops::env_vars::UPSTREAM_TIMEOUT,
        format!("{}ms", gateway.upstream_timeout.as_millis()),
    );
    Ok(Configs {
        registry: orchestrator_registry::Config::from_env(registry_env)?,
        storage_ops: storage_ops::Config::from_env(&storage_ops_env)?,
        machine_driver: machine_driver::Config::from_env(machine_driver_env)?,
        machine_controller: machine_controller::Config::from_env(machine_controller_env)?,
        gateway,
    })
}

/// What `berth up` reads and retires: one process runs every service, so it reads what any of them
/// reads (the union of their `VARS` and the kit's), and a name none of them reads is refused.
pub fn stack_variables() -> (Vec<&'static str>, Vec<service_kit::config::Renamed>) {
    let reads = [
        vars::EVERY_SERVICE,
        gateway::VARS,
        machine_driver::VARS,
        orchestrator_registry::VARS,
        storage_ops::VARS,
        machine_controller::VARS,
        &EMULATOR_LIFECYCLE,
    ]
    .concat();
    let mut renamed = [
        gateway::RENAMED,
        machine_driver::RENAMED,
        orchestrator_registry::RENAMED,
        storage_ops::RENAMED,
        machine_controller::RENAMED,
    ]
    .concat();
    // Of the embedded emulator's settings, `berth up` reads only its lifecycle delays.
    renamed.extend(
        ecs_emulator::cli::RENAMED
            .iter()
            .filter(|r| EMULATOR_LIFECYCLE.contains(&r.new))
            .cloned(),
    );
    (reads, renamed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variable_up_sets_or_reads_is_one_a_service_reads() {
        let (reads, renamed) = stack_variables();
        let src = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
        let undeclared = service_kit::config::undeclared_names(src, &reads, &renamed);
        assert!(undeclared.is_empty(), "no service reads {undeclared:?}");
        // One process, one environment: every service's names and retired names are accepted.
        let env = Env::from_pairs([
            ("BERTH_RATE_LIMIT_RPS", "5"),
            ("BERTH_ALICLOUD_TIMEOUT_MS", "1500"),
            ("BERTH_LOCAL_ROOTS", "/srv"),
            ("BERTH_ORPHAN_POLICY", "report"),
            ("BERTH_URL", "http://127.0.0.1:8080"),
        ]);
        service_kit::config::check_names(&env, &reads, &renamed).unwrap();
        let e = service_kit::config::check_names(
            // Spelled at run time: the scan above reads this file's literals.
            &Env::from_pairs([(format!("{}_RATE_LIMIT_RSP", "BERTH"), "5")]),
            &reads,
            &renamed,
        )
        .unwrap_err();
        assert!(
            e.problem.contains("did you mean BERTH_RATE_LIMIT_RPS?"),
            "{e}"
        );
    }

    fn configs(extra: &[(&str, &str)]) -> Result<Configs, BoxError> {
        let dir = tempfile::tempdir().unwrap();
        let mut env = Env::default().with(vars::DATA_DIR, dir.path().display().to_string());
        for (k, v) in extra {
            env = env.with(k, *v);
        }
        configure(&env, &env, &env, &env, &env)
    }

    #[test]
    fn the_emulators_lifecycle_is_a_person_s_pace_unless_the_variables_say_otherwise() {
        let slow = emulator_lifecycle(&Env::default()).unwrap();
        assert_eq!(
            (slow.pending_ms, slow.starting_ms, slow.stopping_ms),
            (1000, 1000, 1000)
        );
        let env = Env::default()
            .with(EMULATOR_LIFECYCLE[0], "0")
            .with(EMULATOR_LIFECYCLE[1], "0s")
            .with(EMULATOR_LIFECYCLE[2], "5ms");
        assert_eq!(
            emulator_lifecycle(&env).unwrap(),
            ecs_emulator::Lifecycle {
                pending_ms: 0,
                starting_ms: 0,
                stopping_ms: 5
            }
        );
        let e = emulator_lifecycle(&Env::default().with(EMULATOR_LIFECYCLE[2], "5")).unwrap_err();
        assert!(e.to_string().contains(EMULATOR_LIFECYCLE[2]), "{e}");
    }

    #[test]
    fn storage_ops_waits_for_the_registry_less_than_the_gateway_waits_for_it() {
        // Nothing set: the gateway's default (30s) bounds the registry's time.
        let c = configs(&[]).unwrap();
        let registry_total = c.storage_ops.registry_timeout * storage_ops::REGISTRY_ATTEMPTS;
        assert!(registry_total <= c.gateway.upstream_timeout / 2);
        // A short gateway timeout alone: the registry's follows it.
        let c = configs(&[("BERTH_UPSTREAM_TIMEOUT", "2s")]).unwrap();
        assert_eq!(c.storage_ops.registry_timeout, Duration::from_millis(500));
        // Both set so that they contradict: refused at start, naming both.
        let e = configs(&[
            ("BERTH_UPSTREAM_TIMEOUT", "2s"),
            ("BERTH_REGISTRY_TIMEOUT", "5s"),
        ])
        .err()
        .expect("refused")
        .to_string();
        assert!(e.contains("BERTH_REGISTRY_TIMEOUT"), "{e}");
        assert!(e.contains("BERTH_UPSTREAM_TIMEOUT"), "{e}");
    }
}
