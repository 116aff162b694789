//! ListStorage's `continue` tokens (`storage_ops::ops::ContinueTokens`): signed, opaque positions.
//! Any position round-trips through its token, for the list it was issued for and no other; a token the service did not issue (arbitrary text,
//! or an issued token with any edit, or one signed with another key of the same length) is refused
//! with the one InvalidArgument on `continue`, never a panic; and a token that is accepted is
//! exactly the token the service issues for the position it decodes to.
#![no_main]

use domain::Code;
use libfuzzer_sys::fuzz_target;
use storage_ops::ops::{ContinueTokens, list_query};

/// The input: four lines (the key, a namespace, a name, a token decoded as it comes), then edits
/// to the issued token, three bytes each: what (flip, insert, remove, truncate), where, which byte.
struct Input<'a> {
    key: &'a [u8],
    namespace: &'a str,
    name: &'a str,
    foreign: &'a str,
    edits: &'a [u8],
}

fn input(data: &[u8]) -> Option<Input<'_>> {
    let mut parts = data.splitn(5, |b| *b == b'\n');
    let key = parts.next()?;
    let mut text = || std::str::from_utf8(parts.next().unwrap_or_default()).ok();
    let (namespace, name, foreign) = (text()?, text()?, text()?);
    let edits = parts.next().unwrap_or_default();
    Some(Input {
        key,
        namespace,
        name,
        foreign,
        edits,
    })
}

fn apply(token: &str, edits: &[u8]) -> Vec<u8> {
    let mut t = token.as_bytes().to_vec();
    for e in edits.chunks_exact(3) {
        let (what, at, byte) = (e[0] % 4, usize::from(e[1]), e[2]);
        let len = t.len();
        match what {
            0 if len > 0 && byte != 0 => t[at % len] ^= byte,
            1 => t.insert(at % (len + 1), byte),
            2 if len > 0 => {
                t.remove(at % len);
            }
            3 => t.truncate(at % (len + 1)),
            _ => {}
        }
    }
    t
}

fn refused(tokens: &ContinueTokens, token: &str, list: &str) {
    let e = tokens
        .decode(token, list)
        .expect_err("a token it did not issue");
    assert_eq!(e.code, Code::InvalidArgument);
    assert_eq!(
        e.message,
        "query parameter continue: is not a token this service issued; start again without it"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = input(data) else {
        return;
    };
    let tokens = ContinueTokens::new(input.key);
    // The list the token continues: the namespace asked for, no selector.
    let list = list_query(Some(input.namespace), None);
    let token = tokens.encode(input.namespace, input.name, &list);
    assert_eq!(
        tokens.decode(&token, &list).expect("its own token"),
        (input.namespace.to_owned(), input.name.to_owned())
    );
    // It continues that list only.
    let other_list = list_query(None, None);
    let e = tokens
        .decode(&token, &other_list)
        .expect_err("another list's token");
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(
        e.message
            .starts_with("query parameter continue: was issued for another list"),
        "{}",
        e.message
    );
    // URL-safe: a token goes into a query string as it is.
    assert!(
        token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'),
        "{token:?}"
    );

    for candidate in [
        input.foreign.as_bytes().to_vec(),
        apply(&token, input.edits),
    ] {
        let Ok(candidate) = String::from_utf8(candidate) else {
            continue;
        };
        match tokens.decode(&candidate, &list) {
            Ok((ns, name)) => assert_eq!(
                tokens.encode(&ns, &name, &list),
                candidate,
                "accepted a token it did not issue"
            ),
            Err(_) => refused(&tokens, &candidate, &list),
        }
    }

    // Another key of the same length (at most a block, so HMAC uses it as it is): each bit of the
    // key matters.
    if !input.key.is_empty() && input.key.len() <= 64 {
        for (at, mask) in [(0, 0x01), (input.key.len() - 1, 0x80)] {
            let mut other = input.key.to_vec();
            other[at] ^= mask;
            refused(&ContinueTokens::new(&other), &token, &list);
        }
    }
});
