//! URLs built from caller input: region and providerID never choose where the driver connects.

use std::time::Duration;

use client::machines::Client;
use client::{ClientOptions, ServiceClient};
use domain::Code;
use domain::machine::{ListMachinesRequest, MachineRequest};
use serde_json::json;
use service_kit::Env;
use service_kit::testing::{TestServer, spawn};

use crate::support::*;

/// Regions that try to turn `https://ecs.<region>.aliyuncs.com` into another host, port or path,
/// or that are simply not ECS region ids.
fn hostile_regions(port: u16) -> Vec<String> {
    let mut v: Vec<String> = [
        "x@127.0.0.1:{port}/",
        "x@127.0.0.1:{port}",
        "x@127.0.0.1:{port}/#",
        "cn-shanghai@127.0.0.1:{port}/?",
        "cn-shanghai:{port}",
        "127.0.0.1:{port}/x",
        "x@localhost:{port}/",
        "cn-shanghai/../../x",
        "../x",
        "cn-shanghai\r\nHost: 127.0.0.1:{port}",
        "cn-shanghai%2f@127.0.0.1:{port}",
        "CN-SHANGHAI",
        "cn_shanghai",
        "cn-shanghai.",
        "-cn-shanghai",
        "cn-shanghai-",
        "cn--shanghai",
        " cn-shanghai",
        "cn",
    ]
    .iter()
    .map(|r| r.replace("{port}", &port.to_string()))
    .collect();
    v.push(format!("cn-{}", "a".repeat(80)));
    v
}

/// A driver that calls the regional endpoints (no `BERTH_ALICLOUD_ENDPOINT`), as in production.
async fn spawn_driver_without_endpoint() -> (TestServer, Client) {
    let env = Env::default()
        .with("BERTH_LISTEN", "127.0.0.1:0")
        .with("BERTH_REQUEST_TIMEOUT", "3s");
    let mut config = machine_driver::Config::from_env(&env).unwrap();
    config.ecs.retry = retry(2);
    config.ecs.connect_timeout = Duration::from_millis(500);
    let providers = machine_driver::providers(&config).unwrap();
    let driver = spawn(machine_driver::router(&config, providers)).await;
    let machines = Client::new(ServiceClient::new(&driver.url, ClientOptions::default()));
    (driver, machines)
}

fn assert_listener_untouched(listener: &std::net::TcpListener) {
    listener.set_nonblocking(true).unwrap();
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok((_, from)) => panic!("the driver connected to the test's port (from {from})"),
        Err(e) => panic!("accept failed: {e}"),
    }
}

#[tokio::test]
async fn a_region_never_chooses_the_host_the_driver_connects_to() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_driver, machines) = spawn_driver_without_endpoint().await;
    let mut regions = hostile_regions(port);
    // Well-formed, but not a region ECS has: no regional endpoint can ever answer for it.
    regions.push("xx-nowhere-1".into());
    for region in &regions {
        let mut spec = provider_spec();
        spec["region"] = json!(region);
        let r = MachineRequest {
            machine_class: class_with(spec),
            ..req("m-ssrf")
        };
        let l = ListMachinesRequest {
            machine_class: r.machine_class.clone(),
            secret: secret(),
        };
        let answers = [
            ("create", machines.create(&r).await.map(|_| ())),
            ("status", machines.status(&r).await.map(|_| ())),
            ("delete", machines.delete(&r).await.map(|_| ())),
            ("initialize", machines.initialize(&r).await.map(|_| ())),
            ("list", machines.list(&l).await.map(|_| ())),
        ];
        for (method, answer) in answers {
            let e = answer.expect_err(method);
            // Malformed: the request's mistake; well-formed but unknown here: the set-up's refusal.
            if region == "xx-nowhere-1" {
                assert_code(&e, Code::FailedPrecondition, 412);
            } else {
                assert_code(&e, Code::InvalidArgument, 400);
            }
            assert!(
                e.status
                    .message
                    .contains("machineClass.providerSpec.region"),
                "{method} with region {region:?}: {}",
                e.status.message
            );
            assert!(
                !e.status.message.contains(&port.to_string()),
                "the message does not echo the hostile value: {}",
                e.status.message
            );
        }
    }
    assert_listener_untouched(&listener);
}

#[tokio::test]
async fn a_provider_id_never_chooses_the_host_the_driver_connects_to() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_driver, machines) = spawn_driver_without_endpoint().await;
    let mut provider_ids: Vec<String> = hostile_regions(port)
        .into_iter()
        .map(|region| format!("{region}.i-abc123"))
        .collect();
    provider_ids.extend([
        format!("cn-shanghai.i-abc@127.0.0.1:{port}"),
        "cn-shanghai.i-../../x".to_owned(),
        "cn-shanghai.I-ABC".to_owned(),
        "cn-shanghai.".to_owned(),
    ]);
    for provider_id in &provider_ids {
        let r = with_provider_id(req("m-ssrf"), provider_id);
        let answers = [
            ("create", machines.create(&r).await.map(|_| ())),
            ("status", machines.status(&r).await.map(|_| ())),
            ("delete", machines.delete(&r).await.map(|_| ())),
            ("initialize", machines.initialize(&r).await.map(|_| ())),
        ];
        for (method, answer) in answers {
            let e = answer.expect_err(method);
            assert_code(&e, Code::InvalidArgument, 400);
            assert!(
                e.status.message.contains("machine.spec.providerID"),
                "{method} with providerID {provider_id:?}: {}",
                e.status.message
            );
        }
    }
    assert_listener_untouched(&listener);
}

#[tokio::test]
async fn a_region_outside_the_grammar_never_reaches_ecs_nor_a_provider_id() {
    // With the emulator as the endpoint, the region does not pick the host, but it still went into
    // RegionId and the providerID (`../x.i-...`).
    let app = spawn_app().await;
    for region in hostile_regions(1) {
        let mut spec = provider_spec();
        spec["region"] = json!(region);
        let r = MachineRequest {
            machine_class: class_with(spec),
            ..req("m-region")
        };
        let e = app.create(&r).await.unwrap_err();
        assert_code(&e, Code::InvalidArgument, 400);
        assert!(
            e.status
                .message
                .starts_with("machineClass.providerSpec.region:"),
            "{region:?}: {}",
            e.status.message
        );
    }
    assert_eq!(app.emulator.stats().total_calls(), 0, "nothing reached ECS");
    assert_eq!(app.emulator.instance_count(), 0);
}
