//! The value parsers clap calls: `-o`'s shapes, time limits, `key=value` pairs and label changes.
//! Apart because they are plain text rules, shared by several command families, with no clap
//! attributes of their own.

use std::time::Duration;

use super::Shape;

/// `-o`: one of the shapes, with `jsonpath=` followed by its template.
pub(super) fn parse_shape(s: &str) -> Result<Shape, String> {
    Ok(match s {
        "table" => Shape::Table,
        "wide" => Shape::Wide,
        "json" => Shape::Json,
        "yaml" => Shape::Yaml,
        "name" => Shape::Name,
        _ => match s.strip_prefix("jsonpath=") {
            Some(template) => {
                crate::jsonpath::Template::parse(template)?;
                Shape::JsonPath(Box::leak(template.to_owned().into_boxed_str()))
            }
            None => {
                return Err(
                    "must be table, wide, json, yaml, name or jsonpath=TEMPLATE".to_string()
                );
            }
        },
    })
}

/// `key=value` sets a label, `key-` removes it.
pub(super) fn parse_label_change(s: &str) -> Result<(String, Option<String>), String> {
    match s.split_once('=') {
        Some((k, v)) => Ok((k.to_string(), Some(v.to_string()))),
        None => s
            .strip_suffix('-')
            .filter(|k| !k.is_empty())
            .map(|k| (k.to_string(), None))
            .ok_or_else(|| format!("{s:?} is neither key=value (to set) nor key- (to remove)")),
    }
}

pub(super) fn parse_pair(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not key=value"))
}

/// A time limit: a duration above zero (a zero one would fail every call at once).
pub(super) fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?} is no time at all; give a limit such as 30s"));
    }
    Ok(d)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    domain::duration::parse_duration(s)
        .ok_or_else(|| format!("{s:?} is not a duration like 30s or 5m"))
}
