//! The check of a request's token: the [`TokenStore`] the gateway authenticates against, kept in
//! step with the file by a thread of its own, and what a connection remembers of its last token.
//!
//! Apart because it is on every call's path and tuned for it (reads without a lock, one comparison
//! for a remembered token, constant time throughout): the file's format can change without this
//! being read again, and this without the format.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use chrono::Utc;
use subtle::ConstantTimeEq;

use super::last_used::LAST_USED_EVERY;
use super::tokens_file::{TokensFileError, parse_token_lines};
use super::{TokenEntry, hash_token};

/// The tokens, re-read from their file when it changes.
pub struct TokenStore {
    pub(super) path: PathBuf,
    /// The current tokens. Every call reads them and a reload swaps them whole; `ArcSwap` lets the
    /// worker threads read without writing to a shared cache line (a lock's or a reference count's),
    /// which they would otherwise bounce between cores on every call.
    pub(super) entries: ArcSwap<Vec<TokenEntry>>,
    /// The file's stamp at the last load.
    modified: Mutex<Option<Stamp>>,
    /// Whether a token's use was recorded since the last-used file was last written.
    pub(super) used: AtomicBool,
    /// Whether writing the last-used file has failed and been logged: a tokens file mounted read-only
    /// (a Kubernetes Secret) is a set-up, not an incident, and is said once.
    pub(super) last_used_failed: AtomicBool,
    /// Told of every reload, for the watches a token holds open ([`TokenStore::grant_ends`]).
    reloads: tokio::sync::watch::Sender<()>,
}

/// A future that completes when the grant a stream was admitted with ends.
pub(crate) type GrantEnds = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// How often the file is checked for changes.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

impl TokenStore {
    /// Loads `path`. A missing file means no tokens (every call is refused); a malformed one is an error
    /// at start.
    pub fn load(path: &Path) -> Result<Self, TokensFileError> {
        let (entries, modified) = read(path)?;
        Ok(TokenStore {
            path: path.to_path_buf(),
            entries: ArcSwap::new(entries),
            modified: Mutex::new(modified),
            used: AtomicBool::new(false),
            last_used_failed: AtomicBool::new(false),
            reloads: tokio::sync::watch::Sender::new(()),
        })
    }

    /// Completes when the grant `token` has now ends: it expires, or a reload of the file revokes
    /// it or changes what it may do (its scopes, namespaces or expiry). A watch is admitted once
    /// and then streams for up to half an hour; it must not outlive the token that opened it.
    pub fn grant_ends(self: &Arc<Self>, token: &str) -> GrantEnds {
        let hash = hash_token(token);
        let granted = self.entry_of(&hash);
        let mut reloads = self.reloads.subscribe();
        // Not kept alive by a stream: a store that is gone ends it.
        let store = Arc::downgrade(self);
        Box::pin(async move {
            let Some(granted) = granted else { return };
            let expiry = async {
                match granted.expires {
                    Some(at) => {
                        let left = (at - Utc::now()).to_std().unwrap_or_default();
                        tokio::time::sleep(left).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(expiry);
            loop {
                tokio::select! {
                    () = &mut expiry => return,
                    changed = reloads.changed() => {
                        let Some(store) = changed.ok().and_then(|()| store.upgrade()) else {
                            return;
                        };
                        match store.entry_of(&hash) {
                            Some(now) if now.same_grant(&granted) => {}
                            _ => return,
                        }
                    }
                }
            }
        })
    }

    /// The entry whose hash is `hash`, compared in constant time.
    fn entry_of(&self, hash: &[u8; 32]) -> Option<TokenEntry> {
        let entries = self.entries.load();
        let mut found = None;
        for entry in entries.iter() {
            if bool::from(entry.hash.ct_eq(hash)) {
                found = Some(entry.clone());
            }
        }
        found
    }

    /// Loads `path` and keeps the tokens in step with it: a thread checks the file once a second,
    /// for as long as the store is in use, so no call pays for the check.
    pub fn watch(path: &Path) -> Result<Arc<Self>, TokensFileError> {
        let store = Arc::new(TokenStore::load(path)?);
        let watched = Arc::downgrade(&store);
        std::thread::Builder::new()
            .name("tokens-watch".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(RELOAD_CHECK);
                    match watched.upgrade() {
                        Some(store) => {
                            store.reload_if_changed();
                            store.flush_last_used();
                        }
                        None => return,
                    }
                }
            })
            .map_err(TokensFileError::Watch)?;
        Ok(store)
    }

    /// Calls `with` on the entry whose hash matches `token`, checking every entry in constant time;
    /// `None` when no entry matches or the one that does has expired.
    pub fn authenticate<R>(&self, token: &str, with: impl FnOnce(&TokenEntry) -> R) -> Option<R> {
        let entries = self.entries.load();
        let index = find(&entries, token)?;
        self.accept(&entries[index]).then(|| with(&entries[index]))
    }

    /// Whether a matching entry is accepted now (not expired), recording its use when it is.
    fn accept(&self, entry: &TokenEntry) -> bool {
        let now = Utc::now();
        if entry.expired_at(now) {
            return false;
        }
        let second = now.timestamp();
        let last = entry.last_used.load(Ordering::Relaxed);
        if second >= last.saturating_add(LAST_USED_EVERY) {
            entry.last_used.store(second, Ordering::Relaxed);
            self.used.store(true, Ordering::Relaxed);
        }
        true
    }

    /// [`TokenStore::authenticate`] for a caller's connection that remembers the last token it
    /// presented: while the tokens are unchanged, the same token again is recognised by one
    /// constant-time comparison with the remembered one, without hashing it and comparing every
    /// entry. Only a token that matched is remembered.
    pub fn authenticate_remembering<R>(
        &self,
        token: &str,
        memory: &mut Option<Remembered>,
        with: impl FnOnce(&TokenEntry) -> R,
    ) -> Option<R> {
        let entries = self.entries.load();
        if let Some(known) = memory.as_ref()
            && Arc::ptr_eq(&known.entries, &entries)
            && same_token(&known.token, token.as_bytes())
        {
            let entry = &known.entries[known.index];
            return self.accept(entry).then(|| with(entry));
        }
        let index = find(&entries, token)?;
        if !self.accept(&entries[index]) {
            return None;
        }
        let known = memory.insert(Remembered {
            token: token.as_bytes().into(),
            entries: arc_swap::Guard::into_inner(entries),
            index,
        });
        Some(with(&known.entries[index]))
    }

    /// Re-reads the file if it has changed since it was last read.
    ///
    /// A line that does not parse grants nothing and the others apply: keeping the previous tokens
    /// instead would keep a token working after its line was removed, whenever another line of the
    /// same edit had a typo. A file that cannot be read at all (not a missing one: that is no
    /// tokens) keeps the previous tokens until it can.
    pub fn reload_if_changed(&self) {
        let mut known = self.modified.lock().expect("tokens lock");
        let modified = stamp(&self.path);
        if modified == *known {
            return;
        }
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "tokens file unreadable; keeping the previous tokens until it can be read");
                return;
            }
        };
        let parsed = parse_token_lines(&text);
        for e in parsed.malformed.iter().chain(&parsed.duplicates) {
            tracing::error!(path = %self.path.display(), error = %e, "tokens file: this line grants nothing until it is fixed");
        }
        tracing::info!(
            count = parsed.entries.len(),
            malformed = parsed.malformed.len() + parsed.duplicates.len(),
            "tokens file reloaded"
        );
        self.entries.store(Arc::new(parsed.entries));
        *known = modified;
        self.reloads.send_replace(());
    }
}

/// The index of the entry whose hash matches `token`, every entry compared in constant time.
fn find(entries: &[TokenEntry], token: &str) -> Option<usize> {
    let presented = hash_token(token);
    let mut found = None;
    for (index, entry) in entries.iter().enumerate() {
        if bool::from(entry.hash.ct_eq(&presented)) {
            found = Some(index);
        }
    }
    found
}

/// Whether `a` and `b` are the same bytes, in time that depends only on their length (which a token's
/// format makes public). Compared a word at a time: `subtle` hides each comparison from the
/// optimiser, which per byte was a measurable part of a call.
pub(super) fn same_token(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let word = |chunk: &[u8]| {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        u64::from_le_bytes(bytes)
    };
    let mut equal = subtle::Choice::from(1);
    for (x, y) in a.chunks(8).zip(b.chunks(8)) {
        equal &= word(x).ct_eq(&word(y));
    }
    bool::from(equal)
}

/// What a connection remembers of the last token it presented (see
/// [`TokenStore::authenticate_remembering`]).
pub struct Remembered {
    token: Box<[u8]>,
    /// The tokens it was found in; a reload makes a new list, so the memory no longer applies.
    entries: Arc<Vec<TokenEntry>>,
    index: usize,
}

type Loaded = (Arc<Vec<TokenEntry>>, Option<Stamp>);

/// What tells a changed file: its modification time and length. The length catches a rewrite within
/// the file system's timestamp granularity (a few milliseconds on some).
type Stamp = (SystemTime, u64);

fn stamp(path: &Path) -> Option<Stamp> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

fn read(path: &Path) -> Result<Loaded, TokensFileError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let mut parsed = parse_token_lines(&text);
            if !parsed.malformed.is_empty() {
                return Err(TokensFileError::Malformed {
                    path: path.to_path_buf(),
                    source: parsed.malformed.swap_remove(0),
                });
            }
            // A name given twice is not worth refusing to start over: the first line stands.
            for e in &parsed.duplicates {
                tracing::error!(path = %path.display(), error = %e, "tokens file: this line grants nothing until it is fixed");
            }
            Ok((Arc::new(parsed.entries), stamp(path)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((Arc::default(), None)),
        Err(source) => Err(TokensFileError::Unreadable {
            path: path.to_path_buf(),
            source,
        }),
    }
}
