//! Every JSON request body the services take, through the same decoding (`service_kit::extract::
//! decode_object`, what the `Json` extractor runs) and the same validation their handlers run:
//!
//! - machine-driver: `MachineRequest` (CreateMachine, InitializeMachine, DeleteMachine,
//!   GetMachineStatus) through both providers' checks (Docker: names, uid, provider spec, plan,
//!   container, user data; Alicloud: name and owner, provider spec, region, credentials, user data,
//!   RunInstances), `ListMachinesRequest` (both providers' scope), `GetVolumeIdsRequest`;
//! - storage-ops: AddStorage's `VolumeProvisionerProfile` and its `validate()`;
//! - orchestrator-registry: RegisterOrchestrator's body through `parse_registration`, and the
//!   typed `RegisterOrchestrator`.
//!
//! Each input is tried as every body. Properties: nothing panics; a refusal is an InvalidArgument (or
//! the registry's FailedPrecondition); a decoding refusal never carries a string value of the body
//! (checked on those marked `SECRET`), and no refusal of a driver request carries a value of its
//! `secret.data` / `secret.stringData` (plain or base64-decoded, marked), as the extractor and the
//! secret promise; a
//! body that decodes serialises and decodes back equal, and validates the same way again; a
//! registration's config comes back normalised (validating it again changes nothing).
#![no_main]

use domain::orchestrator::{OrchestratorLimits, RegisterOrchestrator};
use domain::{
    Code, GetVolumeIdsRequest, ListMachinesRequest, MachineRequest, Secret, Status,
    VolumeProvisionerProfile,
};
use libfuzzer_sys::fuzz_target;
use machine_driver::alicloud::region::RegionPolicy;
use machine_driver::alicloud::{identity as ali_identity, secret as ali_secret, spec as ali};
use machine_driver::docker::settings::{EngineSite, Settings};
use machine_driver::docker::spec as docker;
use machine_driver::provider::CheckedFor;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use service_kit::extract::decode_object;

const MARK: &str = "SECRET";

/// Strings of the body that must never be repeated: values (not keys) that carry the mark.
fn marked(v: &Value, keys: &mut Vec<String>, out: &mut Vec<String>) {
    match v {
        Value::String(s) if s.contains(MARK) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| marked(x, keys, out)),
        Value::Object(m) => {
            for (k, x) in m {
                keys.push(k.clone());
                marked(x, keys, out);
            }
        }
        _ => {}
    }
}

/// Asserts `message` repeats none of `secrets`, unless a key (which refusals do name) holds it.
fn never_echoes(message: &str, secrets: &[String], keys: &[String], what: &str) {
    for s in secrets {
        if keys.iter().any(|k| k.contains(s.as_str())) {
            continue;
        }
        assert!(
            !message.contains(s.as_str()),
            "{what}: refusal {message:?} repeats {s:?}"
        );
    }
}

/// Decodes `bytes` as `T` as the extractor does; what decodes must come back equal from its JSON.
fn decode<T>(bytes: &[u8], secrets: &[String], keys: &[String], what: &str) -> Option<T>
where
    T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug,
{
    match decode_object::<T>(bytes) {
        Ok(v) => {
            let json = serde_json::to_vec(&v).expect("a decoded body serialises");
            let back: T = decode_object(&json)
                .unwrap_or_else(|e| panic!("{what}: its own JSON is refused: {e}"));
            // Exactly: the workspace's serde_json reads floats back as written (float_roundtrip,
            // guarded by service-kit's a_float_goes_round_exactly).
            assert_eq!(back, v, "{what}: JSON round trip");
            Some(v)
        }
        Err(e) => {
            assert_eq!(e.code, Code::InvalidArgument, "{what}: {e}");
            never_echoes(&e.message, secrets, keys, what);
            None
        }
    }
}

/// The secret's values, plain and base64-decoded, that carry the mark and are written nowhere else
/// in the body: no refusal may repeat them.
fn secret_values(secret: &Secret, elsewhere: &str) -> Vec<String> {
    use base64::Engine as _;
    let mut out = Vec::new();
    for v in secret.data.values().chain(secret.string_data.values()) {
        out.push(v.clone());
        if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(v)
            && let Ok(text) = String::from_utf8(bytes)
        {
            out.push(text);
        }
    }
    // The examples' placeholders are named in the refusal that says to replace them: fixed texts,
    // not the caller's. The credentials trim what they read (as MCM's secret reader does), so a
    // placeholder with white space at its ends is still the placeholder.
    let placeholders = ["EMULATOR_ACCESS_KEY_ID", "EMULATOR_ACCESS_KEY_SECRET"];
    out.retain(|v| {
        v.contains(MARK) && !elsewhere.contains(v.as_str()) && !placeholders.contains(&v.trim())
    });
    out
}

fn refused<T>(result: Result<T, Status>, secrets: &[String], keys: &[String], what: &str) {
    if let Err(e) = result {
        assert_ne!(e.code, Code::Ok, "{what}");
        never_echoes(&e.message, secrets, keys, what);
    }
}

fn machine_request(req: &MachineRequest, keys: &[String]) {
    let elsewhere = format!(
        "{}{}{:?}",
        serde_json::to_string(&req.machine).unwrap_or_default(),
        serde_json::to_string(&req.machine_class).unwrap_or_default(),
        req.secret.keys()
    );
    let secrets = secret_values(&req.secret, &elsewhere);
    let s = secrets.as_slice();

    // Docker, as CreateMachine runs it (the Engine calls aside).
    refused(docker::machine_name(&req.machine), s, keys, "docker name");
    refused(docker::machine_uid(&req.machine), s, keys, "docker uid");
    match docker::ProviderSpec::decode(&req.machine_class.provider_spec) {
        Ok(spec) => {
            refused(spec.scope(), s, keys, "docker scope");
            refused(spec.stop_grace(), s, keys, "docker stop grace");
            for engine in [EngineSite::ThisHost, EngineSite::Elsewhere] {
                match spec.plan(&Settings::default(), engine) {
                    Ok(plan) => {
                        let _ = plan.container("m", "uid");
                        refused(
                            docker::user_data(&req.secret, plan.bootstrap),
                            s,
                            keys,
                            "docker user data",
                        );
                    }
                    Err(e) => refused::<()>(Err(e), s, keys, "docker plan"),
                }
            }
        }
        Err(e) => refused::<()>(Err(e), s, keys, "docker spec"),
    }
    if !req.machine.spec.provider_id.is_empty() {
        refused(
            docker::decode_provider_id(&req.machine.spec.provider_id),
            s,
            keys,
            "docker providerID",
        );
    }

    // Alicloud, as CreateMachine runs it (the ECS calls aside).
    let owner = ali_identity::name_and_owner(&req.machine, CheckedFor::Create);
    refused(
        owner.as_ref().map(|_| ()).map_err(Clone::clone),
        s,
        keys,
        "alicloud name",
    );
    refused(
        ali_secret::credentials(&req.secret),
        s,
        keys,
        "alicloud credentials",
    );
    let user_data = ali_secret::user_data(&req.secret);
    refused(
        user_data.as_ref().map(|_| ()).map_err(Clone::clone),
        s,
        keys,
        "alicloud user data",
    );
    match ali::ProviderSpec::decode(&req.machine_class.provider_spec) {
        Ok(spec) => {
            let policies = [
                RegionPolicy::default(),
                RegionPolicy {
                    known_only: true,
                    ..RegionPolicy::default()
                },
            ];
            for policy in &policies {
                refused(spec.validate_scope(policy), s, keys, "alicloud scope");
                refused(spec.validate_for_create(policy), s, keys, "alicloud spec");
            }
            if let (Ok((name, owner)), Ok(data)) = (&owner, &user_data)
                && spec.validate_for_create(&policies[0]).is_ok()
            {
                let namespace =
                    service_kit::tenancy::effective_namespace(&req.machine.metadata.namespace);
                let _ = spec.run_instances(name, owner, namespace, data.clone());
                let _ = spec.cluster_tags();
                let _ = spec.list_tags();
            }
        }
        Err(e) => refused::<()>(Err(e), s, keys, "alicloud spec"),
    }
}

fn list_machines(req: &ListMachinesRequest, keys: &[String]) {
    let elsewhere = format!(
        "{}{:?}",
        serde_json::to_string(&req.machine_class).unwrap_or_default(),
        req.secret.keys()
    );
    let secrets = secret_values(&req.secret, &elsewhere);
    let s = secrets.as_slice();
    match docker::ProviderSpec::decode(&req.machine_class.provider_spec) {
        Ok(spec) => refused(spec.scope(), s, keys, "docker list scope"),
        Err(e) => refused::<()>(Err(e), s, keys, "docker list spec"),
    }
    match ali::ProviderSpec::decode(&req.machine_class.provider_spec) {
        Ok(spec) => refused(
            spec.validate_scope(&RegionPolicy::default()),
            s,
            keys,
            "alicloud list",
        ),
        Err(e) => refused::<()>(Err(e), s, keys, "alicloud list spec"),
    }
    refused(
        ali_secret::credentials(&req.secret),
        s,
        keys,
        "alicloud list credentials",
    );
}

fn volume(profile: &VolumeProvisionerProfile) {
    match profile.validate() {
        Ok(spec) => {
            assert!(spec.replicas >= 1, "{spec:?}");
            assert!(spec.capacity.bytes() > 0, "{spec:?}");
            // Validating is a function of the body: the decoded copy gives the same spec.
            let json = serde_json::to_vec(profile).expect("serialises");
            let again: VolumeProvisionerProfile = decode_object(&json).expect("decodes");
            assert_eq!(again.validate().expect("validates again"), spec);
        }
        Err(e) => assert_eq!(e.code, Code::InvalidArgument, "{e}"),
    }
}

fn registration(body: &Value) {
    let limits = OrchestratorLimits::default();
    match orchestrator_registry::api::parse_registration(body, &limits) {
        Ok(reg) => {
            let normalised = reg
                .kind
                .validate_config(Some(&reg.config))
                .expect("a normalised config validates");
            assert_eq!(normalised, reg.config, "normalising is idempotent");
            let mut again = body.clone();
            again["config"] = reg.config.clone();
            let reg2 = orchestrator_registry::api::parse_registration(&again, &limits)
                .expect("the normalised registration is accepted");
            assert_eq!(reg2, reg);
        }
        Err(e) => {
            let code = e.status().code;
            assert!(
                matches!(code, Code::InvalidArgument | Code::FailedPrecondition),
                "{}",
                e.status()
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut keys = Vec::new();
    let mut secrets = Vec::new();
    let value = serde_json::from_slice::<Value>(data).ok();
    if let Some(v) = &value {
        marked(v, &mut keys, &mut secrets);
    }
    let (s, k) = (secrets.as_slice(), keys.as_slice());

    if let Some(req) = decode::<MachineRequest>(data, s, k, "MachineRequest") {
        machine_request(&req, k);
    }
    if let Some(req) = decode::<ListMachinesRequest>(data, s, k, "ListMachinesRequest") {
        list_machines(&req, k);
    }
    let _ = decode::<GetVolumeIdsRequest>(data, s, k, "GetVolumeIdsRequest");
    if let Some(profile) =
        decode::<VolumeProvisionerProfile>(data, s, k, "VolumeProvisionerProfile")
    {
        volume(&profile);
    }
    let _ = decode::<RegisterOrchestrator>(data, s, k, "RegisterOrchestrator");
    if let Ok(body) = decode_object::<Value>(data) {
        registration(&body);
    }
});
