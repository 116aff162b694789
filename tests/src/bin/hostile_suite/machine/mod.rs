//! The hostile machines: containers that write what Berth could read back, against a machine
//! driver of their own. This file holds that driver, its Engine and the helpers that act as a
//! machine's own processes would; the attacks are in `attacks`.
//!
//! Apart from the HTTP attacks because this part needs a Docker Engine (it is skipped without one)
//! and runs a driver in this process rather than attacking the process stack.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use bollard::Docker as Engine;
use bollard::exec::{CreateExecOptions, StartExecOptions};
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptions, UploadToContainerOptions};
use client::machines::Client;
use client::{ClientError, ClientOptions, ServiceClient};
use domain::machine::{Machine, MachineClass, MachineRequest, Secret};
use machine_driver::docker::archive;
use serde_json::{Value, json};
use service_kit::Env;
use service_kit::testing::{TestServer, eventually};

use crate::support::{RUN_LABEL, Sweep, local_engine, machine_image};
use crate::tally::Tally;

mod attacks;

const SHEBANG: &str = "#!/berth-machine bootstrap\n";
const WAIT: Duration = Duration::from_secs(60);
/// How much the driver's memory may grow while machines offer it 256 MiB.
const GROWTH_LIMIT: u64 = 64 << 20;

/// The driver, its Engine and the run's names.
pub(crate) struct Machines {
    engine: Engine,
    client: Client,
    run: String,
    image: String,
    dir: PathBuf,
    _driver: TestServer,
    _sweep: Sweep,
}

/// What a call should be answered with.
#[derive(Clone, Copy)]
enum Due {
    Ok,
    Status(u16),
}

fn judge<T>(t: &mut Tally, what: &str, answer: Result<T, ClientError>, due: Due) {
    t.requests += 1;
    let got = match &answer {
        Ok(_) => 200,
        Err(e) => e.http_status.unwrap_or(0),
    };
    if got >= 500 {
        t.server_errors += 1;
    }
    let want = match due {
        Due::Ok => 200,
        Due::Status(s) => s,
    };
    if got == want {
        t.as_due += 1;
    } else {
        let why = answer.err().map(|e| e.to_string()).unwrap_or_default();
        t.wrong(format!(
            "machine-driver: {what}: {got} where {want} was due {why}"
        ));
    }
}

/// This process's resident set, in bytes (the driver runs in it).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

impl Machines {
    /// A driver against the local Engine, or `None` when no Engine answers (an error under
    /// `BERTH_REQUIRE_DOCKER=1`).
    pub(crate) async fn start() -> Result<Option<Self>, String> {
        let Some(engine) = local_engine().await else {
            if std::env::var("BERTH_REQUIRE_DOCKER").as_deref() == Ok("1") {
                return Err("BERTH_REQUIRE_DOCKER=1 but no Docker Engine answers".into());
            }
            return Ok(None);
        };
        let run = format!("hs{}", std::process::id());
        let dir = std::env::temp_dir().join(format!("berth-hostile-machine-{run}"));
        // Machines mount from their namespace's directory under the allowed root.
        let root = dir.join("allowed");
        std::fs::create_dir_all(root.join("default/shared/data")).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(dir.join("outside")).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("outside/secret"), "host secret\n").map_err(|e| e.to_string())?;
        let sweep = Sweep(run.clone());
        let image = machine_image().await;
        let env = Env::default()
            .with("BERTH_LISTEN", "127.0.0.1:0")
            .with("BERTH_DOCKER_MOUNT_PATHS", root.display().to_string());
        let config = machine_driver::Config::from_env(&env).map_err(|e| e.to_string())?;
        let providers = machine_driver::providers(&config).map_err(|e| e.to_string())?;
        let driver = service_kit::testing::spawn(machine_driver::router(&config, providers)).await;
        let client = Client::new(ServiceClient::new(
            &driver.url,
            ClientOptions {
                timeout: WAIT,
                ..ClientOptions::default()
            },
        ));
        Ok(Some(Machines {
            engine,
            client,
            run,
            image,
            dir,
            _driver: driver,
            _sweep: sweep,
        }))
    }

    /// Removes the run's host directories (the sweep removes its containers).
    pub(crate) fn finish(self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// The directory the run's machines (namespace `default`) mount from.
    fn root(&self) -> String {
        self.dir.join("allowed/default").display().to_string()
    }

    fn class(&self, extra: Value) -> MachineClass {
        let mut spec = json!({
            "image": self.image,
            "tags": {format!("kubernetes.io/cluster/{}", self.run): "1", "kubernetes.io/role/worker": "1"},
            "labels": {RUN_LABEL: self.run},
            "stopGracePeriodSeconds": 2,
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        MachineClass {
            provider: "Docker".into(),
            provider_spec: spec,
            ..MachineClass::default()
        }
    }

    fn name(&self, n: usize) -> String {
        format!("{}-{n}", self.run)
    }

    fn req(&self, n: usize, class: &MachineClass, user_data: Option<&str>) -> MachineRequest {
        let mut machine = Machine::default();
        machine.metadata.name = self.name(n);
        machine.metadata.uid = format!("uid-{}-{n}", self.run);
        MachineRequest {
            machine,
            machine_class: class.clone(),
            secret: user_data
                .map(|d| Secret::from_string_data([("userData", d)]))
                .unwrap_or_default(),
        }
    }

    /// Writes a file into machine `n`'s container, as its own processes could.
    async fn plant(&self, n: usize, path: &str, contents: &[u8]) -> Result<(), String> {
        let tar = archive::single_file(path, 0o644, contents).map_err(|e| e.to_string())?;
        self.engine
            .upload_to_container(
                &self.name(n),
                Some(UploadToContainerOptions {
                    path: "/".into(),
                    ..UploadToContainerOptions::default()
                }),
                bollard::body_full(tar.into()),
            )
            .await
            .map_err(|e| e.to_string())
    }

    /// Runs a test-machine script in container `name` as one of its own processes; waits for it
    /// to end when `wait`.
    async fn run_in(&self, name: &str, script: &str, wait: bool) -> Result<(), String> {
        let path = "/tmp/hostile-script";
        let tar = archive::single_file(path, 0o755, format!("{SHEBANG}{script}").as_bytes())
            .map_err(|e| e.to_string())?;
        self.engine
            .upload_to_container(
                name,
                Some(UploadToContainerOptions {
                    path: "/".into(),
                    ..UploadToContainerOptions::default()
                }),
                bollard::body_full(tar.into()),
            )
            .await
            .map_err(|e| e.to_string())?;
        let exec = self
            .engine
            .create_exec(
                name,
                CreateExecOptions {
                    cmd: Some(vec!["/berth-machine", "bootstrap", path]),
                    ..CreateExecOptions::default()
                },
            )
            .await
            .map_err(|e| e.to_string())?;
        self.engine
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: true,
                    ..StartExecOptions::default()
                }),
            )
            .await
            .map_err(|e| e.to_string())?;
        if wait {
            eventually("a machine's own process ends", WAIT, || async {
                let x = self.engine.inspect_exec(&exec.id).await.ok()?;
                (x.running == Some(false)).then_some(())
            })
            .await;
        }
        Ok(())
    }

    async fn running(&self, name: &str) -> bool {
        self.engine
            .inspect_container(name, None)
            .await
            .ok()
            .and_then(|c| c.state)
            .and_then(|s| s.running)
            .unwrap_or(false)
    }

    /// A container that is nobody's machine (started when `start`).
    async fn bystander(&self, suffix: &str, start: bool) -> Result<String, String> {
        let id = self
            .engine
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(format!("{}-{suffix}", self.run)),
                    ..CreateContainerOptions::default()
                }),
                ContainerCreateBody {
                    image: Some(self.image.clone()),
                    labels: Some(HashMap::from([(RUN_LABEL.to_owned(), self.run.clone())])),
                    ..ContainerCreateBody::default()
                },
            )
            .await
            .map_err(|e| e.to_string())?
            .id;
        if start {
            self.engine
                .start_container(&id, None)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(id)
    }
}

/// A small file of a container, as text (for the suite's own checks).
async fn support_file(engine: &bollard::Docker, container: &str, path: &str) -> Option<String> {
    use futures::StreamExt as _;
    let mut stream = engine.download_from_container(
        container,
        Some(bollard::query_parameters::DownloadFromContainerOptions { path: path.into() }),
    );
    let mut tar = Vec::new();
    while let Some(chunk) = stream.next().await {
        tar.extend_from_slice(&chunk.ok()?);
        if tar.len() > 1 << 20 {
            return None;
        }
    }
    machine_driver::docker::archive::first_file(&tar)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}
