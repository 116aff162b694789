//! InitializeMachine.

use std::time::Duration;

use domain::Code;
use service_kit::testing::eventually;

use crate::support::*;

#[tokio::test]
async fn initialize_starts_a_stopped_instance_and_reports_uninitialized_until_running() {
    let app = spawn_app().await;
    let e = app.initialize(&req("m-init")).await.unwrap_err();
    assert_code(&e, Code::NotFound, 404);
    let created = app.create(&req("m-init")).await.unwrap();
    let id = instance_id(&created.provider_id).to_owned();
    let ok = app.initialize(&req("m-init")).await.unwrap();
    assert_eq!(ok.provider_id, created.provider_id);
    assert_eq!(ok.node_name, created.node_name);
    assert!(!ok.addresses.is_empty());

    app.emulator.pin_status(&id, "Starting").unwrap();
    let e = app.initialize(&req("m-init")).await.unwrap_err();
    assert_code(&e, Code::Uninitialized, 409);
    assert!(e.status.message.contains("is Starting"), "{e}");

    app.emulator.pin_status(&id, "Stopped").unwrap();
    app.emulator.unpin(&id).unwrap();
    let e = app.initialize(&req("m-init")).await.unwrap_err();
    assert_code(&e, Code::Uninitialized, 409);
    assert!(
        e.status.message.contains("was Stopped and is starting"),
        "{e}"
    );
    assert_eq!(app.calls("StartInstance"), 1);
    let ok = eventually("the instance runs", Duration::from_secs(5), || async {
        app.initialize(&req("m-init")).await.ok()
    })
    .await;
    assert_eq!(ok.provider_id, created.provider_id);
}
