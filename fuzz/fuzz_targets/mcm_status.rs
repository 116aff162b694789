//! The MCM status string (`domain::code`): `machine codes error: code = [<Name>] message = [<msg>]`,
//! which MCM's `FromError` parses. Parsing any text never panics; text that does not parse is
//! `Unknown` with the whole text as its message; what parses formats back to a string that parses
//! to the same status. Formatting any code with a message whose brackets nest (the documented
//! case) parses back to exactly that code and message; with any other message the code still
//! survives as long as the message has no `[` at all.
#![no_main]

use domain::{Code, Status};
use libfuzzer_sys::fuzz_target;

/// The input: its first byte picks the code (modulo 18), the rest is the message; the whole input
/// is also parsed as it comes, and behind the MCM prefix.
/// Whether every `]` closes an earlier `[` and every `[` is closed.
fn nests(s: &str) -> bool {
    let mut depth = 0usize;
    for c in s.chars() {
        match c {
            '[' => depth += 1,
            ']' if depth == 0 => return false,
            ']' => depth -= 1,
            _ => {}
        }
    }
    depth == 0
}

fn check_parse(text: &str) {
    let (status, ok) = Status::parse_mcm(text);
    if !ok {
        assert_eq!(status, Status::new(Code::Unknown, text));
        return;
    }
    assert!(text.starts_with("machine codes error: "), "{text:?}");
    // A parsed message is the inside of a bracket group: its brackets nest.
    assert!(nests(&status.message), "{text:?} gave {:?}", status.message);
    let (again, ok) = Status::parse_mcm(&status.to_mcm_string());
    assert!(ok, "{text:?}: its own formatting does not parse");
    assert_eq!(again, status, "{text:?}");
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(first) = data.first() else {
        check_parse("");
        return;
    };
    let code = Code::ALL[usize::from(*first) % Code::ALL.len()];
    let message = text.get(1..).unwrap_or(text);
    assert_eq!(Code::from_name(code.name()), code);
    assert_eq!(Code::from_u32(code as u32), Some(code));

    let status = Status::new(code, message);
    let formatted = status.to_mcm_string();
    assert_eq!(
        formatted,
        format!(
            "machine codes error: code = [{}] message = [{}]",
            code.name(),
            message
        )
    );
    let (parsed, ok) = Status::parse_mcm(&formatted);
    if nests(&message) {
        assert!(ok, "{formatted:?}");
        assert_eq!(parsed, status, "{formatted:?}");
    } else if !message.contains('[') {
        assert!(ok, "{formatted:?}");
        assert_eq!(parsed.code, code, "{formatted:?}");
        assert!(message.starts_with(&parsed.message), "{formatted:?}");
    }
    check_parse(&formatted);
    check_parse(text);
    check_parse(&format!("machine codes error: {message}"));

    // The JSON form (problem+json's code and message) round-trips for every code and message.
    let json = serde_json::to_string(&status).expect("serialises");
    let back: Status = serde_json::from_str(&json).expect("deserialises");
    assert_eq!(back, status);
});
