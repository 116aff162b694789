//! No secret in logs.

use std::io::Write;
use std::sync::{Arc, Mutex};

use domain::machine::Secret;
use ecs_emulator::Faults;

use crate::support::*;

/// A writer appending to a shared buffer.
#[derive(Clone, Default)]
pub(crate) struct Captured(pub(crate) Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Runs a representative slice of the suite (every route, successes and the failures that quote
/// ECS) with a TRACE subscriber capturing every line of the driver, the ECS client, the emulator
/// and the HTTP stacks on this thread, then looks for every secret value in every form it travels.
#[tokio::test]
async fn no_secret_value_appears_in_trace_logs() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    // This test's runtime is single-threaded: the driver, the emulator and the client all run on
    // this thread, under this subscriber.
    let _guard = tracing::subscriber::set_default(subscriber);
    let app = spawn_app().await;
    let leaked_secret = "another-secret-value-31337";
    let r = req("m-logs");
    let created = app.create(&r).await.unwrap();
    app.create(&r).await.unwrap();
    app.status(&r).await.unwrap();
    app.initialize(&r).await.unwrap();
    app.list().await.unwrap();
    app.machines.volume_ids(&[]).await.unwrap();
    app.emulator
        .set_faults(Faults {
            throttle_rate: 0.5,
            throttle_time_left_ms: 1,
            server_error_rate: 0.2,
            ..Faults::default()
        })
        .unwrap();
    app.status(&r).await.unwrap();
    app.emulator.set_faults(Faults::default()).unwrap();
    let mut bad = req("m-logs-bad");
    bad.secret = Secret::from_string_data([
        ("alicloudAccessKeyID", KEY_ID),
        ("alicloudAccessKeySecret", leaked_secret),
        ("userData", USER_DATA),
    ]);
    app.create(&bad).await.unwrap_err();
    bad.secret.string_data.remove("alicloudAccessKeyID");
    app.create(&bad).await.unwrap_err();
    app.delete(&with_provider_id(r, &created.provider_id))
        .await
        .unwrap();
    drop(_guard);

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("TRACE"),
        "the subscriber captured TRACE lines"
    );
    assert!(logs.contains("DescribeInstances"), "ECS calls were logged");
    assert!(logs.contains("m-logs"), "driver spans were logged");
    let user_data_b64 = b64(USER_DATA);
    for (what, value) in [
        ("access key secret", KEY_SECRET),
        (
            "access key secret (base64)",
            &b64(&format!("{KEY_SECRET}\n")),
        ),
        ("other access key secret", leaked_secret),
        ("user data", USER_DATA),
        ("user data token", "bootstrap-token-7q3z9x"),
        ("user data (base64)", &user_data_b64),
        (
            "user data (base64, url-encoded prefix)",
            &user_data_b64[..24],
        ),
    ] {
        assert!(!logs.contains(value), "{what} appears in the logs");
    }
}
