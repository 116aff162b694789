//! The whole Berth stack in one process, and the state of its data directory: the one crate that
//! links every service, so that the client commands (`berth-commands`) link none.
//!
//! # Layout
//! - [`up`]: `berth up`, every service on its own listener, still talking HTTP, state under one data
//!   directory.
//! - [`backup`]: `berth backup` and `berth restore` of a data directory's state.
//! - [`tokens`]: the tokens file `up`'s gateway serves and `berth token` edits.

pub mod backup;
pub mod tokens;
pub mod up;
