//! The one written form of a duration in Berth's settings: a number with its unit, `250ms`, `30s`,
//! `5m`, `1h` (a bare `0` aside: zero is zero in any unit). Every variable that takes a duration
//! reads it with [`parse_duration`], so the services, the cloud client and the CLI all accept the
//! same text. A bare number is refused: `BERTH_ALICLOUD_TIMEOUT=30000`, copied from the old
//! milliseconds variable, would otherwise mean 8 h 20 min.

use std::time::Duration;

/// Parses `250ms`, `30s`, `5m`, `1h` or a bare `0`; `None` for anything else (a bare number, a
/// negative one, an unknown unit).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number.parse().ok()?;
    let seconds = match unit {
        "ms" => n / 1000.0,
        "" if n == 0.0 => 0.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    // `try_from`: a number too big for a Duration (`99999999999999999999s`) is no duration, not a
    // panic.
    if !(seconds.is_finite() && seconds >= 0.0) {
        return None;
    }
    Duration::try_from_secs_f64(seconds).ok()
}

/// What a duration setting must look like, for the message refusing one that does not.
pub const DURATION_FORM: &str =
    "a number with its unit, ms, s, m or h, like 30s or 250ms (a bare number is refused, 0 aside)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_common_units() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        // A bare number has no unit to read it in: refused, but for zero.
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("30000"), None);
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(parse_duration("-5s"), None);
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_duration("99999999999999999999s"), None);
        assert!(parse_duration("18446744073709551616000ms").is_none());
        assert!(parse_duration("100000h").is_some());
    }
}
