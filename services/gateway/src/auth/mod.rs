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
//!
//! # Layout
//! - this file: a [`TokenEntry`], what the file and the check share.
//! - `tokens_file`: the file's lines: writing, parsing, revoking.
//! - `last_used`: the last-used file beside it.
//! - `store`: the [`TokenStore`], which checks a request's token.

mod last_used;
mod store;
mod tokens_file;

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use axum::http::HeaderValue;
use chrono::{DateTime, Utc};
use service_kit::tenancy::Namespaces;
use sha2::{Digest, Sha256};

use crate::routes::Scope;

pub use self::last_used::{last_used_file, read_last_used};
pub(crate) use self::store::GrantEnds;
pub use self::store::{Remembered, TokenStore};
pub use self::tokens_file::{
    LineFields, ParsedTokens, TOKENS_FILE_HEADER, TokenLineError, TokenLineProblem,
    TokensFileError, append_token_line, create_tokens_file, ensure_admin_token, grant_rule,
    new_token, parse_token_lines, parse_tokens, revoke_token, tokens_file_line,
    tokens_file_line_with, valid_token_name,
};

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

    /// Whether `other` grants the same: its scopes, namespaces and expiry.
    pub fn same_grant(&self, other: &TokenEntry) -> bool {
        self.scopes == other.scopes
            && self.namespaces == other.namespaces
            && self.expires == other.expires
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

#[cfg(test)]
mod tests {
    use super::store::same_token;
    use super::*;
    use std::sync::atomic::Ordering;

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
        // Each line a token of its own: a hash given twice grants once.
        let [h1, h2, h3] = ["1", "2", "3"].map(|d| format!("sha256:{}", d.repeat(64)));
        let entries = parse_tokens(&format!(
            "old {hash} volumes:read\n\
             team {h1} volumes:read namespaces=b,a created=2026-01-02T03:04:05Z expires=2026-02-01T00:00:00+01:00\n\
             wide {h2} volumes:read namespaces=*\n\
             root {h3} admin namespaces=*\n"
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
        // One token on two lines under two names: the first line's grant, never the later one's.
        std::fs::write(
            &path,
            format!(
                "{}\n{}\n",
                tokens_file_line("reader", "same", &[Scope::VolumesRead]),
                tokens_file_line("admin", "same", &[Scope::Admin]),
            ),
        )
        .unwrap();
        let parsed = parse_token_lines(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(parsed.entries.len(), 1);
        assert_eq!(
            parsed.duplicates[0].to_string(),
            "line 2: the hash is line 1's: one token, two grants; this line grants nothing"
        );
        let store = TokenStore::load(&path).unwrap();
        let name = store.authenticate("same", |entry| entry.name.clone());
        assert_eq!(name.as_deref(), Some("reader"));
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
