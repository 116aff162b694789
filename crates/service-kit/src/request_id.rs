//! `x-request-id`: taken from the caller or generated, echoed on the answer, and carried in a
//! task-local so error bodies, log lines and outgoing calls of the same request all name it.

use std::cell::Cell;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};

/// The header.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

tokio::task_local! {
    // Kept as the header value it travels as: every request needs the header, while the text is
    // only wanted for the rare error body or log line, and a clone shares the bytes.
    static REQUEST_ID: HeaderValue;
}

/// The id of the request this task is serving, if any.
pub fn current() -> Option<String> {
    current_header().and_then(|v| v.to_str().ok().map(str::to_string))
}

/// The id of the request this task is serving, as a header value for an outgoing call.
pub fn current_header() -> Option<HeaderValue> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// Runs `fut` as part of the request whose `x-request-id` is `id`.
pub(crate) fn scope<F: std::future::Future>(
    id: HeaderValue,
    fut: F,
) -> impl std::future::Future<Output = F::Output> {
    REQUEST_ID.scope(id, fut)
}

/// A caller's id is kept only if it is short, printable ASCII: it ends up in logs and headers.
fn acceptable(value: &HeaderValue) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty() && bytes.len() <= 128 && bytes.iter().all(u8::is_ascii_graphic)
}

/// A new id: 32 lowercase hex digits, unique per request (an id names a request for tracing; it is
/// not a secret). Each thread draws a random prefix and key once; an id is the prefix and the
/// thread's call count, mixed with the key and scrambled (SplitMix64's finaliser, a bijection, so ids
/// never repeat within a thread and do not read as a running count). Not a random UUID per request:
/// its generator costs several times the instructions of this, on every request (the counts:
/// BENCHMARKS.md, “Instruction counts per request through the gateway (callgrind)”). The digits are
/// owned by one shared allocation, so the clones the request, its answer and its task-local take
/// cost no further one.
pub(crate) fn make() -> HeaderValue {
    thread_local! {
        static STATE: Cell<(u64, u64, u64)> = {
            let (prefix, key) = uuid::Uuid::new_v4().as_u64_pair();
            Cell::new((prefix, key, 0))
        };
    }
    let (prefix, key, count) = STATE.with(|state| {
        let (prefix, key, count) = state.get();
        state.set((prefix, key, count.wrapping_add(1)));
        (prefix, key, count)
    });
    let mut text = [0u8; 32];
    write_hex(&mut text[..16], prefix);
    write_hex(&mut text[16..], scramble(count ^ key));
    HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(text))
        .expect("hex digits are a valid header value")
}

/// SplitMix64's finaliser: a bijection on 64-bit values that spreads every input bit.
fn scramble(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn write_hex(out: &mut [u8], value: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, digit) in out.iter_mut().enumerate() {
        *digit = DIGITS[((value >> (60 - 4 * i)) & 0xf) as usize];
    }
}

/// Fixes the request's id before anything else runs: the caller's, when acceptable, else a new one.
/// The request's header is set to it; the value is returned for the answer's header and the
/// task-local.
pub(crate) fn take_or_make(request: &mut Request) -> HeaderValue {
    if let Some(value) = request.headers().get(&X_REQUEST_ID)
        && acceptable(value)
    {
        return value.clone();
    }
    let value = make();
    request
        .headers_mut()
        .insert(X_REQUEST_ID.clone(), value.clone());
    value
}

/// Spawns `fut` as part of the current request: it keeps the request's id (for logs, errors and
/// outgoing calls) and runs inside the current span (so its outgoing calls continue the same trace).
/// Use it for work that must finish even if the caller goes away, such as a create that has reached
/// its backend.
pub fn spawn_in_request<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    use tracing::Instrument;
    let span = tracing::Span::current();
    match current_header() {
        Some(id) => tokio::spawn(REQUEST_ID.scope(id, fut).instrument(span)),
        None => tokio::spawn(fut.instrument(span)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_ids_are_32_hex_digits_and_never_repeat() {
        let ids: std::collections::HashSet<String> = (0..10_000)
            .map(|_| make().to_str().unwrap().to_string())
            .collect();
        assert_eq!(ids.len(), 10_000);
        for id in ids.iter().take(10) {
            assert_eq!(id.len(), 32);
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            );
        }
    }
}
