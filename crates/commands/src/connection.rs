//! The checked connection of one command: `--server` made a base URL, a token required, the
//! client built. Apart because it is the one place the connection options are judged, before any
//! command calls the gateway.

use client::{ClientOptions, ServiceClient};
use domain::SecretString;

use crate::CliError;
use crate::args::Connection;

/// The checked connection to the gateway of one command.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The gateway's base URL, normalised (`http://host:port`).
    pub server: String,
    /// How long one call may take (`--request-timeout`); a watch's streams end before it.
    pub request_timeout: std::time::Duration,
    client: ServiceClient,
}

impl Ctx {
    /// Checks the connection options: a URL the CLI can use (a bare `host:port` means http), and a
    /// token (every gateway route needs one).
    pub fn new(connection: &Connection) -> Result<Ctx, CliError> {
        let server = normalise_server(&connection.server)?;
        let Some(token) = connection.token.as_deref().filter(|t| !t.is_empty()) else {
            return Err(CliError::Usage(
                "no token: set BERTH_TOKEN or pass --token (`berth up` prints an admin token on \
                 its first start; `berth token create --admin --data-dir <dir>` adds a new one)"
                    .into(),
            ));
        };
        // A token an HTTP header cannot carry would be left off the call, and the gateway would
        // answer that none was given. Berth's tokens are printable ASCII; the token is never shown.
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(CliError::Usage(
                "the token from --token/BERTH_TOKEN holds a space, a line break or a character \
                 outside printable ASCII, which an HTTP header cannot carry: Berth's tokens are \
                 printable ASCII (check for a stray newline or a pasted quote)"
                    .into(),
            ));
        }
        let client = ServiceClient::new(
            &server,
            ClientOptions {
                timeout: connection.request_timeout,
                bearer: Some(SecretString::new(token)),
                attempts: 3,
                propagation: None,
            },
        );
        Ok(Ctx {
            server,
            client,
            request_timeout: connection.request_timeout,
        })
    }

    /// The shared client for the typed ones.
    pub fn client(&self) -> ServiceClient {
        self.client.clone()
    }
}

/// `--server` as a base URL: `http://` added to a bare `host:port`, anything but http(s) refused.
/// The text is echoed in errors only once it is known to carry no password.
pub fn normalise_server(text: &str) -> Result<String, CliError> {
    let usage = |why: &str| CliError::Usage(format!("--server/BERTH_URL: {why}"));
    let text = text.trim();
    if text.is_empty() {
        return Err(usage(
            "is empty; give the gateway's URL, like http://127.0.0.1:8080",
        ));
    }
    for scheme in ["http:", "https:"] {
        if text.starts_with(scheme) && !text.contains("://") {
            return Err(usage(&format!(
                "{text:?} has a scheme without `//`; write it {scheme}//host:port"
            )));
        }
    }
    let with_scheme = if text.contains("://") {
        text.to_string()
    } else {
        format!("http://{text}")
    };
    let url = reqwest::Url::parse(&with_scheme)
        .map_err(|_| usage("is not a URL like http://127.0.0.1:8080 (or 127.0.0.1:8080)"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(usage(
            "must not carry a user or password; pass credentials with --token/BERTH_TOKEN",
        ));
    }
    if !matches!(url.scheme(), "http" | "https") {
        return Err(usage(&format!(
            "{text:?} is not an http:// or https:// URL (like http://127.0.0.1:8080)"
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(usage(&format!("{text:?} names no host")));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(usage(&format!(
            "{text:?} must not have a query or fragment"
        )));
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_host_and_port_means_http() {
        assert_eq!(
            normalise_server("127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            normalise_server("localhost:9000").unwrap(),
            "http://localhost:9000"
        );
        assert_eq!(
            normalise_server("https://berth.example/").unwrap(),
            "https://berth.example"
        );
        let refused = |s: &str| match normalise_server(s) {
            Err(CliError::Usage(m)) => m,
            other => panic!("{s}: {other:?}"),
        };
        assert!(refused("ftp://x").contains("http://"));
        let m = refused("http://me:hunter2@x");
        assert!(!m.contains("hunter2"), "a password is never echoed: {m}");
    }
}
