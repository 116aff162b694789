//! Kubernetes resource quantities, as exact byte counts.
//!
//! maya passed capacities around as strings and each backend parsed them its own way, so `5Gi` crashed
//! replicas that only understood `5G`. Here a capacity is parsed once, at the edge, into bytes: the
//! grammar is Kubernetes' (`<sign><digits>[.<digits>]<suffix>`, suffix binary `Ki..Ei`, decimal `n u m k
//! M G T P E`, or an exponent `e<n>`, never both), and anything that is not a whole, non-negative
//! number of bytes of at most [`MAX_BYTES`] is refused with a message saying why. The grammar is
//! checked before the size, so a text is either "not a quantity" or, being one, "too large", with
//! one limit and one wording wherever quantities are read.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::code::Status;

/// How the quantity was written, which decides how it is written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantityFormat {
    /// Powers of 1024: `Ki`, `Mi`, `Gi`, ...
    BinarySi,
    /// Powers of 1000 (`k`, `M`, `G`, ...) or an exponent (`1e3`).
    DecimalSi,
}

/// The largest quantity: `i64::MAX` bytes, just under 8Ei. Kubernetes quantities are 64-bit signed
/// too, and storage-ops keeps capacities in SQLite's signed 64-bit integers, so one limit holds for
/// every reader.
pub const MAX_BYTES: u64 = i64::MAX as u64;

/// What a capacity's JSON Schema pattern allows: a quantity that is always a whole number of bytes,
/// more than 0 and less than 8Ei, which [`Quantity::parse_field`] therefore accepts (the schema
/// tests hold it to the parser). An optional `+`, then one of:
/// - a whole number of at most 18 digits (`1536`, `5.0`);
/// - a number with a decimal unit (`k M G T P E`), with no more fraction digits than the unit's
///   power of ten (`1.5G`, `2.125k`, `0.5M`; trailing zeros do not count), and at most 15, 12, 9,
///   6 or 3 digits before the point for `k`, `M`, `G`, `T` or `P` (`1` to `8`, or a whole `9`, for
///   `E`);
/// - a number with a binary unit (`Ki Mi Gi Ti Pi Ei`), whole or with a fraction of `.5`, `.25` or
///   `.75` (`1.5Gi`, `0.25Ki`), at most 15, 12, 9, 6, 3 or 1 (`1` to `7` for `Ei`) digits before the
///   point;
/// - a whole number of at most 9 digits with an exponent `e0` to `e9` (`1e9`, `5E3`), or a single
///   digit with an exponent `e10` to `e18`.
///
/// The service accepts more: any quantity that comes to a whole number of bytes below 8Ei
/// (`1.125Ki`, `1000m`, `1.5e3`, `9223372036854775807`); a schema cannot bound those exactly.
pub const CAPACITY_PATTERN: &str = "^\\+?(0*[1-9][0-9]{0,17}(\\.0*)?|(0*[1-9][0-9]{0,14}(\\.[0-9]{0,3}0*)?|0*\\.[0-9]{0,2}[1-9]0*)k|(0*[1-9][0-9]{0,11}(\\.[0-9]{0,6}0*)?|0*\\.[0-9]{0,5}[1-9]0*)M|(0*[1-9][0-9]{0,8}(\\.[0-9]{0,9}0*)?|0*\\.[0-9]{0,8}[1-9]0*)G|(0*[1-9][0-9]{0,5}(\\.[0-9]{0,12}0*)?|0*\\.[0-9]{0,11}[1-9]0*)T|(0*[1-9][0-9]{0,2}(\\.[0-9]{0,15}0*)?|0*\\.[0-9]{0,14}[1-9]0*)P|(0*[1-8](\\.[0-9]{0,18}0*)?|0*9(\\.0*)?|0*\\.[0-9]{0,17}[1-9]0*)E|(0*[1-9][0-9]{0,14}(\\.(0*|[27]?50*))?|0*\\.[27]?50*)Ki|(0*[1-9][0-9]{0,11}(\\.(0*|[27]?50*))?|0*\\.[27]?50*)Mi|(0*[1-9][0-9]{0,8}(\\.(0*|[27]?50*))?|0*\\.[27]?50*)Gi|(0*[1-9][0-9]{0,5}(\\.(0*|[27]?50*))?|0*\\.[27]?50*)Ti|(0*[1-9][0-9]{0,2}(\\.(0*|[27]?50*))?|0*\\.[27]?50*)Pi|(0*[1-7](\\.(0*|[27]?50*))?|0*\\.[27]?50*)Ei|0*[1-9][0-9]{0,8}[eE]\\+?0*[0-9]|0*[1-9][eE]\\+?0*1[0-8])$";

/// A number of bytes parsed from a Kubernetes quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    bytes: u64,
    format: QuantityFormat,
}

const BINARY: [(&str, u32); 6] = [
    ("Ki", 1),
    ("Mi", 2),
    ("Gi", 3),
    ("Ti", 4),
    ("Pi", 5),
    ("Ei", 6),
];
const DECIMAL: [(&str, i32); 9] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

impl Quantity {
    /// A quantity of exactly this many bytes, written in binary units where they divide it. `bytes`
    /// should be at most [`MAX_BYTES`], which every parsed quantity is.
    pub fn from_bytes(bytes: u64) -> Self {
        Quantity {
            bytes,
            format: QuantityFormat::BinarySi,
        }
    }

    /// The exact number of bytes.
    pub fn bytes(self) -> u64 {
        self.bytes
    }

    /// Parses `text` as a byte count; `field` names the input in the error message.
    pub fn parse_field(field: &str, text: &str) -> Result<Self, Status> {
        parse(text).map_err(|rule| {
            Status::invalid(field, format!("{:?} {rule}", crate::names::truncated(text)))
        })
    }
}

/// The refusal of a text that does not follow the grammar.
const GRAMMAR: &str = "is not a quantity: expected a number with an optional suffix (Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E or e<exponent>), like 10Gi or 500M";

/// The most significant digits a quantity may have (what a `u128` holds exactly).
const MAX_SIGNIFICANT_DIGITS: usize = 38;

/// Why a quantity was refused; the caller prefixes the field name.
fn parse(text: &str) -> Result<Quantity, String> {
    let s = text.trim();
    if s.is_empty() || s.len() != text.len() {
        return Err(GRAMMAR.to_string());
    }
    let (negative, s) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(GRAMMAR.to_string());
    }
    // The whole grammar first, the size after: what is not a quantity is never called too large.
    let scale = parse_suffix(suffix)?;
    let format = match scale {
        Scale::Binary(_) => QuantityFormat::BinarySi,
        Scale::Decimal(_) => QuantityFormat::DecimalSi,
    };
    if negative && number.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        return Err("is negative: a capacity must be zero or more bytes".to_string());
    }
    // The value is significand * 10^exponent (* 1024^power), with the significand's leading and
    // trailing zeros taken off (those only move the exponent).
    let all_digits = format!("{int_part}{frac_part}");
    let leading = all_digits.len() - all_digits.trim_start_matches('0').len();
    let significand = all_digits.trim_matches('0');
    if significand.is_empty() {
        return Ok(Quantity { bytes: 0, format });
    }
    let trailing = all_digits.len() - leading - significand.len();
    let places = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let shift = places(trailing) - places(frac_part.len());
    let exponent = match scale {
        Scale::Binary(_) => shift,
        Scale::Decimal(e) => e.saturating_add(shift),
    };
    // Digits before the decimal point of significand * 10^exponent: past 19 it is at least 10^19,
    // over the limit whatever the unit.
    let magnitude = places(significand.len()).saturating_add(exponent);
    if magnitude > 19 {
        return Err(too_large());
    }
    if significand.len() > MAX_SIGNIFICANT_DIGITS {
        return Err(format!(
            "is not a quantity: at most {MAX_SIGNIFICANT_DIGITS} significant digits"
        ));
    }
    let significand: u128 = significand.parse().map_err(|_| GRAMMAR.to_string())?;
    let bytes = match (scale, u32::try_from(exponent)) {
        // A whole number below 10^19 (the magnitude says so), times 1024^power.
        (Scale::Decimal(_), Ok(e)) => Some(significand * 10u128.pow(e)),
        (Scale::Binary(power), Ok(e)) => {
            (significand * 10u128.pow(e)).checked_mul(1 << (10 * power))
        }
        // No trailing zeros left: divided by a power of ten it is never whole.
        (Scale::Decimal(_), Err(_)) => return Err(fractional().to_string()),
        (Scale::Binary(power), Err(_)) => {
            let tenths = exponent.unsigned_abs();
            binary_fraction(significand, tenths, 10 * power)
                .ok_or_else(|| fractional().to_string())?
        }
    };
    match bytes {
        Some(b) if b <= u128::from(MAX_BYTES) => Ok(Quantity {
            bytes: b as u64,
            format,
        }),
        _ => Err(too_large()),
    }
}

/// `significand * 2^twos / 10^tenths` when it is a whole number (`Some(None)` when that number does
/// not fit a `u128`), `None` when it is not whole.
fn binary_fraction(significand: u128, tenths: u64, twos: u32) -> Option<Option<u128>> {
    // 10^k = 5^k * 2^k: the fives must divide the significand (a power of two has none), and the
    // twos the significand and the unit share.
    let fives = 5u128.checked_pow(u32::try_from(tenths).ok()?)?;
    if !significand.is_multiple_of(fives) {
        return None;
    }
    let without_fives = significand / fives;
    let twos_needed = u32::try_from(tenths).ok()?;
    if twos >= twos_needed {
        return Some(without_fives.checked_mul(1u128 << (twos - twos_needed)));
    }
    let rest = twos_needed - twos;
    if rest >= 128 || !without_fives.is_multiple_of(1u128 << rest) {
        return None;
    }
    Some(Some(without_fives >> rest))
}

/// What a suffix multiplies by: a power of 1024, or of ten.
#[derive(Debug, Clone, Copy)]
enum Scale {
    Binary(u32),
    Decimal(i64),
}

/// Reads a suffix: a binary or decimal unit, an exponent `e<n>`, or nothing.
fn parse_suffix(suffix: &str) -> Result<Scale, String> {
    if suffix.is_empty() {
        return Ok(Scale::Decimal(0));
    }
    if let Some((_, power)) = BINARY.iter().find(|(name, _)| *name == suffix) {
        return Ok(Scale::Binary(*power));
    }
    if let Some((_, e)) = DECIMAL.iter().find(|(name, _)| *name == suffix) {
        return Ok(Scale::Decimal(i64::from(*e)));
    }
    let Some(exp) = suffix.strip_prefix(['e', 'E']) else {
        return Err(GRAMMAR.to_string());
    };
    let unsigned = exp.strip_prefix(['+', '-']).unwrap_or(exp);
    let digits_end = unsigned
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(unsigned.len());
    let (digits, rest) = unsigned.split_at(digits_end);
    if digits.is_empty() {
        return Err(GRAMMAR.to_string());
    }
    if !rest.is_empty() {
        let is_unit =
            BINARY.iter().any(|(n, _)| *n == rest) || DECIMAL.iter().any(|(n, _)| *n == rest);
        return Err(if is_unit {
            "is not a quantity: a number takes an exponent (1e3) or a unit (Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E), not both".to_string()
        } else {
            GRAMMAR.to_string()
        });
    }
    // Any number of digits is grammatical; an exponent past i64 only saturates, and is then too
    // large (or too small) like any other that size.
    let magnitude = digits.parse::<i64>().unwrap_or(i64::MAX);
    Ok(Scale::Decimal(if exp.starts_with('-') {
        -magnitude
    } else {
        magnitude
    }))
}

/// The one wording of the one limit, wherever a quantity is read.
fn too_large() -> String {
    format!("is too large: a quantity must be less than 8Ei (at most {MAX_BYTES} bytes)")
}

fn fractional() -> &'static str {
    "is not a whole number of bytes (milli-units like 100m and fractions of a byte are not allowed for capacities)"
}

impl FromStr for Quantity {
    type Err = Status;

    fn from_str(s: &str) -> Result<Self, Status> {
        Quantity::parse_field("quantity", s)
    }
}

impl fmt::Display for Quantity {
    /// The canonical form: the largest unit of the original family that divides the value exactly, so
    /// `1536Mi` prints `1536Mi`, `1024Mi` prints `1Gi` and `1e3` prints `1k`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.bytes == 0 {
            return f.write_str("0");
        }
        if self.format == QuantityFormat::BinarySi {
            for (name, power) in BINARY.iter().rev() {
                let unit = 1u64 << (10 * power);
                if self.bytes.is_multiple_of(unit) {
                    return write!(f, "{}{name}", self.bytes / unit);
                }
            }
        }
        // A plain number reads back as decimal, so a binary value no binary unit divides is written
        // as that decimal value is (`97.65625Ki` prints `100k`, as `100000` does): the canonical form
        // stays a fixed point.
        for (name, exp) in DECIMAL.iter().rev().filter(|(_, e)| *e > 0) {
            let unit = 10u64.pow(*exp as u32);
            if self.bytes.is_multiple_of(unit) {
                return write!(f, "{}{name}", self.bytes / unit);
            }
        }
        write!(f, "{}", self.bytes)
    }
}

impl Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The rule only: a deserialisation error names the field and the rule, never the value.
        let text = String::deserialize(d)?;
        parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::Code;

    #[test]
    fn valid_quantities_parse_to_exact_bytes() {
        let cases: &[(&str, u64)] = &[
            ("0", 0),
            ("1", 1),
            ("1024", 1024),
            ("10Gi", 10 * (1 << 30)),
            ("1Ki", 1024),
            ("1Mi", 1 << 20),
            ("1.5Gi", 1_610_612_736),
            ("0.5Ki", 512),
            ("2Ti", 2 << 40),
            ("1Pi", 1 << 50),
            ("7Ei", 7 << 60),
            ("500M", 500_000_000),
            ("5G", 5_000_000_000),
            ("1k", 1000),
            ("1.5k", 1500),
            ("3T", 3_000_000_000_000),
            ("2P", 2_000_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000),
            ("1e3", 1000),
            ("1E3", 1000),
            ("1.5e3", 1500),
            ("2e0", 2),
            ("+5", 5),
            ("-0", 0),
            ("1000m", 1),
            ("5000000u", 5),
            ("0.001k", 1),
            (".5Ki", 512),
            ("007", 7),
            ("9223372036854775807", MAX_BYTES),
            ("1e18", 1_000_000_000_000_000_000),
            ("0e99999", 0),
            ("1.0000000000000000000000000000000000000000000000Ki", 1024),
            ("0.0009765625Ki", 1),
            ("100000000000000000000e-3", 100_000_000_000_000_000),
        ];
        for (text, bytes) in cases {
            let q: Quantity = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(q.bytes(), *bytes, "{text}");
        }
    }

    #[test]
    fn invalid_quantities_are_refused_with_a_reason() {
        let cases: &[(&str, &str)] = &[
            ("", "is not a quantity"),
            ("Gi", "is not a quantity"),
            ("abc", "is not a quantity"),
            ("10 Gi", "is not a quantity"),
            (" 10Gi", "is not a quantity"),
            ("10gi", "is not a quantity"),
            ("10GB", "is not a quantity"),
            ("1.2.3", "is not a quantity"),
            ("1e", "is not a quantity"),
            ("1ex", "is not a quantity"),
            (".", "is not a quantity"),
            ("100m", "not a whole number of bytes"),
            ("0.5", "not a whole number of bytes"),
            ("1.5", "not a whole number of bytes"),
            ("1e-1", "not a whole number of bytes"),
            ("-1", "is negative"),
            ("-5Gi", "is negative"),
            ("1e3Gi", "not both"),
            ("1e400Gi", "not both"),
            ("1e-400", "not a whole number of bytes"),
            ("0.0001Ki", "not a whole number of bytes"),
            (
                "1.234567890123456789012345678901234567890",
                "at most 38 significant digits",
            ),
        ];
        for (text, reason) in cases {
            let err = Quantity::parse_field("capacity", text).unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument);
            assert!(
                err.message.starts_with("capacity: "),
                "{text}: {}",
                err.message
            );
            assert!(err.message.contains(reason), "{text}: {}", err.message);
        }
    }

    #[test]
    fn everything_from_8ei_up_is_too_large_in_one_wording() {
        for text in [
            "8Ei",
            "15Ei",
            "16Ei",
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "1e19",
            "1e30",
            "1e400",
            "1e99999",
            "9300P",
            "99999999999999999999999999999999999999999",
        ] {
            let err = Quantity::parse_field("capacity", text).unwrap_err();
            assert_eq!(
                err.message,
                format!(
                    "capacity: {text:?} is too large: a quantity must be less than 8Ei (at most 9223372036854775807 bytes)"
                )
            );
        }
    }

    #[test]
    fn canonical_formatting_keeps_the_unit_family() {
        for (text, canonical) in [
            ("10Gi", "10Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("500M", "500M"),
            ("1000k", "1M"),
            ("1e3", "1k"),
            ("1500", "1500"),
            ("0Gi", "0"),
        ] {
            let q: Quantity = text.parse().unwrap();
            assert_eq!(q.to_string(), canonical, "{text}");
            let again: Quantity = canonical.parse().unwrap();
            assert_eq!(again.bytes(), q.bytes());
        }
    }

    /// Found by the `quantity` fuzz target (`0097.65625Ki`): a binary value no binary unit divides
    /// printed as a plain number, which reads back as decimal and printed differently.
    #[test]
    fn the_canonical_form_is_a_fixed_point() {
        for (text, canonical) in [
            ("0097.65625Ki", "100k"),
            ("0.5Ki", "512"),
            ("1.5Ki", "1536"),
        ] {
            let q: Quantity = text.parse().unwrap();
            assert_eq!(q.to_string(), canonical, "{text}");
            let again: Quantity = canonical.parse().unwrap();
            assert_eq!(
                (again.bytes(), again.to_string()),
                (q.bytes(), q.to_string())
            );
        }
    }

    #[test]
    fn serde_uses_the_string_form() {
        let q: Quantity = serde_json::from_str("\"2Gi\"").unwrap();
        assert_eq!(q.bytes(), 2 << 30);
        assert_eq!(serde_json::to_string(&q).unwrap(), "\"2Gi\"");
        let e = serde_json::from_str::<Quantity>("\"250m\"").unwrap_err();
        assert!(
            !e.to_string().contains("250m"),
            "the value is not echoed: {e}"
        );
        assert!(e.to_string().starts_with("is not a whole number"), "{e}");
    }
}
