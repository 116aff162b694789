//! The gateway in front of the real services: every route reachable with its scope and refused
//! without it, and no service reachable around the gateway without the internal credential.

use berth_tests::{INTERNAL_TOKEN, Stack, machine_request, token_for};
use gateway::routes::Scope;

/// A route, the scope it needs, and the body it is called with.
struct Route {
    method: &'static str,
    path: &'static str,
    scope: Scope,
    body: Option<serde_json::Value>,
}

fn routes(base_path: &str) -> Vec<Route> {
    let m = |path, scope| Route {
        method: "POST",
        path,
        scope,
        body: Some(machine_request("e2e-routes")),
    };
    vec![
        Route {
            method: "PUT",
            path: "/v1/orchestrators/e2e-local",
            scope: Scope::OrchestratorsWrite,
            body: Some(serde_json::json!({"kind": "local", "config": {"basePath": base_path}})),
        },
        Route {
            method: "GET",
            path: "/v1/orchestrators/e2e-local",
            scope: Scope::OrchestratorsRead,
            body: None,
        },
        Route {
            method: "HEAD",
            path: "/v1/orchestrators/e2e-local",
            scope: Scope::OrchestratorsRead,
            body: None,
        },
        Route {
            method: "GET",
            path: "/v1/orchestrators",
            scope: Scope::OrchestratorsRead,
            body: None,
        },
        Route {
            method: "GET",
            path: "/v1/orchestrators:detect",
            scope: Scope::OrchestratorsRead,
            body: None,
        },
        Route {
            method: "GET",
            path: "/v1/kinds",
            scope: Scope::OrchestratorsRead,
            body: None,
        },
        Route {
            method: "POST",
            path: "/v1/volumes",
            scope: Scope::VolumesWrite,
            body: Some(
                serde_json::json!({"name": "e2e", "capacity": "16Mi", "orchestrator": "e2e-local"}),
            ),
        },
        Route {
            method: "GET",
            path: "/v1/volumes/default/e2e",
            scope: Scope::VolumesRead,
            body: None,
        },
        Route {
            method: "GET",
            path: "/v1/volumes/default/e2e/stats",
            scope: Scope::VolumesRead,
            body: None,
        },
        Route {
            method: "GET",
            path: "/v1/volumes?namespace=default",
            scope: Scope::VolumesRead,
            body: None,
        },
        Route {
            method: "GET",
            path: "/v1/orphans",
            scope: Scope::VolumesRead,
            body: None,
        },
        Route {
            method: "DELETE",
            path: "/v1/volumes/default/e2e",
            scope: Scope::VolumesWrite,
            body: None,
        },
        Route {
            method: "GET",
            path: "/v1/providers",
            scope: Scope::MachinesRead,
            body: None,
        },
        m("/v1/machines:create", Scope::MachinesWrite),
        m("/v1/machines:status", Scope::MachinesRead),
        m("/v1/machines:initialize", Scope::MachinesWrite),
        Route {
            method: "POST",
            path: "/v1/machines:list",
            scope: Scope::MachinesRead,
            body: Some({
                let mut r = machine_request("x");
                r.as_object_mut().unwrap().remove("machine");
                r
            }),
        },
        Route {
            method: "POST",
            path: "/v1/volume-ids",
            scope: Scope::MachinesRead,
            body: Some(
                serde_json::json!({"pvSpecs": [{"csi": {"driver": "diskplugin.csi.alibabacloud.com", "volumeHandle": "d-1"}}]}),
            ),
        },
        m("/v1/machines:delete", Scope::MachinesWrite),
        Route {
            method: "DELETE",
            path: "/v1/orchestrators/e2e-local",
            scope: Scope::OrchestratorsWrite,
            body: None,
        },
    ]
}

fn with_body(
    r: reqwest::RequestBuilder,
    body: &Option<serde_json::Value>,
) -> reqwest::RequestBuilder {
    match body {
        Some(b) => r.json(b),
        None => r,
    }
}

#[tokio::test]
async fn every_route_is_reachable_with_its_scope_and_refused_without() {
    let stack = Stack::spawn(&[]).await;
    let base_path = stack.data.path().join("volumes/e2e");
    for route in routes(base_path.to_str().unwrap()) {
        let what = format!("{} {}", route.method, route.path);
        let none = with_body(stack.call(route.method, route.path, None), &route.body)
            .send()
            .await
            .unwrap();
        assert_eq!(none.status(), 401, "{what} without a token");
        let other = if route.scope == Scope::VolumesRead {
            Scope::MachinesRead
        } else {
            Scope::VolumesRead
        };
        let wrong = with_body(
            stack.call(route.method, route.path, Some(token_for(other))),
            &route.body,
        )
        .send()
        .await
        .unwrap();
        assert_eq!(wrong.status(), 403, "{what} with {other}");
        let nothing = with_body(
            stack.call(route.method, route.path, Some("tok-nothing")),
            &route.body,
        )
        .send()
        .await
        .unwrap();
        assert_eq!(nothing.status(), 401, "{what} with a token not in the file");
        let ok = with_body(
            stack.call(route.method, route.path, Some(token_for(route.scope))),
            &route.body,
        )
        .send()
        .await
        .unwrap();
        let status = ok.status().as_u16();
        let text = ok.text().await.unwrap_or_default();
        assert!(
            (200..300).contains(&status),
            "{what} with {}: {status} {text}",
            route.scope
        );
    }
}

#[tokio::test]
async fn services_refuse_calls_that_bypass_the_gateway() {
    let stack = Stack::spawn(&[]).await;
    let c = reqwest::Client::new();
    for (base, path) in [
        (&stack.registry, "/v1/orchestrators"),
        (&stack.storage_ops, "/v1/volumes"),
        (&stack.machine_driver, "/v1/providers"),
    ] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(
            r.status(),
            401,
            "{base}{path} without the internal credential"
        );
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["code"], 16);
        let r = c
            .get(format!("{base}{path}"))
            .bearer_auth("tok-admin")
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            401,
            "a user token is not the internal credential"
        );
        let r = c
            .get(format!("{base}{path}"))
            .bearer_auth(INTERNAL_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{base}{path} with the internal credential");
        assert_eq!(
            c.get(format!("{base}/healthz"))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
    }
}

#[tokio::test]
async fn gateway_readiness_and_openapi_cover_every_upstream() {
    let stack = Stack::spawn(&[]).await;
    let ready = stack.call("GET", "/readyz", None).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let doc: serde_json::Value = stack
        .call("GET", "/openapi.json", None)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for (path, method, scope) in [
        ("/v1/volumes", "post", "volumes:write"),
        ("/v1/volumes/{namespace}/{name}", "get", "volumes:read"),
        ("/v1/orchestrators/{name}", "put", "orchestrators:write"),
        ("/v1/machines:create", "post", "machines:write"),
        ("/v1/machines:status", "post", "machines:read"),
    ] {
        assert_eq!(
            doc["paths"][path][method]["x-berth-scope"], scope,
            "{method} {path}"
        );
    }
}

/// A compressed body is refused as a coding not taken (415), through the gateway to every service
/// that reads a body, not read as if it were plain (a break-it finding: a gzip header was ignored).
#[tokio::test]
async fn a_body_with_a_content_encoding_is_refused_as_such() {
    let stack = Stack::spawn(&[]).await;
    for (method, path) in [
        ("POST", "/v1/volumes"),
        ("PUT", "/v1/orchestrators/enc"),
        ("POST", "/v1/machines:create"),
        ("POST", "/v1/namespaces/default/secrets"),
    ] {
        let r = stack
            .call(method, path, Some("tok-admin"))
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 415, "{method} {path}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(
            body["detail"]
                .as_str()
                .unwrap()
                .contains("Content-Encoding other than identity"),
            "{method} {path}: {body}"
        );
    }
}
