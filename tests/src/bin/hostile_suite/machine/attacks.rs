//! The hostile machines' three attacks: state planted where the driver reads it back, a writable
//! mount around another machine's mount (a symlink swap), and limits above the operator's ceilings.
//!
//! Apart from the driver's setup and helpers (the parent module) so that each attack reads as
//! what it does and what is due, with the plumbing of containers and archives out of sight.

use bollard::exec::CreateExecOptions;
use serde_json::json;

use super::{Due, GROWTH_LIMIT, Machines, SHEBANG, judge, rss};
use crate::tally::Tally;

impl Machines {
    /// Every file Berth ever read back from a container, planted with every trick, before and
    /// after the bootstrap; the driver's memory, the victims and the bootstrap's single run.
    pub(crate) async fn planted_state(&self, t: &mut Tally) {
        if let Err(e) = self.planted_state_or(t).await {
            t.wrong(format!("machine-driver: planted state: {e}"));
        }
    }

    async fn planted_state_or(&self, t: &mut Tally) -> Result<(), String> {
        let victim = self.bystander("victim", false).await?;
        let bystander = self.bystander("bystander", true).await?;
        // A real, unstarted exec of another container: a well-formed id that is not this
        // machine's.
        let foreign_exec = self
            .engine
            .create_exec(
                &bystander,
                CreateExecOptions {
                    cmd: Some(vec!["/berth-machine", "bootstrap", "/nonexistent"]),
                    ..CreateExecOptions::default()
                },
            )
            .await
            .map_err(|e| e.to_string())?
            .id;
        let plain = self.class(json!({}));
        let exec = self.class(json!({"bootstrap": "exec"}));
        let user_data = format!("{SHEBANG}append /var/lib/berth/runs ran\n");
        let req = self.req(0, &exec, Some(&user_data));
        let made = self
            .client
            .create(&self.req(0, &plain, Some(&user_data)))
            .await;
        judge(t, "CreateMachine of the hostile machine", made, Due::Ok);
        self.run_in(&self.name(0), "fill /big 256\n", true).await?;
        let name = self.name(0);
        let exec_ids: Vec<(&str, Vec<u8>)> = vec![
            (
                "a walk to another container's start",
                format!("../v1.23/containers/{victim}/start?").into_bytes(),
            ),
            (
                "a walk to the machine's own export",
                format!("../containers/{name}/export?").into_bytes(),
            ),
            (
                "another container's unstarted exec",
                foreign_exec.clone().into_bytes(),
            ),
            (
                "bytes that are not UTF-8",
                [b"a".as_slice(), &[0xff; 5], &[0xe2, 0x82]].concat(),
            ),
            ("1 MiB", vec![b'a'; 1 << 20]),
            ("an empty file", Vec::new()),
        ];
        let exit_codes: Vec<(&str, Vec<u8>)> = vec![
            ("a claimed success", b"0".to_vec()),
            (
                "a number no i64 holds",
                b"99999999999999999999999999".to_vec(),
            ),
            ("not a number", b"zero".to_vec()),
            ("bytes that are not UTF-8", vec![0xff, 0xfe, 0x80]),
            ("1 MiB", vec![b'7'; 1 << 20]),
        ];
        let before = rss();
        for (trick, bytes) in &exec_ids {
            self.plant(0, "/var/lib/berth/bootstrap.exec", bytes)
                .await?;
            for _ in 0..3 {
                let status = self.client.status(&req).await;
                judge(
                    t,
                    &format!("GetMachineStatus, exec file: {trick}"),
                    status,
                    Due::Status(409),
                );
            }
        }
        for (trick, bytes) in &exit_codes {
            self.plant(0, "/var/lib/berth/bootstrap.exit", bytes)
                .await?;
            let status = self.client.status(&req).await;
            judge(
                t,
                &format!("GetMachineStatus, exit file: {trick}"),
                status,
                Due::Status(409),
            );
        }
        // The state files as a directory and as links (to the big file, to a device).
        self.run_in(
            &name,
            "remove /var/lib/berth/bootstrap.exec\nremove /var/lib/berth/bootstrap.exit\nappend /var/lib/berth/bootstrap.exec/x y\nsymlink /big /var/lib/berth/bootstrap.exit\n",
            true,
        )
        .await?;
        let status = self.client.status(&req).await;
        judge(
            t,
            "GetMachineStatus, state files as a directory and a link",
            status,
            Due::Status(409),
        );
        let init = self.client.initialize(&req).await;
        judge(t, "InitializeMachine of the hostile machine", init, Due::Ok);
        let status = self.client.status(&req).await;
        judge(t, "GetMachineStatus after the bootstrap", status, Due::Ok);
        for (trick, bytes) in exec_ids.iter().chain(exit_codes.iter()) {
            let _ = self
                .run_in(
                    &name,
                    "remove /var/lib/berth/bootstrap.exec\nremove /var/lib/berth/bootstrap.exit\n",
                    true,
                )
                .await;
            self.plant(0, "/var/lib/berth/bootstrap.exec", bytes)
                .await?;
            self.plant(0, "/var/lib/berth/bootstrap.exit", bytes)
                .await?;
            let status = self.client.status(&req).await;
            judge(
                t,
                &format!("GetMachineStatus after the bootstrap, planted: {trick}"),
                status,
                Due::Ok,
            );
            let init = self.client.initialize(&req).await;
            judge(
                t,
                &format!("InitializeMachine after the bootstrap, planted: {trick}"),
                init,
                Due::Ok,
            );
        }
        let grown = rss().saturating_sub(before);
        println!(
            "      driver memory while a machine offered 256 MiB: {} MiB grown (limit {} MiB)",
            grown >> 20,
            GROWTH_LIMIT >> 20
        );
        t.requests += 1;
        if grown > GROWTH_LIMIT {
            t.wrong(format!(
                "machine-driver: memory grew by {} MiB",
                grown >> 20
            ));
        } else {
            t.as_due += 1;
        }
        // Nothing but the machine's own bootstrap ran, once.
        t.requests += 3;
        if self.running(&victim).await {
            t.wrong("machine-driver: the victim container was started".into());
        } else {
            t.as_due += 1;
        }
        match self.engine.inspect_exec(&foreign_exec).await {
            Ok(x) if x.running != Some(true) && x.exit_code.is_none() => t.as_due += 1,
            other => t.wrong(format!(
                "machine-driver: another container's exec was started: {other:?}"
            )),
        }
        let ran = super::support_file(&self.engine, &name, "/var/lib/berth/runs").await;
        if ran.as_deref() == Some("ran\n") {
            t.as_due += 1;
        } else {
            t.wrong(format!(
                "machine-driver: the bootstrap ran {ran:?}, not once"
            ));
        }
        let deleted = self.client.delete(&req).await;
        judge(t, "DeleteMachine of the hostile machine", deleted, Due::Ok);
        Ok(())
    }

    /// A machine with a writable mount could swap a directory another machine mounts for a link
    /// to a host directory outside the root, and win the race between the driver's check and the
    /// Engine's start: such neighbours are refused, in one class and across machines, whichever
    /// is created first.
    pub(crate) async fn symlink_swap(&self, t: &mut Tally) {
        if let Err(e) = self.symlink_swap_or(t).await {
            t.wrong(format!("machine-driver: symlink swap: {e}"));
        }
    }

    async fn symlink_swap_or(&self, t: &mut Tally) -> Result<(), String> {
        let r = self.root();
        let nested = self.class(json!({"mounts": [
            {"hostPath": format!("{r}/shared"), "containerPath": "/shared"},
            {"hostPath": format!("{r}/shared/data"), "containerPath": "/data", "readOnly": true}
        ]}));
        let refused = self.client.create(&self.req(1, &nested, None)).await;
        judge(
            t,
            "CreateMachine, a writable mount holding another's source",
            refused,
            Due::Status(400),
        );
        let writer = self.class(
            json!({"mounts": [{"hostPath": format!("{r}/shared"), "containerPath": "/shared"}]}),
        );
        let reader = self.class(json!({
            "bootstrap": "exec",
            "mounts": [{"hostPath": format!("{r}/shared/data"), "containerPath": "/data", "readOnly": true}]
        }));
        let user_data = format!("{SHEBANG}append /var/lib/berth/runs ran\n");
        let writing = self.req(1, &writer, None);
        let reading = self.req(2, &reader, Some(&user_data));
        let made = self.client.create(&writing).await;
        judge(t, "CreateMachine of the writer", made, Due::Ok);
        for _ in 0..3 {
            let refused = self.client.create(&reading).await;
            judge(
                t,
                "CreateMachine of a reader inside the writer's mount",
                refused,
                Due::Status(412),
            );
        }
        let deleted = self.client.delete(&writing).await;
        judge(t, "DeleteMachine of the writer", deleted, Due::Ok);
        let made = self.client.create(&reading).await;
        judge(t, "CreateMachine of the reader", made, Due::Ok);
        let refused = self.client.create(&writing).await;
        judge(
            t,
            "CreateMachine of a writer around the reader's mount",
            refused,
            Due::Status(412),
        );
        for req in [&reading, &writing] {
            let deleted = self.client.delete(req).await;
            judge(t, "DeleteMachine", deleted, Due::Ok);
        }
        Ok(())
    }

    /// Limits above the operator's ceilings are refused; a machine gets the ceilings.
    pub(crate) async fn limits(&self, t: &mut Tally) {
        for extra in [
            json!({"cpus": 64}),
            json!({"memory": "64Gi"}),
            json!({"pids": 100000}),
            json!({"network": "host"}),
            json!({"network": "none"}),
            json!({"privileged": true}),
            json!({"labels": {"com.docker.compose.project": "x"}}),
            json!({"image": "a".repeat(100_000)}),
        ] {
            let refused = self
                .client
                .create(&self.req(3, &self.class(extra.clone()), None))
                .await;
            let due = if extra.get("labels").is_some()
                || extra.get("image").is_some()
                || extra["network"] == "host"
            {
                400
            } else {
                412
            };
            let what: String = extra.to_string().chars().take(60).collect();
            judge(
                t,
                &format!("CreateMachine with {what}"),
                refused,
                Due::Status(due),
            );
        }
        let made = self
            .client
            .create(&self.req(3, &self.class(json!({})), None))
            .await;
        judge(t, "CreateMachine within the ceilings", made, Due::Ok);
        t.requests += 1;
        match self
            .engine
            .inspect_container(&self.name(3), None)
            .await
            .ok()
            .and_then(|c| c.host_config)
        {
            Some(h)
                if h.memory == Some(512 << 20)
                    && h.nano_cpus == Some(1_000_000_000)
                    && h.pids_limit == Some(256)
                    && h.cap_drop.as_deref() == Some(&["ALL".to_owned()][..])
                    && h.security_opt.as_deref()
                        == Some(&["no-new-privileges:true".to_owned()][..]) =>
            {
                t.as_due += 1
            }
            other => t.wrong(format!("machine-driver: the machine's limits: {other:?}")),
        }
        let deleted = self
            .client
            .delete(&self.req(3, &self.class(json!({})), None))
            .await;
        judge(t, "DeleteMachine", deleted, Due::Ok);
    }
}
