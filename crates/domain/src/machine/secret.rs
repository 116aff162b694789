//! A Kubernetes Secret and the decoding of its base64 values: apart because it holds credentials,
//! and the rules that keep them out of logs and refuse a bad value are all here.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::ObjectMeta;
use crate::code::Status;

/// A Kubernetes `Secret`: `data` values are base64, `stringData` values plain (and win over `data`, as
/// in Kubernetes).
///
/// Its `Debug` and `Display` print the keys only, never a value, so a secret that reaches a log by
/// accident leaks nothing. It does serialise its values, because a client must send them to the driver.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Secret {
    /// Name and namespace, if the caller sent them (MCM does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// Base64-encoded values (the standard alphabet, padded, no white space). Every one is checked
    /// when a secret is read, as Kubernetes checks a Secret's: a value that is not base64 is refused
    /// naming its key, even where `stringData` holds the same key and wins.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "base64_values::deserialize"
    )]
    pub data: BTreeMap<String, String>,
    /// Plain values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub string_data: BTreeMap<String, String>,
}

impl Secret {
    /// The value of `key`: `stringData` first, then `data` decoded from base64. A `data` value that is
    /// not base64 (one set in code; a decoded secret has none) is an InvalidArgument naming the key
    /// (never the value).
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Status> {
        if let Some(v) = self.string_data.get(key) {
            return Ok(Some(v.clone().into_bytes()));
        }
        self.get_data(key)
    }

    /// The value of `key` in `data`, decoded from base64, whatever `stringData` holds (a request is
    /// checked for all it sends, not only for what wins).
    pub fn get_data(&self, key: &str) -> Result<Option<Vec<u8>>, Status> {
        match self.data.get(key) {
            None => Ok(None),
            Some(v) => base64::engine::general_purpose::STANDARD
                .decode(v)
                .map(Some)
                .map_err(|_| {
                    Status::invalid(&format!("secret.data[{key}]"), "is not valid base64")
                }),
        }
    }

    /// The value of `key` as UTF-8 text, trimmed of surrounding white space (a trailing newline from
    /// `echo | base64` is a classic).
    pub fn get_str(&self, key: &str) -> Result<Option<String>, Status> {
        match self.get(key)? {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes)
                .map(|s| Some(s.trim().to_string()))
                .map_err(|_| Status::invalid(&format!("secret.data[{key}]"), "is not UTF-8 text")),
        }
    }

    /// The keys present, from both maps, without values.
    pub fn keys(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self
            .data
            .keys()
            .chain(self.string_data.keys())
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// A secret with these plain values (for tests and tools).
    pub fn from_string_data<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Secret {
            metadata: None,
            data: BTreeMap::new(),
            string_data: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret")
            .field("keys", &self.keys())
            .field("values", &"[REDACTED]")
            .finish()
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Secret(keys: {}; values redacted)",
            self.keys().join(", ")
        )
    }
}

/// `Secret.data` as read from JSON: every value base64, refused where it is not with the value's own
/// path (`secret.data.<key>`) and a rule that never repeats it.
pub(crate) mod base64_values {
    use std::collections::BTreeMap;

    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, de::Error as _};

    /// A `data` value that decodes as base64.
    struct Encoded(String);

    impl<'de> Deserialize<'de> for Encoded {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let text = String::deserialize(d)?;
            match base64::engine::general_purpose::STANDARD.decode(&text) {
                Ok(_) => Ok(Encoded(text)),
                Err(_) => Err(D::Error::custom(
                    "is not valid base64 (standard alphabet, padded, no white space)",
                )),
            }
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, String>, D::Error> {
        let map = BTreeMap::<String, Encoded>::deserialize(d)?;
        Ok(map.into_iter().map(|(k, v)| (k, v.0)).collect())
    }
}
