//! `berth token create`, and the tokens file both it and `berth up` write.
//!
//! The file holds only hashes (`<name> sha256:<hex> <scopes>`), so a token is shown once, when it is
//! made. Whoever can write the data directory can add a line, which is the way back in when the admin
//! token is lost: `berth token create --admin --data-dir <dir>`; a running gateway re-reads the file
//! within a second.

use std::path::{Path, PathBuf};

use gateway::routes::Scope;

use super::CliError;
use crate::args::{Output, TokenCommand};
use crate::output::{Printable, print};

/// The tokens file inside a data directory, as `berth up` serves it.
pub fn tokens_file_in(data_dir: &Path) -> PathBuf {
    data_dir.join("tokens")
}

// The tokens file's format belongs to the gateway, which also writes it (its first start in a
// container, `gateway token create`); the CLI uses the same writers.
pub use gateway::auth::{
    TOKENS_FILE_HEADER as HEADER, append_token_line as append_line,
    create_tokens_file as create_file, new_token,
};

/// `berth token create`.
pub fn run(command: &TokenCommand) -> Result<(), CliError> {
    let TokenCommand::Create {
        scopes,
        admin,
        name,
        data_dir,
        tokens_file,
        format,
    } = command;
    let mut parsed = scopes
        .iter()
        .map(|s| {
            Scope::parse(s.trim()).ok_or_else(|| {
                CliError::Usage(format!(
                    "--scopes: unknown scope {s:?}; the scopes are machines:read, \
                     machines:write, volumes:read, volumes:write, orchestrators:read, \
                     orchestrators:write, admin"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if *admin && !parsed.contains(&Scope::Admin) {
        parsed.push(Scope::Admin);
    }
    let name = name
        .clone()
        .unwrap_or_else(|| if *admin { "admin" } else { "token" }.to_string());
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == '#') {
        return Err(CliError::Usage(
            "--name: must be one word, without `#`".into(),
        ));
    }
    let file = match (data_dir, tokens_file) {
        (Some(dir), _) => {
            if !dir.is_dir() {
                return Err(CliError::Usage(format!(
                    "--data-dir: {} is not a directory (give the one `berth up --data-dir` uses)",
                    dir.display()
                )));
            }
            Some(tokens_file_in(dir))
        }
        (None, Some(path)) => Some(path.clone()),
        (None, None) => None,
    };
    let token = new_token();
    let line = gateway::auth::tokens_file_line(&name, &token, &parsed);
    if let Some(path) = &file {
        append_line(path, &line)
            .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    }
    let mut value = serde_json::json!({"token": token, "tokensFileLine": line});
    if let Some(path) = &file {
        value["tokensFile"] = serde_json::Value::String(path.display().to_string());
    }
    print(
        &Printable::new(
            &value,
            vec!["TOKEN", "TOKENS-FILE LINE"],
            vec![vec![token.clone(), line.clone()]],
        ),
        format.output,
    );
    if format.output == Output::Table || format.output == Output::Wide {
        match &file {
            Some(path) => eprintln!(
                "The token is shown once. Added to {}; a running gateway picks it up within a second.",
                path.display()
            ),
            None => eprintln!(
                "The token is shown once. Add the line to the gateway's tokens file \
                 (BERTH_TOKENS_FILE, or use --data-dir to have it added); it is picked up within a second."
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn appending_creates_the_file_private_and_keeps_lines_whole() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        append_line(&path, "a sha256:00 admin").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"b sha256:11 admin")
            .unwrap();
        append_line(&path, "c sha256:22 admin").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            format!("{HEADER}\na sha256:00 admin\nb sha256:11 admin\nc sha256:22 admin\n")
        );
        assert!(create_file(&path, "d").is_err(), "create never overwrites");
    }
}
