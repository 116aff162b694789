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
