//! Why a command failed: [`CliError`], the exit code each failure gets, and the one line printed
//! for it with a hint of what to do. Apart because every command ends here, and the hints read the
//! server's answers closely (which service answered, which refusal), a subject of their own.

use client::ClientError;
use domain::{Code, Status};

/// Exit code of a request the server (or the CLI, checking the same rules first) refused: not found,
/// invalid, not allowed. Retrying the same command will not help.
pub const EXIT_REFUSED: u8 = 1;
/// Exit code of a command line that cannot be run as written: unknown flags, conflicting options, an
/// unreadable file, no token. The same code clap uses for its own usage errors.
pub const EXIT_USAGE: u8 = 2;
/// Exit code of a server that failed, could not be reached, asked to come back later (429, 503, a VM
/// not initialised yet), or did not finish within `--timeout`. Retrying may help.
pub const EXIT_FAILED: u8 = 3;

/// Why a command failed; decides the exit code and the one line printed.
#[derive(Debug)]
pub enum CliError {
    /// The command line cannot be run as written.
    Usage(String),
    /// Found by the CLI itself: a value the server would refuse (InvalidArgument), a wait that gave
    /// up (DeadlineExceeded), a volume that ended Failed (Internal).
    Local(Status),
    /// The gateway (or whatever answered at `--server`) refused or failed the call, or could not be
    /// reached.
    Call(ClientError),
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        CliError::Call(e)
    }
}

/// What the hints in an error line may refer to.
#[derive(Debug, Clone, Default)]
pub struct HintContext {
    /// The gateway URL the command used.
    pub server: Option<String>,
    /// What `--wait` would wait for in this command (`until it is gone`), when it has one and was not
    /// given it.
    pub wait_for: Option<&'static str>,
}

impl CliError {
    /// The exit code: [`EXIT_REFUSED`], [`EXIT_USAGE`] or [`EXIT_FAILED`].
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::Local(s) => {
                if retry_may_help(s.code) {
                    EXIT_FAILED
                } else {
                    EXIT_REFUSED
                }
            }
            CliError::Call(e) => match e.http_status {
                // A VM not running yet is "come back later", though its status is a 409; a
                // bootstrap that ended for good is not.
                Some(_) if e.code() == Code::Uninitialized && !bootstrap_ended(e) => EXIT_FAILED,
                // What the server said decides: 4xx refused, except "too slow" and "too many".
                Some(s) if (400..500).contains(&s) && s != 408 && s != 429 => EXIT_REFUSED,
                // A 429 without Retry-After is a full capacity or quota, not a rate limit: waiting
                // does not cure it.
                Some(429) if e.retry_after.is_none() => EXIT_REFUSED,
                Some(_) => EXIT_FAILED,
                None => {
                    if retry_may_help(e.code()) {
                        EXIT_FAILED
                    } else {
                        EXIT_REFUSED
                    }
                }
            },
        }
    }

    /// The one line printed for this error: code name, message, request id, and what to do about it
    /// where the CLI can tell.
    pub fn line(&self, context: &HintContext) -> String {
        match self {
            CliError::Usage(m) => format!("error: {m}"),
            CliError::Local(s) => format!("error: {}: {}", s.code.name(), s.message),
            CliError::Call(e) => {
                let rid = e
                    .request_id
                    .as_deref()
                    .map(|r| format!(" (request id: {r})"))
                    .unwrap_or_default();
                let mut line = format!("error: {}: {}{rid}", e.code().name(), e.status.message);
                if let Some(hint) = hint(e, context) {
                    line.push_str(" — ");
                    line.push_str(&hint);
                }
                line
            }
        }
    }
}

/// Whether `e` says a machine's bootstrap ended and will never run again.
pub(crate) fn bootstrap_ended(e: &ClientError) -> bool {
    e.status
        .message
        .contains(domain::machine::BOOTSTRAP_RUNS_ONCE)
}

/// Whether the same call later might succeed.
fn retry_may_help(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
            | Code::Internal
            | Code::Unknown
            | Code::DataLoss
    )
}

/// What the caller can do about `e`, when the CLI can tell.
fn hint(e: &ClientError, context: &HintContext) -> Option<String> {
    let server = context.server.as_deref().unwrap_or("the gateway");
    match e.http_status {
        // Every answer of every Berth service carries a request id (header or problem body); one
        // without is from something else listening at that address.
        Some(status) if e.request_id.is_none() => Some(format!(
            "{server} answered HTTP {status} without a Berth request id, so it is not a Berth \
             gateway: check --server/BERTH_URL"
        )),
        // The machine driver's answer when the cloud refused the class's access key: its own
        // message says what to fix, and it is not the caller's Berth token.
        Some(401)
            if e.status
                .message
                .contains(domain::machine::CLOUD_KEY_REFUSED) =>
        {
            None
        }
        Some(401)
            if e.status
                .message
                .contains(domain::problem::INTERNAL_CREDENTIAL_REQUIRED) =>
        {
            Some(format!(
                "{server} is one of Berth's services, not the gateway: point --server/BERTH_URL at \
                 the gateway (`berth up` serves it on its --port-base, 8080 by default)"
            ))
        }
        Some(401) => Some(
            "the gateway did not accept the token from --token/BERTH_TOKEN (unknown, revoked or \
             expired: `berth token list` says which); `berth up` prints an admin token on its first \
             start, and `berth token create --admin --data-dir <dir>` \
             adds a new one"
                .into(),
        ),
        // Its own message says to delete the machine.
        Some(_) if e.code() == Code::Uninitialized && bootstrap_ended(e) => None,
        Some(_) if e.code() == Code::Uninitialized => Some(
            "retry once the VM runs (`berth machine create --wait` returns when it does)".into(),
        ),
        Some(403) => Some(
            "the token lacks the scope this needs, or may not act in this namespace (or cluster-wide); \
             make one with `berth token create --scopes … --namespaces …`"
                .into(),
        ),
        // A full capacity or quota: its message says what to do.
        Some(429) if e.retry_after.is_none() => None,
        Some(429 | 503) => {
            let after = e
                .retry_after
                .map(|d| format!("retry in {}s", d.as_secs().max(1)))
                .unwrap_or_else(|| "retry shortly".into());
            Some(match context.wait_for {
                Some(what) => format!("{after}, or add --wait to keep retrying {what}"),
                None => after,
            })
        }
        None if e.code() == Code::Unavailable && e.status.message.contains(client::HOST_UNRESOLVED) => {
            Some(format!(
                "the host in {server} does not resolve: check the name in --server/BERTH_URL"
            ))
        }
        // `berth up` and the images serve plain HTTP: TLS to one fails as if nothing answered.
        None if e.code() == Code::Unavailable && server.starts_with("https://") => Some(format!(
            "no TLS connection could be made to {server}: is the stack running (`berth up`), and \
             does the gateway there serve HTTPS? `berth up` serves plain http:// (a TLS proxy in \
             front of it serves https)"
        )),
        None if e.code() == Code::Unavailable => Some(format!(
            "nothing answered at {server}: is the stack running (`berth up`), and is \
             --server/BERTH_URL right?"
        )),
        // The API's paths are added to --server: one with a path of its own (`…/v1`) misses them.
        Some(404) if server_has_path(server) && e.status.message.contains("no route") => {
            Some(format!(
                "{server} has a path: give the gateway's address alone (http://host:port), the \
                 CLI adds the API's paths to it"
            ))
        }
        _ => None,
    }
}

/// Whether a server URL goes past its host and port (`http://h:1/v1`).
fn server_has_path(server: &str) -> bool {
    server
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('/'))
        .is_some_and(|(_, path)| !path.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_with_a_path_is_told_apart() {
        assert!(server_has_path("http://127.0.0.1:8080/v1"));
        assert!(!server_has_path("http://127.0.0.1:8080"));
        assert!(!server_has_path("http://127.0.0.1:8080/"));
    }

    #[test]
    fn a_cloud_key_refusal_is_not_hinted_as_the_callers_token() {
        let context = HintContext {
            server: None,
            wait_for: None,
        };
        let refused = |message: &str| ClientError {
            status: domain::Status::new(Code::Unauthenticated, message),
            http_status: Some(401),
            request_id: Some("r".into()),
            retry_after: None,
        };
        let token = hint(&refused("no bearer token"), &context).unwrap();
        assert!(token.contains("--token/BERTH_TOKEN"), "{token}");
        let cloud = refused(&format!(
            "InvalidAccessKeyId: ECS refused the cloud access key in the request's secret, {}",
            domain::machine::CLOUD_KEY_REFUSED
        ));
        assert_eq!(hint(&cloud, &context), None);
    }

    #[test]
    fn a_service_port_and_an_ended_bootstrap_are_told_as_such() {
        let context = HintContext {
            server: Some("http://127.0.0.1:8083".into()),
            wait_for: None,
        };
        let answer = |code, http, message: &str| ClientError {
            status: domain::Status::new(code, message),
            http_status: Some(http),
            request_id: Some("r".into()),
            retry_after: None,
        };
        let service = answer(
            Code::Unauthenticated,
            401,
            domain::problem::INTERNAL_CREDENTIAL_REQUIRED,
        );
        let said = hint(&service, &context).unwrap();
        assert!(said.contains("not the gateway"), "{said}");
        assert!(!said.contains("token"), "{said}");

        let not_yet = answer(Code::Uninitialized, 409, "the VM is Starting");
        assert_eq!(CliError::Call(not_yet.clone()).exit_code(), EXIT_FAILED);
        assert!(
            hint(&not_yet, &context)
                .unwrap()
                .contains("retry once the VM runs")
        );
        let ended = answer(
            Code::Uninitialized,
            409,
            &format!(
                "the bootstrap failed with exit code 3; {}: delete the machine",
                domain::machine::BOOTSTRAP_RUNS_ONCE
            ),
        );
        assert_eq!(CliError::Call(ended.clone()).exit_code(), EXIT_REFUSED);
        assert_eq!(hint(&ended, &context), None);
    }
}
