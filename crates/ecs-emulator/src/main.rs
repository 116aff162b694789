//! `ecs-emulator`: serves the ECS emulator until SIGINT/SIGTERM. The flags, their variables and the
//! start are [`ecs_emulator::cli`]'s; `ecs-emulator --help` lists them.

/// The binary picks the allocator, not a library it links: mimalloc, since under load the services
/// allocate small, short-lived buffers on many threads, where glibc's allocator showed up as the
/// gateway's largest cost (arena lock contention, in a `perf` profile of `bench/gateway.sh`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Transparent huge pages off: see `service_kit::memory`.
    service_kit::memory::limit_footprint();
    ecs_emulator::cli::main().await
}
