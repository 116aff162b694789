//! Kubernetes resource quantities, as exact byte counts.
//!
//! maya passed capacities around as strings and each backend parsed them its own way, so `5Gi` crashed
//! replicas that only understood `5G`. Here a capacity is parsed once, at the edge, into bytes: the
//! grammar is Kubernetes' (`<sign><digits>[.<digits>]<suffix>`, suffix binary `Ki..Ei`, decimal `n u m k
//! M G T P E`, or an exponent `e<n>`), and anything that is not a whole, non-negative number of bytes
//! that fits in a `u64` is refused with a message saying why.

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
    /// A quantity of exactly this many bytes, written in binary units where they divide it.
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
        parse(text).map_err(|rule| Status::invalid(field, format!("{text:?} {rule}")))
    }
}

/// Why a quantity was refused; the caller prefixes the field name.
fn parse(text: &str) -> Result<Quantity, String> {
    const GRAMMAR: &str = "is not a quantity: expected a number with an optional suffix (Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E or e<exponent>), like 10Gi or 500M";
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
    if negative && number.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        return Err("is negative: a capacity must be zero or more bytes".to_string());
    }
    // The value is mantissa / 10^frac_digits * multiplier, computed as an exact fraction.
    let digits: String = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 38 {
        return Err(too_large());
    }
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| GRAMMAR.to_string())?
    };
    let mut numerator = mantissa;
    let mut denominator: u128 = 10u128.pow(frac_part.len() as u32);
    let format;
    if let Some((_, power)) = BINARY.iter().find(|(name, _)| *name == suffix) {
        format = QuantityFormat::BinarySi;
        numerator = numerator
            .checked_mul(1u128 << (10 * power))
            .ok_or_else(too_large)?;
    } else {
        format = QuantityFormat::DecimalSi;
        let exponent: i32 = if suffix.is_empty() {
            0
        } else if let Some((_, e)) = DECIMAL.iter().find(|(name, _)| *name == suffix) {
            *e
        } else if let Some(exp) = suffix.strip_prefix(['e', 'E']) {
            let valid = !exp.is_empty()
                && exp
                    .trim_start_matches(['+', '-'])
                    .bytes()
                    .all(|b| b.is_ascii_digit())
                && exp.len() <= 4;
            if !valid {
                return Err(GRAMMAR.to_string());
            }
            exp.parse().map_err(|_| GRAMMAR.to_string())?
        } else {
            return Err(GRAMMAR.to_string());
        };
        if exponent >= 0 {
            let factor = 10u128.checked_pow(exponent as u32).ok_or_else(too_large)?;
            if numerator != 0 {
                numerator = numerator.checked_mul(factor).ok_or_else(too_large)?;
            }
        } else {
            let factor = 10u128
                .checked_pow(exponent.unsigned_abs())
                .ok_or_else(|| fractional().to_string())?;
            denominator = denominator
                .checked_mul(factor)
                .ok_or_else(|| fractional().to_string())?;
        }
    }
    if !numerator.is_multiple_of(denominator) {
        return Err(fractional().to_string());
    }
    let bytes = u64::try_from(numerator / denominator).map_err(|_| too_large())?;
    Ok(Quantity { bytes, format })
}

fn too_large() -> String {
    format!(
        "is too large: a capacity must be at most {} bytes (about 16Ei)",
        u64::MAX
    )
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
        match self.format {
            QuantityFormat::BinarySi => {
                for (name, power) in BINARY.iter().rev() {
                    let unit = 1u64 << (10 * power);
                    if self.bytes.is_multiple_of(unit) {
                        return write!(f, "{}{name}", self.bytes / unit);
                    }
                }
            }
            QuantityFormat::DecimalSi => {
                for (name, exp) in DECIMAL.iter().rev().filter(|(_, e)| *e > 0) {
                    let unit = 10u64.pow(*exp as u32);
                    if self.bytes.is_multiple_of(unit) {
                        return write!(f, "{}{name}", self.bytes / unit);
                    }
                }
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
        let text = String::deserialize(d)?;
        parse(&text).map_err(|rule| serde::de::Error::custom(format!("{text:?} {rule}")))
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
            ("15Ei", 15 << 60),
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
            ("18446744073709551615", u64::MAX),
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
            ("16Ei", "is too large"),
            ("18446744073709551616", "is too large"),
            ("1e30", "is too large"),
            ("99999999999999999999999999999999999999999", "is too large"),
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

    #[test]
    fn serde_uses_the_string_form() {
        let q: Quantity = serde_json::from_str("\"2Gi\"").unwrap();
        assert_eq!(q.bytes(), 2 << 30);
        assert_eq!(serde_json::to_string(&q).unwrap(), "\"2Gi\"");
        assert!(serde_json::from_str::<Quantity>("\"100m\"").is_err());
    }
}
