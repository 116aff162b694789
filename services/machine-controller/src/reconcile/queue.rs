//! The work queue, after client-go's: a key is queued at most once, a key being worked on is never
//! worked on twice at a time (a change that arrives meanwhile queues it again once the work is
//! done), and a key can be queued after a delay, with at most one delay waiting per key (the
//! earliest), as client-go's delaying queue keeps it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use domain::resources::Kind;
use tokio::sync::Notify;

/// What a reconcile works on: an object's kind, namespace and name.
pub type Key = (Kind, String, String);

#[derive(Debug, Default)]
struct State {
    ready: VecDeque<Key>,
    queued: HashSet<Key>,
    running: HashSet<Key>,
    again: HashSet<Key>,
    /// When each key's waiting delay ends.
    delayed: HashMap<Key, tokio::time::Instant>,
}

/// The queue.
#[derive(Debug, Default)]
pub struct Queue {
    state: Mutex<State>,
    notify: Notify,
}

impl Queue {
    /// An empty queue.
    pub fn new() -> Arc<Queue> {
        Arc::new(Queue::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `key` (once).
    pub fn add(&self, key: Key) {
        let mut state = self.lock();
        if state.running.contains(&key) {
            state.again.insert(key);
            return;
        }
        if state.queued.insert(key.clone()) {
            state.ready.push_back(key);
            drop(state);
            self.notify.notify_one();
        }
    }

    /// Queues `key` after `delay`, unless it is already due sooner. Each reconcile of a machine
    /// that keeps failing says when to look again, and the periodic resync reconciles it too: with
    /// a timer of its own for each, the timers grew by one every resync, and the machine was
    /// called that many times each round (a break-it finding).
    pub fn add_after(self: &Arc<Self>, key: Key, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let due = tokio::time::Instant::now() + delay;
        {
            let mut state = self.lock();
            if state.delayed.get(&key).is_some_and(|sooner| *sooner <= due) {
                return;
            }
            state.delayed.insert(key.clone(), due);
        }
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            // A sooner delay for the key since replaced this one, and queued it itself.
            let still_due = {
                let mut state = queue.lock();
                let ours = state.delayed.get(&key) == Some(&due);
                if ours {
                    state.delayed.remove(&key);
                }
                ours
            };
            if still_due {
                queue.add(key);
            }
        });
    }

    /// The next key to work on, waiting for one.
    pub async fn take(&self) -> Key {
        loop {
            let notified = self.notify.notified();
            {
                let mut state = self.lock();
                if let Some(key) = state.ready.pop_front() {
                    state.queued.remove(&key);
                    state.running.insert(key.clone());
                    // Another worker may take the next one.
                    if !state.ready.is_empty() {
                        self.notify.notify_one();
                    }
                    return key;
                }
            }
            notified.await;
        }
    }

    /// Marks the work on `key` done; queues it again if it changed meanwhile.
    pub fn done(&self, key: &Key) {
        let again = {
            let mut state = self.lock();
            state.running.remove(key);
            state.again.remove(key)
        };
        if again {
            self.add(key.clone());
        }
    }

    /// How many keys wait.
    pub fn len(&self) -> usize {
        self.lock().ready.len()
    }

    /// Whether no key waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        (Kind::Machine, "ns".into(), name.into())
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_waits_on_one_delay_the_soonest() {
        let q = Queue::new();
        for seconds in [10, 10, 5, 30] {
            q.add_after(key("a"), Duration::from_secs(seconds));
        }
        tokio::time::sleep(Duration::from_millis(4_900)).await;
        assert!(q.is_empty());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(q.len(), 1);
        let taken = q.take().await;
        q.done(&taken);
        // The later ones queue nothing more.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(q.is_empty());
        // Once it fired, a new delay waits again.
        q.add_after(key("a"), Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(q.len(), 1);
    }

    #[tokio::test]
    async fn a_key_is_queued_once_and_never_worked_twice_at_a_time() {
        let q = Queue::new();
        q.add(key("a"));
        q.add(key("a"));
        q.add(key("b"));
        assert_eq!(q.len(), 2);
        let first = q.take().await;
        assert_eq!(first, key("a"));
        // Changed while worked on: queued again only once the work is done.
        q.add(key("a"));
        assert_eq!(q.take().await, key("b"));
        assert!(q.is_empty());
        q.done(&first);
        assert_eq!(q.take().await, key("a"));
    }
}
