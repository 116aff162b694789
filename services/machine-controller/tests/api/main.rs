//! The machine controller over HTTP, with a real machine driver and the ECS emulator behind it,
//! every part on port 0.

mod support;

mod machines;
mod objects;
mod orphans;
mod rollouts;
mod watch;
