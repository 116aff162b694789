//! Which host serves ECS for a region, and what a region id is.
//!
//! The SDK rule is "regional" (`ecs.<region>.aliyuncs.com`) plus an explicit map of exceptions; the
//! map below is the ECS SDK's for the regions where it differs from the rule (finance, government
//! and internal regions, and `cn-hangzhou`, whose historical host is `ecs-cn-hangzhou`).
//!
//! A region id comes from whoever calls the driver, and it becomes part of a host name. So it is a
//! [`Region`], which only [`Region::parse`] makes and which admits ECS's region-id grammar and
//! nothing else: no `@`, `:`, `/`, `.` or anything else that could move a URL to another host, port
//! or path. URLs are built from a [`Region`] only.

use std::fmt;

/// The longest region id accepted; ECS's longest today (`cn-beijing-finance-pop`) has 22 characters.
const MAX_REGION_LEN: usize = 50;

/// An ECS region id (`cn-shanghai`, `eu-central-1`, `cn-shanghai-finance-1`): two to six words of
/// lower-case ASCII letters and digits joined by single hyphens, the first word letters only, at
/// most [`MAX_REGION_LEN`] characters. That grammar makes `ecs.<region>.aliyuncs.com` one host name
/// under `aliyuncs.com`, whatever the id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Region(String);

/// Why a string is not a region id. It never carries the string: a caller's hostile value stays out
/// of messages and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RegionError {
    /// Empty.
    #[error("is empty")]
    Empty,
    /// Longer than [`MAX_REGION_LEN`].
    #[error("is longer than {MAX_REGION_LEN} characters")]
    TooLong,
    /// Not words of `a-z0-9` joined by single hyphens, starting with letters.
    #[error(
        "is not an ECS region id: lower-case letters and digits in two to six words joined by single hyphens, the first word letters only (like cn-shanghai or eu-central-1)"
    )]
    Grammar,
}

impl Region {
    /// Checks `s` against ECS's region-id grammar.
    pub fn parse(s: &str) -> Result<Self, RegionError> {
        if s.is_empty() {
            return Err(RegionError::Empty);
        }
        if s.len() > MAX_REGION_LEN {
            return Err(RegionError::TooLong);
        }
        let words: Vec<&str> = s.split('-').collect();
        let word_ok = |w: &&str| {
            !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        let first_ok = words[0].bytes().all(|b| b.is_ascii_lowercase());
        if !(2..=6).contains(&words.len()) || !words.iter().all(word_ok) || !first_ok {
            return Err(RegionError::Grammar);
        }
        Ok(Region(s.to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether ECS serves this region on a known endpoint ([`KNOWN_REGIONS`] or the exception map).
    pub fn is_known(&self) -> bool {
        KNOWN_REGIONS.contains(&self.as_str()) || EXCEPTIONS.iter().any(|(r, _)| *r == self.0)
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Region {
    type Err = RegionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Region::parse(s)
    }
}

/// The public ECS regions served by the regional rule `ecs.<region>.aliyuncs.com` (Alibaba Cloud's
/// region list). Regions newer than this list are allowed by an operator's allow-list instead.
pub const KNOWN_REGIONS: &[&str] = &[
    "cn-qingdao",
    "cn-beijing",
    "cn-zhangjiakou",
    "cn-huhehaote",
    "cn-wulanchabu",
    "cn-shanghai",
    "cn-nanjing",
    "cn-fuzhou",
    "cn-shenzhen",
    "cn-heyuan",
    "cn-guangzhou",
    "cn-chengdu",
    "cn-wuhan-lr",
    "cn-hongkong",
    "cn-beijing-finance-1",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-southeast-1",
    "ap-southeast-2",
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
    "na-south-1",
];

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

/// Every region [`Region::is_known`] admits, sorted: what a document can list as the regions a
/// driver calling the regional endpoints accepts.
pub fn known_regions() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = KNOWN_REGIONS
        .iter()
        .copied()
        .chain(EXCEPTIONS.iter().map(|(r, _)| *r))
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// The ECS host for `region` (no scheme): the SDK's exception if there is one, else
/// `ecs.<region>.aliyuncs.com`.
pub fn ecs_host(region: &Region) -> String {
    EXCEPTIONS
        .iter()
        .find(|(r, _)| *r == region.as_str())
        .map(|(_, host)| (*host).to_owned())
        .unwrap_or_else(|| format!("ecs.{region}.aliyuncs.com"))
}

/// The base URL requests go to: the override if one is configured (a bare host gets `https://`),
/// else `https://<ecs_host(region)>`. No trailing slash. The override is the operator's
/// (`BERTH_ALICLOUD_ENDPOINT`); the region, a caller's, can only ever fill in the regional host.
pub fn resolve(region: &Region, endpoint_override: Option<&str>) -> String {
    match endpoint_override.map(str::trim).filter(|e| !e.is_empty()) {
        Some(e) if e.contains("://") => e.trim_end_matches('/').to_owned(),
        Some(e) => format!("https://{}", e.trim_end_matches('/')),
        None => format!("https://{}", ecs_host(region)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(s: &str) -> Region {
        Region::parse(s).unwrap()
    }

    #[test]
    fn regional_rule_and_exceptions() {
        assert_eq!(
            ecs_host(&region("cn-shanghai")),
            "ecs.cn-shanghai.aliyuncs.com"
        );
        assert_eq!(
            ecs_host(&region("eu-central-1")),
            "ecs.eu-central-1.aliyuncs.com"
        );
        assert_eq!(
            ecs_host(&region("cn-hangzhou")),
            "ecs-cn-hangzhou.aliyuncs.com"
        );
        assert_eq!(ecs_host(&region("cn-beijing-gov-1")), "ecs.aliyuncs.com");
    }

    #[test]
    fn override_wins() {
        let r = region("cn-shanghai");
        assert_eq!(resolve(&r, None), "https://ecs.cn-shanghai.aliyuncs.com");
        assert_eq!(
            resolve(&r, Some("http://127.0.0.1:8090/")),
            "http://127.0.0.1:8090"
        );
        assert_eq!(
            resolve(&r, Some("ecs.example.com")),
            "https://ecs.example.com"
        );
        assert_eq!(
            resolve(&r, Some("  ")),
            "https://ecs.cn-shanghai.aliyuncs.com"
        );
    }

    #[test]
    fn the_grammar_admits_every_known_region() {
        for r in KNOWN_REGIONS
            .iter()
            .chain(EXCEPTIONS.iter().map(|(r, _)| r))
        {
            let parsed = Region::parse(r).unwrap_or_else(|e| panic!("{r}: {e}"));
            assert!(parsed.is_known(), "{r}");
        }
        assert!(!region("xx-nowhere-1").is_known());
        let listed = known_regions();
        assert_eq!(
            listed.len(),
            KNOWN_REGIONS.len() + EXCEPTIONS.len(),
            "no region twice"
        );
        assert!(listed.iter().all(|r| region(r).is_known()));
        assert!(listed.windows(2).all(|w| w[0] < w[1]));
    }

    /// Values that try to move `https://ecs.<region>.aliyuncs.com` to another host, port, path or
    /// header, or that are no region id at all.
    const ESCAPES: &[&str] = &[
        "",
        "x@127.0.0.1:8443/",
        "x@127.0.0.1:8443",
        "cn-shanghai@127.0.0.1",
        "cn-shanghai:8443",
        "127.0.0.1",
        "127.0.0.1:8443/x",
        "localhost",
        "cn-shanghai/../x",
        "../x",
        "..",
        "cn-shanghai.evil.com#",
        "cn-shanghai?x=1",
        "cn-shanghai%2f",
        "cn-shanghai\r\nHost: evil",
        "cn-shanghai\0",
        "cn-shanghai ",
        " cn-shanghai",
        "CN-SHANGHAI",
        "cn_shanghai",
        "cn-shanghai.",
        "-cn-shanghai",
        "cn-shanghai-",
        "cn--shanghai",
        "1cn-shanghai",
        "cn",
        "a-b-c-d-e-f-g",
        "cn-shànghai",
        "cn-shanghai\u{2024}evil",
    ];

    #[test]
    fn nothing_outside_the_grammar_parses() {
        for s in ESCAPES {
            assert!(Region::parse(s).is_err(), "{s:?} parsed");
        }
        let long = format!("cn-{}", "a".repeat(60));
        assert_eq!(Region::parse(&long), Err(RegionError::TooLong));
        // The error never carries the value.
        let e = Region::parse("x@127.0.0.1:8443/").unwrap_err().to_string();
        assert!(!e.contains("127.0.0.1"), "{e}");
    }

    /// Every URL built from a region is `https://<one host under aliyuncs.com>/`: no user info, no
    /// port, no path, no query, for the known regions and for arbitrary grammatical ones.
    #[test]
    fn every_regional_url_stays_on_its_aliyuncs_host() {
        let arbitrary = ["zz-top-9", "a-b-c-d-e-f", "x-1", "qq-0-0-0"];
        for r in KNOWN_REGIONS
            .iter()
            .chain(EXCEPTIONS.iter().map(|(r, _)| r))
            .chain(arbitrary.iter())
        {
            let region = region(r);
            let url = reqwest::Url::parse(&format!("{}/", resolve(&region, None))).unwrap();
            assert_eq!(url.scheme(), "https", "{r}");
            assert_eq!(url.username(), "", "{r}");
            assert_eq!(url.password(), None, "{r}");
            assert_eq!(url.port(), None, "{r}");
            assert_eq!(url.path(), "/", "{r}");
            assert_eq!(url.query(), None, "{r}");
            assert_eq!(url.fragment(), None, "{r}");
            let host = url.host_str().unwrap();
            assert_eq!(host, ecs_host(&region), "{r}");
            assert!(host.ends_with(".aliyuncs.com"), "{r}: {host}");
        }
    }
}
