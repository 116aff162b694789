//! Contract and end-to-end tests across Berth's services.
//!
//! [`Stack::spawn`] runs every service in this process as `berth up` does (its composition, from
//! berth-stack), each on a listener whose port the OS picks and talking HTTP to the others exactly
//! as in production, with a shared internal credential and a tokens file of known test tokens. The tests in `tests/` drive it
//! through the gateway, as platform tooling would.
//!
//! [`openapi_compat`] finds the breaking changes between a committed OpenAPI document and a served
//! one (`tests/openapi.rs` runs it over every service's document).
//!
//! [`processes`] runs the stack as separate processes instead, for the suites that kill them (the
//! crash suite, `src/bin/crash_suite`, which `tests/reliability/run.sh` runs).

pub mod openapi_compat;
pub mod processes;
pub mod python;

use gateway::auth::tokens_file_line;
use gateway::routes::Scope;
use service_kit::Env;

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

impl Stack {
    /// Starts every service with `extra` variables added to each one's environment: `berth up`'s
    /// own composition (berth-stack), on ports the OS picks, with the test tokens, a known emulator
    /// key and no waiting in the emulator's lifecycle.
    pub async fn spawn(extra: &[(&str, &str)]) -> Stack {
        let data = tempfile::tempdir().expect("temp dir");
        let tokens: Vec<String> = TOKENS
            .iter()
            .map(|(token, scopes)| {
                let name = token.trim_start_matches("tok-");
                // An empty scope list is not a valid file line: the token is left out.
                if scopes.is_empty() {
                    format!("# {name} has no scopes\n")
                } else {
                    tokens_file_line(name, token, scopes)
                }
            })
            .chain(TENANT_TOKENS.iter().map(|(token, namespace)| {
                let name = token.trim_start_matches("tok-");
                format!(
                    "{} namespaces={namespace}",
                    tokens_file_line(name, token, &TENANT_SCOPES)
                )
            }))
            .collect();
        std::fs::write(
            berth_stack::tokens::tokens_file_in(data.path()),
            tokens.join("\n"),
        )
        .expect("tokens file");
        // The emulator's key, where `up` keeps it, so the requests can name it.
        let emulator_dir = data.path().join("ecs-emulator");
        std::fs::create_dir_all(&emulator_dir).expect("emulator dir");
        std::fs::write(
            emulator_dir.join(ecs_emulator::persist::KEY_FILE),
            serde_json::json!({"id": ECS_KEY_ID, "secret": ECS_KEY_SECRET}).to_string(),
        )
        .expect("emulator key");
        let mut env = Env::default()
            .with("BERTH_INTERNAL_TOKEN", INTERNAL_TOKEN)
            .with("BERTH_RATE_LIMIT_RPS", "0");
        for var in berth_stack::up::EMULATOR_LIFECYCLE {
            env = env.with(var, "0s");
        }
        for (k, v) in extra {
            env = env.with(k, *v);
        }
        let options = berth_stack::up::UpOptions {
            data_dir: data.path().to_path_buf(),
            port_base: 0,
            bind: std::net::Ipv4Addr::LOCALHOST.into(),
            expose_services: false,
        };
        let mut built = berth_stack::up::build_stack(&options, &env)
            .await
            .expect("the stack builds");
        built.add_gateway().expect("the gateway builds");
        let emulator = built.emulator.clone();
        let mut urls = std::collections::HashMap::new();
        for (name, app) in std::mem::take(&mut built.apps) {
            urls.insert(name, format!("http://{}", app.local_addr()));
            tokio::spawn(app.run_until(std::future::pending()));
        }
        let url = |name: &str| urls.get(name).cloned().expect("every service runs");
        Stack {
            gateway: url(gateway::NAME),
            registry: url(orchestrator_registry::NAME),
            storage_ops: url(storage_ops::NAME),
            machine_driver: url(machine_driver::NAME),
            machine_controller: url(machine_controller::NAME),
            ecs: url("ecs-emulator"),
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
