//! `berth token create`, `list` and `revoke`: the tokens file of a data directory (`berth_stack::tokens`).
//!
//! The file holds only hashes (`<name> sha256:<hex> <scopes> [namespaces=…] [created=…]
//! [expires=…]`), so a token is shown once, when it is made. Whoever can write the data directory
//! can add a line, which is the way back in when the admin token is lost: `berth token create
//! --admin --data-dir <dir>`; a running gateway re-reads the file within a second. `list` reads the
//! same file and the gateway's last-used file beside it; `revoke` rewrites the file without the
//! token's line.

use std::path::{Path, PathBuf};

use berth_commands::CliError;
use berth_commands::args::{Output, TokenCommand};
use berth_commands::output::{Printable, print};
#[cfg(test)]
use berth_stack::tokens::{HEADER, create_file};
use berth_stack::tokens::{
    LineFields, Namespaces, Scope, append_line, new_token, parse_token_lines, read_last_used,
    tokens_file_in, valid_token_name,
};
use chrono::{DateTime, Utc};

/// `berth token …`.
pub fn run(command: &TokenCommand) -> Result<(), CliError> {
    match command {
        TokenCommand::Create { .. } => create(command),
        TokenCommand::List {
            data_dir,
            tokens_file,
            format,
        } => {
            let file = file_of(data_dir, tokens_file)?
                .ok_or_else(|| CliError::Usage("give --data-dir or --tokens-file".into()))?;
            list(&file, format.output())
        }
        TokenCommand::Revoke {
            name,
            data_dir,
            tokens_file,
        } => {
            let file = file_of(data_dir, tokens_file)?
                .ok_or_else(|| CliError::Usage("give --data-dir or --tokens-file".into()))?;
            let found = berth_stack::tokens::revoke_token(&file, name)
                .map_err(|e| CliError::Usage(format!("{}: {e}", file.display())))?;
            if !found {
                return Err(CliError::Local(domain::Status::new(
                    domain::Code::NotFound,
                    format!("no token is named {name:?} in {}", file.display()),
                )));
            }
            eprintln!(
                "Revoked {name:?}: removed from {}; a running gateway refuses it within a second.",
                file.display()
            );
            Ok(())
        }
    }
}

/// The tokens file `--data-dir` or `--tokens-file` names, if either.
fn file_of(
    data_dir: &Option<PathBuf>,
    tokens_file: &Option<PathBuf>,
) -> Result<Option<PathBuf>, CliError> {
    Ok(match (data_dir, tokens_file) {
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
    })
}

/// When `--expires` says, from `now`: `<n>m`, `<n>h`, `<n>d`, `<n>w`, or an RFC 3339 time; it must
/// be in the future.
pub fn parse_expires(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let form = "expected a time from now such as 90m, 12h, 30d or 8w, or an RFC 3339 time such as \
                2026-12-31T00:00:00Z";
    let at = if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        at.with_timezone(&Utc)
    } else {
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(|| form.to_string())?;
        let (number, unit) = text.split_at(split);
        let number: i64 = number.parse().map_err(|_| form.to_string())?;
        let minutes = match unit {
            "m" => 1,
            "h" => 60,
            "d" => 24 * 60,
            "w" => 7 * 24 * 60,
            _ => return Err(form.to_string()),
        };
        number
            .checked_mul(minutes)
            .and_then(chrono::TimeDelta::try_minutes)
            .and_then(|d| now.checked_add_signed(d))
            .ok_or_else(|| "is too far away".to_string())?
    };
    if at <= now {
        return Err(format!("{at} is not in the future"));
    }
    Ok(at)
}

/// The namespaces a new token gets: `--namespaces` or `--cluster-wide`, one of them required unless
/// it is an admin token (which is cluster-wide and may say nothing else).
fn namespaces_of(
    namespaces: &Option<String>,
    cluster_wide: bool,
    scopes: &[Scope],
) -> Result<Option<Namespaces>, CliError> {
    let asked = match (namespaces.as_deref(), cluster_wide) {
        (_, true) => Some(Namespaces::All),
        (Some(text), false) => {
            // The gateway's reading of the list skips empty entries; a person typing `a,,b` most
            // likely left one out, so it is said rather than passed over (a break-it finding).
            if text.trim() != "*" && text.split(',').any(|part| part.trim().is_empty()) {
                return Err(CliError::Usage(
                    "--namespaces: an empty entry (two commas, or one at an end); list each namespace once, `team-a,team-b`".into(),
                ));
            }
            let parsed = Namespaces::parse(text)
                .map_err(|rule| CliError::Usage(format!("--namespaces: {rule}")))?;
            if parsed == Namespaces::Only(Default::default()) {
                return Err(CliError::Usage(
                    "--namespaces: give at least one namespace".into(),
                ));
            }
            Some(parsed)
        }
        (None, false) => None,
    };
    berth_stack::tokens::grant_rule(scopes, asked.as_ref()).map_err(CliError::Usage)?;
    // Written out when given, so the file says what the token is.
    Ok(asked)
}

/// `berth token create`.
fn create(command: &TokenCommand) -> Result<(), CliError> {
    let TokenCommand::Create {
        token_name,
        scopes,
        admin,
        namespaces,
        cluster_wide,
        expires,
        name,
        data_dir,
        tokens_file,
        format,
    } = command
    else {
        unreachable!("create is called for `token create`")
    };
    let mut parsed = scopes
        .iter()
        .map(|s| {
            Scope::parse(s.trim()).ok_or_else(|| {
                CliError::Usage(format!(
                    "--scopes: unknown scope {s:?}; the scopes are {}",
                    Scope::names()
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if *admin && !parsed.contains(&Scope::Admin) {
        parsed.push(Scope::Admin);
    }
    let namespaces = namespaces_of(namespaces, *cluster_wide, &parsed)?;
    let now = Utc::now();
    let expires = expires
        .as_deref()
        .map(|text| {
            parse_expires(text, now).map_err(|e| CliError::Usage(format!("--expires: {e}")))
        })
        .transpose()?;
    let file = file_of(data_dir, tokens_file)?;
    let taken: Vec<String> = match &file {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => {
                let lines = parse_token_lines(&text);
                lines.entries.into_iter().map(|e| e.name).collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(CliError::Usage(format!("{}: {e}", path.display()))),
        },
        None => Vec::new(),
    };
    let name = match token_name.clone().or_else(|| name.clone()) {
        Some(name) => {
            if !valid_token_name(&name) {
                return Err(CliError::Usage(
                    "name: must be one word of visible ASCII, without `#` or `=`, at most 256 \
                     characters"
                        .into(),
                ));
            }
            if taken.contains(&name) {
                return Err(CliError::Usage(format!(
                    "name: a token named {name:?} is in the tokens file already; choose another \
                     name, or `berth token revoke {name}` first"
                )));
            }
            name
        }
        // The default name is the first one free, so the way back in never collides with the
        // admin token it replaces.
        None => {
            let base = if parsed.contains(&Scope::Admin) {
                "admin"
            } else {
                "token"
            };
            std::iter::once(base.to_string())
                .chain((2..).map(|n| format!("{base}-{n}")))
                .find(|candidate| !taken.contains(candidate))
                .expect("a free name")
        }
    };
    let token = new_token();
    let fields = LineFields {
        namespaces: namespaces.clone(),
        created: Some(now),
        expires,
    };
    let line = berth_stack::tokens::tokens_file_line_with(&name, &token, &parsed, &fields);
    if let Some(path) = &file {
        append_line(path, &line)
            .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    }
    let namespaces_text = namespaces.unwrap_or(Namespaces::All).to_string();
    let mut value = serde_json::json!({
        "name": name,
        "token": token,
        "namespaces": namespaces_text,
        "tokensFileLine": line,
    });
    if let Some(at) = expires {
        value["expires"] = serde_json::Value::String(stamp(&at));
    }
    if let Some(path) = &file {
        value["tokensFile"] = serde_json::Value::String(path.display().to_string());
    }
    print(
        &Printable::new(
            &value,
            vec!["NAME", "TOKEN", "TOKENS-FILE LINE"],
            vec![vec![name.clone(), token.clone(), line.clone()]],
        ),
        format.output(),
    );
    if format.output().is_table() {
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

fn stamp(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `berth token list`: what each line of the file grants, never its hash.
fn list(file: &Path, output: Output) -> Result<(), CliError> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(CliError::Usage(format!("{}: {e}", file.display()))),
    };
    let parsed = parse_token_lines(&text);
    for e in parsed.malformed.iter().chain(&parsed.duplicates) {
        eprintln!("{}: {e}", file.display());
    }
    let used = read_last_used(file);
    let now = Utc::now();
    let mut items = Vec::new();
    let mut rows = Vec::new();
    for entry in &parsed.entries {
        let scopes: Vec<&str> = entry.scopes.iter().map(|s| s.as_str()).collect();
        let scopes = scopes.join(",");
        let namespaces = entry.namespaces.to_string();
        let created = entry.created.as_ref().map(stamp);
        let last_used = used.get(&entry.name).map(stamp);
        let expires = entry.expires.as_ref().map(stamp);
        let expired = entry.expired_at(now);
        items.push(serde_json::json!({
            "name": entry.name,
            "scopes": entry.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            "namespaces": namespaces,
            "created": created,
            "lastUsed": last_used,
            "expires": expires,
            "expired": expired,
        }));
        let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        rows.push(vec![
            entry.name.clone(),
            scopes,
            namespaces,
            or_dash(&created),
            or_dash(&last_used),
            match &expires {
                Some(at) if expired => format!("{at} (expired)"),
                Some(at) => at.clone(),
                None => "never".into(),
            },
        ]);
    }
    print(
        &Printable::new(
            &serde_json::json!({ "items": items }),
            vec![
                "NAME",
                "SCOPES",
                "NAMESPACES",
                "CREATED",
                "LAST-USED",
                "EXPIRES",
            ],
            rows,
        ),
        output,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn expiry_is_a_time_from_now_or_an_rfc_3339_time_in_the_future() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        for (text, at) in [
            ("90m", "2026-01-01T01:30:00Z"),
            ("12h", "2026-01-01T12:00:00Z"),
            ("30d", "2026-01-31T00:00:00Z"),
            ("2w", "2026-01-15T00:00:00Z"),
            ("2026-06-01T00:00:00+02:00", "2026-05-31T22:00:00Z"),
        ] {
            assert_eq!(stamp(&parse_expires(text, now).unwrap()), at, "{text}");
        }
        for text in [
            "30",
            "30s",
            "d",
            "-1d",
            "0d",
            "2025-01-01T00:00:00Z",
            "soon",
        ] {
            assert!(parse_expires(text, now).is_err(), "{text}");
        }
        assert!(parse_expires("99999999999999w", now).is_err());
    }

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
