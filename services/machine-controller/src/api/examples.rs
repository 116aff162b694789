//! The OpenAPI document's examples and read-only marks: apart because they edit the generated
//! document after the fact and serve no request.

use domain::resources::API_VERSION;
use serde_json::{Value, json};

/// The documented examples, one object of each kind that works on a stack whose Alicloud provider
/// is the ECS emulator (`berth up`): a secret with the emulator's key (its two `EMULATOR_*`
/// placeholders replaced by the key `berth up` prints), a class using the secret `alicloud`, and
/// a machine, set and deployment of the class `small` — the secret and class examples made under
/// those two names first, as the README's tour does. Path parameters name the example objects
/// (the secret and class ones under names nothing uses, so deleting them is allowed); a create's
/// example takes a name of its own, so it does not meet the one the others read and replace.
pub(crate) fn document_examples(doc: &mut Value) {
    // What the controller writes and a caller's write never changes (Kubernetes' status
    // subresource): documented read-only, so a client knows not to send it.
    if let Some(class) = doc["components"]["schemas"].get_mut("MachineClass") {
        domain::machine::document_machine_class(class);
    }
    for schema in ["MachineResource", "MachineSet", "MachineDeployment"] {
        if let Some(status) = doc["components"]["schemas"][schema]["properties"].get_mut("status") {
            status["readOnly"] = json!(true);
        }
    }
    let class = "small";
    let examples: [(&str, &str, Value); 5] = [
        (
            "secrets",
            "spare-secret",
            json!({"apiVersion": API_VERSION, "kind": "Secret",
                "stringData": {"alicloudAccessKeyID": "EMULATOR_ACCESS_KEY_ID",
                               "alicloudAccessKeySecret": "EMULATOR_ACCESS_KEY_SECRET"}}),
        ),
        (
            "machineclasses",
            "spare-class",
            json!({"apiVersion": API_VERSION, "kind": "MachineClass", "provider": "Alicloud",
                "providerSpec": {"imageID": "m-demo-image", "instanceType": "ecs.g6.large",
                    "region": "cn-shanghai", "zoneID": "cn-shanghai-b",
                    "securityGroupID": "sg-demo", "vSwitchID": "vsw-demo", "keyPairName": "demo",
                    "tags": {"kubernetes.io/cluster/demo": "1", "kubernetes.io/role/node": "1"}},
                "secretRef": {"name": "alicloud"}}),
        ),
        (
            "machines",
            "worker-1",
            json!({"apiVersion": API_VERSION, "kind": "Machine",
                "metadata": {"labels": {"role": "single"}},
                "spec": {"class": {"name": class}}}),
        ),
        (
            "machinesets",
            "pool",
            json!({"apiVersion": API_VERSION, "kind": "MachineSet",
                "spec": {"replicas": 1, "selector": {"matchLabels": {"pool": "set"}},
                    "template": {"metadata": {"labels": {"pool": "set"}},
                                 "spec": {"class": {"name": class}}}}}),
        ),
        (
            "machinedeployments",
            "workers",
            json!({"apiVersion": API_VERSION, "kind": "MachineDeployment",
                "spec": {"replicas": 1, "selector": {"matchLabels": {"pool": "workers"}},
                    "template": {"metadata": {"labels": {"pool": "workers"}},
                                 "spec": {"class": {"name": class}}}}}),
        ),
    ];
    for (plural, name, body) in examples {
        let collection = format!("/v1/namespaces/{{namespace}}/{plural}");
        let item = format!("{collection}/{{name}}");
        let with_name = |name: &str| {
            let mut body = body.clone();
            let labels = body["metadata"]["labels"].clone();
            body["metadata"] = json!({"name": name});
            if !labels.is_null() {
                body["metadata"]["labels"] = labels;
            }
            body
        };
        let paths = &mut doc["paths"];
        for (path, method) in [
            (&collection, "get"),
            (&collection, "post"),
            (&item, "get"),
            (&item, "put"),
            (&item, "patch"),
            (&item, "delete"),
        ] {
            let Some(operation) = paths.get_mut(path.as_str()).and_then(|p| p.get_mut(method))
            else {
                continue;
            };
            if let Some(parameters) = operation["parameters"].as_array_mut() {
                for p in parameters.iter_mut() {
                    match p["name"].as_str() {
                        Some("namespace") => p["example"] = json!("team-a"),
                        Some("name") => p["example"] = json!(name),
                        _ => {}
                    }
                }
            }
            let example = match method {
                "post" => with_name(&format!("{name}-new")),
                "put" => with_name(name),
                "patch" => json!({"metadata": {"labels": {"team": "a"}}}),
                _ => continue,
            };
            if let Some(content) = operation["requestBody"]["content"].as_object_mut() {
                for media in content.values_mut() {
                    media["example"] = example.clone();
                }
            }
        }
    }
}
