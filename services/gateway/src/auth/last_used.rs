//! When each token was last used: the file beside the tokens file that says so, which `berth token
//! list` reads, and the store's flush that writes it.
//!
//! Apart because it is the one file the gateway writes of its own accord (on the watch thread, never
//! on a call) and another process reads; its rules (at most once a minute per token, merged with what
//! the file says, written whole, a read-only mount said once) are not the check's.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use chrono::{DateTime, SecondsFormat, Utc};

use super::store::TokenStore;
use super::tokens_file::replace_file;

/// How often at most a token's last use is recorded: `berth token list` says when a token was last
/// used to the minute, and no call pays for more.
pub(super) const LAST_USED_EVERY: i64 = 60;

/// The file beside the tokens file at `tokens` that says when each token was last used.
pub fn last_used_file(tokens: &Path) -> PathBuf {
    let mut name = tokens.as_os_str().to_owned();
    name.push(".last-used");
    PathBuf::from(name)
}

/// When each token was last used, as the gateway serving the tokens file at `tokens` recorded it
/// (to the minute); a token never used since the file was kept is absent.
pub fn read_last_used(tokens: &Path) -> BTreeMap<String, DateTime<Utc>> {
    let text = std::fs::read_to_string(last_used_file(tokens)).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (name, at) = line.split_once(' ')?;
            let at = DateTime::parse_from_rfc3339(at.trim()).ok()?;
            Some((name.to_string(), at.with_timezone(&Utc)))
        })
        .collect()
}

impl TokenStore {
    /// Writes the last-used file if a use was recorded since it was last written: the recorded uses
    /// merged into what it says (a later time wins), tokens no longer in the file left out.
    pub fn flush_last_used(&self) {
        if !self.used.swap(false, Ordering::Relaxed) {
            return;
        }
        let entries = self.entries.load();
        let path = last_used_file(&self.path);
        let mut times = read_last_used(&self.path);
        let current: HashSet<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        times.retain(|name, _| current.contains(name.as_str()));
        for entry in entries.iter() {
            let second = entry.last_used.load(Ordering::Relaxed);
            if let Some(at) = DateTime::from_timestamp(second, 0).filter(|_| second > 0) {
                let known = times.entry(entry.name.clone()).or_insert(at);
                *known = (*known).max(at);
            }
        }
        let text: String = times
            .iter()
            .map(|(name, at)| format!("{name} {}\n", at.to_rfc3339_opts(SecondsFormat::Secs, true)))
            .collect();
        match replace_file(&path, &text) {
            Ok(()) => self.last_used_failed.store(false, Ordering::Relaxed),
            Err(e) if !self.last_used_failed.swap(true, Ordering::Relaxed) => {
                tracing::warn!(path = %path.display(), error = %e, "the tokens' last-used file cannot be written (is the tokens file's directory read-only?); `berth token list` will not show last use. Tried again on later uses, logged again once it has worked");
            }
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "the tokens' last-used file still cannot be written");
            }
        }
    }
}
