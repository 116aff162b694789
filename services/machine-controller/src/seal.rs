//! Sealing secrets' values at rest: AES-256-GCM (aws-lc-rs) with keys from the operator's key file.
//!
//! The key file (`BERTH_CONTROLLER_KEY_FILE`, default `<data dir>/controller.key`, made on a first
//! start when absent) holds one key per line, `<id>:<base64 of 32 bytes>`; `#` lines are comments.
//! The first key seals; every key opens what it sealed. Rotating is: put a new key on the first
//! line and restart; the controller reseals every secret with it at start ([`reseal_all`]) and logs
//! how many; then the old line may go.
//!
//! Each sealing binds the values to the secret's namespace, name and uid as associated data, so a
//! row's sealed values copied onto another secret's row do not open there.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::Engine as _;
use domain::{Code, Status};

use crate::store::{Sealed, Store};

/// The longest key file read (keys are one short line each).
const MAX_KEY_FILE: u64 = 64 * 1024;
/// A key's length: AES-256.
const KEY_LEN: usize = 32;

/// Why the key file cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KeyFileError(String);

/// The keys: the first seals, all open.
pub struct Keyring {
    keys: Vec<(String, LessSafeKey)>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("Keyring").field("ids", &ids).finish()
    }
}

impl Keyring {
    /// Reads the key file at `path`; when it does not exist and `make_if_missing`, makes one with
    /// a fresh key (readable by its owner only).
    pub fn load(path: &Path, make_if_missing: bool) -> Result<Keyring, KeyFileError> {
        if make_if_missing && !path.exists() {
            make_key_file(path)?;
        }
        let file = std::fs::File::open(path).map_err(|e| {
            KeyFileError(format!("cannot open the key file {}: {e}", path.display()))
        })?;
        let mut text = String::new();
        file.take(MAX_KEY_FILE + 1)
            .read_to_string(&mut text)
            .map_err(|e| {
                KeyFileError(format!("cannot read the key file {}: {e}", path.display()))
            })?;
        if text.len() as u64 > MAX_KEY_FILE {
            return Err(KeyFileError(format!(
                "the key file {} is longer than {MAX_KEY_FILE} bytes",
                path.display()
            )));
        }
        Keyring::parse(&text)
            .map_err(|why| KeyFileError(format!("the key file {}: {why}", path.display())))
    }

    /// Reads a key file's text. A refusal names the line, never a key.
    pub fn parse(text: &str) -> Result<Keyring, String> {
        let mut keys: Vec<(String, LessSafeKey)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = n + 1;
            let (id, encoded) = line
                .split_once(':')
                .ok_or_else(|| format!("line {at}: expected <id>:<base64 of {KEY_LEN} bytes>"))?;
            let id_ok = !id.is_empty()
                && id.len() <= 32
                && id.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
            if !id_ok {
                return Err(format!(
                    "line {at}: a key id is 1 to 32 letters, digits and '-'"
                ));
            }
            if keys.iter().any(|(other, _)| other == id) {
                return Err(format!("line {at}: key id {id:?} is there twice"));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .ok()
                .filter(|b| b.len() == KEY_LEN)
                .ok_or_else(|| {
                    format!("line {at}: the key is not the base64 of {KEY_LEN} bytes")
                })?;
            let key = UnboundKey::new(&AES_256_GCM, &bytes)
                .map_err(|_| format!("line {at}: not a usable AES-256 key"))?;
            keys.push((id.to_string(), LessSafeKey::new(key)));
        }
        if keys.is_empty() {
            return Err("holds no key".into());
        }
        Ok(Keyring { keys })
    }

    /// The id of the key that seals.
    pub fn sealing_id(&self) -> &str {
        &self.keys[0].0
    }

    /// Seals a secret's values for the secret `namespace/name` with uid `uid`.
    pub fn seal(
        &self,
        values: &SecretValues,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Sealed, Status> {
        let (id, key) = &self.keys[0];
        let plain = serde_json::to_vec(values)
            .map_err(|_| Status::internal("the secret's values could not be encoded"))?;
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce)
            .map_err(|_| Status::internal("no randomness for a nonce"))?;
        let mut in_out = plain;
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(associated(namespace, name, uid).as_bytes()),
            &mut in_out,
        )
        .map_err(|_| Status::internal("the secret's values could not be sealed"))?;
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&in_out);
        Ok(Sealed {
            key_id: id.clone(),
            bytes,
        })
    }

    /// Opens sealed values of the secret `namespace/name` with uid `uid`. A key the ring lacks, or
    /// values that do not open (altered, or another secret's), is a FailedPrecondition saying so,
    /// never what the values are.
    pub fn open(
        &self,
        sealed: &Sealed,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<SecretValues, Status> {
        let Some((_, key)) = self.keys.iter().find(|(id, _)| *id == sealed.key_id) else {
            return Err(Status::new(
                Code::FailedPrecondition,
                format!(
                    "secret {namespace}/{name} was sealed with key {:?}, which the key file no longer holds: put it back (after the new first line) until the controller has resealed every secret",
                    sealed.key_id
                ),
            ));
        };
        if sealed.bytes.len() < NONCE_LEN {
            return Err(unopenable(namespace, name));
        }
        let (nonce, rest) = sealed.bytes.split_at(NONCE_LEN);
        let nonce =
            Nonce::try_assume_unique_for_key(nonce).map_err(|_| unopenable(namespace, name))?;
        let mut in_out = rest.to_vec();
        let plain = key
            .open_in_place(
                nonce,
                Aad::from(associated(namespace, name, uid).as_bytes()),
                &mut in_out,
            )
            .map_err(|_| unopenable(namespace, name))?;
        serde_json::from_slice(plain).map_err(|_| unopenable(namespace, name))
    }
}

fn unopenable(namespace: &str, name: &str) -> Status {
    Status::new(
        Code::FailedPrecondition,
        format!(
            "secret {namespace}/{name}'s sealed values do not open with its key: write the secret again"
        ),
    )
}

fn associated(namespace: &str, name: &str, uid: &str) -> String {
    format!("berth.io/v1 Secret {namespace}/{name} {uid}")
}

/// A secret's values, as sealed.
#[derive(Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretValues {
    /// Base64 values.
    #[serde(default)]
    pub data: BTreeMap<String, String>,
    /// Plain values.
    #[serde(default)]
    pub string_data: BTreeMap<String, String>,
}

impl std::fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValues([REDACTED])")
    }
}

impl SecretValues {
    /// The keys, sorted, without values.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .data
            .keys()
            .chain(self.string_data.keys())
            .cloned()
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// The values as the driver's secret carries them.
    pub fn as_secret(&self) -> domain::Secret {
        domain::Secret {
            metadata: None,
            data: self.data.clone(),
            string_data: self.string_data.clone(),
        }
    }
}

/// Makes a key file with one fresh key, readable and writable by its owner only.
fn make_key_file(path: &Path) -> Result<(), KeyFileError> {
    let mut key = [0u8; KEY_LEN];
    aws_lc_rs::rand::fill(&mut key).map_err(|_| KeyFileError("no randomness for a key".into()))?;
    let id = format!("k{}", chrono::Utc::now().format("%Y%m%d%H%M%S"));
    let text = format!(
        "# Berth machine-controller keys: the first line seals secrets, every line opens them.\n# Back this file up with the database: without it the stored secrets cannot be read.\n{id}:{}\n",
        base64::engine::general_purpose::STANDARD.encode(key)
    );
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            KeyFileError(format!(
                "cannot make the directory of {}: {e}",
                path.display()
            ))
        })?;
    }
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| KeyFileError(format!("cannot make the key file {}: {e}", path.display())))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| KeyFileError(format!("cannot write the key file {}: {e}", path.display())))?;
    tracing::warn!(
        path = %path.display(),
        "made a new key file for the machine controller's secrets; back it up with the database"
    );
    Ok(())
}

/// Reseals every secret sealed with another key than the sealing one; returns how many.
pub async fn reseal_all(
    store: &Store,
    keys: &Keyring,
) -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
    let mut resealed = 0;
    for (namespace, name, uid, sealed) in store.sealed_secrets().await? {
        if sealed.key_id == keys.sealing_id() {
            continue;
        }
        let values = keys.open(&sealed, &namespace, &name, &uid)?;
        let new = keys.seal(&values, &namespace, &name, &uid)?;
        if store.reseal(&uid, &sealed, &new).await? {
            resealed += 1;
        }
    }
    Ok(resealed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_line(id: &str, byte: u8) -> String {
        format!(
            "{id}:{}",
            base64::engine::general_purpose::STANDARD.encode([byte; KEY_LEN])
        )
    }

    fn values() -> SecretValues {
        let mut v = SecretValues::default();
        v.string_data
            .insert("accessKeySecret".into(), "s3cr3t-value".into());
        v
    }

    #[test]
    fn sealed_values_open_only_for_their_secret_and_never_show() {
        let ring = Keyring::parse(&key_line("a", 1)).unwrap();
        let sealed = ring.seal(&values(), "ns", "creds", "uid-1").unwrap();
        assert!(!String::from_utf8_lossy(&sealed.bytes).contains("s3cr3t"));
        assert_eq!(
            ring.open(&sealed, "ns", "creds", "uid-1").unwrap(),
            values()
        );
        // Copied onto another secret's row, or altered, they do not open.
        assert_eq!(
            ring.open(&sealed, "ns", "other", "uid-1").unwrap_err().code,
            Code::FailedPrecondition
        );
        assert!(ring.open(&sealed, "ns", "creds", "uid-2").is_err());
        let mut altered = sealed.clone();
        let last = altered.bytes.len() - 1;
        altered.bytes[last] ^= 1;
        assert!(ring.open(&altered, "ns", "creds", "uid-1").is_err());
        assert!(!format!("{:?} {:?} {ring:?}", values(), sealed).contains("s3cr3t"));
        // Two sealings of the same values differ (a fresh nonce each).
        assert_ne!(
            ring.seal(&values(), "ns", "creds", "uid-1").unwrap().bytes,
            sealed.bytes
        );
    }

    #[test]
    fn a_rotated_ring_opens_old_values_and_seals_with_the_new_key() {
        let old = Keyring::parse(&key_line("old", 1)).unwrap();
        let sealed = old.seal(&values(), "ns", "creds", "u").unwrap();
        let rotated = Keyring::parse(&format!(
            "# new first\n{}\n{}\n",
            key_line("new", 2),
            key_line("old", 1)
        ))
        .unwrap();
        assert_eq!(rotated.sealing_id(), "new");
        assert_eq!(rotated.open(&sealed, "ns", "creds", "u").unwrap(), values());
        assert_eq!(
            rotated.seal(&values(), "ns", "creds", "u").unwrap().key_id,
            "new"
        );
        let without_old = Keyring::parse(&key_line("new", 2)).unwrap();
        let e = without_old.open(&sealed, "ns", "creds", "u").unwrap_err();
        assert!(e.message.contains("\"old\""), "{e}");
    }

    #[test]
    fn a_bad_key_file_names_the_line_and_never_a_key() {
        for (text, said) in [
            ("", "no key"),
            ("justakey", "line 1"),
            ("a:c2hvcnQ=", "line 1: the key"),
            (
                &format!("{}\n{}", key_line("a", 1), key_line("a", 2)),
                "line 2",
            ),
            (&format!("bad id:{}", &key_line("a", 1)[2..]), "key id"),
        ] {
            let e = Keyring::parse(text).err().unwrap();
            assert!(e.contains(said), "{text:?}: {e}");
            assert!(!e.contains("AQEB"), "{e}");
        }
    }

    #[test]
    fn a_first_start_makes_a_private_key_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/controller.key");
        let ring = Keyring::load(&path, true).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = Keyring::load(&path, true).unwrap();
        assert_eq!(ring.sealing_id(), again.sealing_id());
        assert!(Keyring::load(&dir.path().join("absent"), false).is_err());
    }
}
