//! `gateway token create`: a new token added to the gateway's own tokens file, printed once.
//!
//! In a container there is no `berth` CLI and no shell, and the tokens file lives on the gateway's
//! volume, so the way back in when the admin token is lost is the gateway binary itself:
//! `docker compose exec gateway gateway token create --admin`. It writes the file the serving
//! gateway reads (`BERTH_TOKENS_FILE`, default `<BERTH_DATA_DIR>/tokens`), which picks the line up
//! within a second.

use std::io::Write;
use std::path::PathBuf;

use service_kit::Env;

use service_kit::tenancy::Namespaces;

use crate::auth::{
    LineFields, append_token_line, grant_rule, new_token, parse_token_lines, tokens_file_line_with,
    valid_token_name,
};
use crate::routes::Scope;

/// The subcommand's usage, printed by `--help` and after a usage error.
pub const USAGE: &str = "\
Usage: gateway token create [--admin] [--scopes SCOPE,...] [--namespaces NS,... | --cluster-wide]
                            [--name NAME]

Adds a new token to the tokens file this gateway serves (BERTH_TOKENS_FILE, default
<BERTH_DATA_DIR>/tokens) and prints it once on stdout; a running gateway accepts it within a second.
Scopes: machines:read, machines:write, volumes:read, volumes:write, orchestrators:read,
orchestrators:write, metrics:read (the gateway's /metrics; cluster-wide only), admin. --admin adds
the admin scope. A token without admin acts only in the
namespaces --namespaces names, or in every one with --cluster-wide: one of the two is required. The
name (default `admin` with --admin, else `token`, or the first of NAME-2, NAME-3, ... free) is for
people and logs, unique in the file.
";

/// Why `gateway token create` did nothing.
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    /// The command line is wrong; the message says how.
    #[error("{0}")]
    Usage(String),
    /// The tokens file could not be written.
    #[error("cannot add the token to {path}: {source}")]
    Write {
        /// The tokens file.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// A variable is unknown, empty or renamed twice over (the check every gateway start makes).
    #[error("{0}")]
    Config(#[from] service_kit::config::ConfigError),
}

/// What the command line asked for.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    /// `None`: the first default name free in the file.
    name: Option<String>,
    scopes: Vec<Scope>,
    /// `None` for an admin token that said nothing (cluster-wide).
    namespaces: Option<Namespaces>,
}

fn parse(args: &[String]) -> Result<Option<Request>, MintError> {
    let usage = |why: String| MintError::Usage(why);
    let mut args = args.iter();
    match args.next().map(String::as_str) {
        Some("create") => {}
        Some("-h" | "--help" | "help") => return Ok(None),
        Some(other) => return Err(usage(format!("unknown token command {other:?}"))),
        None => return Err(usage("missing the command: `token create`".into())),
    }
    let mut admin = false;
    let mut scopes = Vec::new();
    let mut name = None;
    let mut namespaces = None;
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (arg.as_str(), None),
        };
        let mut value = |flag: &str| {
            inline
                .clone()
                .or_else(|| args.next().cloned())
                .ok_or_else(|| usage(format!("{flag} needs a value")))
        };
        match flag {
            "--admin" if inline.is_none() => admin = true,
            "--scopes" => {
                for s in value(flag)?.split(',').map(str::trim) {
                    let scope = Scope::parse(s)
                        .ok_or_else(|| usage(format!("--scopes: unknown scope {s:?}")))?;
                    scopes.push(scope);
                }
            }
            "--name" => name = Some(value(flag)?),
            "--namespaces" => {
                let parsed = Namespaces::parse(&value(flag)?)
                    .map_err(|rule| usage(format!("--namespaces: {rule}")))?;
                if parsed == Namespaces::Only(Default::default()) {
                    return Err(usage("--namespaces: give at least one namespace".into()));
                }
                namespaces = Some(parsed);
            }
            "--cluster-wide" if inline.is_none() => namespaces = Some(Namespaces::All),
            "-h" | "--help" => return Ok(None),
            _ => return Err(usage(format!("unknown argument {arg:?}"))),
        }
    }
    if admin && !scopes.contains(&Scope::Admin) {
        scopes.push(Scope::Admin);
    }
    if scopes.is_empty() {
        return Err(usage("give --admin or --scopes".into()));
    }
    grant_rule(&scopes, namespaces.as_ref()).map_err(usage)?;
    if let Some(name) = &name
        && !valid_token_name(name)
    {
        return Err(usage(
            "--name: must be one word of visible ASCII, without `#` or `=`".into(),
        ));
    }
    Ok(Some(Request {
        name,
        scopes,
        namespaces,
    }))
}

/// Runs `gateway token …` (`args` are the words after `token`): adds a token to the tokens file
/// `env` names and writes it to `out`. `Ok(false)` when only the usage was asked for.
pub fn run(args: &[String], env: &Env, out: &mut dyn Write) -> Result<bool, MintError> {
    let Some(request) = parse(args)? else {
        let _ = out.write_all(USAGE.as_bytes());
        return Ok(false);
    };
    // The variables are checked as a serving gateway checks them: a misspelled BERTH_TOKENS_FILE
    // would otherwise add the token to a file nobody serves.
    let reads: Vec<&str> = service_kit::config::vars::EVERY_SERVICE
        .iter()
        .chain(crate::VARS)
        .copied()
        .collect();
    for warning in service_kit::config::check_names(env, &reads, crate::RENAMED)? {
        eprintln!("gateway: warning: {warning}");
    }
    let env = &env.clone().migrate(crate::RENAMED)?;
    let path = env
        .get(crate::env_vars::TOKENS_FILE)
        .map(PathBuf::from)
        .unwrap_or_else(|| service_kit::config::data_dir(env).join("tokens"));
    let taken: Vec<String> = match std::fs::read_to_string(&path) {
        Ok(text) => parse_token_lines(&text)
            .entries
            .into_iter()
            .map(|e| e.name)
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => return Err(MintError::Write { path, source }),
    };
    let name = match request.name {
        Some(name) if taken.contains(&name) => {
            return Err(MintError::Usage(format!(
                "--name: a token named {name:?} is in {} already; choose another name",
                path.display()
            )));
        }
        Some(name) => name,
        None => {
            let base = if request.scopes.contains(&Scope::Admin) {
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
    let line = tokens_file_line_with(
        &name,
        &token,
        &request.scopes,
        &LineFields {
            namespaces: request.namespaces,
            created: Some(chrono::Utc::now()),
            expires: None,
        },
    );
    append_token_line(&path, &line).map_err(|source| MintError::Write {
        path: path.clone(),
        source,
    })?;
    let _ = writeln!(out, "{token}");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::TokenStore;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_minted_token_is_accepted_by_the_tokens_file_it_was_added_to() {
        let dir = tempfile::tempdir().unwrap();
        let env = Env::default().with("BERTH_DATA_DIR", dir.path().display().to_string());
        let mut out = Vec::new();
        assert!(run(&words("create --admin"), &env, &mut out).unwrap());
        let token = String::from_utf8(out).unwrap().trim().to_string();
        assert!(token.starts_with("berth_"), "{token}");
        let store = TokenStore::load(&dir.path().join("tokens")).unwrap();
        let scopes = store.authenticate(&token, |e| (e.name.clone(), e.scopes.clone()));
        assert_eq!(scopes, Some(("admin".to_string(), vec![Scope::Admin])));
        // Another one goes beside it, to BERTH_TOKENS_FILE when that is set.
        let file = dir.path().join("elsewhere");
        let env = env.with("BERTH_TOKENS_FILE", file.display().to_string());
        let mut out = Vec::new();
        run(
            &words("create --scopes volumes:read,volumes:write --namespaces b,a --name ci"),
            &env,
            &mut out,
        )
        .unwrap();
        let token = String::from_utf8(out).unwrap().trim().to_string();
        let store = TokenStore::load(&file).unwrap();
        assert!(store.authenticate(&token, |e| e.name == "ci").unwrap());
        assert_eq!(
            store.authenticate(&token, |e| e.namespaces.to_string()),
            Some("a,b".to_string())
        );
        // The way back in: another admin token beside the first takes the next free name; a name
        // that is taken is refused.
        let mut out = Vec::new();
        run(&words("create --admin"), &env, &mut out).unwrap();
        let again = String::from_utf8(out).unwrap().trim().to_string();
        let store = TokenStore::load(&file).unwrap();
        assert_eq!(
            store.authenticate(&again, |e| e.name.clone()),
            Some("admin".to_string())
        );
        let mut out = Vec::new();
        run(&words("create --admin"), &env, &mut out).unwrap();
        let third = String::from_utf8(out).unwrap().trim().to_string();
        let store = TokenStore::load(&file).unwrap();
        assert_eq!(
            store.authenticate(&third, |e| e.name.clone()),
            Some("admin-2".to_string())
        );
        let e = run(&words("create --admin --name ci"), &env, &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("already"), "{e}");
    }

    #[test]
    fn a_wrong_command_line_says_what_is_wrong_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let env = Env::default().with("BERTH_DATA_DIR", dir.path().display().to_string());
        for (args, says) in [
            ("", "token create"),
            ("delete", "unknown token command"),
            ("create", "--admin or --scopes"),
            ("create --scopes root", "unknown scope"),
            ("create --scopes volumes:read", "--cluster-wide"),
            ("create --admin --namespaces a", "every namespace"),
            (
                "create --scopes metrics:read --namespaces a",
                "metrics:read reads what every namespace does together",
            ),
            (
                "create --scopes volumes:read --namespaces A",
                "--namespaces:",
            ),
            ("create --admin --name", "needs a value"),
            ("create --admin --name a#b", "one word"),
            ("create --admin --name a=b", "one word"),
            ("create --admin --force", "unknown argument"),
        ] {
            let e = run(&words(args), &env, &mut Vec::new()).unwrap_err();
            assert!(e.to_string().contains(says), "{args:?}: {e}");
        }
        assert!(!dir.path().join("tokens").exists());
        let mut out = Vec::new();
        assert!(!run(&words("create --help"), &env, &mut out).unwrap());
        assert!(
            String::from_utf8(out)
                .unwrap()
                .starts_with("Usage: gateway token create")
        );
    }
}
