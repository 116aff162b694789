//! The tokens file's lines: writing them (a new token's line, creating the file, appending to it,
//! revoking a token), parsing them into [`TokenEntry`]s, and what is wrong with a line that does not
//! parse.
//!
//! Apart from the store because the format is shared with other processes: `berth up`, `berth token`
//! and `gateway token create` write and read the file through these functions, and none of them
//! touches a running gateway's tokens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::HeaderValue;
use chrono::{DateTime, SecondsFormat, Utc};
use service_kit::tenancy::Namespaces;

use crate::routes::Scope;

use super::{Forwarded, TokenEntry, hash_token};

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
    /// The hash is an earlier line's: one token would hold two grants, and which one a call got
    /// would depend on the order of lines. The earlier line stands, as for a name.
    #[error("the hash is line {first}'s: one token, two grants; this line grants nothing")]
    SameToken {
        /// The earlier line with the same hash.
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
/// A line whose name or hash an earlier line holds is left out (see [`ParsedTokens::duplicates`]).
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
    /// The lines that parse but whose name or hash an earlier line holds: they grant nothing.
    pub duplicates: Vec<TokenLineError>,
}

/// Parses every line of a tokens file: the entries of the lines that parse and hold a name of their
/// own, and why each other line grants nothing.
pub fn parse_token_lines(text: &str) -> ParsedTokens {
    let mut parsed = ParsedTokens::default();
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut hashes: BTreeMap<[u8; 32], usize> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        match parse_token_line(line, i + 1) {
            Ok(entry) => {
                let problem = match (names.get(&entry.name), hashes.get(&entry.hash)) {
                    (Some(&first), _) => Some(TokenLineProblem::Duplicate {
                        name: entry.name.clone(),
                        first,
                    }),
                    (None, Some(&first)) => Some(TokenLineProblem::SameToken { first }),
                    (None, None) => None,
                };
                match problem {
                    Some(problem) => parsed.duplicates.push(TokenLineError {
                        line: i + 1,
                        problem,
                    }),
                    None => {
                        names.insert(entry.name.clone(), i + 1);
                        hashes.insert(entry.hash, i + 1);
                        parsed.entries.push(entry);
                    }
                }
            }
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

/// Writes `text` to `path` whole: a temporary file beside it, synced, renamed over it (mode 0600).
pub(super) fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
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
