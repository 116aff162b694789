//! [`SecretString`]: a string that must never be printed (tokens, access keys).
//!
//! In the domain because services (their configuration), the typed client (its bearer credential)
//! and the cloud client (its access key) all hold secrets, and none of them should need another's
//! dependencies to do so.

use std::fmt;

/// A string that must never be printed: tokens, access keys. `Debug` and `Display` show `[REDACTED]`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        SecretString(value.into())
    }

    /// The secret itself, for the one place that must send or compare it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Compares with `other` in time independent of where they differ.
    pub fn ct_eq(&self, other: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        self.0.len() == other.len() && bool::from(self.0.as_bytes().ct_eq(other))
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed_and_compared_in_constant_time() {
        let s = SecretString::new("tok-123");
        assert_eq!(format!("{s:?} {s}"), "[REDACTED] [REDACTED]");
        assert!(s.ct_eq(b"tok-123"));
        assert!(!s.ct_eq(b"tok-124"));
        assert!(!s.ct_eq(b"tok-12"));
        assert_eq!(s.expose(), "tok-123");
    }
}
