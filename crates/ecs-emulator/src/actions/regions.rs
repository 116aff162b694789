//! Regions: DescribeRegions, and the check every other action makes of its `RegionId`.
//!
//! ECS answers an action in a region it does not have with 404 `InvalidRegionId.NotFound`, so a
//! typo (`cn-shanghia`) makes nothing. The list is Alibaba Cloud's published one (the "Regions and
//! zones" page of its documentation), kept here rather than taken from the `alicloud` crate: the
//! emulator is that crate's test partner, and a region wrong in both must not pass.

use serde_json::{Value, json};

use crate::wire::EcsError;

/// The regions ECS serves, as Alibaba Cloud publishes them.
pub(crate) const REGIONS: &[&str] = &[
    "cn-qingdao",
    "cn-beijing",
    "cn-zhangjiakou",
    "cn-huhehaote",
    "cn-wulanchabu",
    "cn-hangzhou",
    "cn-shanghai",
    "cn-nanjing",
    "cn-fuzhou",
    "cn-shenzhen",
    "cn-heyuan",
    "cn-guangzhou",
    "cn-chengdu",
    "cn-hongkong",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-southeast-1",
    "ap-southeast-3",
    "ap-southeast-5",
    "ap-southeast-6",
    "ap-southeast-7",
    "ap-south-1",
    "us-east-1",
    "us-west-1",
    "eu-west-1",
    "eu-central-1",
    "me-east-1",
    "me-central-1",
];

pub(super) fn describe_regions() -> Value {
    json!({"Regions": {"Region": REGIONS.iter().map(|r| json!({
        "RegionId": r,
        "RegionEndpoint": format!("ecs.{r}.aliyuncs.com"),
        "LocalName": r,
    })).collect::<Vec<_>>()}})
}

/// ECS's answer to a `RegionId` it does not serve; an absent one is each action's own
/// `MissingParameter`.
pub(super) fn check_region(region: Option<&str>) -> Result<(), EcsError> {
    match region {
        Some(r) if !REGIONS.contains(&r) => Err(EcsError::new(
            404,
            "InvalidRegionId.NotFound",
            "The specified RegionId does not exist.",
        )),
        _ => Ok(()),
    }
}
