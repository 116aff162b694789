//! Machines, machine classes, secrets and the driver contract's request/response types.
//!
//! Field names follow MCM's Go/Kubernetes JSON (`providerID`, `nodeName`, `machineList`, ...), so a
//! body written for MCM's types decodes here unchanged. Unknown fields are ignored, as Kubernetes
//! clients expect.
//!
//! Layout: this file holds the words answers share and what the OpenAPI document adds to
//! `MachineClass`; `meta` the object metadata; `objects` Machine, MachineClass and their
//! parts; `secret` the Secret and its base64 values; `volumes` the persistent volume sources;
//! `driver` the driver calls' bodies and answers.

mod driver;
mod meta;
mod objects;
mod secret;
mod volumes;

pub use driver::{
    ClassCheck, Condition, CreateMachineRequest, CreateMachineResponse, DeleteMachineRequest,
    DeleteMachineResponse, GetMachineStatusRequest, GetMachineStatusResponse, GetVolumeIdsRequest,
    GetVolumeIdsResponse, InitializeMachineRequest, InitializeMachineResponse, ListMachinesRequest,
    ListMachinesResponse, MachineRequest, NodeAddress, ProviderInfo, ProviderList,
};

pub use meta::{ObjectMeta, OwnerReference};
pub use objects::{ClassSpec, Machine, MachineClass, MachineSpec, NodeTemplate, SecretReference};
pub use secret::Secret;
pub(crate) use secret::base64_values;
pub use volumes::{CsiVolumeSource, FlexVolumeSource, PersistentVolumeSpec};

/// Words in every answer that says the cloud refused a class's access key (a 401 from the
/// machine driver), so a client can tell it from the gateway refusing the caller's own Berth token.
pub const CLOUD_KEY_REFUSED: &str = "not a Berth credential";

/// Words in every answer about a machine whose bootstrap ended and will not run again (it failed,
/// or its result was lost): still MCM's Uninitialized, but no retry makes it initialised, so a
/// client tells it from "not yet" (the CLI exits 1 for it, not 3).
pub const BOOTSTRAP_RUNS_ONCE: &str = "it runs only once";

/// The providers a class may name.
pub const PROVIDERS: [&str; 2] = ["Alicloud", "Docker"];

/// What an OpenAPI document states of `MachineClass` beyond its Rust type: the providers, and the
/// two fields every provider needs. The driver and the machine controller both document the
/// schema, and the gateway merges their documents into one, so both state it through this.
pub fn document_machine_class(class: &mut serde_json::Value) {
    class["properties"]["provider"]["enum"] = serde_json::json!(PROVIDERS);
    class["required"] = serde_json::json!(["provider", "providerSpec"]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_is_any_integral_number_within_int64() {
        let meta =
            |g: &str| serde_json::from_str::<ObjectMeta>(&format!("{{\"generation\": {g}}}"));
        assert_eq!(meta("7").unwrap().generation, 7);
        assert_eq!(
            meta("2.6701548458116744e16").unwrap().generation,
            26701548458116744
        );
        assert!(
            meta("1.5")
                .unwrap_err()
                .to_string()
                .contains("not an integer")
        );
        assert!(meta("1e19").is_err());
        assert!(meta("-9223372036854775809").is_err());
        assert!(meta("9223372036854775808").is_err());
        assert!(meta("\"3\"").is_err());
    }

    #[test]
    fn secret_debug_and_display_never_show_values() {
        let mut s = Secret::from_string_data([("alicloudAccessKeySecret", "hunter2-very-secret")]);
        s.data
            .insert("userData".into(), "c2VjcmV0LXVzZXItZGF0YQ==".into());
        for text in [format!("{s:?}"), format!("{s:#?}"), s.to_string()] {
            assert!(!text.contains("hunter2"), "{text}");
            assert!(!text.contains("c2VjcmV0"), "{text}");
            assert!(!text.contains("secret-user-data"), "{text}");
            assert!(text.contains("alicloudAccessKeySecret"), "{text}");
        }
    }

    #[test]
    fn secret_values_decode_with_string_data_winning() {
        let mut s = Secret::default();
        s.data.insert("a".into(), "aGVsbG8K".into());
        s.data.insert("b".into(), "not base64!".into());
        s.data.insert("c".into(), "eA==".into());
        s.string_data.insert("c".into(), "plain".into());
        assert_eq!(s.get_str("a").unwrap().as_deref(), Some("hello"));
        assert_eq!(s.get_str("c").unwrap().as_deref(), Some("plain"));
        assert_eq!(s.get("missing").unwrap(), None);
        let e = s.get("b").unwrap_err();
        assert_eq!(e.message, "secret.data[b]: is not valid base64");
    }

    #[test]
    fn every_data_value_is_base64_even_where_string_data_wins() {
        let ok: Secret = serde_json::from_str(
            r#"{"data": {"a": "aGVsbG8K", "b": ""}, "stringData": {"a": "x"}}"#,
        )
        .unwrap();
        assert_eq!(ok.get_str("a").unwrap().as_deref(), Some("x"));
        for bad in [
            r#""\u0084""#,
            r#"" aGVsbG8K""#,
            r#""aGVsbG8K\n""#,
            r#""aGVsbG8""#,
            r#""aGVsbG9=""#,
        ] {
            let body =
                format!(r#"{{"data": {{"userData": {bad}}}, "stringData": {{"userData": ""}}}}"#);
            let e = serde_json::from_str::<Secret>(&body)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("is not valid base64"), "{bad}: {e}");
        }
    }

    #[test]
    fn driver_types_use_mcm_json_names() {
        let body = serde_json::json!({
            "machine": {"metadata": {"name": "m-1", "uid": "u1"}, "spec": {"providerID": "cn-beijing.i-1", "unknown": 1}},
            "machineClass": {"provider": "Alicloud", "providerSpec": {"imageID": "x"}, "secretRef": {"name": "s", "namespace": "n"}},
            "secret": {"data": {"k": "dg=="}}
        });
        let req: MachineRequest = serde_json::from_value(body).unwrap();
        assert_eq!(req.machine.spec.provider_id, "cn-beijing.i-1");
        assert_eq!(req.machine_class.provider, "Alicloud");
        let resp = CreateMachineResponse {
            provider_id: "p".into(),
            node_name: "n".into(),
            last_known_state: "s".into(),
            addresses: vec![NodeAddress {
                kind: "InternalIP".into(),
                address: "10.0.0.1".into(),
            }],
        };
        let v = serde_json::to_value(resp).unwrap();
        assert_eq!(v["providerID"], "p");
        assert_eq!(v["nodeName"], "n");
        assert_eq!(v["lastKnownState"], "s");
        assert_eq!(v["addresses"][0]["type"], "InternalIP");
        let list = ListMachinesResponse {
            machine_list: [("p".to_string(), "m".to_string())].into(),
        };
        assert_eq!(serde_json::to_value(list).unwrap()["machineList"]["p"], "m");
        let ids = GetVolumeIdsResponse {
            volume_ids: vec!["d-1".into()],
        };
        assert_eq!(serde_json::to_value(ids).unwrap()["volumeIDs"][0], "d-1");
    }

    #[test]
    fn pv_specs_tolerate_unknown_sources() {
        let v = serde_json::json!({"pvSpecs": [
            {"csi": {"driver": "diskplugin.csi.alibabacloud.com", "volumeHandle": "d-1"}, "capacity": {"storage": "10Gi"}},
            {"flexVolume": {"driver": "alicloud/disk", "options": {"volumeId": "d-2"}}},
            {"nfs": {"server": "x", "path": "/"}}
        ]});
        let req: GetVolumeIdsRequest = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(req.pv_specs[0].csi.as_ref().unwrap().volume_handle, "d-1");
        assert_eq!(
            req.pv_specs[1].flex_volume.as_ref().unwrap().options["volumeId"],
            "d-2"
        );
        assert!(req.pv_specs[2].other.contains_key("nfs"));
        assert_eq!(serde_json::to_value(&req).unwrap(), v);
    }
}
