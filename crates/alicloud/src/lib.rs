//! A client for the Alibaba Cloud ECS RPC API, written against the wire protocol (no SDK).
//!
//! Berth's machine driver creates, finds and deletes VMs through this crate. It signs requests with
//! RPC signature V1 (HMAC-SHA1) or V3 (`ACS3-HMAC-SHA256`), flattens parameters the way Alibaba's
//! SDKs do, decodes answers into typed values and errors into [`Error`] (which keeps ECS's `Code`
//! and `RequestId`; what a code means to a machine is the driver's to say), and makes calls safe to
//! use at scale: every call has a deadline, retryable failures are retried with jittered
//! exponential backoff (honouring ECS's `TimeLeft` throttling hint), calls are rate-limited per
//! (access key, region) by a token bucket, and each HTTP attempt is measured
//! (`berth_ecs_request_duration_seconds{action}`, `berth_ecs_requests_total{action,result}`,
//! declared as `metric-families` families like every Berth metric, so whoever serves the page
//! renders them).
//!
//! ```no_run
//! # async fn demo() -> Result<(), alicloud::Error> {
//! use std::time::Duration;
//! use alicloud::{Credentials, DescribeInstances, Ecs, EcsConfig, Region, Tag, deadline_in};
//!
//! let ecs = Ecs::new(EcsConfig::default())?;           // once per process
//! let region = Region::parse("cn-shanghai").expect("a region id");
//! let client = ecs.client(&region, Credentials::new("AKID", "secret"));
//! let filter = DescribeInstances {
//!     tags: vec![Tag::new("kubernetes.io/cluster/shoot--a", "1")],
//!     ..Default::default()
//! };
//! let instances = client.describe_all_instances(&filter, deadline_in(Duration::from_secs(30))).await?;
//! # Ok(()) }
//! ```
//!
//! Secrets: [`Credentials`] print their id only; no error, log line or metric label carries the
//! secret, the STS token or request parameters (user data may hold bootstrap tokens).
//!
//! # Layout
//! - [`client`]: [`Ecs`] (shared HTTP pool, config, rate limiters) and [`EcsClient`] (the actions,
//!   the retry loop, request building).
//! - [`model`]: typed requests ([`RunInstances`], [`DescribeInstances`], ...) and responses
//!   ([`Instance`], [`Disk`], [`NetworkInterface`], [`Page`]).
//! - [`params`]: [`Params`] and the SDK flattening rules (`Name.N`, JSON-array lists); it knows no
//!   model type, and tags flatten (`Tag.N.Key`) beside [`Tag`] in [`model`].
//! - [`sign`]: V1 and V3 signing and RFC 3986 percent-encoding, tested against Alibaba's examples.
//! - [`error`]: [`Error`] and the ECS codes it recognises (not found, retryable, throttling).
//! - [`config`]: [`EcsConfig`], [`RetryPolicy`], the `BERTH_ALICLOUD_*` variables.
//! - [`credentials`]: [`Credentials`], which never print their secret ([`SecretString`], domain's).
//! - [`endpoint`]: [`Region`] (the region-id grammar, the only way a region reaches a URL) and
//!   regional endpoint resolution.
//! - [`ratelimit`]: the token bucket.

pub mod client;
pub mod config;
pub mod credentials;
pub mod endpoint;
pub mod error;
pub mod model;
pub mod params;
pub mod ratelimit;
pub mod sign;

pub use client::{API_VERSION, Ecs, EcsClient, SignedCall, deadline_in, sign_call};
pub use config::{EcsConfig, EcsConfigError, RetryPolicy, SignatureVersion};
pub use credentials::{Credentials, SecretString};
pub use endpoint::{Region, RegionError};
pub use error::{EcsApiError, Error};
pub use model::{
    DataDisk, DescribeDisks, DescribeInstances, DescribeNetworkInterfaces, Disk, Instance,
    InstanceNetworkInterface, InstanceStatus, NetworkInterface, Page, RunInstances,
    RunInstancesResponse, SystemDisk, Tag,
};
pub use params::Params;
pub use tokio::time::Instant;
