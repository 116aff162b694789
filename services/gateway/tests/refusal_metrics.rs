//! What an operator alerts on, on the gateway's `/metrics` (issue 32, point 2): its refusals by
//! reason, and each upstream's breaker state. One test in its own binary: the series are the
//! process's, and other tests' gateways would move them.

mod common;

use common::*;

use common::metrics_page as page;

#[tokio::test]
async fn refusals_by_reason_and_breaker_states_are_on_the_page() {
    let mut h = spawn_gateway(&[
        ("BERTH_BREAKER_FAILURES", "1"),
        ("BERTH_BREAKER_OPEN", "30s"),
    ])
    .await;
    let before = page(&h.url).await;
    for upstream in ["machine-driver", "orchestrator-registry", "storage-ops"] {
        assert!(
            before.contains(&format!(
                "berth_gateway_breaker_state{{upstream=\"{upstream}\"}} 0"
            )),
            "{before}"
        );
    }
    assert_eq!(call(&h.url, "GET", "/v1/kinds", None).await.status(), 401);
    assert_eq!(
        call(&h.url, "GET", "/v1/kinds", Some("tok-nobody"))
            .await
            .status(),
        401
    );
    assert_eq!(
        call(&h.url, "POST", "/v1/volumes", Some("tok-reader"))
            .await
            .status(),
        403
    );
    // The registry goes away: one failure opens its breaker.
    let registry = h.upstreams.remove(1);
    let addr = registry.addr;
    registry.shutdown().await;
    let _dead = hold_dead(addr);
    assert_eq!(
        call(&h.url, "GET", "/v1/kinds", Some("tok-reader"))
            .await
            .status(),
        503
    );
    let after = page(&h.url).await;
    for line in [
        "berth_gateway_refusals_total{reason=\"unauthenticated\"} 2",
        "berth_gateway_refusals_total{reason=\"forbidden\"} 1",
        "berth_gateway_breaker_state{upstream=\"orchestrator-registry\"} 1",
        "berth_gateway_breaker_state{upstream=\"storage-ops\"} 0",
        "# HELP berth_gateway_refusals_total ",
        "# HELP berth_gateway_breaker_state ",
    ] {
        assert!(after.contains(line), "no {line:?} on: {after}");
    }
}
