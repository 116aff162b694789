//! The caller's socket as hyper sees it ([`Watched`]): each write of answer bytes counts as
//! progress, and once the connection is idle a read ends hyper's connection as if the caller had
//! closed, so it can be parked.
//!
//! Apart because this is the one place that misleads hyper on purpose, and its rules (when an end
//! may be read, the nudge after a flush, the bytes an earlier spell left unread) only make sense read
//! together.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::Bytes;
use service_kit::protocol::ProblemIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::caller::CallerState;

/// The caller's connection as hyper sees it: it counts each write of answer bytes as progress (a
/// long answer read slowly is still alive), and it ends hyper's connection when the caller is idle
/// (see [`Watched::may_park`]) by reading as if the caller had closed, so the connection can be
/// parked without hyper's buffers.
pub(super) struct Watched {
    pub(super) stream: ProblemIo<TcpStream>,
    pub(super) caller: Arc<CallerState>,
    /// Bytes were handed over since the last flush that completed: hyper may hold some unwritten.
    unflushed: bool,
    /// The end hyper saw was this one's, not the caller's: the socket goes on.
    pub(super) parked: bool,
    /// hyper was woken once to read after its last answer (see `poll_flush`).
    nudged: bool,
    /// What an earlier hyper connection had read and not used, to be read first.
    pub(super) unread: Bytes,
}

impl Watched {
    pub(super) fn new(stream: ProblemIo<TcpStream>, caller: Arc<CallerState>) -> Self {
        Watched {
            stream,
            caller,
            unflushed: false,
            parked: false,
            nudged: false,
            unread: Bytes::new(),
        }
    }

    fn wrote(&self, written: &Poll<std::io::Result<usize>>) {
        if matches!(written, Poll::Ready(Ok(n)) if *n > 0) {
            self.caller.activity.progressed();
        }
    }

    /// Whether hyper may be ended here: every call answered, every answer written and flushed,
    /// every request body read, and no part of a head read since the last whole one. Then hyper is
    /// idle between requests, and an end read now closes it with nothing lost.
    fn may_park(&self) -> bool {
        let caller = &self.caller;
        !self.unflushed
            && caller.activity.is_idle()
            && caller.answering.load(Ordering::Relaxed) == 0
            && caller.reading.load(Ordering::Relaxed) == 0
            && !caller.heard.load(Ordering::Relaxed)
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if !this.unread.is_empty() {
            // Left over from the hyper connection before: part of a head, which must not be
            // parked again before the rest of it comes.
            let n = this.unread.len().min(buf.remaining());
            buf.put_slice(&this.unread.split_to(n));
            this.caller.heard.store(true, Ordering::Relaxed);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Pending if this.may_park() => {
                // Nothing filled: hyper takes it for the caller's close between requests.
                this.parked = true;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                this.nudged = false;
                // Bytes of a request body being read are not part of a head.
                if this.caller.reading.load(Ordering::Relaxed) == 0 {
                    this.caller.heard.store(true, Ordering::Relaxed);
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.unflushed = true;
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.wrote(&written);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.unflushed = true;
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.wrote(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // hyper flushes the socket only once its own buffer is written out.
        let flushed = Pin::new(&mut self.stream).poll_flush(cx);
        if matches!(flushed, Poll::Ready(Ok(()))) {
            self.unflushed = false;
            // hyper asked for the caller's next bytes before this answer was out, and will not
            // ask again until they come: have it ask now, once, so the idle connection is parked.
            if !self.nudged && self.may_park() {
                self.nudged = true;
                cx.waker().wake_by_ref();
            }
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.parked {
            // The caller did not close: the socket stays as it is.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
