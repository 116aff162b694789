//! CreateMachine's walk: adopt the instance that backs the machine, else send RunInstances with
//! the machine's ClientToken series until ECS answers with an instance that exists, then settle
//! who keeps the name ([`super::decide`]).
//!
//! Apart because it is the one call with a state machine of its own (the token walk, the confirm
//! window, the memory of released instances and tokens), acting on a [`CreatePlan`] alone: the
//! request was decoded and checked before the walk starts.

use std::collections::BTreeSet;
use std::time::Duration;

use alicloud::{DescribeDisks, DescribeInstances, EcsClient, Instance, Tag};
use domain::machine::CreateMachineResponse;
use domain::{Code, Status};

use super::Alicloud;
use super::answers::{addresses, multiple};
use super::codes::ecs_status;
use super::identity::{self, OWNER_TAG, Owner};
use super::plan::{CreatePlan, Reach};
use super::verdict::{Outcome, decide, in_namespace, taken};

/// How long, in all, CreateMachine looks for the instance RunInstances answered before taking it
/// for a released one: ECS may list a brand-new instance a moment after creating it. Should a new
/// instance be listed later still, the walk makes one more for the machine, and the two (both
/// carrying the machine's owner tag and name) are settled by [`decide`] on the next look: the
/// earlier stays, the other is released.
const CONFIRM_WINDOW: Duration = Duration::from_millis(1500);

/// How many released instance ids a driver process remembers ([`Released`]).
const RELEASED_MEMORY: usize = 4096;

/// What this driver process knows to be gone for good, the last [`RELEASED_MEMORY`] of each: the
/// instances it released, and the ClientTokens whose instance it found released. An ECS instance
/// id is never reused and a released instance never comes back, so a token answered with one of
/// these instances, or a token found released before, is known to be used up at once, without
/// [`CONFIRM_WINDOW`] spent waiting for its instance to be listed: a machine deleted and made again
/// (the same UID) walks its token series without a pause per earlier life. What another replica
/// released is not here, and is waited for as before.
#[derive(Debug, Default)]
pub(super) struct Released {
    instances: Bounded,
    tokens: Bounded,
}

/// A set that forgets its oldest entries beyond [`RELEASED_MEMORY`].
#[derive(Debug, Default)]
struct Bounded {
    set: BTreeSet<String>,
    order: std::collections::VecDeque<String>,
}

impl Bounded {
    fn insert(&mut self, item: &str) {
        if self.set.insert(item.to_owned()) {
            self.order.push_back(item.to_owned());
            if self.order.len() > RELEASED_MEMORY
                && let Some(oldest) = self.order.pop_front()
            {
                self.set.remove(&oldest);
            }
        }
    }

    fn contains(&self, item: &str) -> bool {
        self.set.contains(item)
    }
}

impl Alicloud {
    /// CreateMachine on a checked plan: adopts the instance that backs the machine (the one the
    /// providerID pins, else the one that keeps its name), or walks the machine's ClientToken
    /// series to make it.
    pub(super) async fn create(&self, plan: CreatePlan) -> Result<CreateMachineResponse, Status> {
        let CreatePlan {
            name,
            owner,
            namespace,
            region,
            credentials,
            scope,
            pinned,
            mut run,
            tokens,
        } = plan;
        let namespace = namespace.as_str();
        let reach = Reach {
            region: &region,
            credentials: &credentials,
            scope: &scope,
            namespace,
        };
        let deadline = self.deadline();
        if let Some(pinned) = &pinned
            && let Some(f) = self
                .pinned(reach, pinned, (&name, &owner), deadline)
                .await?
        {
            let id = &f.instance.instance_id;
            if Owner::of_instance(&f.instance).is_some_and(|o| o != owner) {
                return Err(taken(&name));
            }
            tracing::info!(instance_id = %id, "adopting the instance providerID names");
            return Ok(create_answer(
                f.client.region(),
                &f.instance,
                format!("ECS instance {id} already backs machine {name}; adopted"),
            ));
        }
        let client = reach.home(&self.ecs);
        let seen = self.by_name(&client, &name, &scope, deadline).await?;
        if let Some(i) = self
            .settle(&client, seen, &owner, namespace, &name, deadline)
            .await?
        {
            let id = &i.instance_id;
            tracing::info!(instance_id = %id, "adopting the existing instance");
            return Ok(create_answer(
                client.region(),
                &i,
                format!("ECS instance {id} already backs machine {name}; adopted"),
            ));
        }
        // No instance backs the machine. Walk its ClientToken series: token n is answered with
        // the instance it made before (a retry of this create finds it again), with a new
        // instance (the first unused token), or with an instance since released (the machine is
        // being created again after a delete, with the same UID: go on to token n+1).
        //
        // The series never runs out: a machine may be deleted and made again any number of
        // times. What bounds one call is its deadline; the tokens it found used up are
        // remembered ([`Released`]), so the retry the answer asks for goes on from there.
        let mut walked = 0u32;
        for n in 0u32.. {
            let token = tokens.token(n);
            if self.released().tokens.contains(&token) {
                continue;
            }
            if alicloud::Instant::now() + CONFIRM_WINDOW >= deadline && walked > 0 {
                return Err(Status::unavailable(format!(
                    "machine {name:?} was created and deleted often with this UID: this call found {walked} more of its earlier ClientTokens used up (token {n} is next) before its time ran out; retry to go on from there"
                )));
            }
            walked += 1;
            run.client_token = Some(token.clone());
            let answer = match client.run_instances(&run, deadline).await {
                Ok(answer) => answer,
                // The token made an instance before, with other parameters. Whose, and is it
                // still there? Only this machine's own instance, not listed yet, is a retry.
                Err(e) if is_mismatch(&e) && !owner.tag_value().is_empty() => {
                    match self
                        .token_use(&client, &scope, &owner, namespace, &name, deadline)
                        .await?
                    {
                        TokenUse::ThisMachine => return Err(create_error(&e, &name)),
                        TokenUse::OtherMachine(other) => {
                            return Err(uid_taken(&name, other.as_deref()));
                        }
                        TokenUse::Released => {
                            tracing::info!(
                                token = n,
                                "the machine's ClientToken was used with other parameters by an instance since released; trying the next token of its series"
                            );
                            self.released().tokens.insert(&token);
                            continue;
                        }
                    }
                }
                Err(e) => return Err(create_error(&e, &name)),
            };
            let id = answer.instance_ids.into_iter().next().ok_or_else(|| {
                Status::internal(format!(
                    "ECS instance creation failed for machine {name:?}: instance ID missing"
                ))
            })?;
            let Some(made) = self.confirm(&client, &id, deadline).await? else {
                // Only an instance that exists may be answered OK.
                tracing::info!(
                    instance_id = %id,
                    token = n,
                    "the machine's ClientToken names a released instance; trying the next token of its series"
                );
                self.released().tokens.insert(&token);
                continue;
            };
            // Other creators (other UIDs, other replicas) may have made an instance for this name
            // meanwhile: look again and settle who keeps it. Every creator reaches the same
            // verdict, so exactly one instance stays.
            let mut seen = self.by_name(&client, &name, &scope, deadline).await?;
            if !seen.iter().any(|i| i.instance_id == id) {
                seen.push(made);
            }
            return match self
                .settle(&client, seen, &owner, namespace, &name, deadline)
                .await?
            {
                Some(kept) if kept.instance_id == id => {
                    tracing::info!(instance_id = %id, token = n, "instance created");
                    Ok(create_answer(
                        client.region(),
                        &kept,
                        format!("ECS instance {id} created for machine {name}"),
                    ))
                }
                // An earlier instance of this same machine keeps the name (a replica made it
                // meanwhile); ours was released.
                Some(kept) => {
                    let kept_id = &kept.instance_id;
                    tracing::info!(instance_id = %kept_id, "adopting the instance that keeps the name");
                    Ok(create_answer(
                        client.region(),
                        &kept,
                        format!("ECS instance {kept_id} already backs machine {name}; adopted"),
                    ))
                }
                None => Err(Status::internal(format!(
                    "ECS instance {id} of machine {name:?} vanished while settling who keeps the name"
                ))),
            };
        }
        unreachable!("the token series is endless")
    }

    /// This process's memory of what is gone for good ([`Released`]).
    fn released(&self) -> std::sync::MutexGuard<'_, Released> {
        self.released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that `instance_id` was released ([`Released`]).
    pub(super) fn remember_released(&self, instance_id: &str) {
        self.released().instances.insert(instance_id);
    }

    /// Whether this process released `instance_id`.
    fn was_released(&self, instance_id: &str) -> bool {
        self.released().instances.contains(instance_id)
    }

    /// Applies [`decide`] to the instances carrying `name`: releases this owner's losing instances,
    /// then answers with the name's VM when it is the caller's, `None` when there is none, and
    /// AlreadyExists (another owner's) or OutOfRange (several without owner) otherwise.
    async fn settle(
        &self,
        client: &EcsClient,
        seen: Vec<Instance>,
        owner: &Owner,
        namespace: &str,
        name: &str,
        deadline: alicloud::Instant,
    ) -> Result<Option<Instance>, Status> {
        let verdict = decide(&seen, owner, namespace);
        for id in &verdict.release {
            tracing::info!(instance_id = %id, "releasing an instance that lost the machine name");
            self.release_lost(client, id, deadline)
                .await
                .map_err(|e| {
                    Status::unavailable(format!(
                        "ECS instance {id} was made for machine {name:?} but another instance keeps the name, and releasing it failed ({e}); retry to release it"
                    ))
                })?;
        }
        match verdict.outcome {
            Outcome::Free => Ok(None),
            Outcome::Adopt(n) => Ok(Some(seen[n].clone())),
            Outcome::Taken(_) => Err(taken(name)),
            Outcome::Ambiguous(ids) => Err(multiple(&ids)),
        }
    }

    /// Releases an instance a create of this machine made but that lost the name. It was never
    /// used, so the data disks the spec keeps (`deleteWithInstance: false`) go with it too.
    async fn release_lost(
        &self,
        client: &EcsClient,
        instance_id: &str,
        deadline: alicloud::Instant,
    ) -> Result<(), alicloud::Error> {
        let disks = client
            .describe_all_disks(
                &DescribeDisks {
                    instance_id: Some(instance_id.to_owned()),
                    ..DescribeDisks::default()
                },
                deadline,
            )
            .await?;
        for d in disks
            .iter()
            .filter(|d| d.delete_with_instance == Some(false))
        {
            match client
                .set_disk_delete_with_instance(&d.disk_id, true, deadline)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        match client.delete_instance(instance_id, true, deadline).await {
            Ok(_) => {
                self.remember_released(instance_id);
                Ok(())
            }
            Err(e) if e.is_not_found() => {
                self.remember_released(instance_id);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// After RunInstances: the instance it answered with, looked at at once and then a few times
    /// within [`CONFIRM_WINDOW`], since a cloud may list a new instance a moment after creating it.
    /// `None` means it is gone: the token was answered from an earlier, since released, creation.
    async fn confirm(
        &self,
        client: &EcsClient,
        instance_id: &str,
        deadline: alicloud::Instant,
    ) -> Result<Option<Instance>, Status> {
        if self.was_released(instance_id) {
            return Ok(None);
        }
        within_confirm_window(|| self.by_id(client, instance_id, &[], deadline)).await
    }

    /// Which instance a ClientToken ECS refused as used with other parameters made: one carrying
    /// the machine's UID, looked for within [`CONFIRM_WINDOW`] (a cloud may list a new instance a
    /// moment after making it), under this machine's name or another; or none, when it was released.
    async fn token_use(
        &self,
        client: &EcsClient,
        scope: &[Tag],
        owner: &Owner,
        namespace: &str,
        name: &str,
        deadline: alicloud::Instant,
    ) -> Result<TokenUse, Status> {
        let mut tags = scope.to_vec();
        tags.push(Tag::new(OWNER_TAG, owner.tag_value()));
        let filter = DescribeInstances {
            tags,
            ..DescribeInstances::default()
        };
        let used = within_confirm_window(|| async {
            let found = client
                .describe_all_instances(&filter, deadline)
                .await
                .map_err(|e| ecs_status(&e))?;
            Ok(
                if found
                    .iter()
                    .any(|i| i.instance_name == name && in_namespace(i, namespace))
                {
                    Some(TokenUse::ThisMachine)
                } else {
                    // Another machine of the caller's own namespace may be named; one of another
                    // namespace (a tenant that sent someone else's UID) may not.
                    let visible = found.iter().find(|i| in_namespace(i, namespace));
                    (!found.is_empty())
                        .then(|| TokenUse::OtherMachine(visible.map(|i| i.instance_name.clone())))
                },
            )
        })
        .await?;
        Ok(used.unwrap_or(TokenUse::Released))
    }
}

/// Whether ECS refused a ClientToken as used before with other parameters.
fn is_mismatch(e: &alicloud::Error) -> bool {
    e.ecs_code() == Some("IdempotentParameterMismatch")
}

/// What made the instance a refused ClientToken stands for ([`Alicloud::token_use`]).
enum TokenUse {
    /// An instance of this machine (its UID and name), listed only now: retry to adopt it.
    ThisMachine,
    /// An instance with this machine's UID under another name: the UID is another machine's (its
    /// name when it is in the caller's namespace).
    OtherMachine(Option<String>),
    /// No instance carries the UID: the token's instance was released.
    Released,
}

/// The machine's AlreadyExists when its UID already stands for a VM of another name: a UID is one
/// machine's, and the ClientToken derived from it cannot make a second. It names that machine only
/// when it is in the caller's namespace (`other`), and never its VM.
fn uid_taken(name: &str, other: Option<&str>) -> Status {
    let whose = match other {
        Some(other) => format!("machine {other:?}'s VM"),
        None => "another machine's VM".to_owned(),
    };
    Status::new(
        Code::AlreadyExists,
        format!(
            "machine.metadata.uid: the UID already stands for {whose} in this cluster; machine {name:?} needs a UID of its own"
        ),
    )
}

/// A RunInstances failure as a status. `IdempotentParameterMismatch` means this machine's token
/// already made an instance with other parameters (user data with a renewed bootstrap token, say)
/// that the name lookup did not see yet: the next attempt adopts it, so that is a retry-soon.
fn create_error(e: &alicloud::Error, name: &str) -> Status {
    if e.ecs_code() == Some("IdempotentParameterMismatch") {
        return Status::unavailable(format!(
            "an ECS instance for machine {name:?} was already requested with other parameters and is not listed yet; retry to adopt it ({e})"
        ));
    }
    ecs_status(e)
}

/// CreateMachine's answer for an instance that backs the machine.
fn create_answer(region: &str, i: &Instance, last_known_state: String) -> CreateMachineResponse {
    CreateMachineResponse {
        provider_id: identity::provider_id(region, &i.instance_id),
        node_name: identity::node_name(&i.instance_id),
        last_known_state,
        addresses: addresses(i),
    }
}

/// What `look` finds, asked at once and then after pauses of 100 ms, 200 ms, ... until
/// [`CONFIRM_WINDOW`] has passed: a cloud may list a new instance a moment after making it, so one
/// look that finds nothing is not yet proof that there is nothing.
async fn within_confirm_window<T, F, Fut>(mut look: F) -> Result<Option<T>, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, Status>>,
{
    let mut pause = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    loop {
        if let Some(found) = look().await? {
            return Ok(Some(found));
        }
        if waited >= CONFIRM_WINDOW {
            return Ok(None);
        }
        tokio::time::sleep(pause).await;
        waited += pause;
        pause *= 2;
    }
}
