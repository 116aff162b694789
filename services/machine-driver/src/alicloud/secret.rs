//! The request's secret as the Alicloud provider reads it: the access key (with its fallback key
//! names and an optional STS token) and the user data.
//!
//! Apart from the provider spec because the secret is another part of the request, with its own
//! promise: no message ever carries a value the caller chose, and the examples' placeholder key is
//! refused before any ECS call.

use alicloud::Credentials;
use domain::machine::Secret;
use domain::{Code, Status};

/// ECS's largest `UserData`, base64-encoded.
pub(super) const MAX_USER_DATA_BASE64: usize = 32 * 1024;

/// The first non-empty value of `keys` in the secret, trimmed.
fn first_key(secret: &Secret, keys: &[&str]) -> Result<Option<String>, Status> {
    Ok(first_key_named(secret, keys)?.map(|(_, v)| v))
}

/// The first of `keys` the secret has a non-empty value for, with that key.
fn first_key_named<'k>(
    secret: &Secret,
    keys: &[&'k str],
) -> Result<Option<(&'k str, String)>, Status> {
    for key in keys {
        if let Some(v) = secret.get_str(key)?
            && !v.is_empty()
        {
            return Ok(Some((key, v)));
        }
    }
    Ok(None)
}

/// The access key id Berth's examples (`examples/machine.yaml`, `examples/machine-request.json`)
/// ship in place of a real one.
pub const EXAMPLE_KEY_ID_PLACEHOLDER: &str = "EMULATOR_ACCESS_KEY_ID";
/// The access key secret Berth's examples ship in place of a real one (public text, not a secret).
pub const EXAMPLE_KEY_SECRET_PLACEHOLDER: &str = "EMULATOR_ACCESS_KEY_SECRET";

/// An InvalidArgument when the secret still holds the examples' placeholders: signing with them
/// can only earn ECS's `InvalidAccessKeyId.NotFound`, which reads like a Berth login problem, so the
/// driver says what is wrong and how to fix it without calling ECS. Only the placeholder itself is
/// ever named, never a value the caller chose.
fn refuse_placeholders(id: (&str, &str), key_secret: (&str, &str)) -> Result<(), Status> {
    let stale: Vec<String> = [
        (id, EXAMPLE_KEY_ID_PLACEHOLDER),
        (key_secret, EXAMPLE_KEY_SECRET_PLACEHOLDER),
    ]
    .into_iter()
    .filter(|((_, value), placeholder)| value == placeholder)
    .map(|((key, _), placeholder)| {
        format!("secret.data[{key}] still holds the example's placeholder {placeholder}")
    })
    .collect();
    if stale.is_empty() {
        return Ok(());
    }
    Err(Status::new(
        Code::InvalidArgument,
        format!(
            "{}: replace {} with the access key of the ECS endpoint the driver calls: under `berth up`, the emulator's key id and secret that `berth up` prints when it starts; on Alibaba Cloud, an AccessKey of your account",
            stale.join(", and "),
            if stale.len() > 1 { "them" } else { "it" }
        ),
    ))
}

/// The access key from the secret: `alicloudAccessKeyID` (else `accessKeyID`) and
/// `alicloudAccessKeySecret` (else `accessKeySecret`), plus an optional STS token
/// (`alicloudSecurityToken`, else `securityToken`). A missing key, or one still holding the
/// examples' placeholder, is an InvalidArgument naming the key; no message ever carries a value
/// the caller chose.
pub fn credentials(secret: &Secret) -> Result<Credentials, Status> {
    let missing = |key: &str, fallback: &str| {
        Status::invalid(
            &format!("secret.data[{key}]"),
            format!("is required (or its fallback {fallback})"),
        )
    };
    let (id_key, id) = first_key_named(secret, &["alicloudAccessKeyID", "accessKeyID"])?
        .ok_or_else(|| missing("alicloudAccessKeyID", "accessKeyID"))?;
    let (secret_key, key_secret) =
        first_key_named(secret, &["alicloudAccessKeySecret", "accessKeySecret"])?
            .ok_or_else(|| missing("alicloudAccessKeySecret", "accessKeySecret"))?;
    refuse_placeholders((id_key, &id), (secret_key, &key_secret))?;
    // Both token keys of `data` hold base64 of ASCII text, whichever of them (or of stringData's)
    // is used: the document says so of each, and a request is refused for what it sends, not only
    // for what this call happens to read.
    for key in ["alicloudSecurityToken", "securityToken"] {
        if secret.get_data(key)?.is_some_and(|token| !token.is_ascii()) {
            return Err(Status::invalid(
                &format!("secret.data[{key}]"),
                "must be base64 of ASCII text (an STS token)",
            ));
        }
    }
    let credentials = Credentials::new(id, key_secret);
    Ok(
        match first_key(secret, &["alicloudSecurityToken", "securityToken"])? {
            Some(token) => credentials.with_security_token(token),
            None => credentials,
        },
    )
}

/// `userData`, raw (the ECS client base64-encodes it), if the secret has it. Too large for ECS is an
/// InvalidArgument that gives sizes only.
pub fn user_data(secret: &Secret) -> Result<Option<Vec<u8>>, Status> {
    let Some(data) = secret.get("userData")? else {
        return Ok(None);
    };
    let encoded = data.len().div_ceil(3) * 4;
    if encoded > MAX_USER_DATA_BASE64 {
        return Err(Status::invalid(
            "secret.data[userData]",
            format!(
                "is {} bytes, {encoded} base64-encoded; ECS accepts at most {MAX_USER_DATA_BASE64} encoded bytes",
                data.len()
            ),
        ));
    }
    Ok((!data.is_empty()).then_some(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_examples_placeholders_are_refused_under_the_key_that_holds_them() {
        let s = Secret::from_string_data([
            ("accessKeyID", EXAMPLE_KEY_ID_PLACEHOLDER),
            ("accessKeySecret", EXAMPLE_KEY_SECRET_PLACEHOLDER),
        ]);
        let e = credentials(&s).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        assert!(
            e.message.starts_with(
                "secret.data[accessKeyID] still holds the example's placeholder EMULATOR_ACCESS_KEY_ID, and secret.data[accessKeySecret] still holds the example's placeholder EMULATOR_ACCESS_KEY_SECRET: replace them"
            ),
            "{}",
            e.message
        );
        // A real key merely containing the text is a real key.
        let s = Secret::from_string_data([
            ("alicloudAccessKeyID", "EMULATOR_ACCESS_KEY_ID_2"),
            ("alicloudAccessKeySecret", "x"),
        ]);
        assert!(credentials(&s).is_ok());
    }

    #[test]
    fn secret_keys_with_fallbacks_never_echo_values() {
        let s = Secret::from_string_data([("accessKeyID", "AKID"), ("accessKeySecret", "s3cr3t")]);
        let c = credentials(&s).unwrap();
        assert_eq!(c.access_key_id(), "AKID");
        let s = Secret::from_string_data([("alicloudAccessKeyID", "AKID")]);
        let e = credentials(&s).unwrap_err();
        assert_eq!(
            e.message,
            "secret.data[alicloudAccessKeySecret]: is required (or its fallback accessKeySecret)"
        );
        let s = Secret::from_string_data([("alicloudAccessKeySecret", "s3cr3t")]);
        let e = credentials(&s).unwrap_err();
        assert!(e.message.contains("alicloudAccessKeyID"));
        assert!(!e.message.contains("s3cr3t"));
        let big = "x".repeat(30_000);
        let s = Secret::from_string_data([("userData", big.as_str())]);
        let e = user_data(&s).unwrap_err();
        assert!(
            e.message
                .starts_with("secret.data[userData]: is 30000 bytes")
        );
        assert!(!e.message.contains("xxx"));
    }
}
