//! `berth up` as a user runs it: the real binary, real ports, Ctrl-C to stop.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::Stack;

#[tokio::test]
async fn up_starts_every_service_quickly_and_stops_cleanly_on_ctrl_c() {
    let started = Instant::now();
    let stack = Stack::start();
    let base = stack.base;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let ports = [base, base + 1, base + 2, base + 3, base + 10];
    for port in ports {
        let paths: &[&str] = if port == base + 10 {
            &["/healthz"]
        } else {
            &["/healthz", "/readyz"]
        };
        for path in paths {
            let url = format!("http://127.0.0.1:{port}{path}");
            let r = client
                .get(&url)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(r.status(), 200, "{url}");
        }
    }
    // Reported, not asserted: a loaded CI machine must not turn a timing into a flake.
    println!(
        "banner printed and every service ready {:?} after spawn",
        started.elapsed()
    );
    assert!(
        stack.admin_token.starts_with("berth_"),
        "{:#?}",
        stack.banner
    );
    assert!(stack.banner.iter().any(|l| l.contains("SIMULATED")));

    let (exit, rest, data) = stack.stop();
    assert!(exit.success(), "berth up exited with {exit:?}");
    assert!(rest.iter().any(|l| l == "Stopped."), "{rest:?}");
    for port in ports {
        assert!(
            TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} still held after exit"
        );
    }
    let tokens = std::fs::read_to_string(data.path().join("tokens")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(data.path().join("tokens"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(tokens.contains("admin sha256:"));

    // A second start on the same data keeps the token and says where it is, without printing it.
    let again = Stack::start_in(data);
    assert!(
        again.admin_token.is_empty(),
        "the admin token is printed only once"
    );
    assert!(again.banner.iter().any(|l| l.starts_with("tokens file: ")));
    let (exit, _, _) = again.stop();
    assert!(exit.success());
}
