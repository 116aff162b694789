//! Cold connections: a connection parked for [`COLD_AFTER`] leaves its task, tokio's reactor and
//! its timer for an entry in its worker's cold table, and one task per worker watches them all on an
//! epoll of the worker's own.
//!
//! Apart because it is a second way of waiting, beside tokio's, with bookkeeping of its own (keys,
//! registrations, the idle sweep) that a served connection never touches: it is there only for what
//! many idle callers cost in memory.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use service_kit::connections::Registered;
use service_kit::protocol::ProblemIo;
use tokio::net::TcpStream;

use super::COLD_AFTER;
use super::caller::CallerState;
use super::watched::Watched;
use super::worker::Worker;

/// The bounds of how often a worker sweeps its cold connections for their idle timeouts (an
/// eighth of the timeout, within these): a cold connection closes at most this late.
const COLD_SWEEP_MIN: Duration = Duration::from_millis(100);
const COLD_SWEEP_MAX: Duration = Duration::from_secs(5);

/// A worker's cold connections, by their key in its poll.
pub(super) struct ColdTable {
    pub(super) registry: mio::Registry,
    pub(super) entries: HashMap<usize, ColdEntry>,
    pub(super) next_key: usize,
}

/// A cold connection: what it takes to serve it again. Its socket is in its caller state.
pub(super) struct ColdEntry {
    registered: Registered,
    caller: Arc<CallerState>,
    peer: SocketAddr,
    /// When its idle timeout is up.
    deadline: tokio::time::Instant,
}

impl Worker {
    /// Moves a connection idle for [`COLD_AFTER`] into the cold table: its task ends, its socket
    /// leaves tokio's reactor for the worker's own poll, and its call timer is freed.
    pub(super) fn go_cold(&self, io: Watched, registered: Registered, peer: SocketAddr) {
        let caller = io.caller;
        *caller.timer.lock().expect("timer lock") = crate::proxy::CallTimer::default();
        // The waker the task left to be told of a close holds the task's memory (512 bytes)
        // for as long as it is kept.
        drop(caller.close_waker.take());
        let Ok(stream) = io.stream.into_inner().into_std() else {
            return;
        };
        let deadline =
            tokio::time::Instant::now() + self.shared.idle_timeout.saturating_sub(COLD_AFTER);
        {
            let mut table = self.cold.lock().expect("cold table lock");
            let key = table.next_key;
            table.next_key = table.next_key.wrapping_add(1);
            let fd = stream.as_raw_fd();
            if let Err(e) = table.registry.register(
                &mut mio::unix::SourceFd(&fd),
                mio::Token(key),
                mio::Interest::READABLE,
            ) {
                tracing::debug!(%peer, error = %e, "could not watch a cold connection; closing it");
                return;
            }
            *caller.cold.lock().expect("cold socket lock") = Some(stream);
            table.entries.insert(
                key,
                ColdEntry {
                    registered,
                    caller: caller.clone(),
                    peer,
                    deadline,
                },
            );
        }
        // A close asked while the socket was on its way found none to shut down: shut it now, so
        // the cold watch wakes for it.
        if caller.closing.load(Ordering::SeqCst) {
            caller.shut_cold();
        }
    }

    /// Watches the worker's cold connections: one readiness wait over all of them (the worker's
    /// own `poll`), and one sweep for their idle timeouts, instead of a task, a reactor record and
    /// a timer each. A cold connection that gets bytes (or its caller's close, or a close to make
    /// room, which shuts its socket down) is served again by a new task.
    pub(super) async fn cold_watch(self: Arc<Self>, poll: mio::Poll) {
        // `AsyncFd::new` is deprecated as unsound for a `T` whose descriptor can be closed under
        // it; a `mio::Poll` owns its epoll descriptor until it is dropped, which only the
        // `AsyncFd` can do. Its replacement is an `unsafe fn`, which this workspace forbids.
        #[allow(deprecated)]
        let poll = tokio::io::unix::AsyncFd::new(poll);
        let mut poll = match poll {
            Ok(poll) => poll,
            Err(e) => {
                tracing::error!(error = %e, "cannot watch cold connections");
                return;
            }
        };
        let mut events = mio::Events::with_capacity(256);
        let period = (self.shared.idle_timeout / 8).clamp(COLD_SWEEP_MIN, COLD_SWEEP_MAX);
        let mut sweep = tokio::time::interval(period);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = self.stop.cancelled() => break,
                ready = poll.readable_mut() => {
                    let Ok(mut ready) = ready else { break };
                    loop {
                        events.clear();
                        if ready.get_inner_mut().poll(&mut events, Some(Duration::ZERO)).is_err() {
                            break;
                        }
                        if events.is_empty() {
                            ready.clear_ready();
                            break;
                        }
                        for event in events.iter() {
                            self.warm(event.token().0);
                        }
                    }
                }
                _ = sweep.tick() => self.sweep_cold(),
            }
        }
        // The worker stops: every cold connection closes.
        let entries: Vec<ColdEntry> = {
            let mut table = self.cold.lock().expect("cold table lock");
            table.entries.drain().map(|(_, entry)| entry).collect()
        };
        for entry in entries {
            drop(entry.caller.cold.lock().expect("cold socket lock").take());
        }
    }

    /// A cold connection with something to read: served again by a new task, unless it was asked
    /// to close.
    fn warm(self: &Arc<Self>, key: usize) {
        let Some((entry, stream)) = self.take_cold(key) else {
            return;
        };
        if entry.caller.closing.load(Ordering::SeqCst) {
            return;
        }
        match TcpStream::from_std(stream) {
            Ok(stream) => {
                let io = Watched::new(ProblemIo::new(stream), entry.caller);
                self.tracker
                    .spawn(self.clone().served(io, entry.registered, entry.peer));
            }
            Err(e) => tracing::debug!(error = %e, "could not serve a cold connection again"),
        }
    }

    /// Takes a cold connection out of the table and the worker's poll, with its socket.
    fn take_cold(&self, key: usize) -> Option<(ColdEntry, std::net::TcpStream)> {
        let mut table = self.cold.lock().expect("cold table lock");
        let entry = table.entries.remove(&key)?;
        let stream = entry.caller.cold.lock().expect("cold socket lock").take()?;
        let _ = table
            .registry
            .deregister(&mut mio::unix::SourceFd(&stream.as_raw_fd()));
        Some((entry, stream))
    }

    /// Closes the cold connections past their idle timeout, or asked to close.
    fn sweep_cold(&self) {
        let now = tokio::time::Instant::now();
        let due: Vec<usize> = {
            let table = self.cold.lock().expect("cold table lock");
            table
                .entries
                .iter()
                .filter(|(_, e)| e.deadline <= now || e.caller.closing.load(Ordering::SeqCst))
                .map(|(key, _)| *key)
                .collect()
        };
        for key in due {
            // Dropped here, out of the table's lock: the registration's drop takes the cap's.
            drop(self.take_cold(key));
        }
    }
}
