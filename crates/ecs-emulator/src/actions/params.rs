//! Reading an action's parameters as ECS does (a missing or malformed one gets ECS's own error code),
//! and paging a list by token or by page number.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use serde_json::{Value, json};

use super::Params;
use crate::wire::EcsError;

pub(super) fn required<'p>(p: &'p Params, name: &str) -> Result<&'p str, EcsError> {
    p.get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| EcsError::missing(name))
}

pub(super) fn opt<'p>(p: &'p Params, name: &str) -> Option<&'p str> {
    p.get(name).map(String::as_str).filter(|v| !v.is_empty())
}

pub(super) fn number<T: std::str::FromStr>(p: &Params, name: &str) -> Result<Option<T>, EcsError> {
    opt(p, name)
        .map(|v| {
            v.parse()
                .map_err(|_| EcsError::invalid(name, "not a number"))
        })
        .transpose()
}

pub(super) fn boolean(p: &Params, name: &str) -> Result<Option<bool>, EcsError> {
    opt(p, name)
        .map(|v| match v.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(EcsError::invalid(name, "must be true or false")),
        })
        .transpose()
}

pub(super) fn json_list(
    p: &Params,
    name: &str,
    max: usize,
) -> Result<Option<BTreeSet<String>>, EcsError> {
    let Some(raw) = opt(p, name) else {
        return Ok(None);
    };
    let ids: Vec<String> = serde_json::from_str(raw).map_err(|_| {
        EcsError::new(
            400,
            &format!("Invalid{name}.Malformed"),
            format!("The specified parameter \"{name}\" is not a JSON array of strings."),
        )
    })?;
    if ids.len() > max {
        return Err(EcsError::invalid(name, format!("at most {max} ids")));
    }
    Ok(Some(ids.into_iter().collect()))
}

/// One page of matches: the token scan (`MaxResults`/`NextToken`) or the legacy
/// `PageNumber`/`PageSize`.
pub(super) struct Paged<'a, T> {
    items: Vec<&'a T>,
    next_token: String,
    total: usize,
    page_number: usize,
    page_size: usize,
}

impl<T> Paged<'_, T> {
    /// The page as every Describe call answers it: the counts and token, and the items (each as
    /// `to_json` writes it) under `{set: {item: [...]}}`, ECS's two-level list.
    pub(super) fn answer(&self, set: &str, item: &str, to_json: impl Fn(&T) -> Value) -> Value {
        let items: Vec<Value> = self.items.iter().map(|i| to_json(i)).collect();
        json!({
            "TotalCount": self.total,
            "PageNumber": self.page_number,
            "PageSize": self.page_size,
            "NextToken": self.next_token,
            set: {item: items},
        })
    }
}

pub(super) fn paginate<'a, T>(
    map: &'a BTreeMap<String, T>,
    p: &Params,
    prefix: &str,
    max_allowed: usize,
    matches: impl Fn(&T) -> bool,
) -> Result<Paged<'a, T>, EcsError> {
    let total = map.values().filter(|v| matches(v)).count();
    let legacy = !p.contains_key("MaxResults")
        && !p.contains_key("NextToken")
        && (p.contains_key("PageNumber") || p.contains_key("PageSize"));
    if legacy {
        let size: usize = number(p, "PageSize")?.unwrap_or(10);
        let page: usize = number(p, "PageNumber")?.unwrap_or(1);
        if !(1..=100).contains(&size) || page == 0 {
            return Err(EcsError::invalid(
                "PageSize",
                "PageSize 1..=100, PageNumber ≥ 1",
            ));
        }
        let items = map
            .values()
            .filter(|v| matches(v))
            .skip((page - 1) * size)
            .take(size)
            .collect();
        return Ok(Paged {
            items,
            next_token: String::new(),
            total,
            page_number: page,
            page_size: size,
        });
    }
    let max: usize = number(p, "MaxResults")?.unwrap_or(10);
    if max == 0 || max > max_allowed {
        return Err(EcsError::invalid(
            "MaxResults",
            format!("must be between 1 and {max_allowed}"),
        ));
    }
    let start = match opt(p, "NextToken") {
        None => Bound::Unbounded,
        Some(t) if t.starts_with(prefix) => Bound::Excluded(t.to_owned()),
        Some(_) => {
            return Err(EcsError::new(
                400,
                "InvalidParameter.NextToken",
                "The specified parameter \"NextToken\" is not valid.",
            ));
        }
    };
    let mut items: Vec<&T> = Vec::with_capacity(max + 1);
    let mut last_key = String::new();
    let mut more = false;
    for (k, v) in map.range((start, Bound::Unbounded)) {
        if !matches(v) {
            continue;
        }
        if items.len() == max {
            more = true;
            break;
        }
        items.push(v);
        last_key.clone_from(k);
    }
    Ok(Paged {
        items,
        next_token: if more { last_key } else { String::new() },
        total,
        page_number: 1,
        page_size: max,
    })
}
