//! `berth token create`, and the tokens file both it and `berth up` write.
//!
//! The file holds only hashes (`<name> sha256:<hex> <scopes>`), so a token is shown once, when it is
//! made. Whoever can write the data directory can add a line, which is the way back in when the admin
//! token is lost: `berth token create --admin --data-dir <dir>`; a running gateway re-reads the file
//! within a second.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use gateway::routes::Scope;

use super::CliError;
use crate::args::{Output, TokenCommand};
use crate::output::{Printable, print};

/// The first line of a tokens file Berth creates.
pub const HEADER: &str =
    "# Berth gateway tokens: <name> sha256:<hash> <scopes>. Add lines with `berth token create`.";

/// The tokens file inside a data directory, as `berth up` serves it.
pub fn tokens_file_in(data_dir: &Path) -> PathBuf {
    data_dir.join("tokens")
}

/// A fresh random token: 32 bytes from the OS generator, hex-encoded, with a recognisable prefix.
pub fn new_token() -> String {
    use rand::Rng;
    let bytes: [u8; 32] = rand::rng().random();
    format!("berth_{}", hex::encode(bytes))
}

/// Creates the tokens file at `path` holding `line` (mode 0600, synced); fails if it exists.
pub fn create_file(path: &Path, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    // One write, so the gateway's reload never sees the header without the line.
    file.write_all(format!("{HEADER}\n{line}\n").as_bytes())?;
    file.sync_all()
}

/// Adds `line` to the tokens file at `path`, creating it (mode 0600, with the header) when missing.
pub fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    let existing = match std::fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut text = String::new();
    match &existing {
        None => {
            text.push_str(HEADER);
            text.push('\n');
        }
        Some(bytes) if !bytes.is_empty() && !bytes.ends_with(b"\n") => text.push('\n'),
        Some(_) => {}
    }
    text.push_str(line);
    text.push('\n');
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    // One write of the whole line: a reload in between sees the old file or the new, never half.
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

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
