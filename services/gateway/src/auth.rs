//! Bearer tokens and their scopes.
//!
//! The tokens file (`BERTH_TOKENS_FILE`) holds only SHA-256 hashes, one token a line:
//!
//! ```text
//! # name   hash                                                                     scopes
//! admin    sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 admin
//! ci       sha256:…                                                                 volumes:read,volumes:write
//! ```
//!
//! A presented token is hashed and compared with every entry in constant time, so neither the file nor
//! the timing of a refusal gives a token away. The file is re-read when it changes (a thread checks it
//! once a second), so adding a token needs no restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::routes::Scope;

/// One token's entry.
#[derive(Debug, Clone)]
pub struct TokenEntry {
    /// A name for people and logs (never the token).
    pub name: String,
    hash: [u8; 32],
    /// What it may do.
    pub scopes: Vec<Scope>,
}

impl TokenEntry {
    /// What tells this token from every other: its hash (two entries may share a name).
    pub fn identity(&self) -> &[u8; 32] {
        &self.hash
    }

    /// Whether this token may act with `scope` (`admin` may do everything).
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes
            .iter()
            .any(|s| *s == scope || *s == Scope::Admin)
    }
}

/// The SHA-256 of a token, as stored.
pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The tokens-file line for a new token.
pub fn tokens_file_line(name: &str, token: &str, scopes: &[Scope]) -> String {
    let scopes: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
    format!(
        "{name} sha256:{} {}",
        hex::encode(hash_token(token)),
        scopes.join(",")
    )
}

/// The first line of a tokens file Berth creates.
pub const TOKENS_FILE_HEADER: &str =
    "# Berth gateway tokens: <name> sha256:<hash> <scopes>. Add lines with `berth token create`.";

/// A fresh random token: 32 bytes from the OS generator, hex-encoded, with a recognisable prefix.
pub fn new_token() -> String {
    use rand::Rng;
    let bytes: [u8; 32] = rand::rng().random();
    format!("berth_{}", hex::encode(bytes))
}

/// Creates the tokens file at `path` holding `line` (mode 0600, synced); fails if it exists.
pub fn create_tokens_file(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    // One write, so the gateway's reload never sees the header without the line.
    file.write_all(format!("{TOKENS_FILE_HEADER}\n{line}\n").as_bytes())?;
    file.sync_all()
}

/// Adds `line` to the tokens file at `path`, creating it (mode 0600, with the header) when missing.
pub fn append_token_line(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let existing = match std::fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut text = String::new();
    match &existing {
        None => {
            text.push_str(TOKENS_FILE_HEADER);
            text.push('\n');
        }
        Some(bytes) if !bytes.is_empty() && !bytes.ends_with(b"\n") => text.push('\n'),
        Some(_) => {}
    }
    text.push_str(line);
    text.push('\n');
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    // One write of the whole line: a reload in between sees the old file or the new, never half.
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

/// Creates the tokens file with one admin token when there is none yet (mode 0600, only the hash
/// stored), and returns the token to show once; `None` when the file already exists.
pub fn ensure_admin_token(path: &Path) -> std::io::Result<Option<String>> {
    if path.exists() {
        return Ok(None);
    }
    let token = new_token();
    let line = tokens_file_line("admin", &token, &[Scope::Admin]);
    match create_tokens_file(path, &line) {
        Ok(()) => Ok(Some(token)),
        // Another process made it between the check and the create: theirs stands.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(e),
    }
}

/// A line of a tokens file that does not parse: which line, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct TokenLineError {
    /// The line, counted from 1.
    pub line: usize,
    /// What is wrong with it.
    pub problem: TokenLineProblem,
}

/// What is wrong with a line of a tokens file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenLineProblem {
    /// Not three fields.
    #[error("expected `<name> sha256:<hex> <scope>[,<scope>…]`")]
    Shape,
    /// The hash field is not `sha256:` and 64 hex digits.
    #[error("the hash must be sha256: and 64 hex digits")]
    Hash,
    /// A scope no route knows.
    #[error("unknown scope {0:?}")]
    UnknownScope(String),
}

/// Why the tokens file cannot be used. The file holds hashes only, so no message carries a token.
#[derive(Debug, thiserror::Error)]
pub enum TokensFileError {
    /// It exists but cannot be read.
    #[error("{path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line does not parse.
    #[error("{path}: {source}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Which line and why.
        source: TokenLineError,
    },
    /// The thread that watches it for changes could not be started.
    #[error("starting the tokens file watch: {0}")]
    Watch(#[source] std::io::Error),
}

/// Parses a tokens file; the error names the first line that does not parse and what is wrong with it.
pub fn parse_tokens(text: &str) -> Result<Vec<TokenEntry>, TokenLineError> {
    let (entries, mut malformed) = parse_token_lines(text);
    if malformed.is_empty() {
        Ok(entries)
    } else {
        Err(malformed.swap_remove(0))
    }
}

/// Parses every line of a tokens file: the entries of the lines that parse, and why each other
/// line does not.
fn parse_token_lines(text: &str) -> (Vec<TokenEntry>, Vec<TokenLineError>) {
    let mut entries = Vec::new();
    let mut malformed = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        match parse_token_line(line) {
            Ok(entry) => entries.push(entry),
            Err(problem) => malformed.push(TokenLineError {
                line: i + 1,
                problem,
            }),
        }
    }
    (entries, malformed)
}

fn parse_token_line(line: &str) -> Result<TokenEntry, TokenLineProblem> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [name, hash, scopes] = fields[..] else {
        return Err(TokenLineProblem::Shape);
    };
    let hash = hash
        .strip_prefix("sha256:")
        .and_then(|h| hex::decode(h).ok())
        .and_then(|h| <[u8; 32]>::try_from(h).ok())
        .ok_or(TokenLineProblem::Hash)?;
    let scopes = scopes
        .split(',')
        .map(|s| Scope::parse(s).ok_or_else(|| TokenLineProblem::UnknownScope(s.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(TokenEntry {
        name: name.to_string(),
        hash,
        scopes,
    })
}

/// The tokens, re-read from their file when it changes.
pub struct TokenStore {
    path: PathBuf,
    /// The current tokens. Every call reads them and a reload swaps them whole; `ArcSwap` lets the
    /// worker threads read without writing to a shared cache line (a lock's or a reference count's),
    /// which they would otherwise bounce between cores on every call.
    entries: ArcSwap<Vec<TokenEntry>>,
    /// The file's stamp at the last load.
    modified: Mutex<Option<Stamp>>,
}

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
        })
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
                        Some(store) => store.reload_if_changed(),
                        None => return,
                    }
                }
            })
            .map_err(TokensFileError::Watch)?;
        Ok(store)
    }

    /// Calls `with` on the entry whose hash matches `token`, checking every entry in constant time;
    /// `None` when no entry matches.
    pub fn authenticate<R>(&self, token: &str, with: impl FnOnce(&TokenEntry) -> R) -> Option<R> {
        let entries = self.entries.load();
        find(&entries, token).map(|index| with(&entries[index]))
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
            return Some(with(&known.entries[known.index]));
        }
        let index = find(&entries, token)?;
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
        let (entries, malformed) = parse_token_lines(&text);
        for e in &malformed {
            tracing::error!(path = %self.path.display(), error = %e, "tokens file: this line grants nothing until it is fixed");
        }
        tracing::info!(
            count = entries.len(),
            malformed = malformed.len(),
            "tokens file reloaded"
        );
        self.entries.store(Arc::new(entries));
        *known = modified;
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
fn same_token(a: &[u8], b: &[u8]) -> bool {
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
            let entries = parse_tokens(&text).map_err(|source| TokensFileError::Malformed {
                path: path.to_path_buf(),
                source,
            })?;
            Ok((Arc::new(entries), stamp(path)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((Arc::default(), None)),
        Err(source) => Err(TokensFileError::Unreadable {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_scopes_apply() {
        let line = tokens_file_line("ci", "tok-1", &[Scope::VolumesRead, Scope::VolumesWrite]);
        assert!(!line.contains("tok-1"));
        let entries = parse_tokens(&format!(
            "# comment\n\n{line}\nroot sha256:{} admin\n",
            hex::encode(hash_token("root"))
        ))
        .unwrap();
        assert_eq!(entries.len(), 2);
        assert!(entries[0].allows(Scope::VolumesWrite));
        assert!(!entries[0].allows(Scope::MachinesRead));
        assert!(entries[1].allows(Scope::MachinesWrite));
    }

    #[test]
    fn tokens_are_compared_whole() {
        let token = b"berth_0123456789abcdef0123456789abcdef01234";
        assert!(same_token(token, token));
        for i in [0, 7, 8, token.len() - 1] {
            let mut other = *token;
            other[i] ^= 1;
            assert!(!same_token(token, &other), "byte {i}");
        }
        assert!(!same_token(token, &token[..token.len() - 1]));
        assert!(!same_token(b"ab\0", b"ab"));
    }

    #[test]
    fn malformed_lines_are_named() {
        let e = parse_tokens("a b").unwrap_err();
        assert_eq!((e.line, &e.problem), (1, &TokenLineProblem::Shape));
        assert!(e.to_string().starts_with("line 1: expected"), "{e}");
        let e = parse_tokens("# c\na md5:00 admin").unwrap_err();
        assert_eq!((e.line, &e.problem), (2, &TokenLineProblem::Hash));
        assert!(e.to_string().contains("sha256"), "{e}");
        let e = parse_tokens(&format!("a sha256:{} root", "0".repeat(64))).unwrap_err();
        assert!(e.to_string().contains("unknown scope \"root\""), "{e}");
    }

    #[test]
    fn store_authenticates_by_hash_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, tokens_file_line("a", "alpha", &[Scope::Admin])).unwrap();
        let store = TokenStore::load(&path).unwrap();
        assert_eq!(
            store.authenticate("alpha", |e| e.name.clone()).unwrap(),
            "a"
        );
        assert!(store.authenticate("beta", |_| ()).is_none());
        std::fs::write(
            &path,
            format!(
                "{}\n{}",
                tokens_file_line("a", "alpha", &[Scope::Admin]),
                tokens_file_line("b", "beta", &[Scope::VolumesRead])
            ),
        )
        .unwrap();
        let mut memory = None;
        assert_eq!(
            store
                .authenticate_remembering("alpha", &mut memory, |e| e.name.clone())
                .unwrap(),
            "a"
        );
        assert!(memory.is_some());
        // Remembered: the same token again, and a different one still goes the whole way.
        assert_eq!(
            store
                .authenticate_remembering("alpha", &mut memory, |e| e.name.clone())
                .unwrap(),
            "a"
        );
        assert!(
            store
                .authenticate_remembering("alphb", &mut memory, |_| ())
                .is_none()
        );
        store.reload_if_changed();
        assert_eq!(store.authenticate("beta", |e| e.name.clone()).unwrap(), "b");
        // After a reload the memory no longer applies: a token removed from the file is refused.
        std::fs::write(&path, tokens_file_line("b", "beta", &[Scope::VolumesRead])).unwrap();
        store.reload_if_changed();
        assert!(
            store
                .authenticate_remembering("alpha", &mut memory, |_| ())
                .is_none()
        );
        // A removed line revokes its token even when another line of the edit does not parse; the
        // line that does not parse grants nothing.
        std::fs::write(
            &path,
            format!(
                "{}\noops sha256:12 admin\n{}",
                tokens_file_line("c", "gamma", &[Scope::Admin]),
                tokens_file_line("d", "delta", &[Scope::Admin]).replace("admin", "root")
            ),
        )
        .unwrap();
        store.reload_if_changed();
        assert!(store.authenticate("beta", |_| ()).is_none());
        assert!(store.authenticate("delta", |_| ()).is_none());
        assert_eq!(
            store.authenticate("gamma", |e| e.name.clone()).unwrap(),
            "c"
        );
        assert!(
            TokenStore::load(&dir.path().join("missing"))
                .unwrap()
                .authenticate("alpha", |_| ())
                .is_none()
        );
    }
}
