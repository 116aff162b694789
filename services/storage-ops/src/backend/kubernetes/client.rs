//! The client of an API server and the credentials it is made with: apart because it is shared
//! by every orchestrator naming that server, and reading credentials is its own I/O.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use domain::Code;
use tokio::sync::OnceCell;

use super::calls::CALL_TIMEOUT;
use crate::backend::BackendError;

/// The client of one API server, made on first use and shared by every orchestrator naming that
/// server (`None`: in-cluster). Made lazily because reading credentials is I/O, and a server whose
/// credentials cannot be had is a precondition of the calls that need it, not of the registration.
#[derive(Clone)]
pub struct SharedClient {
    server: Option<String>,
    kubeconfig: Option<PathBuf>,
    client: Arc<OnceCell<kube::Client>>,
}

impl SharedClient {
    /// The client of `server`, with credentials from `kubeconfig` when it has a context for it.
    pub fn new(server: Option<String>, kubeconfig: Option<PathBuf>) -> Self {
        SharedClient {
            server,
            kubeconfig,
            client: Arc::default(),
        }
    }

    pub(super) async fn get(&self) -> Result<kube::Client, BackendError> {
        self.client
            .get_or_try_init(|| async {
                // Where the whole workspace is built, a test crate's dependencies compile rustls'
                // ring provider in beside aws-lc-rs, and rustls then has no default: kube's client
                // would panic making its TLS config. The process's is said here, once: aws-lc-rs,
                // the one reqwest uses (an error only means one is installed already).
                let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
                let mut config = self.config().await?;
                config.connect_timeout = Some(Duration::from_secs(5));
                // Past [`CALL_TIMEOUT`]: the call's own bound fires first and says the server did not
                // answer, where the client's would read as a server that cannot be reached.
                config.read_timeout = Some(CALL_TIMEOUT + Duration::from_secs(5));
                config.write_timeout = Some(CALL_TIMEOUT + Duration::from_secs(5));
                kube::Client::try_from(config).map_err(|e| {
                    BackendError::new(
                        Code::FailedPrecondition,
                        "no client for the Kubernetes API server could be made",
                    )
                    .with_detail(e.to_string())
                })
            })
            .await
            .cloned()
    }

    async fn config(&self) -> Result<kube::Config, BackendError> {
        let unusable = |what: &str, e: &dyn std::fmt::Display| {
            BackendError::new(
                Code::FailedPrecondition,
                format!("the Kubernetes credentials cannot be used: {what}"),
            )
            .with_detail(e.to_string())
        };
        let Some(server) = &self.server else {
            return kube::Config::incluster()
                .map_err(|e| unusable("this is not a pod with a service account", &e));
        };
        // The operator's kubeconfig, when it has a cluster of this server: its credentials and
        // CA. Otherwise none (a loopback stand-in, or a server that allows anonymous calls).
        if let Some(path) = &self.kubeconfig {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| unusable("BERTH_KUBECONFIG cannot be read", &e))?;
            let context = kubeconfig.contexts.iter().find_map(|named| {
                let cluster = &named.context.as_ref()?.cluster;
                let listed = kubeconfig
                    .clusters
                    .iter()
                    .find(|c| &c.name == cluster)?
                    .cluster
                    .as_ref()?
                    .server
                    .as_deref()?;
                let same = domain::orchestrator::validate_kubernetes_server("server", listed)
                    .is_ok_and(|s| &s == server);
                same.then(|| named.name.clone())
            });
            if let Some(context) = context {
                let options = kube::config::KubeConfigOptions {
                    context: Some(context),
                    ..Default::default()
                };
                return kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| unusable("BERTH_KUBECONFIG's context for this server", &e));
            }
        }
        let uri = server
            .parse()
            .map_err(|e| unusable("the server's address", &e))?;
        Ok(kube::Config::new(uri))
    }
}
