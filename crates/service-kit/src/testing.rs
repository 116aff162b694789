//! Test helpers: spawn any router on `127.0.0.1:0`, keep logs quiet unless `TEST_LOG` is set, and wait
//! for a condition without bare sleeps.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Once;
use std::time::{Duration, Instant};

use axum::Router;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A router served on an ephemeral port; stops when dropped.
pub struct TestServer {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// The bound address.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Stops accepting, drains in-flight requests and waits for the server to finish.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Serves `router` on `127.0.0.1:0` and returns once it is listening.
pub async fn spawn(router: Router) -> TestServer {
    init_test_logging();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(crate::server::serve(router, listener, async move {
        let _ = stopped.await;
    }));
    TestServer {
        url: format!("http://{addr}"),
        addr,
        stop: Some(stop),
        task: Some(task),
    }
}

/// Installs a test subscriber once per process: debug logs to the test's output when `TEST_LOG` is
/// set, nothing otherwise. Trace context still propagates either way.
pub fn init_test_logging() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "berth-test");
        opentelemetry::global::set_tracer_provider(provider);
        let otel = tracing_opentelemetry::layer().with_tracer(tracer);
        let registry = tracing_subscriber::registry().with(otel);
        let _ = if std::env::var_os("TEST_LOG").is_some() {
            registry
                .with(tracing_subscriber::EnvFilter::new("debug"))
                .with(tracing_subscriber::fmt::layer().with_test_writer())
                .try_init()
        } else {
            registry
                .with(tracing_subscriber::EnvFilter::new("info"))
                .try_init()
        };
    });
}

/// Polls `check` until it returns `Some` or `timeout` passes; the last `None` becomes a panic naming
/// `what`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("{what}: not true within {timeout:?}");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// Checks a service binary's command line: `--help` and `--version` answer and exit 0 without
/// serving (nothing listens on the port `--help` would have taken), `healthcheck` against nothing
/// says why it failed and exits 1, and an unknown argument exits 2. `binary` is the path Cargo gives
/// a test (`env!("CARGO_BIN_EXE_<name>")`).
pub fn check_service_binary(binary: &str, name: &str) {
    use std::process::{Command, Stdio};
    // A port nothing listens on: bound, read, and closed again.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let run = |args: &[&str]| {
        let mut child = Command::new(binary)
            .args(args)
            .env("BERTH_LISTEN", &listen)
            .env(
                "BERTH_DATA_DIR",
                std::env::temp_dir().join("berth-binary-check"),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let started = Instant::now();
        loop {
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            if started.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                panic!(
                    "`{name} {}` did not exit within 10s: it serves instead",
                    args.join(" ")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().expect("output")
    };
    for help in ["--help", "-h"] {
        let out = run(&[help]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "`{name} {help}`: {out:?}");
        assert!(
            text.contains("Usage:") && text.contains("healthcheck"),
            "{text}"
        );
        assert!(text.contains("BERTH_LISTEN"), "{text}");
    }
    assert!(
        std::net::TcpStream::connect(&listen).is_err(),
        "`{name} --help` left something listening"
    );
    let out = run(&["--version"]);
    assert!(out.status.success(), "`{name} --version`: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with(&format!("{name} ")),
        "{out:?}"
    );
    let out = run(&["healthcheck"]);
    assert_eq!(out.status.code(), Some(1), "`{name} healthcheck`: {out:?}");
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(
        why.contains("nothing answers at"),
        "`{name} healthcheck` says why: {why}"
    );
    let out = run(&["--bogus"]);
    assert_eq!(out.status.code(), Some(2), "`{name} --bogus`: {out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--help"),
        "{out:?}"
    );
}

/// A log writer for tests: every line a subscriber writes to it is kept, to be searched.
#[derive(Clone, Default)]
pub struct LogCapture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogCapture {
    /// What was written so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().expect("capture lock").clone()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("capture lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;

    fn make_writer(&'a self) -> LogCapture {
        self.clone()
    }
}

/// The events of a `watch=true` answer, one JSON value per line, read as they arrive.
pub struct Events {
    response: reqwest::Response,
    buffer: Vec<u8>,
    ready: std::collections::VecDeque<serde_json::Value>,
}

impl Events {
    /// Reads the events of `response` (a 200 with `application/x-ndjson`).
    pub fn new(response: reqwest::Response) -> Events {
        Events {
            response,
            buffer: Vec::new(),
            ready: std::collections::VecDeque::new(),
        }
    }

    /// The next event; `None` when the stream ended, panics when none came `within`.
    pub async fn next(&mut self, within: Duration) -> Option<serde_json::Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .unwrap_or_else(|_| panic!("no event within {within:?}"))
                .expect("the stream broke")?;
            self.buffer.extend_from_slice(&chunk);
            while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                self.ready
                    .push_back(serde_json::from_slice(&line).expect("each line is JSON"));
            }
        }
    }

    /// The next event that is not a BOOKMARK.
    pub async fn next_change(&mut self, within: Duration) -> Option<serde_json::Value> {
        loop {
            let event = self.next(within).await?;
            if event["type"] != "BOOKMARK" {
                return Some(event);
            }
        }
    }
}
