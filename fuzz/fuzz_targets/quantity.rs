//! The quantity parser (`domain::quantity`): any text is either a quantity or refused with one of
//! the documented rules, never a panic. What parses is at most `MAX_BYTES`, and its canonical form
//! (Display, which is also its JSON form) parses back to the same bytes and is a fixed point. A
//! plain `<digits><unit>` text is checked against an independent exact computation.
#![no_main]

use domain::quantity::MAX_BYTES;
use domain::{Code, Quantity};
use libfuzzer_sys::fuzz_target;

const UNITS: [(&str, u128); 15] = [
    ("", 1),
    ("Ki", 1 << 10),
    ("Mi", 1 << 20),
    ("Gi", 1 << 30),
    ("Ti", 1 << 40),
    ("Pi", 1 << 50),
    ("Ei", 1 << 60),
    ("k", 1_000),
    ("M", 1_000_000),
    ("G", 1_000_000_000),
    ("T", 1_000_000_000_000),
    ("P", 1_000_000_000_000_000),
    ("E", 1_000_000_000_000_000_000),
    ("e0", 1),
    ("e3", 1_000),
];

/// Bytes of `<digits><unit>` computed independently of the parser: `Some(Some(b))` a value,
/// `Some(None)` too large, `None` when the text is not of that simple shape.
fn simple(text: &str) -> Option<Option<u64>> {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(end);
    if digits.is_empty() {
        return None;
    }
    let (_, scale) = UNITS.iter().find(|(u, _)| *u == unit)?;
    let digits = digits.trim_start_matches('0');
    if digits.len() > 20 {
        return Some(None);
    }
    let n: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    Some(
        n.checked_mul(*scale)
            .filter(|b| *b <= u128::from(MAX_BYTES))
            .map(|b| b as u64),
    )
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = Quantity::parse_field("capacity", text);
    // The serde path applies the same grammar.
    let json = serde_json::to_string(text).expect("a string serialises");
    let via_serde = serde_json::from_str::<Quantity>(&json);
    assert_eq!(
        parsed.is_ok(),
        via_serde.is_ok(),
        "{text:?}: FromStr and serde disagree"
    );

    if let Some(expected) = simple(text) {
        match (&parsed, expected) {
            (Ok(q), Some(b)) => assert_eq!(q.bytes(), b, "{text:?}"),
            (Err(e), None) => assert!(
                e.message.contains("is too large"),
                "{text:?}: {}",
                e.message
            ),
            (got, want) => panic!("{text:?}: parsed {got:?}, expected {want:?}"),
        }
    }

    match parsed {
        Ok(q) => {
            assert!(q.bytes() <= MAX_BYTES, "{text:?}: {} bytes", q.bytes());
            assert_eq!(via_serde.expect("checked above").bytes(), q.bytes());
            let canonical = q.to_string();
            let again: Quantity = canonical
                .parse()
                .unwrap_or_else(|e| panic!("{text:?}: canonical {canonical:?} refused: {e}"));
            assert_eq!(again.bytes(), q.bytes(), "{text:?} -> {canonical:?}");
            assert_eq!(again.to_string(), canonical, "{text:?}: not a fixed point");
            assert_eq!(
                serde_json::to_string(&q).expect("serialises"),
                format!("\"{canonical}\""),
                "JSON form is the canonical form"
            );
            // The byte count itself, and the binary-unit form of it, are the same quantity.
            let plain: Quantity = q.bytes().to_string().parse().expect("a byte count parses");
            assert_eq!(plain.bytes(), q.bytes());
            let binary = Quantity::from_bytes(q.bytes()).to_string();
            assert_eq!(
                binary.parse::<Quantity>().expect("parses").bytes(),
                q.bytes()
            );
        }
        Err(e) => {
            assert_eq!(e.code, Code::InvalidArgument);
            assert!(e.message.starts_with("capacity: "), "{}", e.message);
            let rule_known = [
                "is not a quantity",
                "is negative",
                "is too large",
                "is not a whole number of bytes",
            ]
            .iter()
            .any(|r| e.message.contains(r));
            assert!(rule_known, "{text:?}: unexpected rule {}", e.message);
            // The JSON refusal is the rule only: it never repeats the text.
            let serde_error = via_serde.expect_err("checked above").to_string();
            assert!(
                serde_error.starts_with("is "),
                "{text:?}: serde refusal {serde_error:?}"
            );
        }
    }
});
