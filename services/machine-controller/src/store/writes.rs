//! Writing objects: create, edit and delete, each run by the store's writer ([`super::commit`])
//! and publishing its change once committed.
//! Apart because this is where the store keeps the fields it owns (uid, creationTimestamp,
//! generation, resourceVersion) and decides a new generation, the rules the module doc states.

use domain::Status;
use domain::resources::{API_VERSION, Kind};
use serde_json::{Value, json};

use service_kit::watch::EventType;

use super::commit::Session;
use super::feed::Change;
use super::rows::{remove_row, write_row};
use super::{Sealed, Store, StoreError, Stored, now};

/// What a write did.
#[derive(Debug, Clone)]
pub enum Written {
    /// The object as it now is (unchanged when the edit changed nothing).
    Kept(Stored),
    /// The object is gone (its deletion was asked and nothing held it); its last state.
    Removed(Stored),
}

impl Written {
    /// The object, kept or as it was last.
    pub fn object(&self) -> &Stored {
        match self {
            Written::Kept(s) | Written::Removed(s) => s,
        }
    }
}

/// An edit of a stored object: changes the body (and, for a secret, may hand new sealed values
/// back), or refuses. It runs on the store's writer, so it owns what it uses.
pub type Edit = Box<dyn FnOnce(&mut Value, &mut Option<Sealed>) -> Result<(), Status> + Send>;

impl Store {
    /// Stores a new object. `body` is what the caller sent, already checked; the store gives it
    /// its `apiVersion`, `kind`, namespace, uid, creationTimestamp, generation 1 and version.
    pub async fn create(
        &self,
        kind: Kind,
        namespace: &str,
        body: Value,
        sealed: Option<Sealed>,
    ) -> Result<Stored, StoreError> {
        let namespace = namespace.to_string();
        self.commit_one_statement(move |session| {
            Box::pin(async move {
                let stored = create_in(session, kind, &namespace, body, sealed).await?;
                let change = change(EventType::Added, &stored, &namespace, false, None);
                Ok((stored, vec![change]))
            })
        })
        .await
    }

    /// Edits a stored object. `expect_uid` (when given) must be the object's uid, so an edit meant
    /// for one incarnation of a name never lands on the next; `precondition` (a resourceVersion)
    /// must be its version. `edit` changes the body (and, for a secret, may hand new sealed values
    /// back); the store then keeps what it owns, bumps the generation when the spec changed, and
    /// removes an object whose deletion was asked once no finalizer holds it.
    pub async fn update<F>(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        expect_uid: Option<&str>,
        precondition: Option<&str>,
        edit: F,
    ) -> Result<Written, StoreError>
    where
        F: FnOnce(&mut Value, &mut Option<Sealed>) -> Result<(), Status> + Send + 'static,
    {
        let target = Target::new(kind, namespace, name, expect_uid, precondition);
        self.commit_one_statement(move |session| {
            Box::pin(async move {
                let (written, change) = update_in(session, &target, Box::new(edit)).await?;
                Ok((written, change.into_iter().collect()))
            })
        })
        .await
    }

    /// Asks for an object's deletion: it goes now when no finalizer holds it, else it is marked
    /// (`deletionTimestamp`) and goes once its finalizers are done. Asking again changes nothing.
    pub async fn delete(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        expect_uid: Option<&str>,
        precondition: Option<&str>,
    ) -> Result<Written, StoreError> {
        self.update(
            kind,
            namespace,
            name,
            expect_uid,
            precondition,
            |body, _| {
                if body["metadata"].get("deletionTimestamp").is_none() {
                    body["metadata"]["deletionTimestamp"] = json!(now());
                }
                Ok(())
            },
        )
        .await
    }
}

/// Which object an update is for, owned (it travels to the writer).
pub(super) struct Target {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub expect_uid: Option<String>,
    pub precondition: Option<String>,
}

impl Target {
    pub(super) fn new(
        kind: Kind,
        namespace: &str,
        name: &str,
        expect_uid: Option<&str>,
        precondition: Option<&str>,
    ) -> Target {
        Target {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            expect_uid: expect_uid.map(str::to_string),
            precondition: precondition.map(str::to_string),
        }
    }
}

/// The change a write publishes.
fn change(
    event: EventType,
    stored: &Stored,
    namespace: &str,
    status_only: bool,
    previous_labels: Option<Value>,
) -> Change {
    Change {
        event,
        kind: stored.kind,
        scope: namespace.to_string(),
        resource_version: stored.resource_version,
        object: stored.body.clone(),
        status_only,
        previous_labels,
    }
}

/// [`Store::create`]'s work on the writing connection: one statement, the insert, which the
/// table's key refuses when the name is taken.
async fn create_in(
    session: &mut Session,
    kind: Kind,
    namespace: &str,
    mut body: Value,
    sealed: Option<Sealed>,
) -> Result<Stored, StoreError> {
    let name = body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let exists = || StoreError::Exists {
        kind,
        namespace: namespace.into(),
        name: name.clone(),
    };
    if session
        .remembered(kind, namespace, &name)
        .is_some_and(|row| row.is_some())
    {
        return Err(exists());
    }
    let version = session.next_version(namespace);
    body["apiVersion"] = json!(API_VERSION);
    body["kind"] = json!(kind.as_str());
    let meta = &mut body["metadata"];
    meta["namespace"] = json!(namespace);
    // A uid chosen by the API (a secret's, which its sealing is bound to) is kept.
    if meta["uid"].as_str().is_none_or(str::is_empty) {
        meta["uid"] = json!(uuid::Uuid::new_v4().to_string());
    }
    meta["creationTimestamp"] = json!(now());
    meta["generation"] = json!(1);
    meta["resourceVersion"] = json!(version.to_string());
    if let Some(m) = meta.as_object_mut() {
        m.remove("deletionTimestamp");
    }
    let inserted = write_row(
        &mut session.conn,
        kind,
        namespace,
        &body,
        version,
        sealed.as_ref(),
        true,
    )
    .await;
    match inserted {
        Err(StoreError::Db(sqlx::Error::Database(e)))
            if e.is_unique_violation() && !e.message().contains("objects.uid") =>
        {
            return Err(exists());
        }
        other => {
            other?;
        }
    }
    let stored = Stored {
        kind,
        body,
        resource_version: version,
        sealed,
    };
    session.stage(kind, namespace, &name, Some(stored.clone()));
    Ok(stored)
}

/// [`Store::update`]'s work on the writing connection: the object as written and the change to
/// publish (none when the edit changed nothing).
pub(super) async fn update_in(
    session: &mut Session,
    target: &Target,
    edit: Edit,
) -> Result<(Written, Option<Change>), StoreError> {
    let Target {
        kind,
        namespace,
        name,
        expect_uid,
        precondition,
    } = target;
    let kind = *kind;
    let not_found = || StoreError::NotFound {
        kind,
        namespace: namespace.clone(),
        name: name.clone(),
    };
    let current = session
        .current(kind, namespace, name)
        .await?
        .ok_or_else(not_found)?;
    if expect_uid
        .as_deref()
        .is_some_and(|uid| uid != current.uid())
    {
        return Err(not_found());
    }
    if let Some(expected) = precondition
        && *expected != current.resource_version.to_string()
    {
        return Err(StoreError::Conflict {
            kind,
            name: name.clone(),
            expected: expected.chars().take(32).collect(),
            current: current.resource_version,
        });
    }
    let mut body = current.body.clone();
    let mut sealed = current.sealed.clone();
    edit(&mut body, &mut sealed).map_err(StoreError::Refused)?;
    // What the store owns, whatever the edit did.
    body["apiVersion"] = json!(API_VERSION);
    body["kind"] = json!(kind.as_str());
    for field in ["name", "namespace", "uid", "creationTimestamp"] {
        body["metadata"][field] = current.body["metadata"][field].clone();
    }
    if current.body["metadata"].get("deletionTimestamp").is_some() {
        body["metadata"]["deletionTimestamp"] =
            current.body["metadata"]["deletionTimestamp"].clone();
    }
    body["metadata"]["generation"] = current.body["metadata"]["generation"].clone();
    body["metadata"]["resourceVersion"] = current.body["metadata"]["resourceVersion"].clone();
    if body == current.body && sealed == current.sealed {
        return Ok((Written::Kept(current), None));
    }
    let status_only = sealed == current.sealed && same_but_status(&body, &current.body);
    // A secret's values are its spec too; new ones are sealed anew (the same ones are kept as
    // sealed, so unequal sealed bytes mean new values). A PUT of new values kept generation 1
    // while a PATCH of a key bumped it (a break-it finding).
    if spec_of(kind, &body) != spec_of(kind, &current.body) || sealed != current.sealed {
        let generation = current.body["metadata"]["generation"].as_i64().unwrap_or(1);
        body["metadata"]["generation"] = json!(generation + 1);
    }
    let version = session.next_version(namespace);
    body["metadata"]["resourceVersion"] = json!(version.to_string());
    let deleting = body["metadata"].get("deletionTimestamp").is_some();
    let held = body["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    let stored = Stored {
        kind,
        body,
        resource_version: version,
        sealed,
    };
    if deleting && !held {
        remove_row(&mut session.conn, kind, namespace, name).await?;
        session.stage(kind, namespace, name, None);
        let change = change(EventType::Deleted, &stored, namespace, false, None);
        return Ok((Written::Removed(stored), Some(change)));
    }
    let updated = write_row(
        &mut session.conn,
        kind,
        namespace,
        &stored.body,
        version,
        stored.sealed.as_ref(),
        false,
    )
    .await?;
    if updated != 1 {
        // The writer's memory of the row was not what the database holds. It cannot be, while
        // this process is the only writer; if it ever is, it is forgotten, and the edit retried
        // starts from the row as stored.
        session.forget_rows();
        return Err(StoreError::Corrupt {
            what: format!("{kind} {name:?} in namespace {namespace:?}"),
            why: "its row was not as the store's writer knew it; retry".into(),
        });
    }
    session.stage(kind, namespace, name, Some(stored.clone()));
    let previous_labels = &current.body["metadata"]["labels"];
    let relabelled =
        (*previous_labels != stored.body["metadata"]["labels"]).then(|| previous_labels.clone());
    let change = change(
        EventType::Modified,
        &stored,
        namespace,
        status_only,
        relabelled,
    );
    Ok((Written::Kept(stored), Some(change)))
}

/// Whether two objects differ in `status` at most (compared field by field, without copies: this
/// runs on every write the reconcilers make).
fn same_but_status(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let others =
        |o: &'_ serde_json::Map<String, Value>| o.keys().filter(|k| *k != "status").count();
    others(a) == others(b)
        && a.iter()
            .filter(|(k, _)| *k != "status")
            .all(|(k, v)| b.get(k) == Some(v))
}

/// What a change of the generation is measured on: `spec`, or for kinds without one (secrets,
/// classes) everything but `metadata` and `status`.
fn spec_of(kind: Kind, body: &Value) -> Value {
    match kind {
        Kind::Machine | Kind::MachineSet | Kind::MachineDeployment => body["spec"].clone(),
        Kind::Secret | Kind::MachineClass => {
            let mut rest = body.clone();
            if let Some(m) = rest.as_object_mut() {
                m.remove("metadata");
                m.remove("status");
            }
            rest
        }
    }
}
