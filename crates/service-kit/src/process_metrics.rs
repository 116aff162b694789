//! The process series every `/metrics` page ends with: Prometheus' standard `process_*` names (as
//! its client libraries' process collectors write them, so existing dashboards and alerts work),
//! and `berth_build_info` naming the service and its version.
//!
//! Read from `/proc/self` when the page is rendered: no sampling task, nothing kept. Under `berth up`
//! every service runs in one process, so each port's page shows the same process figures. Where
//! `/proc` cannot be read (not Linux), the process series are left out rather than made up.

use std::fmt::Write as _;

/// The process series and the build-info series of `service`, in the Prometheus text format.
pub fn page(service: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP berth_build_info The running service and its version (always 1).\n# TYPE berth_build_info gauge\nberth_build_info{{service=\"{service}\",version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(process) = Process::read() {
        process.write(&mut out);
    }
    out
}

/// What the page says of the process.
#[derive(Debug, PartialEq)]
struct Process {
    cpu_seconds: f64,
    resident_bytes: u64,
    virtual_bytes: u64,
    start_time_seconds: f64,
    open_fds: usize,
    max_fds: Option<u64>,
}

impl Process {
    fn read() -> Option<Process> {
        // Our own process's files: small, and written by the kernel, so read whole.
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse::<u64>()
            .ok()?;
        let ticks = clock_ticks()?;
        let page_size = page_size()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
        let max_fds = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .ok()
            .map(|(soft, _)| soft);
        Process::from_stat(&stat, boot_time, ticks, page_size, open_fds, max_fds)
    }

    /// Parses `/proc/self/stat` (proc(5)): the fields after the command name, which is in
    /// parentheses and may itself hold spaces or parentheses, so it is skipped to its last `)`.
    fn from_stat(
        stat: &str,
        boot_time: u64,
        ticks: f64,
        page_size: u64,
        open_fds: usize,
        max_fds: Option<u64>,
    ) -> Option<Process> {
        let after_name = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // proc(5) numbers fields from 1 (pid), 2 (comm), 3 (state): index 0 here is field 3.
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        let (utime, stime) = (field(14)?, field(15)?);
        Some(Process {
            cpu_seconds: (utime + stime) as f64 / ticks,
            start_time_seconds: boot_time as f64 + field(22)? as f64 / ticks,
            virtual_bytes: field(23)?,
            resident_bytes: field(24)? * page_size,
            open_fds,
            max_fds,
        })
    }

    fn write(&self, out: &mut String) {
        let mut gauge = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        gauge(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            self.cpu_seconds.to_string(),
        );
        gauge(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            self.resident_bytes.to_string(),
        );
        gauge(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            self.virtual_bytes.to_string(),
        );
        gauge(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            self.start_time_seconds.to_string(),
        );
        gauge(
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            self.open_fds.to_string(),
        );
        if let Some(max) = self.max_fds {
            gauge(
                "process_max_fds",
                "gauge",
                "Maximum number of open file descriptors.",
                max.to_string(),
            );
        }
    }
}

fn clock_ticks() -> Option<f64> {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(t)) if t > 0 => Some(t as f64),
        _ => None,
    }
}

fn page_size() -> Option<u64> {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE) {
        Ok(Some(p)) if p > 0 => u64::try_from(p).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_a_tricky_command_name_is_read_by_its_fields() {
        // proc(5)'s layout; the name holds a space and a `)`.
        let mut stat = String::from("4242 (berth up) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 ");
        // Fields 14 (utime) and 15 (stime), then 16-21, 22 (starttime), 23 (vsize), 24 (rss).
        stat.push_str("250 150 0 0 20 0 8 0 1000 104857600 2560 18446744073709551615");
        let p = Process::from_stat(&stat, 1_700_000_000, 100.0, 4096, 12, Some(1024)).unwrap();
        assert_eq!(
            p,
            Process {
                cpu_seconds: 4.0,
                resident_bytes: 2560 * 4096,
                virtual_bytes: 104_857_600,
                start_time_seconds: 1_700_000_010.0,
                open_fds: 12,
                max_fds: Some(1024),
            }
        );
        assert_eq!(Process::from_stat("garbage", 0, 100.0, 4096, 0, None), None);
    }

    #[test]
    fn the_page_names_the_service_and_reads_this_process() {
        let page = page("metrics-test");
        assert!(
            page.contains(&format!(
                "berth_build_info{{service=\"metrics-test\",version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{page}"
        );
        let rss: u64 = page
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .expect("this Linux process has /proc")
            .parse()
            .unwrap();
        assert!(rss > 1 << 20, "{page}");
        assert!(
            page.contains("# TYPE process_cpu_seconds_total counter"),
            "{page}"
        );
    }
}
