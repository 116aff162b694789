//! Berth's domain: the pure types and rules every other crate shares.
//!
//! Nothing here does I/O or is async; everything is plain data plus the rules that decide whether that
//! data is acceptable, so the rules can be unit-tested exhaustively and reused by every service, the
//! clients and the CLI without dragging a runtime along.
//!
//! # Layout
//! - [`code`]: the MCM machine codes (0–17), their HTTP status, and [`Status`], whose string form is the
//!   exact `machine codes error: code = [..] message = [..]` contract MCM parses.
//! - [`duration`]: the one written form of a duration setting (`250ms`, `30s`, `5m`).
//! - [`quantity`]: Kubernetes resource quantities (`10Gi`, `1.5G`, `1e3`) as exact byte counts.
//! - [`names`]: DNS-1123 names and Kubernetes label keys/values.
//! - [`selector`]: label selectors (`a=b,c in (x,y),!d`) and matching.
//! - [`machine`]: Machine, MachineClass, Secret and the six driver request/response types.
//! - [`volume`]: Volume, VolumeList and the VolumeProvisionerProfile a client asks for.
//! - [`orchestrator`]: orchestrator kinds and registered orchestrators.
//! - [`resources`]: what the machine controller stores: secrets, machines, machine sets and
//!   deployments as Kubernetes-shaped objects, and the rules a write of each must meet.
//! - [`problem`]: [`Problem`], the problem+json body of every error answer, which services write and
//!   the typed client reads.
//! - [`secret`]: [`SecretString`], which cannot be printed, for credentials wherever they are held.
//!
//! Every rejection is a [`Status`] with [`Code::InvalidArgument`] whose message names the field and the
//! rule, so services can hand it to callers unchanged.

pub mod code;
pub mod duration;
pub mod machine;
pub mod names;
pub mod orchestrator;
pub mod problem;
pub mod quantity;
pub mod resources;
#[cfg(feature = "openapi")]
pub mod schema;
pub mod secret;
pub mod selector;
pub mod volume;

pub use code::{Code, Status};
pub use machine::*;
pub use names::Labels;
pub use orchestrator::{Orchestrator, OrchestratorKind};
pub use problem::{PROBLEM_JSON, Problem};
pub use quantity::Quantity;
pub use secret::SecretString;

/// Where a stack's state lives when `BERTH_DATA_DIR` (or `berth up --data-dir`) is not given.
pub const DEFAULT_DATA_DIR: &str = "./berth-data";
pub use selector::Selector;
pub use volume::*;
