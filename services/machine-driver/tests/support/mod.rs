//! What the Docker provider's tests, its benchmark and the hostile-input suite share: the local Engine, the machine image they
//! build from nothing a registry serves, and the sweep that removes a run's containers.
//!
//! The image: `tests/fixtures/machine.rs` compiled with `rustc` into a static binary, imported as a
//! one-file root file system (`berth-test-machine:<hash of the program>`), so the Engine needs no
//! network and CI nothing extra.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker as Engine;
use bollard::query_parameters::{
    CreateImageOptions, ListContainersOptions, RemoveContainerOptions, RemoveVolumeOptions,
};
use futures::StreamExt as _;
use machine_driver::docker::archive;
use machine_driver::docker::spec::{Record, bootstrap_record};
use sha2::Digest as _;

/// The machine program's source; the image tag is derived from it.
pub(crate) const MACHINE_SOURCE: &str = include_str!("../fixtures/machine.rs");
/// The label every test container carries, valued with the test's run id.
pub(crate) const RUN_LABEL: &str = "berth.test/run";
/// The test machine image, built once per test (or bench) binary.
static IMAGE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();

/// A client of the local Engine, made in the calling test's runtime.
pub(crate) async fn local_engine() -> Option<Engine> {
    let engine = Engine::connect_with_unix_defaults().ok()?;
    let answered = tokio::time::timeout(Duration::from_secs(3), engine.ping())
        .await
        .is_ok_and(|r| r.is_ok());
    if !answered {
        return None;
    }
    engine.negotiate_version().await.ok()
}

/// Compiles the machine program into a static binary (no libc needed in the image).
fn compile_machine(tag: &str) -> Vec<u8> {
    // Tests and benches have a scratch directory of Cargo's; the hostile-input suite (a binary that
    // shares this module) uses the system's.
    let dir = option_env!("CARGO_TARGET_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let source = dir.join(format!("berth-machine-{tag}-{}.rs", std::process::id()));
    let binary = dir.join(format!("berth-machine-{tag}-{}", std::process::id()));
    std::fs::write(&source, MACHINE_SOURCE).unwrap();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = std::process::Command::new(rustc)
        .args([
            "--edition",
            "2024",
            "-C",
            "target-feature=+crt-static",
            "-C",
            "opt-level=1",
            "-C",
            "strip=symbols",
            "-o",
        ])
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("rustc runs");
    assert!(
        out.status.success(),
        "compiling the test machine failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&binary).unwrap();
    let _ = std::fs::remove_file(&source);
    let _ = std::fs::remove_file(&binary);
    bytes
}

/// The machine image (`berth-test-machine:<hash of the program>`), imported into the Engine unless
/// it is there already.
pub(crate) async fn machine_image() -> String {
    IMAGE
        .get_or_init(|| async {
            let hash = hex::encode(sha2::Sha256::digest(MACHINE_SOURCE.as_bytes()));
            let tag = &hash[..16];
            let image = format!("berth-test-machine:{tag}");
            let engine = local_engine().await.expect("the Engine answers");
            if engine.inspect_image(&image).await.is_ok() {
                return image;
            }
            let tag_owned = tag.to_owned();
            let binary = tokio::task::spawn_blocking(move || compile_machine(&tag_owned))
                .await
                .unwrap();
            let rootfs = archive::single_file("berth-machine", 0o755, &binary).unwrap();
            let mut progress = engine.create_image(
                Some(CreateImageOptions {
                    from_src: Some("-".into()),
                    repo: Some("berth-test-machine".into()),
                    tag: Some(tag.into()),
                    changes: vec![r#"CMD ["/berth-machine"]"#.into()],
                    ..CreateImageOptions::default()
                }),
                Some(bollard::body_full(rootfs.into())),
                None,
            );
            while let Some(step) = progress.next().await {
                step.expect("importing the test machine image");
            }
            image
        })
        .await
        .clone()
}

/// Removes every container of a test run when dropped, whether the test passed or not.
pub(crate) struct Sweep(pub(crate) String);

impl Sweep {
    /// The ids of the run's containers.
    pub(crate) async fn containers(engine: &Engine, run: &str) -> Vec<String> {
        engine
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(HashMap::from([(
                    "label".to_owned(),
                    vec![format!("{RUN_LABEL}={run}")],
                )])),
                ..ListContainersOptions::default()
            }))
            .await
            .unwrap_or_default()
            .into_iter()
            .filter_map(|c| c.id)
            .collect()
    }
}

impl Drop for Sweep {
    fn drop(&mut self) {
        let run = self.0.clone();
        // A runtime of its own: the test's may be gone (a panic) or be the one dropping us.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let Some(engine) = local_engine().await else {
                    return;
                };
                for id in Sweep::containers(&engine, &run).await {
                    let _ = engine
                        .remove_container(
                            &id,
                            Some(RemoveContainerOptions {
                                force: true,
                                v: true,
                                ..RemoveContainerOptions::default()
                            }),
                        )
                        .await;
                    // The driver's bootstrap records of the container (DeleteMachine removes
                    // them; a test that fails before it does leaves them).
                    for record in [Record::Started, Record::Exited] {
                        let _ = engine
                            .remove_volume(
                                &bootstrap_record(&id, record),
                                None::<RemoveVolumeOptions>,
                            )
                            .await;
                    }
                }
            });
        })
        .join();
    }
}
