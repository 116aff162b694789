//! Replaying a committed pact against a running provider.
//!
//! [`verify`] hands the pact file to `pact_verifier`, which sends every interaction's example
//! request to the provider and checks the answer against the interaction's matchers. Before each
//! interaction it calls the [`States`] closure with the interaction's provider state, which sets
//! the state up through the provider's own API (or store); a request filter may rewrite each
//! request just before it is sent (the ECS pair re-signs it).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use pact_models::provider_states::ProviderState;
use pact_verifier::callback_executors::{
    NullRequestFilterExecutor, ProviderStateExecutor, RequestFilterExecutor,
};
use pact_verifier::verification_result::VerificationMismatchResult;
use pact_verifier::{FilterInfo, PactSource, ProviderInfo, ProviderTransport, VerificationOptions};
use serde_json::Value;

/// What a provider-state closure returns: values the interaction's request may take through a
/// provider-state generator (`${name}`), such as the `providerID` of the VM the state made.
pub type StateValues = HashMap<String, Value>;

type StateFuture = Pin<Box<dyn Future<Output = anyhow::Result<StateValues>> + Send>>;
type StateFn = dyn Fn(String, HashMap<String, Value>) -> StateFuture + Send + Sync;

/// Sets provider states up: called with the state's name and parameters before each interaction.
pub struct States {
    set_up: Box<StateFn>,
}

impl States {
    /// States set up by `f(name, params)`; an unknown name should be an error, so a pact that
    /// names a state the provider test does not know fails instead of running against whatever
    /// state there happens to be.
    pub fn new<F, Fut>(f: F) -> Arc<Self>
    where
        F: Fn(String, HashMap<String, Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<StateValues>> + Send + 'static,
    {
        Arc::new(States {
            set_up: Box::new(move |name, params| Box::pin(f(name, params))),
        })
    }
}

impl fmt::Debug for States {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("States")
    }
}

#[async_trait::async_trait]
impl ProviderStateExecutor for States {
    async fn call(
        self: Arc<Self>,
        _interaction_id: Option<String>,
        provider_state: &ProviderState,
        setup: bool,
        _client: Option<&reqwest::Client>,
    ) -> anyhow::Result<HashMap<String, Value>> {
        // An interaction without a state is called with an empty one: nothing to set up.
        if !setup || provider_state.name.is_empty() {
            return Ok(HashMap::new());
        }
        (self.set_up)(provider_state.name.clone(), provider_state.params.clone()).await
    }

    fn teardown(&self) -> bool {
        false
    }
}

/// Replays the pact at `pact` against the provider at `base_url` (`http://127.0.0.1:PORT`),
/// failing with every mismatch the verifier found.
pub async fn verify(provider: &str, base_url: &str, pact: &Path, states: Arc<States>) {
    verify_filtered::<NullRequestFilterExecutor>(provider, base_url, pact, states, None).await
}

/// [`verify`] with a request filter that rewrites each request just before it is sent.
pub async fn verify_filtered<F: RequestFilterExecutor>(
    provider: &str,
    base_url: &str,
    pact: &Path,
    states: Arc<States>,
    filter: Option<Arc<F>>,
) {
    crate::pactfile::no_tracking();
    assert!(
        pact.exists(),
        "no committed pact {}: run the consumer test with {}=1 first",
        pact.display(),
        crate::pactfile::UPDATE_VAR
    );
    let url = reqwest::Url::parse(base_url).expect("a provider URL");
    let transport = ProviderTransport {
        transport: "http".into(),
        port: url.port(),
        path: None,
        scheme: Some("http".into()),
    };
    let info = ProviderInfo {
        name: provider.to_string(),
        host: url.host_str().expect("a host").to_string(),
        transports: vec![transport],
        ..ProviderInfo::default()
    };
    let options = VerificationOptions {
        request_filter: filter,
        request_timeout: 30_000,
        coloured_output: false,
        no_pacts_is_error: true,
        follow_redirects: false,
        ..VerificationOptions::default()
    };
    let result = pact_verifier::verify_provider_async(
        info,
        vec![PactSource::File(pact.display().to_string())],
        FilterInfo::None,
        vec![],
        &options,
        None,
        &states,
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("the verifier could not run {}: {e}", pact.display()));
    if !result.result || !result.errors.is_empty() {
        let mut report = String::new();
        for (interaction, mismatch) in &result.errors {
            report.push_str(&format!("- {interaction}:\n"));
            match mismatch {
                VerificationMismatchResult::Mismatches { mismatches, .. } => {
                    for m in mismatches {
                        report.push_str(&format!("    {}\n", m.description()));
                    }
                }
                VerificationMismatchResult::Error { error, .. } => {
                    report.push_str(&format!("    {error}\n"));
                }
            }
        }
        panic!(
            "{provider} breaks the committed pact {}:\n{report}\nverifier output:\n{}",
            pact.display(),
            result.output.join("\n")
        );
    }
    assert!(
        !result.interaction_results.is_empty(),
        "the pact {} held no interaction to verify",
        pact.display()
    );
}
