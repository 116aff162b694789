//! Keeping the emulated account, and a generated access key, in a directory across restarts.
//!
//! A state directory holds two files:
//! - `state.json`: `{"version": 1, "account": {...}}`, every instance (id, status, tags, ...),
//!   disk, network interface and ClientToken, plus the address counter and its key, so addresses
//!   never repeat;
//! - `access-key.json`: `{"id": "...", "secret": "..."}`, written by [`stored_access_key`] the first
//!   time and read back every time after, so clients configured with it keep working.
//!
//! Every write goes to a temporary file in the same directory, is flushed to disk (`fsync`), then
//! renamed over the old file, and the directory is flushed too: a crash or power cut at any moment
//! leaves the old file or the new one, never a torn one. On Unix the directory is `0700` and the
//! files `0600` (the key is a secret).
//!
//! Not kept: signature nonces (a restart forgets them, as it forgets nothing else an ECS client
//! relies on), faults, lifecycle delays and call counts (they come from the configuration).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rand::Rng as _;
use serde::{Deserialize, Serialize};

use crate::config::AccessKey;
use crate::state::State;

/// The account's file in a state directory.
pub const STATE_FILE: &str = "state.json";
/// The generated access key's file in a state directory.
pub const KEY_FILE: &str = "access-key.json";
/// The format of [`STATE_FILE`] this emulator writes and reads.
const FORMAT_VERSION: u32 = 1;

/// Why a state directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading, writing or creating something in the directory failed.
    #[error("emulator state {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// A file is there but is not what the emulator writes. It is left as it is: moving it away
    /// starts an empty account (or a new key), deleting nothing by accident.
    #[error("emulator state {} is not readable: {reason}; it was left untouched (move it away to start afresh)", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it (never a value from the key file).
        reason: String,
    },
}

impl StateError {
    fn io(path: &Path, source: io::Error) -> Self {
        StateError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// A persistent emulator's link to its directory: writes [`STATE_FILE`] in revision order.
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
    /// The newest revision on disk; an older snapshot arriving late is not written over it.
    written: Mutex<u64>,
}

#[derive(Serialize)]
struct StateFileOut<'a> {
    version: u32,
    account: &'a State,
}

#[derive(Deserialize)]
struct StateFileIn {
    version: u32,
    account: serde_json::Value,
}

#[derive(Serialize, Deserialize)]
struct KeyFile {
    id: String,
    secret: String,
}

impl Store {
    /// Opens `dir` (created if missing) and reads the account kept there, or an empty one.
    pub(crate) fn open(dir: &Path) -> Result<(Store, State), StateError> {
        ensure_dir(dir)?;
        let path = dir.join(STATE_FILE);
        let state = match fs::read(&path) {
            Ok(bytes) => decode(&path, &bytes)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => State::default(),
            Err(e) => return Err(StateError::io(&path, e)),
        };
        let store = Store {
            dir: dir.to_owned(),
            written: Mutex::new(0),
        };
        Ok((store, state))
    }

    /// Writes a snapshot taken at `revision` (see [`encode`]), unless a newer one is already on
    /// disk. Returns once the bytes are durable.
    pub(crate) fn save(&self, revision: u64, bytes: &[u8]) -> Result<(), StateError> {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if *written >= revision {
            return Ok(());
        }
        write_atomically(&self.dir, STATE_FILE, bytes)
            .map_err(|e| StateError::io(&self.dir.join(STATE_FILE), e))?;
        *written = revision;
        Ok(())
    }
}

/// The account as [`STATE_FILE`] holds it.
pub(crate) fn encode(state: &State) -> Vec<u8> {
    serde_json::to_vec(&StateFileOut {
        version: FORMAT_VERSION,
        account: state,
    })
    .expect("the account serialises")
}

fn decode(path: &Path, bytes: &[u8]) -> Result<State, StateError> {
    let corrupt = |reason: String| StateError::Corrupt {
        path: path.to_owned(),
        reason,
    };
    let file: StateFileIn = serde_json::from_slice(bytes)
        .map_err(|e| corrupt(format!("not an emulator state file ({e})")))?;
    if file.version != FORMAT_VERSION {
        return Err(corrupt(format!(
            "format version {}, this emulator reads version {FORMAT_VERSION}",
            file.version
        )));
    }
    serde_json::from_value(file.account).map_err(|e| corrupt(e.to_string()))
}

/// The access key kept in `dir` ([`KEY_FILE`]): read back if it is there, else generated (an id
/// like `LTAI` and 16 characters, a 30-character secret, as Alibaba Cloud's look), written
/// crash-safely and returned. Give it to [`crate::Config::access_keys`] of an emulator whose
/// `state_dir` is `dir`, so clients keep the key across restarts along with their instances.
pub fn stored_access_key(dir: &Path) -> Result<AccessKey, StateError> {
    ensure_dir(dir)?;
    let path = dir.join(KEY_FILE);
    match fs::read(&path) {
        Ok(bytes) => {
            // serde's message could quote part of the secret: say only what is expected.
            let key: KeyFile = serde_json::from_slice(&bytes).map_err(|_| StateError::Corrupt {
                path: path.clone(),
                reason: "expected {\"id\": \"...\", \"secret\": \"...\"}".into(),
            })?;
            if key.id.is_empty() || key.secret.is_empty() {
                return Err(StateError::Corrupt {
                    path,
                    reason: "the id or the secret is empty".into(),
                });
            }
            Ok(AccessKey::new(key.id, key.secret))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let key = KeyFile {
                id: format!("LTAI{}", random_alphanumeric(16)),
                secret: random_alphanumeric(30),
            };
            let bytes = serde_json::to_vec_pretty(&key).expect("two strings serialise");
            write_atomically(dir, KEY_FILE, &bytes).map_err(|e| StateError::io(&path, e))?;
            Ok(AccessKey::new(key.id, key.secret))
        }
        Err(e) => Err(StateError::io(&path, e)),
    }
}

fn random_alphanumeric(len: usize) -> String {
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect()
}

/// Creates `dir` if needed (`0700` on Unix: it holds a secret).
fn ensure_dir(dir: &Path) -> Result<(), StateError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(|e| StateError::io(dir, e))
}

/// Replaces `dir/name` with `bytes` so that a crash leaves the old content or the new, whole:
/// write a temporary file beside it, fsync it, rename it over the target, fsync the directory.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, dir.join(name))?;
    // The rename itself is durable only once the directory entry is. (Windows cannot open a
    // directory as a file; NTFS journals the rename.)
    #[cfg(unix)]
    File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_generated_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let first = stored_access_key(dir.path()).unwrap();
        assert!(
            first.id.starts_with("LTAI") && first.id.len() == 20,
            "{first:?}"
        );
        assert_eq!(first.secret.len(), 30);
        let again = stored_access_key(dir.path()).unwrap();
        assert_eq!(again, first);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&dir.path().join(KEY_FILE)), 0o600);
        }
    }

    #[test]
    fn a_broken_key_file_is_refused_without_quoting_it() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(KEY_FILE),
            "{\"id\": \"x\", \"secret\": 7-secret-ish",
        )
        .unwrap();
        let e = stored_access_key(dir.path()).unwrap_err().to_string();
        assert!(e.contains("left untouched"), "{e}");
        assert!(!e.contains("secret-ish"), "{e}");
        // Nothing was overwritten.
        assert!(
            fs::read_to_string(dir.path().join(KEY_FILE))
                .unwrap()
                .contains("secret-ish")
        );
    }

    #[test]
    fn a_stale_temporary_file_is_ignored_and_an_older_revision_never_overwrites_a_newer() {
        let dir = tempfile::tempdir().unwrap();
        // A crash between writing the temporary file and renaming it leaves it behind.
        fs::write(dir.path().join(format!(".{STATE_FILE}.tmp")), "{torn").unwrap();
        let (store, state) = Store::open(dir.path()).unwrap();
        assert!(state.instances.is_empty());
        store.save(2, b"{\"version\":1,\"account\":{}}").unwrap();
        store.save(1, b"older").unwrap();
        let on_disk = fs::read(dir.path().join(STATE_FILE)).unwrap();
        assert_eq!(on_disk, b"{\"version\":1,\"account\":{}}");
    }

    #[test]
    fn an_unreadable_or_newer_state_file_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STATE_FILE);
        fs::write(&path, "not json").unwrap();
        let e = Store::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not an emulator state file"), "{e}");
        fs::write(&path, "{\"version\": 9, \"account\": {}}").unwrap();
        let e = Store::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("format version 9"), "{e}");
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "{\"version\": 9, \"account\": {}}"
        );
    }
}
