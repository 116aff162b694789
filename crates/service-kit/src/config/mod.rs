//! Typed configuration from `BERTH_*` variables.
//!
//! Settings are read once at start from an [`Env`] map: [`Env::from_process`] in a binary (given the
//! variables beyond `BERTH_*` and `OTEL_*` the service reads), a literal
//! map in tests, so no test ever mutates the process environment. A value that does not parse stops
//! the service with a message naming the variable and the expected form.
//!
//! # One convention for names and values
//!
//! **A variable is `BERTH_` + the setting's name, prefixed only by the other thing the setting is
//! about: an outside system (`ALICLOUD_`, `DOCKER_`, `LOCAL_` for local orchestrators,
//! `ECS_EMULATOR_` for the simulated cloud) or the Berth service whose address, database or calls it
//! sets (`REGISTRY_`, `STORAGE_OPS_`, `MACHINE_DRIVER_`); no name carries a unit.** So the gateway's
//! own settings are `BERTH_WORKERS`, `BERTH_RATE_LIMIT_RPS`, `BERTH_TOKENS_FILE`, and one kind of
//! thing has one name in every service: the Docker Engines Berth may use are `BERTH_DOCKER_ENDPOINTS`
//! for the machine driver as for the registry and storage-ops. (Prefixing every service's own
//! settings with the service would rename a dozen; a name without a prefix cannot collide either,
//! since no two services have a setting of the same name meaning different things.)
//!
//! Values: a duration takes a unit (`250ms`, `30s`, `5m`, `1h`; a bare `0` aside), so a number
//! copied from an old `_MS` variable is refused rather than read as hours of seconds; a `BERTH_*`
//! variable set to the empty string is refused (unset it to get the default), so
//! `BERTH_INTERNAL_TOKEN=` cannot silently leave the credential off.
//!
//! # Which names a binary accepts
//!
//! Each component declares the variables it reads next to where it reads them (its `VARS`) and the
//! names it renamed ([`Renamed`], its `RENAMED`); the kit lists only its own ([`vars::EVERY_SERVICE`],
//! [`vars::TELEMETRY`], [`vars::ORCHESTRATOR_LIMITS`]). A binary hands those lists to [`check_names`] before
//! anything reads a setting, and it refuses, naming the nearest known name, any `BERTH_*` variable
//! that is neither one of them nor one of Berth's tools' ([`is_tool_variable`]: the CLI's, the tests'
//! and the scripts', which CI exports and every child process inherits). A renamed variable is read
//! under its old name for one release, with a warning logged once; both names at once are refused.
//! `OTEL_*` and other programs' variables are not Berth's to police.
//!
//! # Layout
//! - [`vars`]: the names of the variables the kit reads.
//! - `env`: [`Env`], reading values (durations, quantities, secrets), [`ConfigError`].
//! - `names`: [`Renamed`], the tools' names, [`check_names`], `declare_variables!`,
//!   [`undeclared_names`].
//! - `service`: the shared settings: [`HttpConfig`], the internal credential's file, [`data_dir`],
//!   [`listen_addr`], [`SqliteServiceConfig`], [`orchestrator_limits`], [`UnusableDockerHost`].

mod env;
mod names;
mod service;
pub mod vars;

pub use env::{ConfigError, DURATION_FORM, Env, SecretString, parse_duration};
pub use names::{
    OldForm, Renamed, TOOL_PREFIXES, TOOL_VARIABLES, check_names, is_tool_variable,
    names_in_sources, undeclared_names,
};
pub use service::{
    BasePathError, DEFAULT_DATA_DIR, HttpConfig, SqliteServiceConfig, UnusableDockerHost,
    absolute_base_path, data_dir, listen_addr, orchestrator_limits, resolve_internal_token_file,
};

#[cfg(test)]
mod tests;
