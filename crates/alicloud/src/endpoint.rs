//! Which host serves ECS for a region.
//!
//! The SDK rule is "regional" (`ecs.<region>.aliyuncs.com`) plus an explicit map of exceptions; the
//! map below is the ECS SDK's for the regions where it differs from the rule (finance, government
//! and internal regions, and `cn-hangzhou`, whose historical host is `ecs-cn-hangzhou`).

/// Regions whose ECS host is not `ecs.<region>.aliyuncs.com`, from the ECS SDK's endpoint map.
const EXCEPTIONS: &[(&str, &str)] = &[
    ("cn-hangzhou", "ecs-cn-hangzhou.aliyuncs.com"),
    ("cn-shanghai-finance-1", "ecs-cn-hangzhou.aliyuncs.com"),
    ("cn-shenzhen-finance-1", "ecs-cn-hangzhou.aliyuncs.com"),
    ("cn-north-2-gov-1", "ecs.aliyuncs.com"),
    ("cn-beijing-finance-pop", "ecs.aliyuncs.com"),
    ("cn-beijing-gov-1", "ecs.aliyuncs.com"),
    ("cn-hangzhou-finance", "ecs.aliyuncs.com"),
    ("cn-hongkong-finance-pop", "ecs.aliyuncs.com"),
    ("cn-shanghai-inner", "ecs.aliyuncs.com"),
    ("cn-shenzhen-inner", "ecs.aliyuncs.com"),
    ("cn-wuhan", "ecs.aliyuncs.com"),
    ("cn-yushanfang", "ecs.aliyuncs.com"),
    ("cn-edge-1", "ecs.cn-qingdao-nebula.aliyuncs.com"),
];

/// The ECS host for `region` (no scheme): the SDK's exception if there is one, else
/// `ecs.<region>.aliyuncs.com`.
pub fn ecs_host(region: &str) -> String {
    EXCEPTIONS
        .iter()
        .find(|(r, _)| *r == region)
        .map(|(_, host)| (*host).to_owned())
        .unwrap_or_else(|| format!("ecs.{region}.aliyuncs.com"))
}

/// The base URL requests go to: the override if one is configured (a bare host gets `https://`),
/// else `https://<ecs_host(region)>`. No trailing slash.
pub fn resolve(region: &str, endpoint_override: Option<&str>) -> String {
    match endpoint_override.map(str::trim).filter(|e| !e.is_empty()) {
        Some(e) if e.contains("://") => e.trim_end_matches('/').to_owned(),
        Some(e) => format!("https://{}", e.trim_end_matches('/')),
        None => format!("https://{}", ecs_host(region)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regional_rule_and_exceptions() {
        assert_eq!(ecs_host("cn-shanghai"), "ecs.cn-shanghai.aliyuncs.com");
        assert_eq!(ecs_host("eu-central-1"), "ecs.eu-central-1.aliyuncs.com");
        assert_eq!(ecs_host("cn-hangzhou"), "ecs-cn-hangzhou.aliyuncs.com");
        assert_eq!(ecs_host("cn-beijing-gov-1"), "ecs.aliyuncs.com");
    }

    #[test]
    fn override_wins() {
        assert_eq!(
            resolve("cn-shanghai", None),
            "https://ecs.cn-shanghai.aliyuncs.com"
        );
        assert_eq!(
            resolve("cn-shanghai", Some("http://127.0.0.1:8090/")),
            "http://127.0.0.1:8090"
        );
        assert_eq!(
            resolve("cn-shanghai", Some("ecs.example.com")),
            "https://ecs.example.com"
        );
        assert_eq!(
            resolve("cn-shanghai", Some("  ")),
            "https://ecs.cn-shanghai.aliyuncs.com"
        );
    }
}
