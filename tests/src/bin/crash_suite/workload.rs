//! The workload: workers sending mixed operations through the gateway, and the killer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use berth_tests::processes::{ProcessStack, Service};
use client::ClientError;
use domain::Code;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Mutex;

use crate::model::{
    Clients, Counts, Intent, NameState, machine_name, machine_request, profile, reason, retryable,
    volume_name,
};
use crate::{NAMESPACE, SETTLE};

pub(crate) struct Shared {
    pub(crate) seed: u64,
    pub(crate) clients: Clients,
    pub(crate) volumes: Vec<Mutex<NameState>>,
    pub(crate) machines: Vec<Mutex<NameState>>,
    pub(crate) next_op: AtomicUsize,
    pub(crate) ops: usize,
    pub(crate) counts: std::sync::Mutex<Counts>,
    /// The services the killer may kill (alone, or all together).
    pub(crate) victims: Vec<Service>,
}

impl Shared {
    pub(crate) fn count(&self, f: impl FnOnce(&mut Counts)) {
        f(&mut self.counts.lock().expect("counts"));
    }

    pub(crate) async fn volume_op(&self, i: usize, intent: Intent) -> Result<(), ClientError> {
        let name = volume_name(i);
        match intent {
            Intent::Create => self.clients.volumes.add(&profile(&name)).await.map(|_| ()),
            Intent::Delete => self
                .clients
                .volumes
                .delete(NAMESPACE, &name)
                .await
                .map(|_| ()),
        }
    }

    pub(crate) async fn machine_op(
        &self,
        i: usize,
        intent: Intent,
        generation: u32,
    ) -> Result<(), ClientError> {
        let req = machine_request(self.seed, &machine_name(i), generation);
        match intent {
            Intent::Create => self.clients.machines.create(&req).await.map(|_| ()),
            Intent::Delete => self.clients.machines.delete(&req).await.map(|_| ()),
        }
    }

    /// One worker: names `i` with `i % workers == worker` are its own, so each name's operations
    /// are sequential and the model per name is exact.
    pub(crate) async fn worker(self: Arc<Self>, worker: usize, workers: usize) {
        let mut rng = StdRng::seed_from_u64(self.seed * 1000 + worker as u64);
        let own = |n: usize| (0..n).filter(|i| i % workers == worker).collect::<Vec<_>>();
        let (own_volumes, own_machines) = (own(self.volumes.len()), own(self.machines.len()));
        while self.next_op.fetch_add(1, Ordering::Relaxed) < self.ops {
            let roll = rng.random_range(0..100);
            let on_machine = roll >= 60 && !own_machines.is_empty();
            let intent = if rng.random_bool(0.6) {
                Intent::Create
            } else {
                Intent::Delete
            };
            let answer = if on_machine {
                let i = own_machines[rng.random_range(0..own_machines.len())];
                let mut state = self.machines[i].lock().await;
                if roll >= 95 {
                    // A read: an acknowledged machine must be found (Uninitialized counts: the VM
                    // is there, not yet Running).
                    let req = machine_request(self.seed, &machine_name(i), state.generation);
                    let found = self.clients.machines.status_even_uninitialized(&req).await;
                    if state.pending.is_none() {
                        self.check_read(&machine_name(i), state.present, &found);
                    }
                    self.count_read(&found);
                    continue;
                }
                let generation = state.generation;
                let answer = self.machine_op(i, intent, generation).await;
                if answer.is_ok() {
                    state.acknowledged(intent);
                    if intent == Intent::Delete {
                        state.generation += 1;
                    }
                } else {
                    state.pending = Some(intent);
                }
                answer
            } else {
                let i = own_volumes[rng.random_range(0..own_volumes.len())];
                let mut state = self.volumes[i].lock().await;
                if roll < 10 {
                    let found = self.clients.volumes.get(NAMESPACE, &volume_name(i)).await;
                    if state.pending.is_none() {
                        self.check_read(&volume_name(i), state.present, &found);
                    }
                    self.count_read(&found);
                    continue;
                }
                let answer = self.volume_op(i, intent).await;
                if answer.is_ok() {
                    state.acknowledged(intent);
                } else {
                    state.pending = Some(intent);
                }
                answer
            };
            if let Err(e) = &answer {
                // A refusal's words (its problem+json detail) are an answer too.
                self.no_secret_in("a refusal's answer", &format!("{e:?}"));
            }
            self.count(|c| {
                c.operations += 1;
                match &answer {
                    Ok(()) => c.acknowledged += 1,
                    Err(e) => {
                        c.unacknowledged += 1;
                        *c.unacknowledged_by.entry(reason(e)).or_default() += 1;
                    }
                }
            });
            if answer.is_err() {
                // As a controller requeues: a refused call is tried again a little later, not in a
                // tight loop against a service that is restarting.
                tokio::time::sleep(Duration::from_millis(rng.random_range(20..120))).await;
            }
        }
    }

    /// A read is acknowledged when it was answered: found, or not found. What it answered, either
    /// way, must hold no planted secret.
    fn count_read<T: std::fmt::Debug>(&self, found: &Result<T, ClientError>) {
        self.no_secret_in("a read's answer", &format!("{found:?}"));
        let answered = match found {
            Ok(_) => true,
            Err(e) => e.code() == Code::NotFound,
        };
        self.count(|c| {
            c.operations += 1;
            if answered {
                c.acknowledged += 1;
            } else {
                c.unacknowledged += 1;
            }
        });
    }

    /// A read in the run: a name known present must be found, a name known absent must not be.
    fn check_read<T>(&self, name: &str, present: bool, found: &Result<T, ClientError>) {
        let finding = match found {
            Ok(_) if !present => Some(format!("{name}: acknowledged as deleted, but read back")),
            Err(e) if present && e.code() == Code::NotFound => Some(format!(
                "{name}: acknowledged as made, but read as not found"
            )),
            _ => None,
        };
        if let Some(f) = finding {
            self.count(|c| {
                c.data_lost += 1;
                c.findings.push(f);
            });
        }
    }
}

/// The killer: at random moments, SIGKILL one of the three stateful services or all of them, and
/// start what it killed again on the same data.
pub(crate) async fn killer(stack: Arc<Mutex<ProcessStack>>, shared: Arc<Shared>, mut rng: StdRng) {
    while shared.next_op.load(Ordering::Relaxed) < shared.ops {
        // Often enough that a seed of release binaries, 500 operations in a second or two, still
        // sees several kills (one every 0.1-0.9 s left some seeds with one).
        tokio::time::sleep(Duration::from_millis(rng.random_range(30..300))).await;
        let pick = rng.random_range(0..=shared.victims.len());
        let victims: &[Service] = match shared.victims.get(pick) {
            Some(one) => std::slice::from_ref(one),
            None => &shared.victims,
        };
        let mut stack = stack.lock().await;
        for v in victims {
            stack.process(*v).kill().await;
        }
        shared.count(|c| c.kills += victims.len());
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
        for v in [
            Service::Registry,
            Service::StorageOps,
            Service::MachineDriver,
        ] {
            if victims.contains(&v)
                && let Err(e) = stack.process(v).start().await
            {
                shared.count(|c| c.findings.push(format!("restart failed: {e}")));
            }
        }
    }
}

/// Repeats `op` until it is acknowledged or `SETTLE` runs out, waiting as `Retry-After` says.
pub(crate) async fn until_acknowledged<F, Fut>(mut op: F) -> Result<(), ClientError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), ClientError>>,
{
    let started = Instant::now();
    loop {
        match op().await {
            Ok(()) => return Ok(()),
            Err(e) if retryable(&e) && started.elapsed() < SETTLE => {
                let wait = e.retry_after.unwrap_or(Duration::from_millis(100));
                tokio::time::sleep(wait.min(Duration::from_secs(2))).await;
            }
            Err(e) => return Err(e),
        }
    }
}
