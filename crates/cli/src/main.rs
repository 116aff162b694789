//! `berth`: the Berth CLI, and `berth up`, the whole stack in one process.
//!
//! Run `berth --help` for the commands; `cargo run --release -p berth -- up` starts everything.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    berth::run(std::env::args_os()).await
}
