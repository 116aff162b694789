//! `Tag.N.Key`/`Tag.N.Value`: as a filter on Describe calls, and as the tags RunInstances sets.

use super::Params;
use super::params::opt;
use crate::state::Tags;
use crate::wire::EcsError;

/// `Tag.N.Key` / `Tag.N.Value` for N in 1..=20, as filters (no value = any value).
pub(super) fn tag_filter(p: &Params) -> Vec<(String, Option<String>)> {
    (1..=20)
        .filter_map(|n| {
            let key = opt(p, &format!("Tag.{n}.Key"))?;
            Some((
                key.to_owned(),
                opt(p, &format!("Tag.{n}.Value")).map(str::to_owned),
            ))
        })
        .collect()
}

pub(super) fn tags_to_set(p: &Params) -> Result<Tags, EcsError> {
    let mut tags = Tags::new();
    for n in 1..=21 {
        let Some(key) = opt(p, &format!("Tag.{n}.Key")) else {
            continue;
        };
        if n == 21 {
            return Err(EcsError::invalid("Tag", "at most 20 tags"));
        }
        if key.starts_with("aliyun") || key.starts_with("acs:") || key.len() > 128 {
            return Err(EcsError::new(
                400,
                "InvalidTagKey.Malformed",
                "The specified Tag.n.Key is not valid.",
            ));
        }
        let value = opt(p, &format!("Tag.{n}.Value")).unwrap_or("");
        tags.retain(|(k, _)| k != key);
        tags.push((key.to_owned(), value.to_owned()));
    }
    Ok(tags)
}
