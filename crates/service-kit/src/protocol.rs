//! Problem+json for the answers hyper writes by itself.
//!
//! When a request cannot even be parsed (a garbage request line, a bad `Content-Length`, a path over
//! hyper's limit, too many headers), hyper answers on its own with a bare `400`, `414` or `431` and
//! closes the connection: no handler runs, so no middleware can shape that answer, and hyper has no
//! hook for it. [`ProblemIo`] wraps a connection's socket and recognises those canned answers as they
//! are written (an error status line with an empty body and no content type, which no answer of ours
//! ever is: ours always carry a problem+json body), and writes a problem+json answer with a request
//! id in their place. Everything else passes through untouched.
//!
//! It also closes as nginx's lingering close does. A request refused before its body was read (413
//! for a body over the limit, announced by its `Content-Length`) is answered at once and the
//! connection closed; a caller that writes its whole body before reading (Python's `http.client`,
//! most scripts) is then still writing when the socket closes with unread bytes in it, the kernel
//! answers with a reset, and the caller sees a broken pipe instead of the 413. So when hyper shuts
//! the connection down after an error answer, or with request bytes still arriving, [`ProblemIo`]
//! half-closes it (the answer is complete for the caller) and reads and discards what the caller
//! still sends, until the caller closes, [`LINGER_BYTES`] have been thrown away, or [`LINGER_TIME`]
//! has passed, whichever comes first; only then is the socket closed.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use domain::Code;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::{ApiError, PROBLEM_JSON};

/// The most a lingering close reads and throws away before it closes anyway.
pub const LINGER_BYTES: usize = 4 * 1024 * 1024;

/// The longest a lingering close waits for the caller to stop sending.
pub const LINGER_TIME: Duration = Duration::from_secs(2);

/// A connection whose protocol-level error answers come out as problem+json, and whose close
/// lingers after an error answer (see the module's documentation).
pub struct ProblemIo<T> {
    inner: T,
    /// A replacement answer still being written, and how much of it is out.
    pending: Vec<u8>,
    written: usize,
    /// The last answer written was an error (4xx): its request's body may be unread.
    refused: bool,
    /// A lingering close under way.
    linger: Option<Linger>,
}

/// A lingering close: the write side is shut, what the caller still sends is read and dropped.
struct Linger {
    deadline: Pin<Box<tokio::time::Sleep>>,
    drained: usize,
}

impl<T> ProblemIo<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> Self {
        ProblemIo {
            inner,
            pending: Vec::new(),
            written: 0,
            refused: false,
            linger: None,
        }
    }

    /// The wrapped connection, given back.
    pub fn into_inner(self) -> T {
        self.inner
    }

    /// The wrapped connection, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Notes what kind of answer a write starts, if it starts one.
    fn note_answer(&mut self, buf: &[u8]) {
        if buf.starts_with(b"HTTP/1.1 ") {
            self.refused = buf.get(9) == Some(&b'4');
        }
    }

    /// The wrapped connection.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

/// The three answers hyper writes by itself, by the status line it starts them with.
const CANNED: [(&[u8], u16, &str); 3] = [
    (
        b"HTTP/1.1 400 Bad Request\r\n",
        400,
        "the request could not be parsed as HTTP/1.1 (its request line, a header, or its framing is malformed)",
    ),
    (
        b"HTTP/1.1 414 URI Too Long\r\n",
        414,
        "the request target is longer than the server accepts",
    ),
    (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
        431,
        "the request's header section is larger, or has more fields, than the server accepts",
    ),
];

/// The problem+json answer that replaces `head`, if `head` is one of hyper's canned error answers.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let (status_line, status, detail) =
        CANNED.iter().find(|(line, _, _)| head.starts_with(line))?;
    // A canned answer is a head alone, with no content type and an empty body; every answer a handler
    // of ours makes with these statuses is problem+json with a body.
    let head_end = head.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let lower = head[..head_end].to_ascii_lowercase();
    let has = |needle: &[u8]| lower.windows(needle.len()).any(|w| w == needle);
    if head_end != head.len() || has(b"content-type:") || !has(b"content-length: 0\r\n") {
        return None;
    }
    let id = crate::request_id::make();
    let id = id.to_str().unwrap_or_default();
    let http = http::StatusCode::from_u16(*status).ok()?;
    let problem = ApiError::from_code(Code::InvalidArgument, *detail)
        .with_http_status(http)
        .problem(id);
    let body = serde_json::to_vec(&problem).ok()?;
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(status_line);
    out.extend_from_slice(b"content-type: ");
    out.extend_from_slice(PROBLEM_JSON.as_bytes());
    out.extend_from_slice(format!("\r\ncontent-length: {}\r\n", body.len()).as_bytes());
    out.extend_from_slice(format!("x-request-id: {id}\r\n").as_bytes());
    out.extend_from_slice(b"connection: close\r\n\r\n");
    out.extend_from_slice(&body);
    tracing::debug!(
        status,
        request_id = id,
        "request refused before parsing finished"
    );
    Some(out)
}

impl<T: AsyncWrite + Unpin> ProblemIo<T> {
    /// Writes out what is left of a replacement answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> ProblemIo<T> {
    /// Whether the caller has sent bytes nobody read yet (read into a scratch buffer and counted
    /// toward the linger, if so).
    fn poll_has_data(&mut self, cx: &mut Context<'_>) -> bool {
        let mut scratch = [0u8; 1024];
        let mut buf = ReadBuf::new(&mut scratch);
        matches!(
            Pin::new(&mut self.inner).poll_read(cx, &mut buf),
            Poll::Ready(Ok(())) if !buf.filled().is_empty()
        )
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ProblemIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> ProblemIo<T> {
    /// Reads and drops what the caller still sends, until it closes or a bound is reached.
    fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(linger) = self.linger.as_mut() else {
            return Poll::Ready(());
        };
        let mut scratch = [0u8; 8192];
        loop {
            if linger.drained >= LINGER_BYTES {
                return Poll::Ready(());
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.inner).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(()),
                Poll::Ready(Ok(())) => linger.drained += buf.filled().len(),
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => return linger.deadline.as_mut().poll(cx),
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for ProblemIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_pending(cx))?;
        this.note_answer(buf);
        // A cheap first test (one byte compare and a length) keeps ordinary writes on the fast path.
        if buf.starts_with(b"HTTP/1.1 4")
            && let Some(answer) = replacement(buf)
        {
            this.pending = answer;
            this.written = 0;
            // hyper's bytes count as written; ours go out now or on the next write or flush.
            let _ = this.poll_pending(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // A canned answer is a head alone, written in one piece: only the first slice can be one.
        match bufs.iter().find(|b| !b.is_empty()) {
            Some(first) if first.starts_with(b"HTTP/1.1 4") => self.poll_write(cx, first),
            first => {
                let this = &mut *self;
                ready!(this.poll_pending(cx))?;
                if let Some(first) = first {
                    this.note_answer(first);
                }
                Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.linger.is_none() {
            ready!(this.poll_pending(cx))?;
            ready!(Pin::new(&mut this.inner).poll_shutdown(cx))?;
            // Linger after an error answer, whose request body may be unread, or while the caller
            // is still sending; an idle keep-alive caller closing is not kept waiting for.
            if !this.refused && !this.poll_has_data(cx) {
                return Poll::Ready(Ok(()));
            }
            this.linger = Some(Linger {
                deadline: Box::pin(tokio::time::sleep(LINGER_TIME)),
                drained: 0,
            });
        }
        ready!(this.poll_linger(cx));
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canned_answers_are_replaced_and_ours_are_not() {
        for (line, status, _) in CANNED {
            let mut head = line.to_vec();
            head.extend_from_slice(b"connection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n");
            let answer = String::from_utf8(replacement(&head).expect("replaced")).unwrap();
            assert!(answer.starts_with(std::str::from_utf8(line).unwrap()));
            assert!(answer.contains("content-type: application/problem+json\r\n"));
            assert!(answer.contains("x-request-id: "));
            let body: serde_json::Value =
                serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
            assert_eq!(body["status"], status);
            assert_eq!(body["code"], 3);
            assert_eq!(body["requestId"].as_str().unwrap().len(), 32);
        }
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json\r\ncontent-length: 0\r\n\r\n";
        assert!(replacement(ours).is_none());
        let with_body = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n{}";
        assert!(replacement(with_body).is_none());
    }
}
