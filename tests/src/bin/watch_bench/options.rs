//! What is settled before any process starts: the command line ([`Options`]) and the limit on open
//! files, raised when the watchers would need more than it allows.
//!
//! Apart because none of it is measured: it decides whether a run can start at all, and reads best
//! away from the measurement it serves.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) watchers: usize,
    pub(crate) events: usize,
    pub(crate) pace: Duration,
    pub(crate) bin_dir: PathBuf,
}

pub(crate) fn options() -> Result<Options, String> {
    let mut o = Options {
        watchers: 1000,
        events: 200,
        pace: Duration::from_millis(20),
        bin_dir: std::env::current_exe()
            .map_err(|e| e.to_string())?
            .parent()
            .ok_or("this binary has no directory")?
            .to_path_buf(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--watchers" => {
                o.watchers = value()?.parse().map_err(|e| format!("--watchers: {e}"))?;
                if o.watchers == 0 {
                    return Err("--watchers must be at least 1".into());
                }
            }
            "--events" => {
                o.events = value()?.parse().map_err(|e| format!("--events: {e}"))?;
                if o.events == 0 {
                    return Err("--events must be at least 1".into());
                }
            }
            "--pace-ms" => {
                o.pace =
                    Duration::from_millis(value()?.parse().map_err(|e| format!("--pace-ms: {e}"))?)
            }
            "--bin-dir" => o.bin_dir = PathBuf::from(value()?),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

/// The soft and hard limits on open files, from `/proc/self/limits` (`None` for unlimited).
fn file_limits() -> Result<(Option<u64>, Option<u64>), String> {
    let limits = std::fs::read_to_string("/proc/self/limits").map_err(|e| e.to_string())?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .ok_or("/proc/self/limits has no \"Max open files\"")?;
    let mut fields = line["Max open files".len()..].split_whitespace();
    let mut next = || -> Result<Option<u64>, String> {
        match fields.next() {
            Some("unlimited") => Ok(None),
            Some(n) => n.parse().map(Some).map_err(|e| format!("{n:?}: {e}")),
            None => Err(format!("cannot read {line:?}")),
        }
    };
    Ok((next()?, next()?))
}

/// Makes sure this process (and so the services it starts) may open `needed` files: raises the
/// soft limit to the hard one with `prlimit` when it is lower than `needed`.
pub(crate) fn enough_files(needed: u64) -> Result<String, String> {
    let (soft, hard) = file_limits()?;
    let show = |l: Option<u64>| l.map_or("unlimited".to_string(), |n| n.to_string());
    if soft.is_none_or(|s| s >= needed) {
        return Ok(format!(
            "open files: soft limit {} (needed {needed})",
            show(soft)
        ));
    }
    if hard.is_some_and(|h| h < needed) {
        return Err(format!(
            "open files: the hard limit is {} and this run needs {needed}; raise it (as root: ulimit -Hn {needed}; ulimit -n {needed}) or ask for fewer --watchers",
            show(hard)
        ));
    }
    let status = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={}:{}", show(hard), show(hard)))
        .status()
        .map_err(|e| format!("prlimit: {e}; set ulimit -n {needed} before running"))?;
    let (raised, _) = file_limits()?;
    if !status.success() || raised.is_some_and(|s| s < needed) {
        return Err(format!(
            "open files: soft limit {} and prlimit could not raise it ({status}); set ulimit -n {needed} before running",
            show(soft)
        ));
    }
    Ok(format!(
        "open files: soft limit raised from {} to {} (needed {needed})",
        show(soft),
        show(raised)
    ))
}
