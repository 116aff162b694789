//! `berth up`: every service in one process, each on its own listener and still talking HTTP to the
//! others exactly as in production, so what works here works in compose and Kubernetes.
//!
//! The services get their configuration the way their binaries do, as `BERTH_*` variables: the
//! process's own, overridden by what `up` decides (ports, data directory, upstream URLs, a fresh
//! internal credential shared by the services of this run, unless `BERTH_INTERNAL_TOKEN` or
//! `BERTH_INTERNAL_TOKEN_FILE` gives one).
//!
//! Credentials are written only once every listener is bound: a start that fails (a port in use)
//! leaves no admin token behind that nobody was shown. The banner says where everything is, which
//! orchestrator new volumes go to and why that one, and how to get back in when the token is lost.
//!
//! # Layout
//! This file holds what a run is asked for ([`UpOptions`]) and the ports it takes ([`Ports`]); the
//! rest is in a file per step, all re-exported here:
//! - `credentials`: the internal credential of a run and the first admin token.
//! - `instance`: the stack's Docker instance, kept in its data directory.
//! - `config`: every service's configuration, and the variables `up` reads.
//! - `build`: [`build_stack`], every service bound to its port, the gateway last.
//! - `banner`: what `up` says once it serves.
//! - `run`: [`run`], serving until Ctrl-C or SIGTERM, then stopping tier by tier.
//! - `wiring`: [`wiring`], what each service is told of the others (shared with the suites'
//!   process stack).

mod banner;
mod build;
mod config;
mod credentials;
mod instance;
mod run;
mod wiring;

pub use build::{Built, build_stack};
pub use config::{Configs, EMULATOR_LIFECYCLE, configure, emulator_lifecycle, stack_variables};
pub use credentials::ensure_admin_token;
pub use instance::new_docker_instance;
pub use run::run;
pub use wiring::{Caller, ServiceUrls, wiring};

/// What `berth up` is asked for (its command-line options).
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Where all state goes: SQLite files, local volumes, the tokens file.
    pub data_dir: std::path::PathBuf,
    /// The gateway's port; the services take the next ones ([`Ports::from_base`]). 0 lets the OS
    /// pick every port (the tests' stacks).
    pub port_base: u16,
    /// The address the gateway binds; the services listen on loopback unless `expose_services`.
    pub bind: std::net::IpAddr,
    /// The services bind on `bind` too, not only the gateway.
    pub expose_services: bool,
}

/// The ports of one run, in the order of docs/architecture.md's table.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// The gateway.
    pub gateway: u16,
    /// The machine driver.
    pub machine_driver: u16,
    /// The orchestrator registry.
    pub registry: u16,
    /// Storage ops.
    pub storage_ops: u16,
    /// The machine controller.
    pub machine_controller: u16,
    /// The ECS emulator.
    pub ecs_emulator: u16,
}

impl Ports {
    /// B, B+1, B+2, B+3, B+4 and B+10; every one 0 (a port the OS picks, which the banner says)
    /// when B is 0.
    pub fn from_base(base: u16) -> Option<Ports> {
        if base == 0 {
            return Some(Ports {
                gateway: 0,
                machine_driver: 0,
                registry: 0,
                storage_ops: 0,
                machine_controller: 0,
                ecs_emulator: 0,
            });
        }
        Some(Ports {
            gateway: base,
            machine_driver: base.checked_add(1)?,
            registry: base.checked_add(2)?,
            storage_ops: base.checked_add(3)?,
            machine_controller: base.checked_add(4)?,
            ecs_emulator: base.checked_add(10)?,
        })
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
