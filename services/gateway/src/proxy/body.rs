//! The caller's body on its way to the upstream ([`CallerBody`]), the progress it reports as it
//! goes ([`BodyProgress`]), and how long it may bring no bytes ([`body_stall_limit`]).
//!
//! Apart because this is what lets the forwarder blame the right party. hyper polls the body deep
//! inside the upstream call, so what became of it (in, too large, broken, stalled) has to be recorded
//! while it streams and read once the call is over; how a caller's body is judged is a question of
//! its own, with nothing to do with connections or headers.

use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Body as _, Frame, SizeHint};

/// What became of the caller's body, as the call goes.
pub(super) struct BodyProgress {
    state: AtomicU8,
    /// When the body ended, once it has.
    pub(super) finished_at: OnceLock<Instant>,
    /// When the call began, and how long after that the body last brought bytes (in nanoseconds).
    began: Instant,
    last_bytes_after: AtomicU64,
}

// The state starts at 0: still streaming.
pub(super) const FINISHED: u8 = 1;
pub(super) const TOO_LARGE: u8 = 2;
pub(super) const BROKEN: u8 = 3;

impl BodyProgress {
    fn new() -> Self {
        BodyProgress {
            state: AtomicU8::new(0),
            finished_at: OnceLock::new(),
            began: Instant::now(),
            last_bytes_after: AtomicU64::new(0),
        }
    }

    pub(super) fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    fn brought_bytes(&self) {
        let after = u64::try_from(self.began.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_bytes_after.store(after, Ordering::Relaxed);
    }

    /// When the body last brought bytes (or the call began).
    pub(super) fn last_bytes_at(&self) -> Instant {
        self.began + Duration::from_nanos(self.last_bytes_after.load(Ordering::Relaxed))
    }
}

/// The caller's body on its way to the upstream, reporting its progress, so a failure of the call
/// can be told apart: the caller's body broke or stalled (the caller's fault), or the upstream
/// failed.
pub(crate) struct CallerBody {
    inner: Body,
    progress: Arc<BodyProgress>,
}

impl CallerBody {
    pub(super) fn new(inner: Body) -> (Self, Arc<BodyProgress>) {
        let progress = Arc::new(BodyProgress::new());
        let body = CallerBody {
            inner,
            progress: progress.clone(),
        };
        body.finish_if_ended();
        (body, progress)
    }

    /// Records the end once the caller's body has none left. Hyper stops polling a body whose
    /// declared length it has sent (it asks `is_end_stream` instead of waiting for the `None`), so
    /// the end must be read off the body after every frame, not only from a final poll: else the
    /// body never counts as in, and an upstream slower than the stall limit looks like a caller
    /// that stopped sending (a 408 for every slow CreateMachine).
    fn finish_if_ended(&self) {
        if self.inner.is_end_stream() {
            self.finish();
        }
    }

    fn finish(&self) {
        let _ = self.progress.finished_at.set(Instant::now());
        // Only a body still streaming ends well; a broken or oversized one stays what it was.
        let _ =
            self.progress
                .state
                .compare_exchange(0, FINISHED, Ordering::AcqRel, Ordering::Acquire);
    }
}

impl hyper::body::Body for CallerBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(_))) => {
                self.progress.brought_bytes();
                self.finish_if_ended();
            }
            Poll::Ready(None) => self.finish(),
            Poll::Ready(Some(Err(e))) => {
                let state = if is_too_large(e) { TOO_LARGE } else { BROKEN };
                self.progress.state.store(state, Ordering::Release);
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        let ended = self.inner.is_end_stream();
        if ended {
            self.finish();
        }
        ended
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn is_too_large(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// How long a caller's body may bring no bytes before the call is answered 408: half the upstream's
/// time, at most 10 s. Well inside the upstream's own request limit, so a stalled caller is told by
/// the gateway (408) before the upstream gives up on the body itself (its 504, which would read as
/// the upstream's failure).
pub(super) fn body_stall_limit(upstream_timeout: Duration) -> Duration {
    (upstream_timeout / 2).min(Duration::from_secs(10))
}
