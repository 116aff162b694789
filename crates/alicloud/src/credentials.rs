//! Access keys, wrapped so that the secret and the STS token can never be printed.

use std::fmt;

/// The secret and the token are Berth's one secret type: `Debug` and `Display` say `[REDACTED]`,
/// and [`SecretString::expose`] is the only way to read one, which makes every use greppable.
pub use domain::SecretString;

/// An Alibaba Cloud access key pair, optionally with an STS security token.
///
/// The access key id is not secret (it appears in every request and in ECS error messages), so it
/// is printed; the secret and the token are not.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    access_key_id: String,
    access_key_secret: SecretString,
    security_token: Option<SecretString>,
}

impl Credentials {
    /// A long-lived access key pair. Surrounding whitespace is trimmed, as MCM's secret reader does.
    pub fn new(access_key_id: impl Into<String>, access_key_secret: impl Into<String>) -> Self {
        Credentials {
            access_key_id: access_key_id.into().trim().to_owned(),
            access_key_secret: SecretString::new(access_key_secret.into().trim()),
            security_token: None,
        }
    }

    /// Adds an STS security token (sent as `SecurityToken` / `x-acs-security-token`).
    pub fn with_security_token(mut self, token: impl Into<String>) -> Self {
        let token = token.into().trim().to_owned();
        self.security_token = (!token.is_empty()).then(|| SecretString::new(token));
        self
    }

    /// The access key id.
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// The access key secret.
    pub fn access_key_secret(&self) -> &SecretString {
        &self.access_key_secret
    }

    /// The STS token, if any.
    pub fn security_token(&self) -> Option<&SecretString> {
        self.security_token.as_ref()
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("access_key_secret", &self.access_key_secret)
            .field("security_token", &self.security_token)
            .finish()
    }
}

impl fmt::Display for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "access key {} (secret redacted)", self.access_key_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_secret_or_token() {
        let c = Credentials::new(" AKID ", " s3cr3t-value\n").with_security_token("t0ken-value");
        assert_eq!(c.access_key_id(), "AKID");
        assert_eq!(c.access_key_secret().expose(), "s3cr3t-value");
        for text in [format!("{c:?}"), format!("{c:#?}"), c.to_string()] {
            assert!(!text.contains("s3cr3t"), "{text}");
            assert!(!text.contains("t0ken"), "{text}");
            assert!(text.contains("AKID"), "{text}");
        }
        assert_eq!(format!("{}", c.access_key_secret()), "[REDACTED]");
    }

    #[test]
    fn empty_token_means_none() {
        assert!(
            Credentials::new("a", "b")
                .with_security_token("  ")
                .security_token()
                .is_none()
        );
    }
}
