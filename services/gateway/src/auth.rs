//! Bearer tokens: their scopes, their namespaces and their lifetimes.
//!
//! The tokens file (`BERTH_TOKENS_FILE`) holds only SHA-256 hashes, one token a line:
//!
//! ```text
//! # name   hash                                                                     scopes                     [fields]
//! admin    sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 admin                      created=2026-01-02T03:04:05Z
//! ci       sha256:…                                                                 volumes:read,volumes:write namespaces=team-a,team-b expires=2026-06-01T00:00:00Z
//! ```
//!
//! After the three fields a line may carry `namespaces=` (`a,b`, or `*` for cluster-wide), `created=`
//! and `expires=` (RFC 3339). A line without `namespaces=` (every line written before namespaces
//! existed) is cluster-wide, as is one with the `admin` scope; an `admin` line that names namespaces
//! does not parse, since admin is everything. An expired token is refused as an unknown one is. Names
//! are unique: a later line with a name an earlier line holds grants nothing, and the log says so.
//!
//! A presented token is hashed and compared with every entry in constant time, so neither the file nor
//! the timing of a refusal gives a token away. The file is re-read when it changes (a thread checks it
//! once a second), so adding a token needs no restart.
//!
//! When each token was last used goes to a file beside it (`<tokens file>.last-used`, `<name>
//! <RFC 3339>` a line), written by the same thread, at most once a minute per token: it holds no
//! secret, and `berth token list` (another process) reads it.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use axum::http::HeaderValue;
use chrono::{DateTime, SecondsFormat, Utc};
use service_kit::tenancy::Namespaces;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::routes::Scope;

/// One token's entry.
#[derive(Debug, Clone)]
pub struct TokenEntry {
    /// A name for people and logs (never the token); unique in a file.
    pub name: String,
    hash: [u8; 32],
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// Where it may act: every namespace for a line without `namespaces=` and for admin tokens.
    pub namespaces: Namespaces,
    /// When it was made, when the line says.
    pub created: Option<DateTime<Utc>>,
    /// When it stops being accepted, when the line says.
    pub expires: Option<DateTime<Utc>>,
    /// The line it came from, counted from 1.
    pub line: usize,
    /// The two headers the gateway sets from it on every forwarded call, made once.
    forwarded: Forwarded,
    /// The Unix second its use was last recorded (0: not since the file was read).
    last_used: Arc<AtomicI64>,
    /// Its calls in flight ([`crate::limits::InFlight`]); a reload of the file starts it again.
    pub(crate) in_flight: Arc<std::sync::atomic::AtomicU32>,
}

/// The caller's identity as the services read it ([`service_kit::tenancy`]): the token's name and its
/// namespaces, as header values made when the tokens file is read.
#[derive(Debug, Clone)]
pub struct Forwarded {
    /// The value of `x-berth-token-name`.
    pub name: HeaderValue,
    /// The value of `x-berth-namespaces`.
    pub namespaces: HeaderValue,
}

impl TokenEntry {
    /// What tells this token from every other: its hash.
    pub fn identity(&self) -> &[u8; 32] {
        &self.hash
    }

    /// The headers the services get for this token's calls.
    pub fn forwarded(&self) -> &Forwarded {
        &self.forwarded
    }

    /// Whether the token has expired at `now`.
    pub fn expired_at(&self, now: DateTime<Utc>) -> bool {
        self.expires.is_some_and(|at| now >= at)
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

/// What a tokens-file line says besides the name, the hash and the scopes.
#[derive(Debug, Clone, Default)]
pub struct LineFields {
    /// `namespaces=`; `None` writes none (cluster-wide, as admin tokens are).
    pub namespaces: Option<Namespaces>,
    /// `created=`.
    pub created: Option<DateTime<Utc>>,
    /// `expires=`.
    pub expires: Option<DateTime<Utc>>,
}

/// The tokens-file line for a new token, with its namespaces and lifetime.
pub fn tokens_file_line_with(
    name: &str,
    token: &str,
    scopes: &[Scope],
    fields: &LineFields,
) -> String {
    let mut line = tokens_file_line(name, token, scopes);
    if let Some(namespaces) = &fields.namespaces {
        line.push_str(&format!(" namespaces={namespaces}"));
    }
    let stamp = |t: &DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
    if let Some(created) = &fields.created {
        line.push_str(&format!(" created={}", stamp(created)));
    }
    if let Some(expires) = &fields.expires {
        line.push_str(&format!(" expires={}", stamp(expires)));
    }
    line
}

/// The first line of a tokens file Berth creates.
pub const TOKENS_FILE_HEADER: &str = "# Berth gateway tokens: <name> sha256:<hash> <scopes> [namespaces=a,b|*] [created=RFC3339] [expires=RFC3339]. Add lines with `berth token create`.";

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
    let line = tokens_file_line_with(
        "admin",
        &token,
        &[Scope::Admin],
        &LineFields {
            created: Some(Utc::now()),
            ..LineFields::default()
        },
    );
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
    /// The name could not be a header value, so it could not be passed on.
    #[error("the name must be at most 256 visible ASCII characters")]
    Name,
    /// A field after the scopes that is not `namespaces=`, `created=` or `expires=`, or one given twice.
    #[error("unknown or repeated field {0:?}: expected namespaces=, created=, expires=")]
    Field(String),
    /// `namespaces=` that is not `*` nor a list of namespaces.
    #[error("namespaces: {0}")]
    Namespaces(String),
    /// An admin token is cluster-wide.
    #[error("an admin token is cluster-wide: give namespaces=* or none")]
    AdminNamespaced,
    /// A time that is not RFC 3339.
    #[error("{0}: expected an RFC 3339 time such as 2026-01-02T03:04:05Z")]
    Time(&'static str),
    /// The name is taken by an earlier line; this one grants nothing.
    #[error("the name {name:?} is taken by line {first}; this line grants nothing")]
    Duplicate {
        /// The name.
        name: String,
        /// The earlier line that holds it.
        first: usize,
    },
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
/// A line whose name an earlier line holds is left out (see [`ParsedTokens::duplicates`]).
pub fn parse_tokens(text: &str) -> Result<Vec<TokenEntry>, TokenLineError> {
    let mut parsed = parse_token_lines(text);
    if parsed.malformed.is_empty() {
        Ok(parsed.entries)
    } else {
        Err(parsed.malformed.swap_remove(0))
    }
}

/// Every line of a tokens file, parsed.
#[derive(Debug, Default)]
pub struct ParsedTokens {
    /// The lines that grant something, in file order.
    pub entries: Vec<TokenEntry>,
    /// The lines that do not parse, and why.
    pub malformed: Vec<TokenLineError>,
    /// The lines that parse but whose name an earlier line holds: they grant nothing.
    pub duplicates: Vec<TokenLineError>,
}

/// Parses every line of a tokens file: the entries of the lines that parse and hold a name of their
/// own, and why each other line grants nothing.
pub fn parse_token_lines(text: &str) -> ParsedTokens {
    let mut parsed = ParsedTokens::default();
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        match parse_token_line(line, i + 1) {
            Ok(entry) => match names.get(&entry.name) {
                Some(&first) => parsed.duplicates.push(TokenLineError {
                    line: i + 1,
                    problem: TokenLineProblem::Duplicate {
                        name: entry.name,
                        first,
                    },
                }),
                None => {
                    names.insert(entry.name.clone(), i + 1);
                    parsed.entries.push(entry);
                }
            },
            Err(problem) => parsed.malformed.push(TokenLineError {
                line: i + 1,
                problem,
            }),
        }
    }
    parsed
}

/// Whether a token with `scopes` may be made acting in `namespaces` (`None`: nothing said), as
/// both ways of making one (`berth token create`, `gateway token create`) check it; the refusal is
/// worded for their flags.
pub fn grant_rule(scopes: &[Scope], namespaces: Option<&Namespaces>) -> Result<(), String> {
    let wide = scopes.iter().find(|s| s.needs_cluster_wide());
    match (namespaces, wide) {
        (Some(Namespaces::Only(_)), Some(Scope::Admin)) => Err(
            "--namespaces: an admin token acts in every namespace; drop --namespaces, or give \
             --scopes without admin"
                .into(),
        ),
        (Some(Namespaces::Only(_)), Some(scope)) => Err(format!(
            "--namespaces: {scope} reads what every namespace does together, so its token must be \
             --cluster-wide"
        )),
        (None, None) => Err(
            "--namespaces: say which namespaces the token may act in (--namespaces team-a,team-b), \
             or give --cluster-wide for every namespace"
                .into(),
        ),
        // An admin token that says nothing is cluster-wide; so is metrics:read's (`None` is
        // written as no `namespaces=` field, which reads as every namespace).
        _ => Ok(()),
    }
}

/// Whether `name` may name a token: what a header value carries (it is passed on to the services),
/// without `#` (a comment in the file) or `=`.
pub fn valid_token_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'#' && b != b'=')
}

fn parse_token_line(line: &str, number: usize) -> Result<TokenEntry, TokenLineProblem> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [name, hash, scopes, rest @ ..] = &fields[..] else {
        return Err(TokenLineProblem::Shape);
    };
    if !(name.len() <= 256 && name.bytes().all(|b| b.is_ascii_graphic())) {
        return Err(TokenLineProblem::Name);
    }
    let hash = hash
        .strip_prefix("sha256:")
        .and_then(|h| hex::decode(h).ok())
        .and_then(|h| <[u8; 32]>::try_from(h).ok())
        .ok_or(TokenLineProblem::Hash)?;
    let scopes = scopes
        .split(',')
        .map(|s| Scope::parse(s).ok_or_else(|| TokenLineProblem::UnknownScope(s.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    let mut namespaces = None;
    let mut created = None;
    let mut expires = None;
    for field in rest {
        let (key, value) = field
            .split_once('=')
            .ok_or_else(|| TokenLineProblem::Field(field.to_string()))?;
        let time = |what: &'static str| {
            DateTime::parse_from_rfc3339(value)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| TokenLineProblem::Time(what))
        };
        match key {
            "namespaces" if namespaces.is_none() => {
                let parsed = Namespaces::parse(value).map_err(TokenLineProblem::Namespaces)?;
                if parsed == Namespaces::Only(Default::default()) {
                    return Err(TokenLineProblem::Namespaces(
                        "give at least one namespace, or *".into(),
                    ));
                }
                namespaces = Some(parsed);
            }
            "created" if created.is_none() => created = Some(time("created")?),
            "expires" if expires.is_none() => expires = Some(time("expires")?),
            _ => return Err(TokenLineProblem::Field(key.to_string())),
        }
    }
    let admin = scopes.contains(&Scope::Admin);
    let namespaces = match namespaces {
        Some(Namespaces::Only(_)) if admin => return Err(TokenLineProblem::AdminNamespaced),
        Some(ns) => ns,
        None => Namespaces::All,
    };
    let forwarded = Forwarded {
        name: HeaderValue::from_str(name).map_err(|_| TokenLineProblem::Name)?,
        namespaces: HeaderValue::from_str(&namespaces.header_value())
            .map_err(|_| TokenLineProblem::Namespaces("not a header value".into()))?,
    };
    Ok(TokenEntry {
        name: name.to_string(),
        hash,
        scopes,
        namespaces,
        created,
        expires,
        line: number,
        forwarded,
        last_used: Arc::default(),
        in_flight: Arc::default(),
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
    /// Whether a token's use was recorded since the last-used file was last written.
    used: AtomicBool,
    /// Whether writing the last-used file has failed and been logged: a tokens file mounted read-only
    /// (a Kubernetes Secret) is a set-up, not an incident, and is said once.
    last_used_failed: AtomicBool,
}

/// How often at most a token's last use is recorded: `berth token list` says when a token was last
/// used to the minute, and no call pays for more.
const LAST_USED_EVERY: i64 = 60;

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

/// Writes `text` to `path` whole: a temporary file beside it, synced, renamed over it (mode 0600).
fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut temp = path.as_os_str().to_owned();
    temp.push(format!(".tmp-{}", std::process::id()));
    let temp = PathBuf::from(temp);
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename is durable once the directory is synced; a failure here loses nothing now.
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// Removes the lines of the token named `name` from the tokens file at `path` (rewritten whole, so a
/// reload sees the old file or the new); whether there was one. A running gateway refuses the token
/// within a second.
pub fn revoke_token(path: &Path, name: &str) -> std::io::Result<bool> {
    let text = std::fs::read_to_string(path)?;
    let mut kept = String::with_capacity(text.len());
    let mut found = false;
    for line in text.lines() {
        let content = line.split('#').next().unwrap_or_default();
        if content.split_whitespace().next() == Some(name) {
            found = true;
            continue;
        }
        kept.push_str(line);
        kept.push('\n');
    }
    if found {
        replace_file(path, &kept)?;
    }
    Ok(found)
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
            used: AtomicBool::new(false),
            last_used_failed: AtomicBool::new(false),
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

    #[test]
    fn fields_after_the_scopes_give_namespaces_and_a_lifetime() {
        let hash = format!("sha256:{}", "0".repeat(64));
        let entries = parse_tokens(&format!(
            "old {hash} volumes:read\n\
             team {hash} volumes:read namespaces=b,a created=2026-01-02T03:04:05Z expires=2026-02-01T00:00:00+01:00\n\
             wide {hash} volumes:read namespaces=*\n\
             root {hash} admin namespaces=*\n"
        ))
        .unwrap();
        assert_eq!(
            entries[0].namespaces,
            Namespaces::All,
            "an old line is cluster-wide"
        );
        assert_eq!(entries[1].namespaces.to_string(), "a,b");
        assert_eq!(entries[1].forwarded().namespaces, "a,b");
        assert_eq!(entries[1].forwarded().name, "team");
        let expires = entries[1].expires.unwrap();
        assert_eq!(expires.to_rfc3339(), "2026-01-31T23:00:00+00:00");
        assert!(entries[1].expired_at(expires));
        assert!(!entries[1].expired_at(expires - chrono::Duration::seconds(1)));
        assert!(entries[1].created.is_some());
        assert_eq!(entries[2].namespaces, Namespaces::All);
        assert_eq!(entries[3].forwarded().namespaces, "*");

        for (fields, says) in [
            ("namespaces=", "at least one"),
            ("namespaces=Team", "namespaces:"),
            ("namespaces=a namespaces=b", "repeated field"),
            ("owner=me", "unknown or repeated field"),
            ("expires=tomorrow", "expires: expected an RFC 3339"),
            ("stray", "unknown or repeated field"),
        ] {
            let e = parse_tokens(&format!("t {hash} volumes:read {fields}")).unwrap_err();
            assert!(e.to_string().contains(says), "{fields}: {e}");
        }
        let e = parse_tokens(&format!("t {hash} admin namespaces=a")).unwrap_err();
        assert_eq!(e.problem, TokenLineProblem::AdminNamespaced);

        let line = tokens_file_line_with(
            "ci",
            "tok",
            &[Scope::VolumesWrite],
            &LineFields {
                namespaces: Some(Namespaces::parse("y,x").unwrap()),
                created: Some(expires),
                expires: Some(expires),
            },
        );
        assert!(line.ends_with(
            " volumes:write namespaces=x,y created=2026-01-31T23:00:00Z expires=2026-01-31T23:00:00Z"
        ));
        assert_eq!(parse_tokens(&line).unwrap()[0].expires, Some(expires));
    }

    #[test]
    fn a_name_given_twice_grants_nothing_to_the_later_line_and_the_first_stands() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(
            &path,
            format!(
                "{}\n{}\n{}\n",
                tokens_file_line("a", "first", &[Scope::VolumesRead]),
                tokens_file_line("a", "second", &[Scope::Admin]),
                tokens_file_line("b", "third", &[Scope::Admin]),
            ),
        )
        .unwrap();
        let parsed = parse_token_lines(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(parsed.entries.len(), 2);
        assert_eq!(
            parsed.duplicates[0].to_string(),
            "line 2: the name \"a\" is taken by line 1; this line grants nothing"
        );
        // Not a reason to refuse to start: the first line stands, the later one is refused.
        let store = TokenStore::load(&path).unwrap();
        assert!(store.authenticate("first", |_| ()).is_some());
        assert!(store.authenticate("second", |_| ()).is_none());
        assert!(store.authenticate("third", |_| ()).is_some());
    }

    #[test]
    fn uses_are_recorded_beside_the_file_and_revoking_removes_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(
            &path,
            format!(
                "# header\n{}\n{}\n",
                tokens_file_line("a", "alpha", &[Scope::VolumesRead]),
                tokens_file_line("b", "beta", &[Scope::VolumesRead]),
            ),
        )
        .unwrap();
        let store = TokenStore::load(&path).unwrap();
        store.flush_last_used();
        assert!(
            !last_used_file(&path).exists(),
            "nothing used, nothing written"
        );
        let before = Utc::now().timestamp();
        let mut memory = None;
        for _ in 0..3 {
            store
                .authenticate_remembering("alpha", &mut memory, |_| ())
                .unwrap();
        }
        store.flush_last_used();
        let used = read_last_used(&path);
        assert_eq!(used.keys().collect::<Vec<_>>(), ["a"]);
        assert!(used["a"].timestamp() >= before);
        let text = std::fs::read_to_string(last_used_file(&path)).unwrap();
        assert!(
            !text.contains("alpha") && !text.contains("sha256"),
            "{text}"
        );

        assert!(revoke_token(&path, "a").unwrap());
        assert!(!revoke_token(&path, "a").unwrap(), "already gone");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# header\nb sha256:"), "{text}");
        store.reload_if_changed();
        assert!(store.authenticate("alpha", |_| ()).is_none());
        assert!(store.authenticate("beta", |_| ()).is_some());
        store.flush_last_used();
        assert_eq!(
            read_last_used(&path).keys().collect::<Vec<_>>(),
            ["b"],
            "a revoked token's last use goes with it"
        );

        // A last-used file that cannot be written (as under a read-only mount; a directory in its
        // place, since tests may run as root): said once, and calls are served all the same.
        let path = dir.path().join("other-tokens");
        std::fs::write(&path, tokens_file_line("c", "gamma", &[Scope::Admin])).unwrap();
        std::fs::create_dir(last_used_file(&path)).unwrap();
        let store = TokenStore::load(&path).unwrap();
        assert!(store.authenticate("gamma", |_| ()).is_some());
        store.flush_last_used();
        assert!(store.last_used_failed.load(Ordering::Relaxed));
        assert!(store.authenticate("gamma", |_| ()).is_some());
        assert!(read_last_used(&path).is_empty());
    }
}
