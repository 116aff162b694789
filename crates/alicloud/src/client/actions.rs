//! The typed actions: one method per ECS action Berth calls (RunInstances, Describe*, Delete*,
//! Start/StopInstance, ModifyDiskAttribute), plus [`EcsClient::call`] for any other.
//!
//! Apart from the machinery (retries, signing, the attempt) because each is a thin typed wrapper:
//! reading this file is reading what Berth asks of ECS, with nothing of how a call travels.

use tokio::time::Instant;

use super::EcsClient;
use crate::error::Error;
use crate::model::{
    DescribeDisks, DescribeInstances, DescribeNetworkInterfaces, Disk, Instance, NetworkInterface,
    Page, RunInstances, RunInstancesResponse, wire,
};
use crate::params::Params;

impl EcsClient {
    /// RunInstances for one instance. A `ClientToken` is always sent (the request's, or a fresh one
    /// reused by this call's own retries), so a retry after a lost answer cannot create a second VM.
    pub async fn run_instances(
        &self,
        req: &RunInstances,
        deadline: Instant,
    ) -> Result<RunInstancesResponse, Error> {
        if req.image_id.is_empty() || req.instance_type.is_empty() {
            return Err(Error::InvalidRequest(
                "RunInstances needs ImageId and InstanceType".into(),
            ));
        }
        let token = match &req.client_token {
            Some(t) if t.is_empty() || t.len() > 64 || !t.is_ascii() => {
                return Err(Error::InvalidRequest(
                    "ClientToken must be 1 to 64 ASCII characters".into(),
                ));
            }
            Some(t) => t.clone(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let params = req.to_params(self.region(), &token);
        let body: wire::RunInstancesBody =
            self.call_typed("RunInstances", params, deadline).await?;
        Ok(RunInstancesResponse {
            request_id: body.request_id,
            instance_ids: body.instance_id_sets.instance_id_set,
            order_id: body.order_id.filter(|s| !s.is_empty()),
            client_token: token,
        })
    }

    /// One page of DescribeInstances.
    pub async fn describe_instances(
        &self,
        filter: &DescribeInstances,
        deadline: Instant,
    ) -> Result<Page<Instance>, Error> {
        if filter.instance_ids.len() > 100 {
            return Err(Error::InvalidRequest(
                "DescribeInstances takes at most 100 InstanceIds per call".into(),
            ));
        }
        let body: wire::DescribeInstancesBody = self
            .call_typed(
                "DescribeInstances",
                filter.to_params(self.region()),
                deadline,
            )
            .await?;
        Ok(Page {
            items: body
                .instances
                .instance
                .into_iter()
                .map(Into::into)
                .collect(),
            next_token: wire::token(body.next_token),
            request_id: body.request_id,
        })
    }

    /// Every instance matching `filter`, following `NextToken` (100 a page). More than 100
    /// `instance_ids` are looked up 100 at a time.
    pub async fn describe_all_instances(
        &self,
        filter: &DescribeInstances,
        deadline: Instant,
    ) -> Result<Vec<Instance>, Error> {
        let chunks: Vec<Vec<String>> = if filter.instance_ids.is_empty() {
            vec![Vec::new()]
        } else {
            filter.instance_ids.chunks(100).map(<[_]>::to_vec).collect()
        };
        let mut all = Vec::new();
        for ids in chunks {
            let mut f = DescribeInstances {
                instance_ids: ids,
                next_token: None,
                ..filter.clone()
            };
            self.collect_pages("DescribeInstances", &mut all, |token| {
                f.next_token = token;
                self.describe_instances_owned(f.clone(), deadline)
            })
            .await?;
        }
        Ok(all)
    }

    async fn describe_instances_owned(
        &self,
        f: DescribeInstances,
        deadline: Instant,
    ) -> Result<Page<Instance>, Error> {
        self.describe_instances(&f, deadline).await
    }

    /// DeleteInstance. `force = true` releases a Running instance directly (MCM's behaviour);
    /// `false` requires it to be Stopped. Returns ECS's request id. A missing instance is an error
    /// with [`Error::is_not_found`]; delete callers usually treat that as done.
    pub async fn delete_instance(
        &self,
        instance_id: &str,
        force: bool,
        deadline: Instant,
    ) -> Result<String, Error> {
        let mut p = Params::new();
        p.set("InstanceId", instance_id).set("Force", force);
        self.call_request_id("DeleteInstance", p, deadline).await
    }

    /// StartInstance (Stopped → Starting → Running). Returns ECS's request id.
    pub async fn start_instance(
        &self,
        instance_id: &str,
        deadline: Instant,
    ) -> Result<String, Error> {
        let mut p = Params::new();
        p.set("InstanceId", instance_id);
        self.call_request_id("StartInstance", p, deadline).await
    }

    /// StopInstance (Running → Stopping → Stopped). Returns ECS's request id.
    pub async fn stop_instance(
        &self,
        instance_id: &str,
        force_stop: bool,
        deadline: Instant,
    ) -> Result<String, Error> {
        let mut p = Params::new();
        p.set("InstanceId", instance_id)
            .set("ForceStop", force_stop);
        self.call_request_id("StopInstance", p, deadline).await
    }

    /// One page of DescribeDisks.
    pub async fn describe_disks(
        &self,
        filter: &DescribeDisks,
        deadline: Instant,
    ) -> Result<Page<Disk>, Error> {
        let body: wire::DescribeDisksBody = self
            .call_typed("DescribeDisks", filter.to_params(self.region()), deadline)
            .await?;
        Ok(Page {
            items: body.disks.disk.into_iter().map(Into::into).collect(),
            next_token: wire::token(body.next_token),
            request_id: body.request_id,
        })
    }

    /// Every disk matching `filter`, following `NextToken`.
    pub async fn describe_all_disks(
        &self,
        filter: &DescribeDisks,
        deadline: Instant,
    ) -> Result<Vec<Disk>, Error> {
        let mut all = Vec::new();
        let mut f = filter.clone();
        self.collect_pages("DescribeDisks", &mut all, |token| {
            f.next_token = token;
            let f = f.clone();
            async move { self.describe_disks(&f, deadline).await }
        })
        .await?;
        Ok(all)
    }

    /// DeleteDisk (the disk must be detached, `Available`). Returns ECS's request id.
    pub async fn delete_disk(&self, disk_id: &str, deadline: Instant) -> Result<String, Error> {
        let mut p = Params::new();
        p.set("DiskId", disk_id);
        self.call_request_id("DeleteDisk", p, deadline).await
    }

    /// One page of DescribeNetworkInterfaces.
    pub async fn describe_network_interfaces(
        &self,
        filter: &DescribeNetworkInterfaces,
        deadline: Instant,
    ) -> Result<Page<NetworkInterface>, Error> {
        let body: wire::DescribeNicsBody = self
            .call_typed(
                "DescribeNetworkInterfaces",
                filter.to_params(self.region()),
                deadline,
            )
            .await?;
        Ok(Page {
            items: body
                .network_interface_sets
                .network_interface_set
                .into_iter()
                .map(Into::into)
                .collect(),
            next_token: wire::token(body.next_token),
            request_id: body.request_id,
        })
    }

    /// Every network interface matching `filter`, following `NextToken`.
    pub async fn describe_all_network_interfaces(
        &self,
        filter: &DescribeNetworkInterfaces,
        deadline: Instant,
    ) -> Result<Vec<NetworkInterface>, Error> {
        let mut all = Vec::new();
        let mut f = filter.clone();
        self.collect_pages("DescribeNetworkInterfaces", &mut all, |token| {
            f.next_token = token;
            let f = f.clone();
            async move { self.describe_network_interfaces(&f, deadline).await }
        })
        .await?;
        Ok(all)
    }

    /// DeleteNetworkInterface (the interface must be detached, `Available`). Returns the request id.
    pub async fn delete_network_interface(
        &self,
        network_interface_id: &str,
        deadline: Instant,
    ) -> Result<String, Error> {
        let mut p = Params::new();
        p.set("RegionId", self.region())
            .set("NetworkInterfaceId", network_interface_id);
        self.call_request_id("DeleteNetworkInterface", p, deadline)
            .await
    }

    /// ModifyDiskAttribute's `DeleteWithInstance`: whether the disk is released with the instance it
    /// is attached to. Returns ECS's request id.
    pub async fn set_disk_delete_with_instance(
        &self,
        disk_id: &str,
        delete_with_instance: bool,
        deadline: Instant,
    ) -> Result<String, Error> {
        let mut p = Params::new();
        p.set("RegionId", self.region())
            .set("DiskId", disk_id)
            .set("DeleteWithInstance", delete_with_instance);
        self.call_request_id("ModifyDiskAttribute", p, deadline)
            .await
    }

    /// Any action, for what the typed methods do not cover: signs, sends, retries and returns the
    /// answer's JSON. `params` are the action's own; the common ones are added here.
    pub async fn call(
        &self,
        action: &str,
        params: Params,
        deadline: Instant,
    ) -> Result<serde_json::Value, Error> {
        self.call_typed(action, params, deadline).await
    }

    async fn call_request_id(
        &self,
        action: &str,
        params: Params,
        deadline: Instant,
    ) -> Result<String, Error> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Body {
            #[serde(default)]
            request_id: String,
        }
        let b: Body = self.call_typed(action, params, deadline).await?;
        Ok(b.request_id)
    }
}
