//! What the OpenAPI document says beyond the handlers' annotations: the request bodies per
//! provider, the links between calls, and the examples and 412 texts the annotations share. Apart
//! because it describes the API and serves no request.

/// The request bodies as each provider reads them: `machineClass.provider` is `Alicloud` or
/// `Docker`, and one `if provider is P then the body is P's` rule per provider says what P accepts
/// of the machine, its class's `providerSpec` and the secret (each provider's `schema` module, held
/// to its validators by its tests). CreateMachine reads more of a class than the other calls (a
/// machine whose class changed since it was made can still be looked at and deleted), so it has a
/// body schema of its own, `CreateMachineRequest`.
fn document_requests(doc: &mut serde_json::Value) {
    use serde_json::{Value, json};

    use crate::provider::CheckedFor;
    use crate::{alicloud, docker};

    fn when(provider: &str, then: Value) -> Value {
        json!({
            "if": {
                "required": ["machineClass"],
                "properties": {"machineClass": {"required": ["provider"], "properties": {"provider": {"const": provider}}}}
            },
            "then": then,
        })
    }

    fn class(spec: Value) -> Value {
        json!({"required": ["providerSpec"], "properties": {"providerSpec": spec}})
    }
    // body: "create", "initialize", "machine" (status and delete) or "list"
    let rules = |body: &str| -> Value {
        let checked_for = if body == "create" {
            CheckedFor::Create
        } else {
            CheckedFor::Lookup
        };
        let mut alicloud = json!({"properties": {
            "machineClass": class(alicloud::spec::schema::provider_spec(checked_for)),
            "secret": alicloud::spec::schema::secret(checked_for),
        }});
        let mut docker = json!({"properties": {
            "machineClass": class(docker::spec::schema::provider_spec(checked_for)),
            "secret": docker::spec::schema::secret(),
        }});
        if body != "list" {
            alicloud["properties"]["machine"] = alicloud::spec::schema::machine(checked_for);
            docker["properties"]["machine"] = docker::spec::schema::machine(checked_for);
            // The machine's namespace, which each provider stamps on what it makes ([`namespace_of`]).
            for machine in [&mut alicloud, &mut docker] {
                machine["properties"]["machine"]["properties"]["metadata"]["properties"]["namespace"] = json!({
                    "type": "string",
                    "pattern": domain::schema::DNS1123_LABEL_OR_EMPTY,
                    "maxLength": domain::names::MAX_NAME_LEN,
                    "description": "The machine's namespace (empty: default), a DNS-1123 label; a token scoped to namespaces sees only machines in them"
                });
            }
        }
        // Only the calls that write or run the user data read it.
        if body == "create" || body == "initialize" {
            docker["allOf"] = json!([docker::spec::schema::exec_needs_a_script()]);
        }
        json!([when(alicloud::NAME, alicloud), when(docker::NAME, docker)])
    };
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if let Some(class) = schemas.get_mut("MachineClass") {
        domain::machine::document_machine_class(class);
    }
    if let Some(list) = schemas.get_mut("ListMachinesRequest") {
        list["allOf"] = rules("list");
    }
    let Some(base) = schemas.get("MachineRequest").cloned() else {
        return;
    };
    for (name, body, what) in [
        ("CreateMachineRequest", "create", "CreateMachine"),
        (
            "InitializeMachineRequest",
            "initialize",
            "InitializeMachine",
        ),
    ] {
        let mut schema = base.clone();
        schema["description"] = json!(format!(
            "The body of {what}: the machine, its class and the secret."
        ));
        schema["allOf"] = rules(body);
        schemas.insert(name.into(), schema);
    }
    if let Some(machine) = schemas.get_mut("MachineRequest") {
        machine["description"] = json!(
            "The body of GetMachineStatus and DeleteMachine: the machine, its class and the secret."
        );
        machine["allOf"] = rules("machine");
    }
    // CheckMachineClass runs CreateMachine's checks, so it takes CreateMachine's body and rules.
    for (path, name) in [
        ("machines:create", "CreateMachineRequest"),
        ("machines:initialize", "InitializeMachineRequest"),
        ("machineclasses:check", "CreateMachineRequest"),
    ] {
        if let Some(body) = doc.pointer_mut(&format!(
            "/paths/~1v1~1{path}/post/requestBody/content/application~1json/schema"
        )) {
            *body = json!({"$ref": format!("#/components/schemas/{name}")});
        }
    }
}

/// OpenAPI `links` from CreateMachine's answer to the calls that take the same request (status,
/// initialise, delete), so a client (and schemathesis' stateful phase) can follow them; and the
/// request bodies per provider ([`document_requests`]).
pub(crate) fn document_links(doc: &mut serde_json::Value) {
    document_requests(doc);
    let links = serde_json::json!({
        "GetMachineStatus": {"operationId": "get_machine_status", "requestBody": "$request.body", "description": "The machine just made"},
        "InitializeMachine": {"operationId": "initialize_machine", "requestBody": "$request.body", "description": "Initialise it"},
        "DeleteMachine": {"operationId": "delete_machine", "requestBody": "$request.body", "description": "Delete it"},
    });
    if let Some(response) = doc.pointer_mut("/paths/~1v1~1machines:create/post/responses/200") {
        response["links"] = links;
    }
}

/// The request example of every machine call: an Alicloud machine against `berth up`'s ECS emulator,
/// its access key placeholders to be replaced with the one `berth up` prints.
pub(super) fn machine_request_example() -> serde_json::Value {
    serde_json::json!({
        "machine": {
            "metadata": {"name": "worker-1", "namespace": "shoot--demo", "uid": "0d9a3c1e-7f44-4f0e-8d3b-5b6a2c1d7e01"},
            "spec": {"class": {"kind": "MachineClass", "name": "demo-class"}}
        },
        "machineClass": {
            "metadata": {"name": "demo-class", "namespace": "shoot--demo"},
            "provider": "Alicloud",
            "providerSpec": {
                "apiVersion": "mcm.gardener.cloud/v1alpha1",
                "imageID": "m-demo-image",
                "instanceType": "ecs.g6.large",
                "region": "cn-shanghai",
                "zoneID": "cn-shanghai-b",
                "securityGroupID": "sg-demo",
                "vSwitchID": "vsw-demo",
                "keyPairName": "demo",
                "systemDisk": {"category": "cloud_efficiency", "size": 50},
                "tags": {"kubernetes.io/cluster/shoot--demo": "1", "kubernetes.io/role/node": "1"}
            }
        },
        "secret": {"stringData": {"alicloudAccessKeyID": "EMULATOR_ACCESS_KEY_ID", "alicloudAccessKeySecret": "EMULATOR_ACCESS_KEY_SECRET"}}
    })
}

/// The 412 of every machine call: a well-formed request this driver's set-up refuses.
pub(super) const PRECONDITION: &str = "Well-formed, but this driver's set-up refuses it (code 9), naming the setting: an Alicloud region it knows no ECS endpoint for or its allow-list (BERTH_ALICLOUD_REGIONS) leaves out, a Docker machine when the driver has no usable Docker Engine (DOCKER_HOST) or the secret's dockerHost is not one BERTH_DOCKER_ENDPOINTS allows";
/// CreateMachine's 412: [`PRECONDITION`], and what only creating reads.
pub(super) const PRECONDITION_ON_CREATE: &str = "Well-formed, but this driver's set-up refuses it (code 9), naming the setting: an Alicloud region it knows no ECS endpoint for or its allow-list (BERTH_ALICLOUD_REGIONS) leaves out, a Docker machine when the driver has no usable Docker Engine (DOCKER_HOST) or the secret's dockerHost is not one BERTH_DOCKER_ENDPOINTS allows, a pull from a registry BERTH_DOCKER_REGISTRIES does not allow, privileged mode without BERTH_DOCKER_ALLOW_PRIVILEGED, a host directory outside BERTH_DOCKER_MOUNT_PATHS, memory, CPUs or pids above the operator's ceiling (BERTH_DOCKER_MEMORY, BERTH_DOCKER_CPUS, BERTH_DOCKER_PIDS), a network BERTH_DOCKER_NETWORKS does not allow, an image the Engine does not have with pull Never, or a network it does not have";

/// ListMachines' request example: the class and secret of [`machine_request_example`].
pub(super) fn list_request_example() -> serde_json::Value {
    let mut example = machine_request_example();
    example.as_object_mut().map(|o| o.remove("machine"));
    example
}
