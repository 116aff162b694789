//! ListStorage's page latency over HTTP as the table grows.

use super::*;

/// Seeds `ns` up to `target` rows (1 in 10 labelled gold), 256 callers at a time.
pub(super) async fn seed(store: &Store, from: usize, target: usize) {
    let callers = 256;
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut i = from + c;
                while i < target {
                    store
                        .insert(
                            row("seeded", &format!("v{i:07}"), i.is_multiple_of(10)),
                            None,
                        )
                        .await
                        .unwrap();
                    i += callers;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

pub(super) fn percentiles(mut samples: Vec<Duration>) -> (f64, f64) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (
        ms(samples[samples.len() / 2]),
        ms(samples[(samples.len() * 99 / 100).min(samples.len() - 1)]),
    )
}

pub(super) async fn page_latency(stack: &Stack, label: &str, params: ListParams, rounds: usize) {
    // Untimed first: the first calls fill the readers' statement caches and the page cache, which
    // would otherwise land on whichever size is measured first.
    for _ in 0..rounds / 10 {
        stack.storage.list(&params).await.unwrap();
    }
    let mut samples = Vec::with_capacity(rounds);
    let mut items = 0;
    for _ in 0..rounds {
        let started = Instant::now();
        let page = stack.storage.list(&params).await.unwrap();
        samples.push(started.elapsed());
        items = page.items.len();
    }
    let (p50, p99) = percentiles(samples);
    println!("    {label:<44} {items:>5} items   p50 {p50:>7.2} ms   p99 {p99:>7.2} ms");
}

pub(super) async fn list_figures(stack: &Stack, volumes: usize) {
    println!("  ListStorage at {volumes} volumes (namespace 'seeded'; HTTP, keep-alive):");
    // A token continues the list it was issued for: one for all namespaces, one for 'seeded'.
    let middle_name = format!("v{:07}", volumes / 2);
    let middle = stack.ops.encode_continue(
        "seeded",
        &middle_name,
        &storage_ops::ops::list_query(None, None),
    );
    let middle_seeded = stack.ops.encode_continue(
        "seeded",
        &middle_name,
        &storage_ops::ops::list_query(Some("seeded"), None),
    );
    page_latency(stack, "first page, limit 100", ListParams::default(), 200).await;
    page_latency(
        stack,
        "middle page via continue, limit 100",
        ListParams {
            continue_token: Some(middle.clone()),
            ..Default::default()
        },
        200,
    )
    .await;
    page_latency(
        stack,
        "namespace=seeded, middle, limit 100",
        ListParams {
            namespace: Some("seeded".into()),
            continue_token: Some(middle_seeded),
            ..Default::default()
        },
        200,
    )
    .await;
    page_latency(
        stack,
        "first page, limit 1000",
        ListParams {
            limit: Some(1000),
            ..Default::default()
        },
        50,
    )
    .await;
    page_latency(
        stack,
        "labelSelector=tier=gold (1 in 10), limit 100",
        ListParams {
            label_selector: Some("tier=gold".into()),
            ..Default::default()
        },
        100,
    )
    .await;
}
