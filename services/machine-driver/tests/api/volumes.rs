//! GetVolumeIDs (MCM alicloud: "should get volume IDs successfully").

use domain::machine::{CsiVolumeSource, FlexVolumeSource, PersistentVolumeSpec};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn get_volume_ids_maps_flex_and_alicloud_csi_volumes() {
    let app = spawn_app().await;
    let csi = |driver: &str, handle: &str| PersistentVolumeSpec {
        csi: Some(CsiVolumeSource {
            driver: driver.into(),
            volume_handle: handle.into(),
            ..CsiVolumeSource::default()
        }),
        ..PersistentVolumeSpec::default()
    };
    let flex = PersistentVolumeSpec {
        flex_volume: Some(FlexVolumeSource {
            driver: "alicloud/disk".into(),
            options: [("volumeId".to_string(), "d-flex".to_string())].into(),
        }),
        ..PersistentVolumeSpec::default()
    };
    let mut nfs = PersistentVolumeSpec::default();
    nfs.other
        .insert("nfs".into(), json!({"server": "x", "path": "/"}));
    let specs = vec![
        flex,
        csi("diskplugin.csi.alibabacloud.com", "d-csi"),
        csi("ebs.csi.aws.com", "vol-aws"),
        nfs,
        csi(EXTRA_CSI, "d-extra"),
        csi("diskplugin.csi.alibabacloud.com", ""),
    ];
    let ids = app.machines.volume_ids(&specs).await.unwrap();
    assert_eq!(ids, vec!["d-flex", "d-csi", "d-extra"]);
    assert!(app.machines.volume_ids(&[]).await.unwrap().is_empty());
    assert_eq!(app.emulator.stats().total_calls(), 0, "no ECS call");
}
