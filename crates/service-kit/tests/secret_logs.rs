//! Secrets never reach a log line, even at TRACE: the values are logged through every path a careless
//! caller might use (`?`, `%`, inside a struct, in an error) and the captured output is searched.

use std::io::Write;
use std::sync::{Arc, Mutex};

use domain::Secret;
use service_kit::SecretString;
use tracing_subscriber::fmt::MakeWriter;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

#[test]
fn secret_values_never_appear_in_trace_logs() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(capture.clone())
        .finish();
    let mut secret =
        Secret::from_string_data([("alicloudAccessKeySecret", "plain-value-0xdeadbeef")]);
    secret
        .data
        .insert("token".into(), "YmFzZTY0LXZhbHVlLWNhZmU=".into()); // "base64-value-cafe"
    let token = SecretString::new("bearer-token-feedface");
    tracing::subscriber::with_default(subscriber, || {
        tracing::trace!(?secret, "debug form");
        tracing::trace!(%secret, "display form");
        tracing::trace!(?token, %token, "token");
        tracing::trace!(request = ?domain::MachineRequest { secret: secret.clone(), ..Default::default() }, "whole request");
        let err = secret.get("token").map(|_| ());
        tracing::trace!(?err, "lookup result");
    });
    let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("alicloudAccessKeySecret"),
        "the key names are logged: {text}"
    );
    for value in [
        "plain-value-0xdeadbeef",
        "YmFzZTY0LXZhbHVlLWNhZmU=",
        "base64-value-cafe",
        "bearer-token-feedface",
    ] {
        assert!(!text.contains(value), "{value} leaked into: {text}");
    }
}
