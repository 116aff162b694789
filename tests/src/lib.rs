//! Contract and end-to-end tests across Berth's services.
//!
//! [`Stack::spawn`] runs every service in this process, each on its own `127.0.0.1:0` listener and
//! talking HTTP to the others exactly as in production (the same wiring `berth up` does), with a
//! shared internal credential and a tokens file of known test tokens. The tests in `tests/` drive it
//! through the gateway, as platform tooling would.
//!
//! [`openapi_compat`] finds the breaking changes between a committed OpenAPI document and a served
//! one (`tests/openapi.rs` runs it over every service's document).
//!
//! [`processes`] runs the stack as separate processes instead, for the suites that kill them (the
//! crash suite, `src/bin/crash_suite`, which `tests/reliability/run.sh` runs).

use std::future::Future;

pub mod openapi_compat;
pub mod processes;
pub mod python;

use gateway::auth::tokens_file_line;
use gateway::routes::Scope;
use service_kit::Env;
use service_kit::server::Application;

/// The internal credential of a test stack.
pub const INTERNAL_TOKEN: &str = "internal-test-credential";
/// The emulator's access key id.
pub const ECS_KEY_ID: &str = "LTAItestkey";
/// The emulator's access key secret.
pub const ECS_KEY_SECRET: &str = "test-secret-do-not-log";

/// Test tokens: (token, scopes). The token's name in the file is its text without `tok-`.
pub const TOKENS: [(&str, &[Scope]); 9] = [
    ("tok-admin", &[Scope::Admin]),
    ("tok-machines-read", &[Scope::MachinesRead]),
    ("tok-machines-write", &[Scope::MachinesWrite]),
    ("tok-volumes-read", &[Scope::VolumesRead]),
    ("tok-volumes-write", &[Scope::VolumesWrite]),
    ("tok-orchestrators-read", &[Scope::OrchestratorsRead]),
    ("tok-orchestrators-write", &[Scope::OrchestratorsWrite]),
    ("tok-metrics-read", &[Scope::MetricsRead]),
    ("tok-nothing", &[]),
];

/// Tokens scoped to one namespace each: (token, namespace). The token's name is its text without
/// `tok-`; each may read and write machines, volumes and orchestrators, but only in its namespace
/// (and, orchestrators being cluster-wide, may only read those).
pub const TENANT_TOKENS: [(&str, &str); 2] =
    [("tok-tenant-a", "tenant-a"), ("tok-tenant-b", "tenant-b")];

/// The scopes of every [`TENANT_TOKENS`] token.
pub const TENANT_SCOPES: [Scope; 6] = [
    Scope::MachinesRead,
    Scope::MachinesWrite,
    Scope::VolumesRead,
    Scope::VolumesWrite,
    Scope::OrchestratorsRead,
    Scope::OrchestratorsWrite,
];

/// The token that holds exactly `scope`.
pub fn token_for(scope: Scope) -> &'static str {
    TOKENS
        .iter()
        .find(|(_, scopes)| scopes == &[scope])
        .map(|(t, _)| *t)
        .expect("a token per scope")
}

/// Every service of a stack, running in this process.
pub struct Stack {
    /// The gateway's URL.
    pub gateway: String,
    /// The registry's URL.
    pub registry: String,
    /// Storage ops' URL.
    pub storage_ops: String,
    /// The machine driver's URL.
    pub machine_driver: String,
    /// The machine controller's base URL.
    pub machine_controller: String,
    /// The ECS emulator's URL.
    pub ecs: String,
    /// The emulator, for inspecting what the cloud holds.
    pub emulator: ecs_emulator::Emulator,
    /// Where state lives; removed when the stack is dropped.
    pub data: tempfile::TempDir,
}

fn serve(app: Application) -> String {
    let url = format!("http://{}", app.local_addr());
    tokio::spawn(app.run_until(std::future::pending()));
    url
}

impl Stack {
    /// Starts every service with `extra` variables added to each one's environment.
    pub async fn spawn(extra: &[(&str, &str)]) -> Stack {
        let data = tempfile::tempdir().expect("temp dir");
        let tokens: Vec<String> = TOKENS
            .iter()
            .map(|(token, scopes)| {
                // An empty scope list is not a valid file line; give it a scope no route needs.
                let scopes: &[Scope] = if scopes.is_empty() { &[] } else { scopes };
                let name = token.trim_start_matches("tok-");
                if scopes.is_empty() {
                    format!("# {name} has no scopes\n")
                } else {
                    tokens_file_line(name, token, scopes)
                }
            })
            .collect();
        let tokens: Vec<String> = tokens
            .into_iter()
            .chain(TENANT_TOKENS.iter().map(|(token, namespace)| {
                let name = token.trim_start_matches("tok-");
                format!(
                    "{} namespaces={namespace}",
                    tokens_file_line(name, token, &TENANT_SCOPES)
                )
            }))
            .collect();
        let tokens_file = data.path().join("tokens");
        std::fs::write(&tokens_file, tokens.join("\n")).expect("tokens file");
        let mut env = Env::default()
            .with("BERTH_LISTEN", "127.0.0.1:0")
            .with("BERTH_DATA_DIR", data.path().display().to_string())
            .with("BERTH_INTERNAL_TOKEN", INTERNAL_TOKEN)
            .with("BERTH_TOKENS_FILE", tokens_file.display().to_string())
            .with("BERTH_RATE_LIMIT_RPS", "0");
        for (k, v) in extra {
            env = env.with(k, *v);
        }
        let registry = serve(
            build(orchestrator_registry::build(
                orchestrator_registry::Config::from_env(&env).unwrap(),
            ))
            .await,
        );
        let env = env.with("BERTH_REGISTRY_URL", registry.clone());
        let storage_ops = serve(
            build(storage_ops::build(
                storage_ops::Config::from_env(&env).unwrap(),
            ))
            .await,
        );
        let emulator = ecs_emulator::Emulator::new(ecs_emulator::Config::for_tests(
            ECS_KEY_ID,
            ECS_KEY_SECRET,
        ));
        let ecs = serve(Application::new(
            emulator.router(),
            tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind"),
        ));
        let env = env.with("BERTH_ALICLOUD_ENDPOINT", ecs.clone());
        let machine_driver = serve(
            build(machine_driver::build(
                machine_driver::Config::from_env(&env).unwrap(),
            ))
            .await,
        );
        let env = env
            .with("BERTH_MACHINE_DRIVER_URL", machine_driver.clone())
            .with("BERTH_STORAGE_OPS_URL", storage_ops.clone());
        let machine_controller = serve(
            build(machine_controller::build(
                machine_controller::Config::from_env(&env).unwrap(),
            ))
            .await,
        );
        let env = env.with("BERTH_MACHINE_CONTROLLER_URL", machine_controller.clone());
        let gateway = serve(build(gateway::build(gateway::Config::from_env(&env).unwrap())).await);
        Stack {
            gateway,
            registry,
            storage_ops,
            machine_driver,
            machine_controller,
            ecs,
            emulator,
            data,
        }
    }

    /// A request to the gateway with `token`.
    pub fn call(&self, method: &str, path: &str, token: Option<&str>) -> reqwest::RequestBuilder {
        let mut r = reqwest::Client::new().request(
            method.parse().expect("method"),
            format!("{}{path}", self.gateway),
        );
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r
    }
}

async fn build<F>(f: F) -> Application
where
    F: Future<Output = Result<Application, Box<dyn std::error::Error + Send + Sync>>>,
{
    f.await.expect("service builds")
}

/// A machine request for the emulator: an Alicloud class with the cluster and role tags, and a
/// secret with the emulator's key.
pub fn machine_request(name: &str) -> serde_json::Value {
    alicloud_machine_request(&AlicloudMachine {
        name,
        uid: &format!("uid-{name}"),
        cluster: "shoot--e2e",
        class: "e2e-class",
        key_id: ECS_KEY_ID,
        key_secret: ECS_KEY_SECRET,
        user_data: "#!/bin/sh\necho hi\n",
    })
}

/// What varies between the suites' Alicloud machine requests.
#[derive(Debug, Clone, Copy)]
pub struct AlicloudMachine<'a> {
    /// The machine's name.
    pub name: &'a str,
    /// Its UID (a new one is a new Machine object under the same name).
    pub uid: &'a str,
    /// The shoot: the machine's namespace and the cluster tag.
    pub cluster: &'a str,
    /// The machine class's name.
    pub class: &'a str,
    /// The emulator's access key id.
    pub key_id: &'a str,
    /// The emulator's access key secret.
    pub key_secret: &'a str,
    /// The secret's user data.
    pub user_data: &'a str,
}

/// An Alicloud machine request as the MCM driver contract has it, for the emulator.
pub fn alicloud_machine_request(m: &AlicloudMachine<'_>) -> serde_json::Value {
    serde_json::json!({
        "machine": {"metadata": {"name": m.name, "namespace": m.cluster, "uid": m.uid}},
        "machineClass": {
            "metadata": {"name": m.class},
            "provider": "Alicloud",
            "providerSpec": {
                "apiVersion": "mcm.gardener.cloud/v1alpha1",
                "imageID": "m-image",
                "instanceType": "ecs.g6.large",
                "region": "cn-shanghai",
                "zoneID": "cn-shanghai-b",
                "securityGroupID": "sg-1",
                "vSwitchID": "vsw-1",
                "systemDisk": {"category": "cloud_efficiency", "size": 50},
                "keyPairName": "kp",
                "tags": {format!("kubernetes.io/cluster/{}", m.cluster): "1", "kubernetes.io/role/node": "1"}
            }
        },
        "secret": {"stringData": {
            "alicloudAccessKeyID": m.key_id,
            "alicloudAccessKeySecret": m.key_secret,
            "userData": m.user_data,
        }}
    })
}
