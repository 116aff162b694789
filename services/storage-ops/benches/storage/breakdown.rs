//! Where one AddStorage's time goes: each step it takes, timed alone.

use super::*;

/// Mean and median of `rounds` timed runs of `step`, in microseconds.
pub(super) async fn time_step<F, Fut>(rounds: usize, mut step: F) -> (f64, f64)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let started = Instant::now();
        step(i).await;
        samples.push(started.elapsed());
    }
    let mean = samples.iter().sum::<Duration>().as_secs_f64() * 1e6 / rounds as f64;
    samples.sort();
    (mean, samples[rounds / 2].as_secs_f64() * 1e6)
}

/// The steps of one AddStorage, each timed alone (sequentially, one caller).
pub(super) async fn add_breakdown(stack: &Stack, dir: &Path, registry_url: &str) {
    use storage_ops::backend::{Backend, ObjectRef, local::LocalBackend};
    const ROUNDS: usize = 300;
    println!(
        "  Where one AddStorage goes (one caller, each step alone, {ROUNDS} rounds; mean / median us):"
    );
    let print = |label: &str, (mean, median): (f64, f64)| {
        println!("    {label:<56} {mean:>8.0} / {median:>6.0} us");
    };
    let storage = stack.storage.clone();
    storage
        .add(&VolumeProvisionerProfile {
            name: "probe".into(),
            namespace: Some("breakdown".into()),
            capacity: "1Gi".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    print(
        "HTTP round trip + handler + one read (GET a volume)",
        time_step(ROUNDS, |_| {
            let storage = storage.clone();
            async move {
                storage.get("breakdown", "probe").await.unwrap();
            }
        })
        .await,
    );
    let registry =
        client::registry::Client::new(ServiceClient::new(registry_url, ClientOptions::default()));
    print(
        "registry: resolve the default orchestrator (HTTP)",
        time_step(ROUNDS, |_| {
            let registry = registry.clone();
            async move {
                registry.default_orchestrator().await.unwrap();
            }
        })
        .await,
    );
    let store = stack.ops.store().clone();
    let mut uids = Vec::with_capacity(ROUNDS);
    let inserted = time_step(ROUNDS, |i| {
        let store = store.clone();
        let mut r = row("breakdown-rows", &format!("r{i:05}"), false);
        r.phase = VolumePhase::Provisioning;
        uids.push(r.uid.clone());
        async move {
            store.insert(r, None).await.unwrap();
        }
    })
    .await;
    print("store: insert one row (one commit, fsync)", inserted);
    print(
        "store: set_status Ready (one commit, fsync)",
        time_step(ROUNDS, |i| {
            let store = store.clone();
            let uid = uids[i].clone();
            async move {
                store
                    .set_status(
                        &uid,
                        storage_ops::store::StatusUpdate {
                            phase: VolumePhase::Ready,
                            reason: "Provisioned".into(),
                            message: String::new(),
                            location: Some("/x".into()),
                        },
                    )
                    .await
                    .unwrap();
            }
        })
        .await,
    );
    let base = dir.join("vols");
    let backend = LocalBackend::new(
        &base.display().to_string(),
        vec![dir.display().to_string()].into(),
    );
    let object = |i: usize, ns: &str| ObjectRef {
        uid: uuid::Uuid::new_v4().to_string(),
        namespace: ns.into(),
        name: format!("b{i:05}"),
        capacity_bytes: 1 << 30,
        file: false,
    };
    print(
        "local backend: create (checks, mkdir, directory fsync)",
        time_step(ROUNDS, |i| {
            let (backend, v) = (backend.clone(), object(i, "breakdown-backend"));
            async move {
                backend.create(&v).await.unwrap();
            }
        })
        .await,
    );
    // The core of an add (no HTTP, no registry), both orders, on the same store and disk.
    let core_row = |i: usize, tag: &str| {
        let mut r = row("breakdown-core", &format!("{tag}{i:05}"), false);
        r.backend_config = serde_json::json!({"basePath": base.display().to_string()});
        r
    };
    print(
        "core, two commits: insert Provisioning, create, Ready",
        time_step(ROUNDS, |i| {
            let (store, backend) = (store.clone(), backend.clone());
            let mut r = core_row(i, "two");
            r.phase = VolumePhase::Provisioning;
            async move {
                let r = store.insert(r, None).await.unwrap();
                let v = r.object_ref();
                let location = backend.create(&v).await.unwrap();
                store
                    .set_status(
                        &r.uid,
                        storage_ops::store::StatusUpdate {
                            phase: VolumePhase::Ready,
                            reason: "Provisioned".into(),
                            message: String::new(),
                            location: Some(location),
                        },
                    )
                    .await
                    .unwrap();
            }
        })
        .await,
    );
    print(
        "core, in the writer: make, dir fsync, commit, mark",
        time_step(ROUNDS, |i| {
            let (store, backend) = (store.clone(), backend.clone());
            let r = core_row(i, "one");
            async move {
                let object = backend.new_object(&r.object_ref()).unwrap();
                store.insert_with_object(r, None, object).await.unwrap();
            }
        })
        .await,
    );
    let ns_dir = base.join("breakdown-raw");
    std::fs::create_dir_all(&ns_dir).unwrap();
    // The floor for a crash-safe create, with nothing of Berth's in it: the object's mkdir and
    // its directory's fsync, then one raw single-row commit (rusqlite, FULL), in one thread.
    let mut floor = Floor::open(dir, "breakdown");
    print(
        "floor: mkdir, directory fsync, raw commit (no Berth code)",
        time_step(ROUNDS, |i| {
            floor.create(&format!("f{i:05}"));
            async {}
        })
        .await,
    );
    print(
        "  of which: mkdir alone (no fsync, no checks)",
        time_step(ROUNDS, |i| {
            let path = ns_dir.join(format!("m{i:05}"));
            async move {
                std::fs::create_dir(&path).unwrap();
            }
        })
        .await,
    );
    print(
        "  of which: mkdir then fsync of its directory",
        time_step(ROUNDS, |i| {
            let path = ns_dir.join(format!("f{i:05}"));
            let parent = ns_dir.clone();
            async move {
                std::fs::create_dir(&path).unwrap();
                std::fs::File::open(&parent).unwrap().sync_all().unwrap();
            }
        })
        .await,
    );
    print(
        "  of which: canonicalize the base and namespace paths",
        time_step(ROUNDS, |_| {
            let (base, ns) = (base.clone(), ns_dir.clone());
            async move {
                std::fs::canonicalize(&base).unwrap();
                std::fs::canonicalize(&ns).unwrap();
            }
        })
        .await,
    );
    print(
        "  of which: a spawn_blocking round trip",
        time_step(ROUNDS, |_| async {
            tokio::task::spawn_blocking(|| ()).await.unwrap();
        })
        .await,
    );
}
