//! The commands that talk to a running stack through the gateway, with the typed clients.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use client::{ClientError, ClientOptions, ServiceClient};
use domain::machine::{ListMachinesRequest, Machine, MachineClass, MachineRequest, Secret};
use domain::orchestrator::{OrchestratorKind, RegisterOrchestrator};
use domain::{Code, Status, Volume, VolumePhase, VolumeProvisionerProfile};
use service_kit::SecretString;

use crate::args::{
    Cli, MachineCommand, MachineFiles, OrchestratorCommand, TokenCommand, VolumeCommand,
};
use crate::output::{Printable, human_bytes, print};

/// Why a command failed; decides the exit code.
#[derive(Debug)]
pub enum CliError {
    /// The server (or the input) refused the request: exit 2.
    Client(ClientError),
    /// Bad input caught before any call: exit 2.
    Usage(String),
    /// The server failed or could not be reached: exit 3.
    Server(ClientError),
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> Self {
        match e.http_status {
            Some(s) if (400..500).contains(&s) && s != 408 && s != 429 => CliError::Client(e),
            _ => CliError::Server(e),
        }
    }
}

impl CliError {
    /// The one line printed for this error: code name, message, request id.
    pub fn line(&self) -> String {
        match self {
            CliError::Usage(m) => format!("error: InvalidArgument: {m}"),
            CliError::Client(e) | CliError::Server(e) => {
                let rid = e
                    .request_id
                    .as_deref()
                    .map(|r| format!(" (request id: {r})"))
                    .unwrap_or_default();
                format!("error: {}: {}{rid}", e.status.code.name(), e.status.message)
            }
        }
    }

    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Client(_) => crate::EXIT_CLIENT_ERROR,
            CliError::Server(_) => crate::EXIT_SERVER_ERROR,
        }
    }
}

fn service(cli: &Cli) -> ServiceClient {
    ServiceClient::new(
        &cli.server,
        ClientOptions {
            timeout: cli.timeout,
            bearer: cli.token.clone().map(SecretString::new),
            attempts: 3,
        },
    )
}

fn split_name(name: &str, namespace: &Option<String>) -> (String, String) {
    match name.split_once('/') {
        Some((ns, n)) => (ns.to_string(), n.to_string()),
        None => (
            namespace
                .clone()
                .unwrap_or_else(|| domain::volume::DEFAULT_NAMESPACE.to_string()),
            name.to_string(),
        ),
    }
}

fn read_structured(path: &Path) -> Result<Vec<serde_json::Value>, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = <serde_json::Value as serde::Deserialize>::deserialize(doc)
            .map_err(|e| CliError::Usage(format!("{}: not YAML or JSON: {e}", path.display())))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

fn decode<T: serde::de::DeserializeOwned>(
    what: &str,
    value: serde_json::Value,
) -> Result<T, CliError> {
    serde_json::from_value(value).map_err(|e| CliError::Usage(format!("{what}: {e}")))
}

/// Assembles the machine, class and secret from Kubernetes objects (by `kind`) or a whole request body.
pub fn machine_request(
    files: &MachineFiles,
) -> Result<(Option<Machine>, MachineClass, Secret), CliError> {
    let (mut machine, mut class, mut secret) = (None, None, None);
    for path in &files.files {
        for doc in read_structured(path)? {
            if doc.get("machineClass").is_some() {
                let body: serde_json::Map<String, serde_json::Value> = decode("request body", doc)?;
                if let Some(m) = body.get("machine") {
                    machine = Some(decode("machine", m.clone())?);
                }
                class = Some(decode("machineClass", body["machineClass"].clone())?);
                if let Some(s) = body.get("secret") {
                    secret = Some(decode("secret", s.clone())?);
                }
                continue;
            }
            match doc.get("kind").and_then(|k| k.as_str()) {
                Some("Machine") => machine = Some(decode("Machine", doc)?),
                Some("MachineClass") => class = Some(decode("MachineClass", doc)?),
                Some("Secret") => secret = Some(decode("Secret", doc)?),
                other => {
                    return Err(CliError::Usage(format!(
                        "{}: kind {other:?} is not Machine, MachineClass or Secret",
                        path.display()
                    )));
                }
            }
        }
    }
    let class = class
        .ok_or_else(|| CliError::Usage("no MachineClass in the files given with -f".into()))?;
    let secret =
        secret.ok_or_else(|| CliError::Usage("no Secret in the files given with -f".into()))?;
    Ok((machine, class, secret))
}

fn addresses(list: &[domain::machine::NodeAddress]) -> String {
    list.iter()
        .map(|a| format!("{}={}", a.kind, a.address))
        .collect::<Vec<_>>()
        .join(",")
}

/// `berth machine …`.
pub async fn machine(cli: &Cli, command: &MachineCommand) -> Result<(), CliError> {
    let machines = client::machines::Client::new(service(cli));
    let files = match command {
        MachineCommand::Create(f)
        | MachineCommand::Status(f)
        | MachineCommand::Delete(f)
        | MachineCommand::Init(f)
        | MachineCommand::List(f) => f,
    };
    let (machine, machine_class, secret) = machine_request(files)?;
    if let MachineCommand::List(_) = command {
        let body = ListMachinesRequest {
            machine_class,
            secret,
        };
        let r = machines.list(&body).await?;
        let rows = r
            .machine_list
            .iter()
            .map(|(id, name)| vec![id.clone(), name.clone()])
            .collect();
        print(
            &Printable::new(&r, vec!["PROVIDER-ID", "MACHINE"], rows),
            cli.output,
        );
        return Ok(());
    }
    let machine =
        machine.ok_or_else(|| CliError::Usage("no Machine in the files given with -f".into()))?;
    let body = MachineRequest {
        machine,
        machine_class,
        secret,
    };
    let printable = match command {
        MachineCommand::Create(_) => {
            let r = machines.create(&body).await?;
            let row = vec![
                r.provider_id.clone(),
                r.node_name.clone(),
                r.last_known_state.clone(),
                addresses(&r.addresses),
            ];
            Printable::new(
                &r,
                vec!["PROVIDER-ID", "NODE", "STATE", "ADDRESSES"],
                vec![row],
            )
        }
        MachineCommand::Init(_) => {
            let r = machines.initialize(&body).await?;
            let row = vec![
                r.provider_id.clone(),
                r.node_name.clone(),
                addresses(&r.addresses),
            ];
            Printable::new(&r, vec!["PROVIDER-ID", "NODE", "ADDRESSES"], vec![row])
        }
        MachineCommand::Status(_) => {
            let r = machines.status(&body).await?;
            let status = r
                .conditions
                .iter()
                .map(|c| {
                    format!(
                        "{}={}",
                        c.kind,
                        if c.reason.is_empty() {
                            &c.status
                        } else {
                            &c.reason
                        }
                    )
                })
                .collect::<Vec<_>>()
                .join(",");
            let row = vec![
                r.provider_id.clone(),
                r.node_name.clone(),
                addresses(&r.addresses),
                status,
            ];
            Printable::new(
                &r,
                vec!["PROVIDER-ID", "NODE", "ADDRESSES", "STATUS"],
                vec![row],
            )
        }
        MachineCommand::Delete(_) => {
            let r = machines.delete(&body).await?;
            Printable::new(
                &r,
                vec!["MACHINE", "STATE"],
                vec![vec![
                    body.machine.metadata.name.clone(),
                    r.last_known_state.clone(),
                ]],
            )
        }
        MachineCommand::List(_) => unreachable!("handled above"),
    };
    print(&printable, cli.output);
    Ok(())
}

fn volume_rows(volumes: &[Volume]) -> Vec<Vec<String>> {
    volumes
        .iter()
        .map(|v| {
            vec![
                v.metadata.namespace.clone(),
                v.metadata.name.clone(),
                v.spec.capacity.clone(),
                v.spec.orchestrator.clone(),
                v.status.phase.to_string(),
                v.metadata.creation_timestamp.clone(),
            ]
        })
        .collect()
}

const VOLUME_HEADERS: [&str; 6] = [
    "NAMESPACE",
    "NAME",
    "CAPACITY",
    "ORCHESTRATOR",
    "PHASE",
    "CREATED",
];

/// `berth volume …`.
pub async fn volume(cli: &Cli, command: &VolumeCommand) -> Result<(), CliError> {
    let storage = client::storage::Client::new(service(cli));
    match command {
        VolumeCommand::Create {
            name,
            file,
            namespace,
            capacity,
            orchestrator,
            replicas,
            labels,
            params,
            wait,
        } => {
            let profile = match file {
                Some(path) => {
                    let mut docs = read_structured(path)?;
                    if docs.len() != 1 {
                        return Err(CliError::Usage(format!(
                            "{}: expected one profile",
                            path.display()
                        )));
                    }
                    decode::<VolumeProvisionerProfile>("profile", docs.remove(0))?
                }
                None => VolumeProvisionerProfile {
                    name: name.clone().ok_or_else(|| {
                        CliError::Usage("a volume name (or -f) is required".into())
                    })?,
                    namespace: namespace.clone(),
                    capacity: capacity.clone().ok_or_else(|| {
                        CliError::Usage("--capacity is required (like 10Gi)".into())
                    })?,
                    orchestrator: orchestrator.clone(),
                    replicas: *replicas,
                    labels: (!labels.is_empty()).then(|| labels.iter().cloned().collect()),
                    parameters: (!params.is_empty()).then(|| params.iter().cloned().collect()),
                },
            };
            // Checked here too, so a typo costs no round trip and reads the same as the server's answer.
            profile.validate().map_err(|s| CliError::Usage(s.message))?;
            let (mut volume, _created) = storage.add(&profile).await?;
            if *wait {
                volume = wait_ready(&storage, &volume, cli.timeout).await?;
            }
            print(
                &Printable::new(
                    &volume,
                    VOLUME_HEADERS.to_vec(),
                    volume_rows(std::slice::from_ref(&volume)),
                ),
                cli.output,
            );
        }
        VolumeCommand::Get { name, namespace } => {
            let (ns, n) = split_name(name, namespace);
            let v = storage.get(&ns, &n).await?;
            print(
                &Printable::new(
                    &v,
                    VOLUME_HEADERS.to_vec(),
                    volume_rows(std::slice::from_ref(&v)),
                ),
                cli.output,
            );
        }
        VolumeCommand::List {
            namespace,
            selector,
            limit,
        } => {
            let params = client::storage::ListParams {
                namespace: namespace.clone(),
                label_selector: selector.clone(),
                limit: *limit,
                continue_token: None,
            };
            let list = match limit {
                Some(_) => storage.list(&params).await?,
                None => domain::VolumeList {
                    items: storage.list_all(&params).await?,
                    continue_token: None,
                },
            };
            print(
                &Printable::new(&list, VOLUME_HEADERS.to_vec(), volume_rows(&list.items)),
                cli.output,
            );
        }
        VolumeCommand::Delete { name, namespace } => {
            let (ns, n) = split_name(name, namespace);
            let r = storage.delete(&ns, &n).await?;
            let said = if r.deleted {
                "deleted"
            } else {
                "not found (nothing to delete)"
            };
            print(
                &Printable::new(
                    &r,
                    vec!["VOLUME", "RESULT"],
                    vec![vec![format!("{ns}/{n}"), said.into()]],
                ),
                cli.output,
            );
        }
        VolumeCommand::Stats { name, namespace } => {
            let (ns, n) = split_name(name, namespace);
            let s = storage.stats(&ns, &n).await?;
            let used = s
                .used_bytes
                .map(human_bytes)
                .unwrap_or_else(|| "unknown".into());
            let row = vec![
                format!("{}/{}", s.namespace, s.name),
                human_bytes(s.capacity_bytes),
                used,
            ];
            print(
                &Printable::new(&s, vec!["VOLUME", "CAPACITY", "USED"], vec![row]),
                cli.output,
            );
        }
    }
    Ok(())
}

async fn wait_ready(
    storage: &client::storage::Client,
    volume: &Volume,
    timeout: Duration,
) -> Result<Volume, CliError> {
    let deadline = Instant::now() + timeout;
    let (ns, name) = (&volume.metadata.namespace, &volume.metadata.name);
    let mut current = volume.clone();
    loop {
        match current.status.phase {
            VolumePhase::Ready => return Ok(current),
            VolumePhase::Failed => {
                return Err(CliError::Server(ClientError {
                    status: Status::new(
                        Code::Internal,
                        format!("volume {ns}/{name} failed: {}", current.status.message),
                    ),
                    http_status: None,
                    request_id: None,
                    retry_after: None,
                }));
            }
            _ if Instant::now() >= deadline => {
                return Err(CliError::Server(ClientError {
                    status: Status::new(
                        Code::DeadlineExceeded,
                        format!(
                            "volume {ns}/{name} is still {} after {timeout:?}",
                            current.status.phase
                        ),
                    ),
                    http_status: None,
                    request_id: None,
                    retry_after: None,
                }));
            }
            _ => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                current = storage.get(ns, name).await?;
            }
        }
    }
}

/// `berth orchestrator …`.
pub async fn orchestrator(cli: &Cli, command: &OrchestratorCommand) -> Result<(), CliError> {
    let registry = client::registry::Client::new(service(cli));
    let headers = vec!["NAME", "KIND", "DEFAULT", "STORAGE-OPS", "REGION", "LABEL"];
    let row = |o: &domain::Orchestrator| {
        vec![
            o.name.clone(),
            o.kind.to_string(),
            o.default.to_string(),
            o.storage_ops.to_string(),
            o.region.clone(),
            o.label.clone(),
        ]
    };
    match command {
        OrchestratorCommand::Register {
            name,
            kind,
            label,
            region,
            config,
            default,
        } => {
            let kind = OrchestratorKind::parse_field("kind", kind)
                .map_err(|s| CliError::Usage(s.message))?;
            let config: BTreeMap<String, String> = config.iter().cloned().collect();
            let request = RegisterOrchestrator {
                kind,
                label: label.clone(),
                region: region.clone(),
                config: (!config.is_empty())
                    .then(|| serde_json::to_value(&config).unwrap_or_default()),
                default: default.then_some(true),
            };
            let o = registry.register(name, &request).await?;
            print(&Printable::new(&o, headers, vec![row(&o)]), cli.output);
        }
        OrchestratorCommand::Get { name } => {
            let o = registry.get(name).await?;
            print(&Printable::new(&o, headers, vec![row(&o)]), cli.output);
        }
        OrchestratorCommand::List => {
            let list = registry.list().await?;
            let rows = list.items.iter().map(row).collect();
            print(&Printable::new(&list, headers, rows), cli.output);
        }
        OrchestratorCommand::Delete { name } => {
            let existed = registry.deregister_reporting(name).await?;
            let said = if existed {
                "deregistered"
            } else {
                "not registered (nothing to do)"
            };
            print(
                &Printable::new(
                    &serde_json::json!({"deleted": existed}),
                    vec!["ORCHESTRATOR", "RESULT"],
                    vec![vec![name.clone(), said.into()]],
                ),
                cli.output,
            );
        }
        OrchestratorCommand::Detect => {
            let d = registry.detect().await?;
            let rule = serde_json::to_value(d.rule)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            print(
                &Printable::new(
                    &d,
                    vec!["KIND", "RULE", "REASON"],
                    vec![vec![d.kind.to_string(), rule, d.reason.clone()]],
                ),
                cli.output,
            );
        }
        OrchestratorCommand::Kinds => {
            let kinds = registry.kinds().await?;
            let rows = kinds
                .iter()
                .map(|k| {
                    vec![
                        k.kind.to_string(),
                        k.storage_ops.to_string(),
                        k.description.clone(),
                    ]
                })
                .collect();
            print(
                &Printable::new(&kinds, vec!["KIND", "STORAGE-OPS", "DESCRIPTION"], rows),
                cli.output,
            );
        }
    }
    Ok(())
}

/// A fresh random token: 32 bytes from the OS generator, hex-encoded, with a recognisable prefix.
pub fn new_token() -> String {
    use rand::Rng;
    let bytes: [u8; 32] = rand::rng().random();
    format!("berth_{}", hex::encode(bytes))
}

/// `berth token create`.
pub fn token(cli: &Cli, command: &TokenCommand) -> Result<(), CliError> {
    let TokenCommand::Create { scopes, name } = command;
    let scopes = scopes
        .iter()
        .map(|s| gateway::routes::Scope::parse(s.trim()).ok_or_else(|| CliError::Usage(format!("--scopes: unknown scope {s:?}; the scopes are machines:read, machines:write, volumes:read, volumes:write, orchestrators:read, orchestrators:write, admin"))))
        .collect::<Result<Vec<_>, _>>()?;
    if name.is_empty() || name.chars().any(char::is_whitespace) {
        return Err(CliError::Usage("--name: must be one word".into()));
    }
    let token = new_token();
    let line = gateway::auth::tokens_file_line(name, &token, &scopes);
    let value = serde_json::json!({"token": token, "tokensFileLine": line});
    print(
        &Printable::new(
            &value,
            vec!["TOKEN", "TOKENS-FILE LINE"],
            vec![vec![token.clone(), line.clone()]],
        ),
        cli.output,
    );
    if cli.output == crate::args::Output::Table {
        eprintln!(
            "The token is shown once. Add the line to the gateway's tokens file (BERTH_TOKENS_FILE); it is picked up within a second."
        );
    }
    Ok(())
}
