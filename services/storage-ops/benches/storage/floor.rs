//! The floor of a crash-safe create with nothing else (mkdir, directory fsync, raw commit), alone
//! and behind a bare axum route that asks the registry first, as the design has every AddStorage do.

use super::*;

/// The floor of a crash-safe create, with nothing else: the object's mkdir, its directory's
/// fsync, then one raw single-row commit.
pub(super) struct Floor {
    db: RawDb,
    objects: std::path::PathBuf,
}

impl Floor {
    pub(super) fn open(dir: &Path, tag: &str) -> Floor {
        let objects = dir.join(format!("floor-{tag}"));
        std::fs::create_dir_all(&objects).unwrap();
        Floor {
            db: RawDb::open(&dir.join(format!("floor-{tag}.db")), "FULL"),
            objects,
        }
    }

    pub(super) fn create(&mut self, name: &str) {
        std::fs::create_dir(self.objects.join(name)).unwrap();
        std::fs::File::open(&self.objects)
            .unwrap()
            .sync_all()
            .unwrap();
        self.db.commit_one(name);
    }
}

/// The state of a bare floor route: the floor, and for the design's floor the registry it asks.
pub(super) struct FloorRoute {
    floor: std::sync::Mutex<Floor>,
    registry: Option<(reqwest::Client, String)>,
}

/// The floor route's handler: for the design's floor, first the registry's default orchestrator
/// (one GET, its JSON parsed), as every AddStorage asks it; then [`Floor::create`] on the blocking
/// pool.
pub(super) async fn floor_create(
    axum::extract::State(route): axum::extract::State<Arc<FloorRoute>>,
    axum::Json(profile): axum::Json<VolumeProvisionerProfile>,
) -> (axum::http::StatusCode, axum::Json<serde_json::Value>) {
    if let Some((client, url)) = &route.registry {
        let orchestrator: serde_json::Value = client
            .get(url)
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(orchestrator["config"]["basePath"].is_string());
    }
    tokio::task::spawn_blocking(move || route.floor.lock().unwrap().create(&profile.name))
        .await
        .unwrap();
    (
        axum::http::StatusCode::CREATED,
        axum::Json(serde_json::json!({"created": true})),
    )
}

/// The floor of a durable create over HTTP, with no Berth code: a bare axum route (no middleware)
/// whose handler runs [`Floor::create`] on the blocking pool, called over keep-alive with
/// AddStorage's body. What any HTTP service doing a crash-safe create could reach on this machine;
/// with `registry`, what one that also asks a registry over HTTP first, as AddStorage must
/// (docs/design.md, “Storage ops API”), could reach.
pub(super) struct FloorOverHttp {
    url: String,
    client: reqwest::Client,
}

impl FloorOverHttp {
    pub(super) async fn start(dir: &Path, registry: Option<&str>) -> FloorOverHttp {
        let tag = if registry.is_some() { "design" } else { "http" };
        let route = Arc::new(FloorRoute {
            floor: std::sync::Mutex::new(Floor::open(dir, tag)),
            registry: registry.map(|url| {
                (
                    reqwest::Client::new(),
                    format!("{url}/v1/orchestrators:default"),
                )
            }),
        });
        let router = axum::Router::new()
            .route("/v1/volumes", axum::routing::post(floor_create))
            .with_state(route);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/volumes", listener.local_addr().unwrap());
        tokio::spawn(service_kit::serve(router, listener, std::future::pending()));
        FloorOverHttp {
            url,
            client: reqwest::Client::new(),
        }
    }

    /// `total` creates from one sequential client.
    pub(super) async fn creates(&self, total: usize, tag: &str) -> Timed {
        let mut latencies = Vec::with_capacity(total);
        let started = Instant::now();
        for i in 0..total {
            let sent = Instant::now();
            let answer = self
                .client
                .post(&self.url)
                .json(&VolumeProvisionerProfile {
                    name: format!("{tag}-{i:05}"),
                    namespace: Some("adds".into()),
                    capacity: "1Gi".into(),
                    ..Default::default()
                })
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), reqwest::StatusCode::CREATED);
            answer.bytes().await.unwrap();
            latencies.push(sent.elapsed());
        }
        Timed::of(latencies, started)
    }
}
