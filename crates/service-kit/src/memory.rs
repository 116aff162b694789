//! The process's memory settings, applied once at start by every binary (through
//! [`crate::server::run_binary`], `berth up` and the emulator's start).
//!
//! # Why transparent huge pages are off
//!
//! Every binary allocates with mimalloc, which reserves its heap as one 1 GiB arena and, by
//! default, asks the kernel to back it with transparent huge pages (`madvise(MADV_HUGEPAGE)`). Each
//! 2 MiB of that arena a service touches then becomes resident whole, so an idle service holds
//! several times the heap it uses (`AnonHugePages` in `/proc/PID/smaps`). `bench/footprint.sh`
//! prints the figures; those measured with huge pages on and off are in BENCHMARKS.md, “Memory:
//! each service idle and at peak, and berth up”. Two switches take that away, each for the case the
//! other misses:
//!
//! - the kit builds mimalloc with its `no_thp` feature (Cargo unifies features, so every binary's
//!   allocator is built so), so the arena is never `madvise`d: enough where the kernel's
//!   `transparent_hugepage/enabled` is `madvise`, the usual setting;
//! - [`limit_footprint`] sets the process's "THP disable" flag (`PR_SET_THP_DISABLE`), which the
//!   kernel honours at every later fault, so a kernel set to `always` does not make 2 MiB pages of
//!   the arena either. (Memory touched before it runs, the async runtime's first allocations, may
//!   still be; the flag is inherited by child processes, which no Berth service starts.)
//!
//! What huge pages buy, fewer TLB misses, pays off for heaps of hundreds of MiB; these heaps are a
//! few MiB, and the requests/s of `bench/footprint.sh`'s load were the same either way, within the
//! run-to-run noise of a shared 2-core machine (two alternating runs of each).

/// Applies the process-wide memory settings: see the module's documentation. Call it first thing
/// in a binary's `main`; failure (a kernel without the flag) leaves the kernel's default and is
/// only logged at debug level, since memory use is then higher but nothing else changes.
pub fn limit_footprint() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        tracing::debug!(error = %e, "could not turn transparent huge pages off");
    }
}
