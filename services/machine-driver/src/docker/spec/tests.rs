//! The spec's unit tests: every rule, allowance and name against the answers it gives, and each
//! pattern of [`super::schema`] against the validator it stands for. Apart because they outweigh
//! the code they test, and read across all of the spec's files at once.

use super::rules::{has_control, is_env_name};
use super::*;
use crate::docker::settings::{EngineSite, MIN_MEMORY, Settings, is_network_name};
use domain::machine::{Machine, MachineRequest, Secret};
use domain::{Code, Quantity, Status};
use serde_json::{Value, json};

fn spec(extra: serde_json::Value) -> serde_json::Value {
    let mut base = json!({
        "image": "berth/machine:1",
        "tags": {"kubernetes.io/cluster/demo": "1", "kubernetes.io/role/worker": "1"}
    });
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    base
}

fn plan(extra: serde_json::Value) -> Result<Plan, Status> {
    ProviderSpec::decode(&spec(extra))?.plan(&Settings::default(), EngineSite::Elsewhere)
}

fn refused(extra: serde_json::Value) -> String {
    plan(extra).unwrap_err().message
}

#[test]
fn a_minimal_spec_plans_a_plain_container() {
    let p = plan(json!({})).unwrap();
    assert_eq!(p.image.reference, "berth/machine:1");
    assert_eq!(p.image.registry, "docker.io");
    assert_eq!(p.pull, Pull::Never);
    assert_eq!(p.bootstrap, Bootstrap::None);
    assert_eq!(p.stop_grace, DEFAULT_STOP_GRACE);
    assert_eq!(
        p.scope,
        Scope {
            cluster: "demo".into(),
            role: "worker".into(),
            instance: None,
        }
    );
    let body = p.container("m-1", "u-1");
    let labels = body.labels.unwrap();
    assert_eq!(labels[LABEL_CLUSTER], "demo");
    assert_eq!(labels[LABEL_ROLE], "worker");
    assert_eq!(labels[LABEL_MACHINE], "m-1");
    assert_eq!(labels[LABEL_UID], "u-1");
    assert_eq!(body.hostname.as_deref(), Some("m-1"));
    let host = body.host_config.unwrap();
    assert_eq!(host.privileged, Some(false));
    assert!(host.mounts.is_none());
    assert!(body.entrypoint.is_none() && body.cmd.is_none());
    // A class that names no limits gets the operator's ceilings, and never the Engine's
    // defaults: every capability dropped but a few, no new privileges, no swap.
    assert_eq!(host.memory, Some(512 << 20));
    assert_eq!(host.memory_swap, Some(512 << 20));
    assert_eq!(host.nano_cpus, Some(1_000_000_000));
    assert_eq!(host.pids_limit, Some(256));
    assert_eq!(host.cap_drop.unwrap(), ["ALL"]);
    let caps = host.cap_add.unwrap();
    assert!(
        !caps.iter().any(|c| c == "NET_RAW" || c == "MKNOD"),
        "{caps:?}"
    );
    assert_eq!(host.security_opt.unwrap(), ["no-new-privileges:true"]);
    assert_eq!(host.network_mode, None);
    assert_eq!(labels[LABEL_RECORDS], "volumes");
}

#[test]
fn a_class_may_lower_the_operators_ceilings_never_raise_them() {
    let settings = Settings::default();
    let p = |extra: Value| {
        ProviderSpec::decode(&spec(extra))
            .unwrap()
            .plan(&settings, EngineSite::Elsewhere)
    };
    let low = p(json!({"cpus": 0.25, "memory": "64Mi", "pids": 32})).unwrap();
    assert_eq!(
        (low.nano_cpus, low.memory, low.pids),
        (250_000_000, 64 << 20, 32)
    );
    for (extra, want) in [
        (
            json!({"cpus": 2}),
            "machineClass.providerSpec.cpus: must be at most 1, the operator's ceiling (BERTH_DOCKER_CPUS)",
        ),
        (
            json!({"memory": "513Mi"}),
            "machineClass.providerSpec.memory: must be at most 512Mi, the operator's ceiling (BERTH_DOCKER_MEMORY)",
        ),
        (
            json!({"pids": 257}),
            "machineClass.providerSpec.pids: must be at most 256, the operator's ceiling (BERTH_DOCKER_PIDS)",
        ),
        (
            json!({"network": "kind"}),
            "machineClass.providerSpec.network: \"kind\" is not a network the operator allows machines to join (BERTH_DOCKER_NETWORKS: bridge)",
        ),
    ] {
        let e = p(extra.clone()).unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition, "{extra}");
        assert_eq!(e.message, want, "{extra}");
    }
    let e = p(json!({"pids": 2})).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(e.message.contains("pids: must be between 8 and"), "{e:?}");
    // Raised by the operator, the class may ask for more; without `bridge` on the list, a class
    // naming no network is refused too.
    let raised = Settings {
        nano_cpus: 4_000_000_000,
        memory: 2 << 30,
        pids: 1024,
        networks: ["kind".to_owned()].into(),
        ..Settings::default()
    };
    let p = |extra: Value| {
        ProviderSpec::decode(&spec(extra))
            .unwrap()
            .plan(&raised, EngineSite::Elsewhere)
    };
    let high = p(json!({"cpus": 2, "memory": "1Gi", "pids": 1000, "network": "kind"})).unwrap();
    assert_eq!(
        (high.nano_cpus, high.memory, high.pids),
        (2_000_000_000, 1 << 30, 1000)
    );
    let e = p(json!({})).unwrap_err();
    assert!(e.message.contains("\"bridge\" is not a network"), "{e:?}");
}

#[test]
fn every_free_string_has_a_bound_and_a_huge_one_is_a_400_naming_field_and_bound() {
    let huge = "x".repeat(100_000);
    let huge_path = format!("/{huge}");
    for (extra, field, bound) in [
        (json!({"image": huge}), "image", "image reference"),
        (json!({"pull": huge}), "pull", "Never or IfNotPresent"),
        (json!({"command": [huge]}), "command[0]", "4096"),
        (json!({"args": [huge]}), "args[0]", "4096"),
        (json!({"env": {"A": huge}}), "env[A]", "32768"),
        (json!({"env": {huge.clone(): "v"}}), "env", "256"),
        (json!({"labels": {"a": huge}}), "labels[a]", "1024"),
        (json!({"labels": {huge.clone(): "v"}}), "labels", "317"),
        (json!({"network": huge}), "network", "128"),
        (json!({"memory": huge}), "memory", "32"),
        (json!({"apiVersion": huge}), "apiVersion", "256"),
        (json!({"kind": huge}), "kind", "256"),
        (json!({"bootstrap": huge}), "bootstrap", "none or exec"),
        (
            json!({"mounts": [{"hostPath": huge_path, "containerPath": "/d"}]}),
            "mounts[0].hostPath",
            "4096",
        ),
        (
            json!({"mounts": [{"hostPath": "/d", "containerPath": huge}]}),
            "mounts[0].containerPath",
            "4096",
        ),
    ] {
        let mut raw = spec(json!({}));
        for (k, v) in extra.as_object().unwrap() {
            raw[k] = v.clone();
        }
        let e = ProviderSpec::decode(&raw)
            .unwrap()
            .plan(&Settings::default(), EngineSite::Elsewhere)
            .unwrap_err();
        assert_eq!(
            e.code,
            Code::InvalidArgument,
            "{field}: {}",
            &e.message[..200.min(e.message.len())]
        );
        assert!(
            e.message
                .contains(&format!("machineClass.providerSpec.{field}: ")),
            "{field}: {}",
            &e.message[..200.min(e.message.len())]
        );
        assert!(e.message.contains(bound), "{field}: {}", e.message);
        assert!(
            e.message.len() < 2000,
            "{field}: the answer echoes the value"
        );
    }
    // Tags: a huge value, or a huge key, of a tag besides the scope's.
    let mut raw = spec(json!({}));
    raw["tags"]["note"] = json!(huge);
    let e = ProviderSpec::decode(&raw)
        .unwrap()
        .plan(&Settings::default(), EngineSite::Elsewhere)
        .unwrap_err();
    assert!(
        e.message
            .contains("machineClass.providerSpec.tags[note]: must be at most 1024"),
        "{e:?}"
    );
    let mut raw = spec(json!({}));
    raw["tags"][huge.as_str()] = json!("1");
    let e = ProviderSpec::decode(&raw)
        .unwrap()
        .plan(&Settings::default(), EngineSite::Elsewhere)
        .unwrap_err();
    assert!(
        e.message
            .contains("machineClass.providerSpec.tags: a key must be 1 to 317"),
        "{e:?}"
    );
    assert!(e.message.len() < 2000);
}

#[test]
fn every_field_reaches_the_container() {
    let dir = std::env::temp_dir();
    let root = dir.display().to_string();
    let settings = Settings {
        mount_roots: vec![root.clone()],
        allow_privileged: true,
        nano_cpus: 2_000_000_000,
        networks: ["kind".to_owned()].into(),
        ..Settings::default()
    };
    let p = ProviderSpec::decode(&spec(json!({
        "command": ["/sbin/init"], "args": ["--log", "x"],
        "env": {"A_B": "1"}, "labels": {"team": "infra"}, "network": "kind",
        "cpus": 1.5, "memory": "512Mi", "pids": 100, "privileged": true,
        "mounts": [{"hostPath": format!("{root}/x"), "containerPath": "/data/", "readOnly": true}],
        "bootstrap": "exec", "stopGracePeriodSeconds": 2, "pull": "IfNotPresent"
    })))
    .unwrap()
    .plan(&settings, EngineSite::Elsewhere)
    .unwrap();
    let body = p.container("m-1", "");
    assert_eq!(body.entrypoint.unwrap(), ["/sbin/init"]);
    assert_eq!(body.cmd.unwrap(), ["--log", "x"]);
    assert_eq!(body.env.unwrap(), ["A_B=1"]);
    assert_eq!(body.labels.unwrap()["team"], "infra");
    assert_eq!(body.stop_timeout, Some(2));
    let host = body.host_config.unwrap();
    assert_eq!(host.nano_cpus, Some(1_500_000_000));
    assert_eq!(host.memory, Some(512 << 20));
    assert_eq!(host.pids_limit, Some(100));
    assert_eq!(host.privileged, Some(true));
    assert_eq!(host.network_mode.as_deref(), Some("kind"));
    let m = &host.mounts.unwrap()[0];
    assert_eq!(m.source.as_deref(), Some(format!("{root}/x").as_str()));
    assert_eq!(m.target.as_deref(), Some("/data"));
    assert_eq!(m.read_only, Some(true));
    assert_eq!(p.bootstrap, Bootstrap::Exec);
    assert_eq!(p.pull, Pull::IfNotPresent);
}

#[test]
fn each_rule_names_its_field() {
    let cases = [
        (
            json!({"image": ""}),
            "machineClass.providerSpec.image: is required",
        ),
        (
            json!({"image": "Upper/Case"}),
            "machineClass.providerSpec.image: must be an image reference",
        ),
        (
            json!({"image": "x:"}),
            "machineClass.providerSpec.image: must be an image reference",
        ),
        (
            json!({"pull": "Always"}),
            "machineClass.providerSpec.pull: must be Never or IfNotPresent",
        ),
        (
            json!({"image": "ghcr.io/a/b:1", "pull": "IfNotPresent"}),
            "machineClass.providerSpec.pull: IfNotPresent would pull from registry \"ghcr.io\", which the operator does not allow (BERTH_DOCKER_REGISTRIES)",
        ),
        (
            json!({"command": [""]}),
            "machineClass.providerSpec.command[0]: must not be empty",
        ),
        (
            json!({"args": ["a\u{0}b"]}),
            "machineClass.providerSpec.args[0]: must be at most 4096 characters without control characters (C0, DEL or C1)",
        ),
        (
            json!({"env": {"1X": "v"}}),
            "machineClass.providerSpec.env: \"1X\" is not a variable name",
        ),
        (
            json!({"labels": {"berth.io/machine": "x"}}),
            "machineClass.providerSpec.labels[berth.io/machine]: keys under berth.io/ are the driver's own",
        ),
        (
            json!({"labels": {"com.docker.compose.project": "x"}}),
            "machineClass.providerSpec.labels[com.docker.compose.project]: keys under com.docker. are reserved",
        ),
        (
            json!({"labels": {"berth.io": "x"}}),
            "machineClass.providerSpec.labels[berth.io]: keys under berth.io/ are the driver's own",
        ),
        (
            json!({"labels": {"COM.Docker.compose.project": "x"}}),
            "machineClass.providerSpec.labels[COM.Docker.compose.project]: keys under com.docker. are reserved",
        ),
        (
            json!({"labels": {"com.docker": "x"}}),
            "machineClass.providerSpec.labels[com.docker]: keys under com.docker. are reserved",
        ),
        (
            json!({"labels": {"a b": "x"}}),
            "machineClass.providerSpec.labels: \"a b\" is not a valid label key",
        ),
        (
            json!({"network": "host"}),
            "machineClass.providerSpec.network: host would share",
        ),
        (
            json!({"network": "container:x"}),
            "machineClass.providerSpec.network: must be a Docker network name",
        ),
        (
            json!({"cpus": 0}),
            "machineClass.providerSpec.cpus: must be between 0.01 and 1024",
        ),
        (
            json!({"memory": "1Ki"}),
            "machineClass.providerSpec.memory: must be at least 6Mi",
        ),
        (
            json!({"memory": "lots"}),
            "machineClass.providerSpec.memory: \"lots\" is not a quantity",
        ),
        (
            json!({"privileged": true}),
            "machineClass.providerSpec.privileged: privileged containers are not allowed by the operator (BERTH_DOCKER_ALLOW_PRIVILEGED)",
        ),
        (
            json!({"mounts": [{"hostPath": "/etc", "containerPath": "/etc"}]}),
            "machineClass.providerSpec.mounts[0].hostPath: no host directory may be mounted: the operator allows them with BERTH_DOCKER_MOUNT_PATHS",
        ),
        (
            json!({"mounts": [{"hostPath": "/x", "containerPath": "/var/lib/berth"}]}),
            "machineClass.providerSpec.mounts[0].containerPath: must not be /var/lib/berth, inside it or above it: the driver keeps the user data there",
        ),
        (
            json!({"mounts": [{"hostPath": "/x", "containerPath": "/var/lib/berth/x"}]}),
            "machineClass.providerSpec.mounts[0].containerPath: must not be /var/lib/berth, inside it or above it: the driver keeps the user data there",
        ),
        (
            json!({"mounts": [{"hostPath": "/x", "containerPath": "/var/lib"}]}),
            "machineClass.providerSpec.mounts[0].containerPath: must not be /var/lib/berth, inside it or above it: the driver keeps the user data there",
        ),
        (
            json!({"mounts": [{"hostPath": "/x", "containerPath": "/var/"}]}),
            "machineClass.providerSpec.mounts[0].containerPath: must not be /var/lib/berth, inside it or above it: the driver keeps the user data there",
        ),
        (
            json!({"mounts": [{"hostPath": "/x", "containerPath": "/proc"}]}),
            "machineClass.providerSpec.mounts[0].containerPath: must not be /proc: the Docker Engine provides it",
        ),
        (
            json!({"mounts": [{"hostPath": "/x", "containerPath": "/sys"}]}),
            "machineClass.providerSpec.mounts[0].containerPath: must not be /sys: the Docker Engine provides it",
        ),
        (
            json!({"mounts": [{"hostPath": "/x", "containerPath": "/dev/"}]}),
            "machineClass.providerSpec.mounts[0].containerPath: must not be /dev: the Docker Engine provides it",
        ),
        (
            json!({"mounts": [{"hostPath": "/x", "containerPath": "rel"}]}),
            "machineClass.providerSpec.mounts[0].containerPath: \"rel\" must be an absolute path",
        ),
        (
            json!({"bootstrap": "cloud-init"}),
            "machineClass.providerSpec.bootstrap: must be none or exec",
        ),
        (
            json!({"stopGracePeriodSeconds": 301}),
            "machineClass.providerSpec.stopGracePeriodSeconds: must be at most 300",
        ),
        (
            json!({"tags": {}}),
            "machineClass.providerSpec.tags: must hold one key kubernetes.io/cluster/<name>",
        ),
        (
            json!({"tags": {"kubernetes.io/cluster/a": "1", "kubernetes.io/cluster/b": "1", "kubernetes.io/role/r": "1"}}),
            "machineClass.providerSpec.tags: must hold exactly one key kubernetes.io/cluster/<name>",
        ),
    ];
    for (extra, want) in cases {
        let got = refused(extra.clone());
        assert!(got.contains(want), "{extra}: {got}");
    }
    // One answer names every malformed field; what only the operator's settings refuse waits
    // until the request is well-formed, and is then a FailedPrecondition naming the setting.
    let e = plan(json!({"image": "", "cpus": 9999, "privileged": true})).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert_eq!(
        e.message.matches("machineClass.providerSpec.").count(),
        2,
        "{}",
        e.message
    );
    let e = plan(json!({"privileged": true, "pull": "IfNotPresent", "image": "ghcr.io/x/y", "mounts": [{"hostPath": "/etc", "containerPath": "/etc"}]})).unwrap_err();
    assert_eq!(e.code, Code::FailedPrecondition, "{}", e.message);
    assert_eq!(
        e.message.matches("machineClass.providerSpec.").count(),
        3,
        "{}",
        e.message
    );
    let e = plan(json!({"mounts": [{"hostPath": "rel", "containerPath": "/x"}]})).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{}", e.message);
}

#[test]
fn decoding_errors_name_the_field_and_type_never_the_value() {
    let e = ProviderSpec::decode(&spec(json!({"cpus": "hunter2-secretish"}))).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert_eq!(
        e.message,
        "machineClass.providerSpec.cpus: invalid type: string, expected f64"
    );
    let e = ProviderSpec::decode(&spec(json!({"stopGracePeriodSeconds": -5}))).unwrap_err();
    assert!(!e.message.contains("-5"), "{}", e.message);
    assert!(
        e.message
            .starts_with("machineClass.providerSpec.stopGracePeriodSeconds: "),
        "{}",
        e.message
    );
    let e = ProviderSpec::decode(&spec(json!({"mounts": [{"hostPath": 7}]}))).unwrap_err();
    assert_eq!(
        e.message,
        "machineClass.providerSpec.mounts[0].hostPath: invalid type: integer, expected a string"
    );
    let e = ProviderSpec::decode(&spec(json!({"privilegd": true}))).unwrap_err();
    assert!(
        e.message
            .ends_with("privilegd: not a field it has; did you mean privileged?"),
        "{}",
        e.message
    );
    let e = ProviderSpec::decode(&spec(json!({"networks": "n"}))).unwrap_err();
    assert!(
        e.message.ends_with("did you mean network?"),
        "{}",
        e.message
    );
    let e = ProviderSpec::decode(&spec(json!({"bogus": true}))).unwrap_err();
    assert!(
        e.message.contains("unknown field `bogus`, expected one of"),
        "{}",
        e.message
    );
    let e = ProviderSpec::decode(&json!("x")).unwrap_err();
    assert!(
        e.message
            .starts_with("machineClass.providerSpec: must be a JSON object")
    );
}

#[test]
fn image_references_parse_like_the_engine_reads_them() {
    for (text, registry) in [
        ("alpine", "docker.io"),
        ("alpine:3.20", "docker.io"),
        (
            "library/alpine@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "docker.io",
        ),
        ("localhost:5000/berth/m:v1", "localhost:5000"),
        ("ghcr.io/org/img", "ghcr.io"),
        ("kindest/node:v1.31.0", "docker.io"),
    ] {
        assert_eq!(parse_image(text).unwrap().registry, registry, "{text}");
    }
    for bad in [
        "",
        "a b",
        "UPPER",
        "a:",
        "a@sha256:xyz",
        "alpine@foo:0123456789abcdef0123456789abcdef",
        "alpine@sha256:0123456789abcdef0123456789abcdef",
        "alpine@sha256:0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF",
        "-a",
        "a//b",
        "a:b:c/d",
    ] {
        assert!(parse_image(bad).is_err(), "{bad}");
    }
}

#[test]
fn control_bytes_scope_grammar_and_request_names_are_400s_naming_the_field() {
    let words = |extra: serde_json::Value| refused(extra);
    for (extra, field) in [
        (json!({"args": ["a\u{7}b"]}), "args[0]"),
        (json!({"command": ["/x", "a\u{9b}b"]}), "command[1]"),
        (json!({"env": {"A": "x\u{7f}"}}), "env[A]"),
    ] {
        let e = words(extra.clone());
        assert!(
            e.contains(&format!(
                "machineClass.providerSpec.{field}: must be at most"
            )) && e.contains("without control characters"),
            "{extra}: {e}"
        );
        assert!(!e.chars().any(char::is_control), "{e:?}");
    }
    for (path_field, mount) in [
        (
            "containerPath",
            json!({"hostPath": "/x", "containerPath": "/a\u{1}b"}),
        ),
        (
            "hostPath",
            json!({"hostPath": "/x\u{1}", "containerPath": "/a"}),
        ),
    ] {
        let e = words(json!({"mounts": [mount]}));
        assert!(
            e.contains(&format!(
                "mounts[0].{path_field}: must not contain control characters"
            )),
            "{e}"
        );
        assert!(!e.chars().any(char::is_control), "{e:?}");
    }
    for (tag, rule) in [
        (
            "kubernetes.io/cluster/../..",
            "must be a DNS-1123 subdomain",
        ),
        (
            "kubernetes.io/cluster/a b,c=d",
            "must be a DNS-1123 subdomain",
        ),
        ("kubernetes.io/role/a.b", "must be a DNS-1123 label"),
        ("kubernetes.io/role/A", "must be a DNS-1123 label"),
    ] {
        let mut tags = json!({"kubernetes.io/cluster/c1": "1", "kubernetes.io/role/worker": "1"});
        let prefix = [CLUSTER_TAG, ROLE_TAG]
            .into_iter()
            .find(|p| tag.starts_with(p))
            .unwrap();
        let obj = tags.as_object_mut().unwrap();
        obj.retain(|k, _| !k.starts_with(prefix));
        obj.insert(tag.to_owned(), json!("1"));
        let e = ProviderSpec::decode(&json!({"image": "x", "tags": tags}))
            .unwrap()
            .scope()
            .unwrap_err();
        assert!(
            e.message.contains("machineClass.providerSpec.tags") && e.message.contains(rule),
            "{tag}: {e:?}"
        );
    }
    let mut req = MachineRequest::default();
    req.machine.metadata.namespace = "n".repeat(100_000);
    let e = check_names(&req).unwrap_err();
    assert!(
        e.message.starts_with("machine.metadata.namespace: "),
        "{e:?}"
    );
    assert!(e.message.len() < 1000, "{}", e.message.len());
    req.machine.metadata.namespace = "team-a".into();
    req.machine_class.metadata.name = "c".repeat(100_000);
    let e = check_names(&req).unwrap_err();
    assert!(
        e.message.starts_with("machineClass.metadata.name: "),
        "{e:?}"
    );
    assert!(e.message.len() < 1000, "{}", e.message.len());
    req.machine_class.metadata.name = "a b".into();
    assert!(check_names(&req).is_err());
    req.machine_class.metadata.name = "docker-small.v1".into();
    check_names(&req).unwrap();
    req.machine.metadata.namespace.clear();
    check_names(&req).unwrap();
}

#[test]
fn an_images_reserved_labels_are_foreign_unless_the_driver_sets_them() {
    let labels = |keys: &[&str]| -> HashMap<String, String> {
        keys.iter()
            .map(|k| ((*k).to_owned(), "v".to_owned()))
            .collect()
    };
    assert_eq!(
        foreign_image_label(&labels(&[
            "org.opencontainers.image.title",
            LABEL_CLUSTER,
            LABEL_RECORDS,
            "berth.io/namespace"
        ])),
        None
    );
    for key in [
        "com.docker.compose.project",
        "berth.io/bootstrap-exec",
        "Berth.io/cluster",
        "berth.io",
        "COM.DOCKER",
    ] {
        assert_eq!(foreign_image_label(&labels(&[key, "zz.other"])), Some(key));
    }
}

#[test]
fn names_uids_and_provider_ids() {
    let mut m = Machine::default();
    m.metadata.name = "worker-1.pool".into();
    m.metadata.uid = "6a0c5d4e-0b7e".into();
    assert_eq!(machine_name(&m).unwrap(), "worker-1.pool");
    assert_eq!(machine_uid(&m).unwrap(), "6a0c5d4e-0b7e");
    assert_eq!(provider_id("worker-1"), "docker:///worker-1");
    assert_eq!(
        decode_provider_id("docker:///worker-1").unwrap(),
        "worker-1"
    );
    for bad in [
        "docker://worker-1",
        "docker:////worker-1",
        "docker:///",
        "docker:///a/b",
        "w",
    ] {
        let e = decode_provider_id(bad).unwrap_err();
        assert!(e.message.starts_with("machine.spec.providerID: "), "{bad}");
    }
    m.metadata.name = "x".repeat(64);
    assert!(machine_name(&m).is_err());
    m.metadata.name = "a".into();
    assert!(machine_name(&m).is_err());
    m.metadata.uid = "a/b".into();
    assert!(machine_uid(&m).is_err());
}

#[test]
fn user_data_is_required_and_runnable_for_an_exec_bootstrap() {
    let none = Secret::default();
    assert_eq!(user_data(&none, Bootstrap::None).unwrap(), None);
    let e = user_data(&none, Bootstrap::Exec).unwrap_err();
    assert_eq!(
        e.message,
        "secret.data[userData]: is required when machineClass.providerSpec.bootstrap is exec"
    );
    let plain = Secret::from_string_data([("userData", "echo token-abc123")]);
    assert!(user_data(&plain, Bootstrap::None).unwrap().is_some());
    let e = user_data(&plain, Bootstrap::Exec).unwrap_err();
    assert!(e.message.contains("must start with #!"));
    assert!(!e.message.contains("token-abc123"));
    let script = Secret::from_string_data([("userData", "#!/bin/sh\necho hi\n")]);
    assert!(user_data(&script, Bootstrap::Exec).unwrap().is_some());
}

/// Each pattern of [`schema`] against the validator it stands for: a value matches exactly when
/// the driver accepts it, or, where the pattern says it is narrower, only values it accepts.
mod schema_patterns {
    use super::super::schema::*;
    use super::*;

    fn re(pattern: &str) -> regex::Regex {
        regex::Regex::new(pattern).unwrap()
    }

    #[test]
    fn image_references() {
        let pattern = re(&image_pattern());
        let exact = [
            "alpine",
            "alpine:3.20",
            "library/alpine@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "localhost:5000/berth/m:v1",
            "localhost/x",
            "ghcr.io/org/img",
            "GHCR.io/org/img",
            "kindest/node:v1.31.0",
            "a.b",
            "a.b/c",
            "a_b.c/x",
            "a__b/c-d",
            "my-reg:5000/x",
            "",
            "a b",
            "UPPER",
            "a:",
            "a@sha256:xyz",
            "alpine@foo:0123456789abcdef0123456789abcdef",
            "alpine@sha256:0123456789abcdef0123456789abcdef",
            "a@sha512:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "-a",
            "a//b",
            "a:b:c/d",
            "a:.x",
            "a/b:-x",
            "x:5000",
            "-reg.io/x",
            "reg-.io/x",
            "a.b:0/x",
        ];
        for case in exact {
            assert_eq!(
                pattern.is_match(case),
                parse_image(case).is_ok(),
                "{case:?}"
            );
        }
        // Narrower: ports the validator also reads (leading zeros) are left out.
        assert!(parse_image("reg:05000/x").is_ok() && !pattern.is_match("reg:05000/x"));
        let long = format!("a:{}", "t".repeat(128));
        assert!(pattern.is_match(&long) && parse_image(&long).is_ok());
        let too_long = format!("a:{}", "t".repeat(129));
        assert!(!pattern.is_match(&too_long) && parse_image(&too_long).is_err());
    }

    #[test]
    fn reserved_container_paths() {
        let reserved = re(RESERVED_CONTAINER_PATH);
        for path in [
            "/var",
            "/var/",
            "//var/lib",
            "/var/lib/berth",
            "/var/lib/berth/x",
            "/proc",
            "/sys/",
            "/dev",
            "/data",
            "/var/log",
            "/variable",
            "/proc/x",
            "/devices",
            "/var/lib/berthx",
        ] {
            let refused = plan(json!({"mounts": [{"hostPath": "/x", "containerPath": path}]}))
                .unwrap_err()
                .message
                .contains("containerPath");
            assert_eq!(reserved.is_match(path), refused, "{path}");
        }
    }

    #[test]
    fn names_networks_and_memory() {
        let env = re(ENV_NAME);
        for case in ["A_B", "_x", "a1", "1X", "", "a-b", "ü", "A B"] {
            assert_eq!(env.is_match(case), is_env_name(case), "{case:?}");
        }
        let network = re(NETWORK);
        for case in ["kind", "a_b.c-d", "0", "-x", "a b", "container:x", "ü"] {
            assert_eq!(network.is_match(case), is_network_name(case), "{case:?}");
        }
        let memory = re(MEMORY);
        for case in ["6Mi", "512Mi", "9999999Mi", "1Gi", "999999Gi"] {
            assert!(memory.is_match(case), "{case:?}");
            let q = Quantity::parse_field("m", case).unwrap();
            assert!(
                q.bytes() >= MIN_MEMORY && i64::try_from(q.bytes()).is_ok(),
                "{case:?}"
            );
        }
        for case in ["5Mi", "0Gi", "1Ki", "lots", "", "06Mi", "1.5Gi"] {
            assert!(!memory.is_match(case), "{case:?}");
        }
    }

    #[test]
    fn controls_and_provider_ids() {
        let no_control = re(NO_CONTROL);
        for case in [
            "plain",
            "tab\there",
            "nul\0",
            "del\u{7f}",
            "c1\u{85}",
            "ü",
            "",
        ] {
            assert_eq!(no_control.is_match(case), !has_control(case), "{case:?}");
        }
        let pattern = re(&provider_id_pattern());
        for case in [
            "docker:///worker-1",
            "docker:///w",
            "docker://worker-1",
            "docker:////worker-1",
            "docker:///",
            "docker:///a/b",
            "docker:///A",
            "w",
        ] {
            assert_eq!(
                pattern.is_match(case),
                decode_provider_id(case).is_ok(),
                "{case:?}"
            );
        }
    }

    #[test]
    fn scope_tags() {
        for (tags, ok) in [
            (
                json!({"kubernetes.io/cluster/c": "1", "kubernetes.io/role/r": ""}),
                true,
            ),
            (
                json!({"kubernetes.io/cluster/": "1", "kubernetes.io/role/r": "1"}),
                false,
            ),
            (
                json!({"kubernetes.io/cluster/c\n": "1", "kubernetes.io/role/r": "1"}),
                false,
            ),
            (
                json!({"kubernetes.io/cluster/ü": "1", "kubernetes.io/role/r": "1", "x": "y"}),
                false,
            ),
            (
                json!({"kubernetes.io/cluster/c.d-1": "1", "kubernetes.io/role/r-2": "1", "x": "y"}),
                true,
            ),
            (json!({"kubernetes.io/role/r": "1"}), false),
        ] {
            let spec = ProviderSpec::decode(&json!({"tags": tags})).unwrap();
            assert_eq!(spec.scope().is_ok(), ok, "{tags}");
        }
        let mut tags = serde_json::Map::new();
        let longest = [
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61),
        ]
        .join(".");
        assert_eq!(longest.len(), 253);
        tags.insert(format!("kubernetes.io/cluster/{longest}"), json!("1"));
        tags.insert("kubernetes.io/role/r".into(), json!("1"));
        let spec = ProviderSpec::decode(&json!({"tags": tags})).unwrap();
        assert!(spec.scope().is_ok());
    }
}
