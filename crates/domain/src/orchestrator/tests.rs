//! The tests of the kinds' configs, the path rules and the limits. Apart because, inline, their
//! 300 lines outweighed the module's own code and buried it.

use super::*;

/// A capacity of nothing would refuse every volume forever: it is refused at registration, as
/// the schema's pattern (more than 0) says, naming `config.capacity`.
#[test]
fn a_zero_capacity_is_refused() {
    for capacity in ["0", "000", "0Gi", "0.0", "-0", "0e9"] {
        let config = json!({"basePath": "/srv", "capacity": capacity});
        let e = OrchestratorKind::Local
            .validate_config(Some(&config))
            .unwrap_err();
        assert!(
            e.message.starts_with("config.capacity: ")
                && e.message.contains("must be more than 0 bytes"),
            "{capacity}: {}",
            e.message
        );
    }
    let config = json!({"basePath": "/srv", "capacity": "1.5Gi"});
    let config = OrchestratorKind::Local
        .validate_config(Some(&config))
        .unwrap();
    assert_eq!(config["capacity"], "1536Mi");
    let schema = OrchestratorKind::Local.config_schema();
    assert_eq!(
        schema["properties"]["capacity"]["pattern"],
        crate::quantity::CAPACITY_PATTERN
    );
}

#[test]
fn base_paths_nest_when_one_is_the_other_or_inside_it() {
    assert!(base_paths_nest("/srv/a", "/srv/a"));
    assert!(base_paths_nest("/srv/a", "/srv/a/team/x"));
    assert!(base_paths_nest("/srv/a/team/x", "/srv/a"));
    assert!(!base_paths_nest("/srv/a", "/srv/ab"));
    assert!(!base_paths_nest("/srv/a/b", "/srv/a/c"));
}

#[test]
fn control_characters_in_a_base_path_are_refused_naming_the_field() {
    for bad in [
        "/srv/a\u{1}b",
        "/srv/\n",
        "/srv/a\u{7f}",
        "/srv/\u{85}x",
        "/srv/\u{9b}31m",
        "/a\0",
    ] {
        let e = normalize_base_path("config.basePath", bad).unwrap_err();
        assert!(
            e.message.starts_with("config.basePath: ") && e.message.contains("control"),
            "{bad:?}: {}",
            e.message
        );
        OrchestratorKind::Local
            .validate_config(Some(&json!({"basePath": bad})))
            .unwrap_err();
    }
    normalize_base_path("f", "/srv/caf\u{e9}").unwrap();
}

/// A base path inside a volume's own directory (`<name>-<uid>`) is refused, naming the field
/// and the component; names that only look close are not.
#[test]
fn a_base_path_inside_a_volume_is_refused() {
    let uid = "0f8fad5b-d9cb-469f-a165-70867728950e";
    for inside in [
        format!("/srv/vols/team/data-{uid}"),
        format!("/srv/vols/team/data-{uid}/nested"),
        format!("/srv/a-b-{uid}/x"),
    ] {
        let e = OrchestratorKind::Local
            .validate_config(Some(&json!({"basePath": inside})))
            .unwrap_err();
        assert!(
            e.message.starts_with("config.basePath: ")
                && e.message.contains("inside the directory of a Berth volume"),
            "{inside}: {}",
            e.message
        );
    }
    for fine in [
        "/srv/vols".to_string(),
        format!("/srv/{uid}"),
        format!("/srv/data-{}", uid.to_uppercase()),
        format!("/srv/data_{uid}"),
        format!("/srv/Data-{uid}"),
        format!("/srv/data-{uid}x"),
        format!("/srv/\u{e9}-{uid}"),
    ] {
        assert_eq!(volume_object_in(&fine), None, "{fine}");
        OrchestratorKind::Local
            .validate_config(Some(&json!({"basePath": fine})))
            .unwrap_or_else(|e| panic!("{fine}: {e:?}"));
    }
}

#[test]
fn the_base_path_and_host_patterns_accept_only_what_the_validators_accept() {
    let base_path = regex::Regex::new(BASE_PATH_PATTERN).unwrap();
    for text in [
        "/a",
        "/srv/vols",
        "//a//b/",
        "/a/.b/..c/...",
        "/\u{e9}t\u{e9}",
    ] {
        assert!(base_path.is_match(text), "{text}");
        normalize_base_path("f", text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
    }
    for text in [
        "",
        "/",
        "//",
        "a/b",
        "/a/../b",
        "/..",
        "/a/./b",
        "/a\u{0}b",
        "/a\nb",
        "/a\u{84}b",
    ] {
        assert!(!base_path.is_match(text), "{text}");
    }
    let host = regex::Regex::new(DOCKER_HOST_PATTERN).unwrap();
    for text in [
        "unix:///var/run/docker.sock",
        "tcp://127.0.0.1:2375",
        "tcp://[::1]:2376/",
        "tcp://docker-1.example:65535",
    ] {
        assert!(host.is_match(text), "{text}");
        validate_docker_host("f", text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
    }
    for text in [
        "unix://",
        "unix://relative",
        "unix:///a/../b",
        "unix:///a\u{84}b",
        "tcp://host",
        "tcp://:80",
        "tcp://h:0",
        "tcp://h:65536",
        "http://h:80",
    ] {
        assert!(!host.is_match(text), "{text}");
    }
}

#[test]
fn kinds_parse_and_report_storage_ops() {
    assert_eq!(
        OrchestratorKind::parse_field("kind", "docker").unwrap(),
        OrchestratorKind::Docker
    );
    let e = OrchestratorKind::parse_field("kind", "swarm").unwrap_err();
    assert!(
        e.message
            .starts_with("kind: \"swarm\" is not a known orchestrator kind")
    );
    assert!(OrchestratorKind::Local.supports_storage_ops());
    assert!(!OrchestratorKind::Nomad.supports_storage_ops());
    assert_eq!(
        serde_json::to_string(&OrchestratorKind::Kubernetes).unwrap(),
        "\"kubernetes\""
    );
}

#[test]
fn local_config_is_validated_and_normalised() {
    let k = OrchestratorKind::Local;
    let c = k
        .validate_config(Some(
            &json!({"basePath": "//var/./berth/", "capacity": "1024Mi"}),
        ))
        .unwrap();
    assert_eq!(c, json!({"basePath": "/var/berth", "capacity": "1Gi"}));
    let back = LocalConfig::from_config(&c).unwrap();
    assert_eq!(back.capacity.unwrap().bytes(), 1 << 30);
    for (config, field) in [
        (json!({}), "config.basePath: is required"),
        (
            json!({"basePath": "rel/dir"}),
            "config.basePath: \"rel/dir\" must be an absolute",
        ),
        (
            json!({"basePath": "/"}),
            "config.basePath: \"/\" must not be the root",
        ),
        (
            json!({"basePath": "/a/../etc"}),
            "config.basePath: \"/a/../etc\" must not contain '..'",
        ),
        (json!({"basePath": 7}), "config.basePath: must be a string"),
        (
            json!({"basePath": "/a", "capacity": "lots"}),
            "config.capacity: \"lots\" is not a quantity",
        ),
        (
            json!({"basePath": "/a", "size": "1Gi"}),
            "config.size: is not a config key of a local orchestrator",
        ),
    ] {
        let e = k.validate_config(Some(&config)).unwrap_err();
        assert!(e.message.starts_with(field), "{config}: {}", e.message);
    }
    assert!(k.validate_config(Some(&json!([1]))).is_err());
}

#[test]
fn docker_hosts() {
    let k = OrchestratorKind::Docker;
    assert_eq!(
        k.validate_config(None).unwrap(),
        json!({"host": DEFAULT_DOCKER_HOST})
    );
    for ok in [
        "unix:///run/docker.sock",
        "tcp://10.0.0.1:2375",
        "tcp://docker-engine:2376/",
        "tcp://[::1]:2375",
    ] {
        assert!(validate_docker_host("h", ok).is_ok(), "{ok}");
    }
    assert_eq!(
        validate_docker_host("h", "tcp://e:1/").unwrap(),
        "tcp://e:1"
    );
    for bad in [
        "http://x:1",
        "unix://relative.sock",
        "tcp://host",
        "tcp://:2375",
        "tcp://h:99999",
        "unix:///",
    ] {
        let e = validate_docker_host("config.host", bad).unwrap_err();
        assert!(e.message.starts_with("config.host: "), "{bad}");
    }
    let e = OrchestratorKind::Nomad
        .validate_config(Some(&json!({"address": "x"})))
        .unwrap_err();
    assert!(e.message.starts_with(
        "config.address: is not a config key of a nomad orchestrator; it takes no config keys"
    ));
}

#[test]
fn limits_allow_the_roots_and_what_is_under_them_only() {
    let limits = OrchestratorLimits {
        local_roots: vec!["/srv/volumes".into(), "/mnt/b".into()],
        docker_endpoints: vec![DEFAULT_DOCKER_HOST.into(), "tcp://engine:2376".into()],
        kubernetes_servers: Vec::new(),
        in_cluster: false,
    };
    let local = |base: &str| {
        let config = OrchestratorKind::Local
            .validate_config(Some(&json!({ "basePath": base })))
            .unwrap();
        limits.check(OrchestratorKind::Local, &config)
    };
    for ok in [
        "/srv/volumes",
        "/srv/volumes/a/b",
        "/srv//volumes/./x/",
        "/mnt/b/c",
    ] {
        assert!(local(ok).is_ok(), "{ok}");
    }
    for bad in ["/etc", "/srv", "/srv/volumes2", "/srv/volumesx/a", "/mnt"] {
        let e = local(bad).unwrap_err();
        assert!(
            e.message.starts_with("config.basePath: ") && e.message.contains(LOCAL_ROOTS_SETTING),
            "{bad}: {}",
            e.message
        );
    }
    let docker = |host: &str| {
        let config = OrchestratorKind::Docker
            .validate_config(Some(&json!({ "host": host })))
            .unwrap();
        limits.check(OrchestratorKind::Docker, &config)
    };
    assert!(docker("tcp://engine:2376/").is_ok());
    assert!(docker("unix:///var/run/docker.sock").is_ok());
    let e = docker("tcp://10.0.0.1:2375").unwrap_err();
    assert!(
        e.message.starts_with("config.host: ") && e.message.contains(DOCKER_ENDPOINTS_SETTING),
        "{}",
        e.message
    );
    assert!(docker("unix:///run/other.sock").is_err());
    assert!(limits.check(OrchestratorKind::Nomad, &json!({})).is_ok());
    let none = OrchestratorLimits::default();
    let e = none.check_base_path("config.basePath", "/srv").unwrap_err();
    assert!(e.message.contains("none is allowed"), "{}", e.message);
}

#[test]
fn every_kind_has_a_closed_schema() {
    for k in OrchestratorKind::ALL {
        let info = k.info();
        assert_eq!(info.config_schema["additionalProperties"], false);
        assert_eq!(info.storage_ops, k.supports_storage_ops());
    }
}
