//! The orphan collector's records: the machines this controller made (recorded before the driver
//! is asked), and the VMs seen backing no machine. Apart because they are tables of their own,
//! kept beside the objects, that only the collector and the machine reconciler use.

use domain::resources::Kind;
use sqlx::{Row, SqliteConnection};

use super::writes::{Target, update_in};
use super::{Edit, Store, StoreError, Written, now};

impl Store {
    /// Records, before the driver is asked, that this controller makes machine `name` (uid `uid`)
    /// of class `class_name` in `namespace`.
    pub async fn record_made(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        class_name: &str,
    ) -> Result<(), StoreError> {
        let made = Made::new(namespace, name, uid, class_name);
        self.commit(move |session| {
            Box::pin(async move {
                made.record(&mut session.conn).await?;
                Ok(((), Vec::new()))
            })
        })
        .await
    }

    /// Edits machine `name`'s status through `edit` (for incarnation `uid` only) and records that
    /// this controller makes it, of class `class_name`, in one commit: both must hold before the
    /// driver is asked for its VM.
    pub async fn update_as_made(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        class_name: &str,
        edit: Edit,
    ) -> Result<Written, StoreError> {
        let made = Made::new(namespace, name, uid, class_name);
        let target = Target::new(Kind::Machine, namespace, name, Some(uid), None);
        self.commit(move |session| {
            Box::pin(async move {
                let (written, change) = update_in(session, &target, edit).await?;
                made.record(&mut session.conn).await?;
                Ok((written, change.into_iter().collect()))
            })
        })
        .await
    }

    /// The machines of class `class_name` in `namespace` this controller made: name → uid.
    pub async fn made(
        &self,
        namespace: &str,
        class_name: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, uid FROM made_machines WHERE namespace = ? AND class_name = ?",
        )
        .bind(namespace)
        .bind(class_name)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("name")?, r.try_get("uid")?)))
            .collect()
    }

    /// Forgets that machine `name` in `namespace` was made (its VM is known gone).
    pub async fn forget_made(&self, namespace: &str, name: &str) -> Result<(), StoreError> {
        let (namespace, name) = (namespace.to_string(), name.to_string());
        self.commit(move |session| {
            Box::pin(async move {
                sqlx::query("DELETE FROM made_machines WHERE namespace = ? AND name = ?")
                    .bind(&namespace)
                    .bind(&name)
                    .execute(&mut session.conn)
                    .await?;
                Ok(((), Vec::new()))
            })
        })
        .await
    }

    /// Forgets the sighting of `provider_id`.
    pub async fn forget_orphan(&self, provider_id: &str) -> Result<(), StoreError> {
        let provider_id = provider_id.to_string();
        self.commit(move |session| {
            Box::pin(async move {
                sqlx::query("DELETE FROM orphan_sightings WHERE provider_id = ?")
                    .bind(&provider_id)
                    .execute(&mut session.conn)
                    .await?;
                Ok(((), Vec::new()))
            })
        })
        .await
    }

    /// Records that `provider_id` (in `namespace`, of class `class_name`, named for `machine`)
    /// was seen backing no machine in one full listing; returns how many listings have seen it so
    /// and when the first did.
    pub async fn sight_orphan(
        &self,
        provider_id: &str,
        namespace: &str,
        class_name: &str,
        machine: &str,
    ) -> Result<(u32, String), StoreError> {
        let fields = [provider_id, namespace, class_name, machine].map(str::to_string);
        self.commit(move |session| {
            Box::pin(async move {
                let [provider_id, namespace, class_name, machine] = &fields;
                let row = sqlx::query(
                    "INSERT INTO orphan_sightings \
                     (provider_id, namespace, class_name, machine, first_seen, sightings) \
                     VALUES (?, ?, ?, ?, ?, 1) \
                     ON CONFLICT (provider_id) DO UPDATE SET sightings = sightings + 1 \
                     RETURNING sightings, first_seen",
                )
                .bind(provider_id)
                .bind(namespace)
                .bind(class_name)
                .bind(machine)
                .bind(now())
                .fetch_one(&mut session.conn)
                .await?;
                let sightings: i64 = row.try_get("sightings")?;
                Ok(((sightings as u32, row.try_get("first_seen")?), Vec::new()))
            })
        })
        .await
    }

    /// Forgets the sightings of VMs not in `still_orphaned` among those of `namespace` and
    /// `class_name` (they back a machine again, or are gone).
    pub async fn forget_orphans_except(
        &self,
        namespace: &str,
        class_name: &str,
        still_orphaned: &[String],
    ) -> Result<(), StoreError> {
        let (namespace, class_name) = (namespace.to_string(), class_name.to_string());
        let still_orphaned = still_orphaned.to_vec();
        self.commit(move |session| {
            Box::pin(async move {
                let ids: Vec<String> = sqlx::query_scalar(
                    "SELECT provider_id FROM orphan_sightings WHERE namespace = ? AND class_name = ?",
                )
                .bind(&namespace)
                .bind(&class_name)
                .fetch_all(&mut session.conn)
                .await?;
                for id in ids.iter().filter(|id| !still_orphaned.contains(id)) {
                    sqlx::query("DELETE FROM orphan_sightings WHERE provider_id = ?")
                        .bind(id)
                        .execute(&mut session.conn)
                        .await?;
                }
                Ok(((), Vec::new()))
            })
        })
        .await
    }
}

/// A made-machines record, owned (it travels to the writer).
struct Made {
    namespace: String,
    name: String,
    uid: String,
    class_name: String,
}

impl Made {
    fn new(namespace: &str, name: &str, uid: &str, class_name: &str) -> Made {
        Made {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
            class_name: class_name.to_string(),
        }
    }

    async fn record(&self, conn: &mut SqliteConnection) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO made_machines (namespace, name, uid, class_name) VALUES (?, ?, ?, ?) \
             ON CONFLICT (namespace, name) DO UPDATE SET uid = excluded.uid, class_name = excluded.class_name",
        )
        .bind(&self.namespace)
        .bind(&self.name)
        .bind(&self.uid)
        .bind(&self.class_name)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}
