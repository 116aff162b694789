//! Bad input: a 400 problem+json naming the field; the operator's allow-lists.

use std::path::Path;

use serde_json::json;
use service_kit::Env;

use crate::support::*;

#[tokio::test]
async fn invalid_names_are_400_naming_the_name_on_every_route() {
    let app = spawn_app().await;
    let long = "a".repeat(64);
    for bad in [
        "Upper",
        "under_score",
        "-lead",
        "trail-",
        long.as_str(),
        "dots.in.it",
    ] {
        app.put(bad, json!({"kind": "nomad"}))
            .await
            .assert_invalid("name");
        app.get(bad).await.assert_invalid("name");
        app.delete(bad).await.assert_invalid("name");
        assert_eq!(app.head(bad).await.status, 400, "{bad}");
    }
    // The longest label is fine.
    let max = "a".repeat(63);
    assert_eq!(app.put(&max, json!({"kind": "nomad"})).await.status, 201);
}

#[tokio::test]
async fn invalid_kinds_are_400_naming_the_kind() {
    let app = spawn_app().await;
    app.put("x", json!({"kind": "swarm"}))
        .await
        .assert_invalid("kind");
    app.put("x", json!({"kind": "Docker"}))
        .await
        .assert_invalid("kind");
    app.put("x", json!({"label": "no kind"}))
        .await
        .assert_invalid("kind");
    app.put("x", json!({"kind": 7}))
        .await
        .assert_invalid("kind");
    let r = app.put("x", json!({"kind": "swarm"})).await;
    assert!(
        r.detail().contains("local, docker, kubernetes, nomad"),
        "{}",
        r.detail()
    );
    assert_eq!(app.get("x").await.status, 404, "nothing half-made");
}

#[tokio::test]
async fn invalid_configs_and_fields_are_400_naming_the_field() {
    let app = spawn_app().await;
    for (body, field) in [
        (json!({"kind": "local"}), "config.basePath"),
        (local("relative/dir"), "config.basePath"),
        (local("/"), "config.basePath"),
        (local("/srv/../etc"), "config.basePath"),
        // Control bytes: C0, DEL, C1 (an ANSI escape's introducer among them).
        (local("/srv/a\u{1}b"), "config.basePath"),
        (local("/srv/a\u{1b}[31m"), "config.basePath"),
        (local("/srv/\u{7f}"), "config.basePath"),
        (local("/srv/\u{9b}31m"), "config.basePath"),
        (
            json!({"kind": "docker", "config": {"host": "unix:///run/\u{85}d.sock"}}),
            "config.host",
        ),
        (json!({"kind": "nomad", "label": "a\u{9b}b"}), "label"),
        (
            json!({"kind": "local", "config": {"basePath": 3}}),
            "config.basePath",
        ),
        (
            json!({"kind": "local", "config": {"basePath": "/srv", "capacity": "a lot"}}),
            "config.capacity",
        ),
        (
            json!({"kind": "local", "config": {"basePath": "/srv", "capacity": "-1Gi"}}),
            "config.capacity",
        ),
        (
            json!({"kind": "local", "config": {"basePath": "/srv", "sise": "1Gi"}}),
            "config.sise",
        ),
        (
            json!({"kind": "docker", "config": {"host": "http://engine:2375"}}),
            "config.host",
        ),
        (
            json!({"kind": "docker", "config": {"host": "unix://docker.sock"}}),
            "config.host",
        ),
        (
            json!({"kind": "docker", "config": {"host": "tcp://engine"}}),
            "config.host",
        ),
        (
            json!({"kind": "docker", "config": {"basePath": "/srv"}}),
            "config.basePath",
        ),
        (
            json!({"kind": "kubernetes", "config": {"context": "prod"}}),
            "config.context",
        ),
        (json!({"kind": "nomad", "config": "yes"}), "config"),
        (json!({"kind": "nomad", "colour": "blue"}), "colour"),
        (json!({"kind": "nomad", "label": 1}), "label"),
        (json!({"kind": "nomad", "label": "l".repeat(254)}), "label"),
        (json!({"kind": "nomad", "region": "r".repeat(64)}), "region"),
        (json!({"kind": "nomad", "region": "eu\nwest"}), "region"),
        (json!({"kind": "nomad", "default": "yes"}), "default"),
        (json!(["kind", "nomad"]), "body"),
    ] {
        app.put("bad-input", body).await.assert_invalid(field);
    }
    // Not JSON at all.
    let r = app
        .send(
            app.http
                .put(app.item("bad-input"))
                .header("content-type", "application/json")
                .body("{kind:"),
        )
        .await;
    r.assert_invalid("body");
    assert_eq!(app.get("bad-input").await.status, 404, "nothing half-made");
}

#[tokio::test]
async fn orchestrators_may_point_only_where_the_operator_allows() {
    // The defaults: volumes under the data directory's volumes/, the local Docker socket.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let roots = data.join("volumes").display().to_string();
    let app = spawn_app_with(
        Env::default().with("BERTH_LOCAL_ROOTS", roots.as_str()),
        false,
        Some(dir),
    )
    .await;
    std::fs::create_dir_all(data.join("volumes")).unwrap();
    std::fs::create_dir_all(data.join("outside")).unwrap();
    std::os::unix::fs::symlink(data.join("outside"), data.join("volumes/escape")).unwrap();
    let at = |rel: &str| format!("{}/{rel}", data.display());
    for (i, (body, field, setting)) in [
        (local("/etc/berth"), "config.basePath", "BERTH_LOCAL_ROOTS"),
        (local("/"), "config.basePath", ""),
        (local(&at("volumes/../../etc")), "config.basePath", ""),
        (
            local(&at("volumes2")),
            "config.basePath",
            "BERTH_LOCAL_ROOTS",
        ),
        (
            local(&data.display().to_string()),
            "config.basePath",
            "BERTH_LOCAL_ROOTS",
        ),
        (
            local(&at("volumes/escape")),
            "config.basePath",
            "symbolic link",
        ),
        (
            local(&at("volumes/escape/deeper")),
            "config.basePath",
            "symbolic link",
        ),
        (
            json!({"kind": "docker", "config": {"host": "tcp://10.0.0.1:2375"}}),
            "config.host",
            "BERTH_DOCKER_ENDPOINTS",
        ),
        (
            json!({"kind": "docker", "config": {"host": "unix:///run/user/1000/docker.sock"}}),
            "config.host",
            "BERTH_DOCKER_ENDPOINTS",
        ),
        // Kubernetes (issue 31): an API server the operator did not allow, in-cluster outside a
        // pod, plain http off loopback, a credential in the config, a claim namespace that is not
        // a label.
        (
            json!({"kind": "kubernetes", "config": {"server": "https://k8s.example:6443", "namespace": "v"}}),
            "config.server",
            "BERTH_KUBERNETES_SERVERS",
        ),
        (
            json!({"kind": "kubernetes", "config": {"namespace": "v"}}),
            "config.server",
            "in-cluster",
        ),
        (
            json!({"kind": "kubernetes", "config": {"server": "http://10.0.0.1:6443", "namespace": "v"}}),
            "config.server",
            "",
        ),
        (
            json!({"kind": "kubernetes", "config": {"namespace": "v", "token": "s3cret"}}),
            "config.token",
            "",
        ),
        (
            json!({"kind": "kubernetes", "config": {"namespace": "Volumes"}}),
            "config.namespace",
            "",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("refused-{i}");
        let r = app.put(&name, body.clone()).await;
        // A malformed path is the caller's 400; a well-formed one the operator's settings refuse
        // is a 412 naming the setting.
        if setting.is_empty() {
            r.assert_invalid(field);
        } else {
            r.assert_not_allowed(field);
        }
        assert!(r.detail().contains(setting), "{body}: {}", r.detail());
        assert_names_no_resolved_path(r.detail(), &data);
        assert_eq!(
            app.get(&name).await.status,
            404,
            "{body}: nothing registered"
        );
    }
    // Each allowed path alone (two local base paths may not nest, so one at a time).
    app.clear().await;
    for (name, body) in [
        ("under", local(&at("volumes/team/./fast"))),
        ("root", local(&roots)),
        ("engine", json!({"kind": "docker"})),
    ] {
        let r = app.put(name, body.clone()).await;
        assert_eq!(r.status, 201, "{body}: {}", r.body);
        if name == "under" {
            app.delete(name).await;
        }
    }
    // An operator allows more, and only what they name.
    let other = tempfile::tempdir().unwrap();
    let other_roots = other.path().join("volumes").display().to_string();
    let app = spawn_app_with(
        Env::default()
            .with("BERTH_LOCAL_ROOTS", format!("{other_roots},/srv/berth"))
            .with("BERTH_DOCKER_ENDPOINTS", "tcp://10.0.0.1:2375")
            .with("BERTH_KUBERNETES_SERVERS", "https://k8s.example:6443"),
        false,
        Some(other),
    )
    .await;
    assert_eq!(app.put("srv", local("/srv/berth/v")).await.status, 201);
    let docker = json!({"kind": "docker", "config": {"host": "tcp://10.0.0.1:2375/"}});
    assert_eq!(app.put("remote", docker).await.status, 201);
    let k8s = json!({"kind": "kubernetes", "config": {"server": "https://K8S.example:6443/", "namespace": "v"}});
    let made = app.put("cluster", k8s).await;
    assert_eq!(made.status, 201, "{}", made.body);
    assert_eq!(
        made.body["config"],
        json!({"server": "https://k8s.example:6443", "namespace": "v", "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"})
    );
    assert_eq!(made.body["storageOps"], true);
    app.put("socket", json!({"kind": "docker"}))
        .await
        .assert_not_allowed("config.host");
}

/// A refusal says a link leads outside, not where (the resolved path is the host's business).
fn assert_names_no_resolved_path(detail: &str, data: &Path) {
    let outside = data.join("outside").display().to_string();
    assert!(!detail.contains(&outside), "{detail}");
}

#[tokio::test]
async fn every_route_refuses_query_parameters_it_does_not_declare() {
    let app = spawn_app().await;
    app.put("q", json!({"kind": "nomad"})).await;
    let url = |path: &str| format!("{}{path}", app.url);
    for (request, name, route) in [
        (
            app.http.get(url("/v1/orchestrators/q?verbose=1")),
            "verbose",
            "GET /v1/orchestrators/{name}",
        ),
        (
            app.http
                .put(url("/v1/orchestrators/q?dryRun=1"))
                .json(&json!({"kind": "nomad", "label": "changed"})),
            "dryRun",
            "PUT /v1/orchestrators/{name}",
        ),
        (
            app.http.delete(url("/v1/orchestrators/q?force=1")),
            "force",
            "DELETE /v1/orchestrators/{name}",
        ),
        (
            app.http.get(url("/v1/orchestrators:detect?x=1")),
            "x",
            "GET /v1/orchestrators:detect",
        ),
        (
            app.http.get(url("/v1/orchestrators:default?x=1")),
            "x",
            "GET /v1/orchestrators:default",
        ),
        (
            app.http.get(url("/v1/kinds?kind=local")),
            "kind",
            "GET /v1/kinds",
        ),
    ] {
        let r = app.send(request).await;
        r.assert_invalid(name);
        assert_eq!(
            r.detail(),
            format!("{name}: is not a query parameter of {route}; it takes none")
        );
    }
    // The list takes the watch's parameters, and names them.
    let r = app
        .send(app.http.get(url("/v1/orchestrators?bogus=1")))
        .await;
    r.assert_invalid("bogus");
    assert_eq!(
        r.detail(),
        "bogus: is not a query parameter of GET /v1/orchestrators; it takes watch, resourceVersion, timeoutSeconds, allowWatchBookmarks"
    );
    let head = app
        .http
        .head(url("/v1/orchestrators/q?verbose=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 400);
    // The refused calls changed nothing.
    let now = app.get("q").await;
    assert_eq!(now.status, 200);
    assert_eq!(now.body["label"], "");
}

/// A symbolic link does not let one `local` base path sit inside another's tree under another name
/// (a break-it finding: a volume made through the link landed in the other's directories, past its
/// capacity): nesting is judged where the paths lead too.
#[tokio::test]
async fn base_paths_that_nest_through_a_symbolic_link_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let volumes = data.join("volumes");
    let roots = volumes.display().to_string();
    let app = spawn_app_with(
        Env::default().with("BERTH_LOCAL_ROOTS", roots.as_str()),
        false,
        Some(dir),
    )
    .await;
    std::fs::create_dir_all(volumes.join("small/team-a")).unwrap();
    std::os::unix::fs::symlink("small", volumes.join("lnk")).unwrap();
    std::os::unix::fs::symlink(volumes.join("small/team-a"), volumes.join("lnk2")).unwrap();
    let at = |rest: &str| volumes.join(rest).display().to_string();
    assert_eq!(app.put("small", local(&at("small"))).await.status, 201);
    for (i, path) in ["lnk", "lnk2", "lnk/deeper"].into_iter().enumerate() {
        let name = format!("linked-{i}");
        let r = app.put(&name, local(&at(path))).await;
        assert_eq!(r.status, 409, "{path}: {}", r.body);
        assert!(
            r.detail().contains("local orchestrator 'small'"),
            "{path}: {}",
            r.detail()
        );
        assert_eq!(
            app.get(&name).await.status,
            404,
            "{path}: nothing registered"
        );
    }
    // Beside it, through a link or not, is fine.
    std::fs::create_dir_all(volumes.join("other")).unwrap();
    std::os::unix::fs::symlink("other", volumes.join("lnk3")).unwrap();
    assert_eq!(app.put("beside", local(&at("lnk3"))).await.status, 201);
}
