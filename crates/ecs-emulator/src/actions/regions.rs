//! Regions: DescribeRegions.

use serde_json::{Value, json};

pub(super) fn describe_regions() -> Value {
    let regions = ["cn-hangzhou", "cn-shanghai", "cn-beijing", "eu-central-1"];
    json!({"Regions": {"Region": regions.iter().map(|r| json!({
        "RegionId": r,
        "RegionEndpoint": format!("ecs.{r}.aliyuncs.com"),
        "LocalName": r,
    })).collect::<Vec<_>>()}})
}
