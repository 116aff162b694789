//! What the engine keeps per caller connection ([`CallerState`]), and the bodies that count its
//! answers being written ([`Answered`]) and its request bodies being read ([`Reading`]).
//!
//! Apart because every stage shares it (the connection's task, the answer, the cold table, the cap's
//! close), so it belongs to none of them; its counts are what decide when a connection may park.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use hyper::body::Incoming;
use service_kit::connections::{Activity, Closer};

/// What the engine keeps per caller connection: what shows it is alive (its [`Activity`]), and the
/// token it last presented. Written only by the connection's own task, so never contended; locks
/// only because the task must be `Send`.
#[derive(Default)]
pub(super) struct CallerState {
    pub(super) activity: Activity,
    /// Answers hyper has not finished writing ([`Answered`]).
    pub(super) answering: AtomicU32,
    /// Request bodies not read to their end ([`Reading`]); one dropped unfinished stays counted,
    /// since hyper may still be draining it.
    pub(super) reading: AtomicU32,
    /// Bytes were read since the last request head was complete: hyper may hold part of a head.
    pub(super) heard: AtomicBool,
    /// A connection's calls nearly always carry the same token: remembering it spares hashing it
    /// on every call ([`crate::auth::TokenStore::authenticate_remembering`]).
    pub(super) token: std::sync::Mutex<Option<crate::auth::Remembered>>,
    /// The timer bounding its calls' upstream time ([`crate::proxy::CallTimer`]).
    pub(super) timer: std::sync::Mutex<crate::proxy::CallTimer>,
    /// Asked to close, to make room under the cap ([`Closer::close`]); with the task to wake.
    pub(super) closing: AtomicBool,
    pub(super) close_waker: futures::task::AtomicWaker,
    /// Its socket while it is cold ([`Worker::go_cold`]): here, so a close can shut it down.
    ///
    /// [`Worker::go_cold`]: super::worker::Worker::go_cold
    pub(super) cold: std::sync::Mutex<Option<std::net::TcpStream>>,
}

impl CallerState {
    /// Whether the connection was asked to close; if not, `cx` is woken when it is.
    pub(super) fn asked_to_close(&self, cx: &mut Context<'_>) -> bool {
        self.close_waker.register(cx.waker());
        self.closing.load(Ordering::SeqCst)
    }

    /// Shuts a cold connection's socket down: its caller sees the close, and the worker's poll
    /// wakes for it, which drops it.
    pub(super) fn shut_cold(&self) {
        if let Some(stream) = self.cold.lock().expect("cold socket lock").as_ref() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Closer for CallerState {
    fn activity(&self) -> &Activity {
        &self.activity
    }

    fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.close_waker.wake();
        self.shut_cold();
    }

    fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }
}

impl AsRef<Activity> for CallerState {
    fn as_ref(&self) -> &Activity {
        &self.activity
    }
}

pub(super) type Busy = service_kit::connections::Busy<CallerState>;

/// An answer hyper is writing, counted in [`CallerState::answering`] until hyper drops its body.
pub(super) struct Answering(Arc<CallerState>);

impl Answering {
    pub(super) fn start(caller: &Arc<CallerState>) -> Self {
        caller.answering.fetch_add(1, Ordering::Relaxed);
        Answering(caller.clone())
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.answering.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An answer's body, with what counts it as being written.
pub(super) struct Answered {
    pub(super) body: Body,
    #[allow(dead_code)] // Held for its drop.
    pub(super) answering: Answering,
}

impl hyper::body::Body for Answered {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A request body being read, counted in [`CallerState::reading`] until its end is read.
pub(super) struct Reading {
    body: Incoming,
    caller: Option<Arc<CallerState>>,
}

impl Reading {
    pub(super) fn start(body: Incoming, caller: &Arc<CallerState>) -> Self {
        caller.reading.fetch_add(1, Ordering::Relaxed);
        Reading {
            body,
            caller: Some(caller.clone()),
        }
    }

    fn finished(&mut self) {
        if let Some(caller) = self.caller.take() {
            caller.reading.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl hyper::body::Body for Reading {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) || self.body.is_end_stream() {
            self.finished();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
