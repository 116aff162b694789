//! The Docker provider's unit tests: what can be checked without an Engine (how its errors read,
//! the mount crossing rule, the bootstrap states' answers, pull references, volume ids). Apart so
//! the provider's files hold only the provider; the tests against a live Engine are in
//! `tests/docker.rs`.

use super::mounts::crossing;
use super::*;
use crate::provider::Provider;
use bollard::errors::Error as BollardError;
use domain::Code;
use domain::machine::{CsiVolumeSource, PersistentVolumeSpec};

#[test]
fn engine_errors_keep_client_refusals_and_hide_engine_internals() {
    let answered = |status: u16, message: &str| {
        EngineError::new(
            "creating container m-1",
            BollardError::DockerResponseServerError {
                status_code: status,
                message: message.into(),
            },
        )
        .to_status()
    };
    let s = answered(400, "invalid mount config");
    assert_eq!(s.code, Code::InvalidArgument);
    assert!(s.message.contains("invalid mount config"));
    // The Engine's words may repeat a spec's bytes: no control character reaches the caller.
    let s = answered(400, "bad path \"/x\u{1b}[31m\n\u{85}y\"");
    assert!(!s.message.chars().any(char::is_control), "{s:?}");
    assert!(s.message.contains("/x [31m  y"), "{s:?}");
    assert_eq!(answered(404, "no such container").code, Code::NotFound);
    assert_eq!(answered(409, "removal in progress").code, Code::Unavailable);
    let s = answered(
        500,
        "error at /var/lib/docker/overlay2/abc: unix:///run/x.sock",
    );
    assert_eq!(s.code, Code::Internal);
    assert!(!s.message.contains("/var/lib/docker"), "{}", s.message);
    let s = EngineError::new(
        "connecting",
        BollardError::IOError {
            err: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "/secret/path/docker.sock missing",
            ),
        },
    )
    .to_status();
    assert_eq!(s.code, Code::Unavailable);
    assert!(!s.message.contains("/secret/path"), "{}", s.message);
    assert!(s.message.contains("does not answer"));
}

#[test]
fn a_mount_may_not_lie_strictly_inside_another_machines_writable_one() {
    let w = |p: &str| (p.to_owned(), true);
    let r = |p: &str| (p.to_owned(), false);
    // Inside another's writable mount, or writable around another's: refused either way.
    assert!(crossing(&[r("/m/root/w")], &[w("/m/root")]).is_some());
    assert!(crossing(&[w("/m/root")], &[r("/m/root/w")]).is_some());
    assert!(crossing(&[w("/m/root/w")], &[w("/m/root")]).is_some());
    // Equal sources, read-only outer ones, and neighbours are fine.
    assert_eq!(crossing(&[w("/m/root")], &[w("/m/root")]), None);
    assert_eq!(crossing(&[r("/m/root/w")], &[r("/m/root")]), None);
    assert_eq!(crossing(&[r("/m/root")], &[r("/m/root/w")]), None);
    assert_eq!(crossing(&[w("/m/root")], &[w("/m/rooted")]), None);
    assert_eq!(crossing(&[w("/m/a")], &[]), None);
    let e = crossing(&[r("/m/root/w")], &[w("/m/root")]).unwrap();
    assert!(
        e.contains("lies inside another machine's writable mount"),
        "{e}"
    );
}

#[test]
fn bootstrap_states_explain_themselves() {
    assert!(BootstrapState::Completed.is_done());
    assert!(BootstrapState::NotRequested.is_done());
    for s in [
        BootstrapState::Pending,
        BootstrapState::Unstarted("e".into()),
        BootstrapState::Running("0123456789abcdef".into()),
        BootstrapState::Failed(3),
        BootstrapState::Lost("e".into()),
        BootstrapState::Unknown,
    ] {
        assert!(!s.is_done());
        assert!(s.reason("m-1").contains("\"m-1\""), "{s:?}");
        let code = if s == BootstrapState::Unknown {
            Code::FailedPrecondition
        } else {
            Code::Uninitialized
        };
        assert_eq!(s.refusal("m").code, code, "{s:?}");
    }
    assert!(
        BootstrapState::Failed(3)
            .reason("m")
            .contains("exit code 3")
    );
    assert!(
        BootstrapState::Running("0123456789abcdef".into())
            .reason("m")
            .contains("exec 0123456789ab)")
    );
}

#[test]
fn pulls_name_a_tag() {
    let image = |r: &str| spec::parse_image(r).unwrap().pullable();
    assert_eq!(image("alpine"), "alpine:latest");
    assert_eq!(image("localhost:5000/a/b"), "localhost:5000/a/b:latest");
    assert_eq!(image("localhost:5000/a/b:v1"), "localhost:5000/a/b:v1");
    assert_eq!(
        image("a@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
        "a@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
}

#[tokio::test]
async fn volume_ids_are_docker_volume_names_of_the_berth_csi_driver() {
    let d = Docker::new(Settings::default(), Duration::from_secs(5));
    let csi = |driver: &str, handle: &str| PersistentVolumeSpec {
        csi: Some(CsiVolumeSource {
            driver: driver.into(),
            volume_handle: handle.into(),
            ..CsiVolumeSource::default()
        }),
        ..PersistentVolumeSpec::default()
    };
    let req = domain::machine::GetVolumeIdsRequest {
        pv_specs: vec![
            csi(spec::VOLUME_CSI_DRIVER, "berth-default-data-1a2b3c4d"),
            csi("diskplugin.csi.alibabacloud.com", "d-1"),
            csi(spec::VOLUME_CSI_DRIVER, "../etc"),
            PersistentVolumeSpec::default(),
        ],
    };
    let ids = d.get_volume_ids(&req).await.unwrap().volume_ids;
    assert_eq!(ids, ["berth-default-data-1a2b3c4d"]);
}
