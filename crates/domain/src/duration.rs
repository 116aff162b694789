//! The one written form of a duration in Berth's settings: `250ms`, `30s`, `5m`, `1h`, or a plain
//! number of seconds. Every variable that takes a duration reads it with [`parse_duration`], so the
//! services, the cloud client and the CLI all accept the same text.

use std::time::Duration;

/// Parses `250ms`, `30s`, `5m`, `1h` or a plain number of seconds; `None` for anything else
/// (a negative number, an unknown unit).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number.parse().ok()?;
    let seconds = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
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
pub const DURATION_FORM: &str = "a number with ms, s, m or h, like 30s";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_common_units() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("5"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(parse_duration("-5s"), None);
        assert_eq!(parse_duration(""), None);
        assert_eq!(parse_duration("99999999999999999999s"), None);
        assert!(parse_duration("18446744073709551616000ms").is_none());
        assert!(parse_duration("100000h").is_some());
    }
}
