//! What the suite knows of each name, what it counts, and the requests it sends.

use std::collections::BTreeMap;
use std::time::Duration;

use client::{ClientError, ClientOptions, ServiceClient, machines, storage};
use domain::machine::MachineRequest;
use domain::{Code, SecretString, VolumeProvisionerProfile};

use crate::{ADMIN_TOKEN, ECS_KEY_ID, ECS_KEY_SECRET, NAMESPACE, USER_DATA};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intent {
    Create,
    Delete,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct NameState {
    /// What the last acknowledged operation left: present or absent.
    pub(crate) present: bool,
    /// An operation that was sent but not acknowledged: the name is uncertain until it is repeated.
    pub(crate) pending: Option<Intent>,
    /// A machine's generation: a new Machine object (new UID) after each acknowledged delete.
    pub(crate) generation: u32,
}

impl NameState {
    pub(crate) fn new() -> Self {
        NameState {
            present: false,
            pending: None,
            generation: 0,
        }
    }

    pub(crate) fn acknowledged(&mut self, intent: Intent) {
        self.present = intent == Intent::Create;
        self.pending = None;
    }
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Counts {
    pub(crate) operations: usize,
    pub(crate) acknowledged: usize,
    pub(crate) unacknowledged: usize,
    pub(crate) kills: usize,
    pub(crate) data_lost: usize,
    pub(crate) half_made: usize,
    pub(crate) orphans: usize,
    pub(crate) duplicate_vms: usize,
    /// Places a planted secret was found: a log line, a metrics page, an answer.
    pub(crate) secrets_leaked: usize,
    /// Why operations went unacknowledged: the machine code, or the HTTP status with none.
    pub(crate) unacknowledged_by: BTreeMap<String, usize>,
    pub(crate) findings: Vec<String>,
}

impl Counts {
    /// Nothing lost, half-made, leaked or left over, nothing else found wrong (a listing that
    /// failed, a restart that failed: a check that could not look saw nothing), and the run did
    /// what it is for: at least one kill, and operations acknowledged around it. A run whose
    /// services never died, or that acknowledged nothing, proves nothing and fails.
    pub(crate) fn passed(&self) -> bool {
        self.data_lost == 0
            && self.half_made == 0
            && self.orphans == 0
            && self.duplicate_vms == 0
            && self.secrets_leaked == 0
            && self.findings.is_empty()
            && self.kills > 0
            && self.acknowledged > 0
    }
}

pub(crate) struct Clients {
    pub(crate) volumes: storage::Client,
    pub(crate) machines: machines::Client,
}

pub(crate) fn clients(gateway: &str) -> Clients {
    let service = ServiceClient::new(
        gateway,
        ClientOptions {
            timeout: Duration::from_secs(20),
            bearer: Some(SecretString::new(ADMIN_TOKEN)),
            // The suite decides what an unanswered call means; the client must not retry behind it.
            attempts: 1,
            propagation: None,
        },
    );
    Clients {
        volumes: storage::Client::new(service.clone()),
        machines: machines::Client::new(service),
    }
}

pub(crate) fn volume_name(i: usize) -> String {
    format!("v-{i:02}")
}

pub(crate) fn machine_name(i: usize) -> String {
    format!("m-{i:02}")
}

pub(crate) fn machine_request(seed: u64, name: &str, generation: u32) -> MachineRequest {
    let request = berth_tests::alicloud_machine_request(&berth_tests::AlicloudMachine {
        name,
        uid: &format!("crash-{seed}-{name}-{generation}"),
        cluster: "shoot--crash",
        class: "crash-class",
        key_id: ECS_KEY_ID,
        key_secret: ECS_KEY_SECRET,
        user_data: USER_DATA,
    });
    serde_json::from_value(request).expect("the suite's machine request is well formed")
}

pub(crate) fn profile(name: &str) -> VolumeProvisionerProfile {
    VolumeProvisionerProfile {
        name: name.into(),
        namespace: Some(NAMESPACE.into()),
        capacity: "1Mi".into(),
        ..Default::default()
    }
}

pub(crate) fn reason(e: &ClientError) -> String {
    match e.http_status {
        Some(h) => format!("{h} {:?}", e.code()),
        None => format!("no answer ({:?})", e.code()),
    }
}

/// Whether a refusal says the name is in the other state already settling (a machine between
/// states, a volume being deleted): the intent stands, to be repeated.
pub(crate) fn retryable(e: &ClientError) -> bool {
    !matches!(
        e.code(),
        Code::InvalidArgument | Code::AlreadyExists | Code::Unauthenticated
    )
}

#[cfg(test)]
mod tests {
    use super::Counts;

    #[test]
    fn a_run_passes_only_when_it_killed_acknowledged_and_found_nothing() {
        let good = Counts {
            operations: 10,
            acknowledged: 8,
            kills: 2,
            ..Counts::default()
        };
        assert!(good.passed());
        assert!(
            !Counts {
                kills: 0,
                ..good.clone()
            }
            .passed(),
            "no kill"
        );
        assert!(
            !Counts {
                acknowledged: 0,
                ..good.clone()
            }
            .passed(),
            "nothing acknowledged"
        );
        let mut unseen = good.clone();
        unseen.findings.push("cannot list orphans: refused".into());
        assert!(!unseen.passed(), "a check that could not look");
    }
}
