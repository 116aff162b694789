//! A stored secret: cloud credentials a machine class refers to. Apart because its values are
//! write-only (a read answers keys, `Debug` prints none), a rule no other kind has.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::MAX_SECRET_BYTES;
use crate::code::Status;
use crate::machine::ObjectMeta;

/// A stored secret: cloud credentials (and user data) a machine class refers to.
///
/// Its values are write-only: a write sends `data` (base64) and/or `stringData`; a read answers
/// `keys` and never a value. Its `Debug` prints keys only.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct SecretResource {
    /// `berth.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `Secret`.
    #[serde(default)]
    pub kind: String,
    /// Name, namespace, labels; uid and resourceVersion are the controller's.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// A free-form type, as Kubernetes' (`Opaque` when absent).
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub secret_type: String,
    /// Base64 values (write only).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "crate::machine::base64_values::deserialize"
    )]
    pub data: BTreeMap<String, String>,
    /// Plain values (write only; win over `data` for the same key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub string_data: BTreeMap<String, String>,
    /// The keys the secret holds (read only: what a read answers in place of values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
}

impl fmt::Debug for SecretResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretResource")
            .field("metadata", &self.metadata)
            .field("keys", &self.as_secret().keys())
            .field("values", &"[REDACTED]")
            .finish()
    }
}

impl SecretResource {
    /// The values as the driver's [`crate::Secret`] carries them.
    pub fn as_secret(&self) -> crate::Secret {
        crate::Secret {
            metadata: None,
            data: self.data.clone(),
            string_data: self.string_data.clone(),
        }
    }

    /// A write's own rules: at least one value (values are write-only, so a body printed by a
    /// read, which has none, cannot silently empty a secret), keys as Kubernetes allows them, and
    /// at most [`MAX_SECRET_BYTES`] of values.
    pub fn check(&self) -> Result<(), Status> {
        if self.data.is_empty() && self.string_data.is_empty() {
            return Err(Status::invalid(
                "data",
                "a secret's values are write-only and a read never returns them: send them in data (base64) or stringData",
            ));
        }
        let mut total = 0usize;
        for (field, map) in [("data", &self.data), ("stringData", &self.string_data)] {
            for (key, value) in map {
                let ok = !key.is_empty()
                    && key.len() <= 253
                    && key
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
                if !ok {
                    return Err(Status::invalid(
                        &format!("{field} key"),
                        "a key is 1 to 253 characters of letters, digits, '-', '_' and '.'",
                    ));
                }
                total = total.saturating_add(value.len());
            }
        }
        if total > MAX_SECRET_BYTES {
            return Err(Status::invalid(
                "data",
                format!("values together are at most {MAX_SECRET_BYTES} bytes"),
            ));
        }
        if self.secret_type.len() > 253 {
            return Err(Status::invalid("type", "is at most 253 characters"));
        }
        Ok(())
    }
}
