//! The credentials of a run: the internal one its services share, and the first admin token of
//! its tokens file. Apart because they are secrets: what makes them, and when, is kept where it
//! can be read at once.

use service_kit::Env;
use service_kit::config::vars;

use super::BoxError;

fn random_token() -> String {
    crate::tokens::new_token()
}

/// The internal credential of this run: the one `BERTH_INTERNAL_TOKEN` or `BERTH_INTERNAL_TOKEN_FILE`
/// gives (the file made with a random one when missing), else a fresh random one. Whoever must call
/// the services directly, past the gateway (the Python harness fuzzing each service's own API), sets
/// the file and reads it; nobody else ever needs to know it.
pub(super) fn internal_token_of(env: &Env) -> Result<String, BoxError> {
    let env = service_kit::config::resolve_internal_token_file(env.clone())?;
    Ok(env
        .get(vars::INTERNAL_TOKEN)
        .map(str::to_string)
        .unwrap_or_else(random_token))
}

/// Creates the tokens file with one admin token when there is none yet (mode 0600, only the hash
/// stored), and returns the token to show once; `None` when the file already exists.
pub fn ensure_admin_token(path: &std::path::Path) -> Result<Option<String>, BoxError> {
    gateway::auth::ensure_admin_token(path)
        .map_err(|e| format!("cannot create the tokens file {}: {e}", path.display()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_internal_credential_is_the_one_given_or_a_fresh_one() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = internal_token_of(&Env::default()).unwrap();
        assert!(fresh.len() >= 32, "a random credential");
        assert_ne!(fresh, internal_token_of(&Env::default()).unwrap());
        let given = Env::default().with(vars::INTERNAL_TOKEN, "given-credential");
        assert_eq!(internal_token_of(&given).unwrap(), "given-credential");
        // A file that does not exist yet is made, and the next run reads the same credential back.
        let file = dir.path().join("internal-token");
        let with_file = Env::default().with(vars::INTERNAL_TOKEN_FILE, file.display().to_string());
        let made = internal_token_of(&with_file).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), made);
        assert_eq!(internal_token_of(&with_file).unwrap(), made);
        // Both at once is refused, as every service refuses it.
        let both = with_file.with(vars::INTERNAL_TOKEN, "given-credential");
        let e = internal_token_of(&both).expect_err("refused").to_string();
        assert!(e.contains("BERTH_INTERNAL_TOKEN"), "{e}");
        assert!(!e.contains("given-credential"), "never the secret: {e}");
    }
}
