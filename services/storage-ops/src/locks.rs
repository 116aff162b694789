//! Per-volume locks: at most one AddStorage, DeleteStorage or reconcile step works on a
//! (namespace, name) at a time, so 100 concurrent creates of one name make one backend object.
//!
//! Entries are removed when their last holder or waiter lets go, so the map holds only the keys that
//! are busy right now.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

type Key = (String, String);

/// The lock table.
#[derive(Debug, Default)]
pub struct KeyLocks {
    map: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

/// A held lock; released on drop.
pub struct KeyGuard<'a> {
    locks: &'a KeyLocks,
    key: Key,
    guard: Option<OwnedMutexGuard<()>>,
}

impl KeyLocks {
    fn entry(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_default()
            .clone()
    }

    /// Waits for the lock of `namespace/name`.
    pub async fn lock(&self, namespace: &str, name: &str) -> KeyGuard<'_> {
        let key = (namespace.to_string(), name.to_string());
        let guard = self.entry(&key).lock_owned().await;
        KeyGuard {
            locks: self,
            key,
            guard: Some(guard),
        }
    }

    /// The lock of `namespace/name` if nobody holds it (the reconciler skips busy volumes).
    pub fn try_lock(&self, namespace: &str, name: &str) -> Option<KeyGuard<'_>> {
        let key = (namespace.to_string(), name.to_string());
        let guard = self.entry(&key).try_lock_owned().ok();
        let held = KeyGuard {
            locks: self,
            key,
            guard,
        };
        // Dropping a guard without the lock still tidies the entry it may have made.
        held.guard.is_some().then_some(held)
    }

    /// How many keys are busy (for tests).
    pub fn busy(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self.locks.map.lock().unwrap_or_else(|p| p.into_inner());
        // Clones are only made under this mutex, so a count of 1 means nobody holds or awaits it.
        if map
            .get(&self.key)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_holder_per_key_and_entries_are_tidied() {
        let locks = KeyLocks::default();
        let a = locks.lock("ns", "a").await;
        assert!(locks.try_lock("ns", "a").is_none());
        let b = locks.try_lock("ns", "b").expect("another key is free");
        drop(a);
        drop(b);
        assert_eq!(locks.busy(), 0);
        assert!(locks.try_lock("ns", "a").is_some());
        assert_eq!(locks.busy(), 0);
    }
}
