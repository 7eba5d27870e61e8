//! Graph memory: measured per graph (modelled per node on the host backend), one budget for the
//! whole session across its run contexts, least recently used graphs of any context trimmed first,
//! and a graph that cannot fit launched once and not kept. Outputs stay correct throughout.

mod common;

use std::sync::Arc;

use common::*;
use saggar_dispatch::{BucketSpec, GRAPH_NODE_BYTES, GraphConfig, Session, SessionConfig};

/// Graph memory of one pinned-copy graph of the sum model on the host: upload, kernel, download
/// (what a request replays too).
const PINNED_GRAPH: u64 = 3 * GRAPH_NODE_BYTES;

fn session(
    model: &Arc<SumModel>,
    budget: u64,
    concurrency: usize,
) -> Session<saggar_device::host::HostBackend, SumModel> {
    let config = SessionConfig::builder()
        .buckets(BucketSpec::PowersOfTwo { max: 16 })
        .graphs(GraphConfig::default().with_memory_budget_bytes(Some(budget)))
        .max_concurrency(concurrency)
        .prewarm_contexts(1)
        .build()
        .unwrap();
    Session::builder(host_device(), model.clone()).config(config).build().unwrap()
}

#[test]
fn a_budget_below_every_contexts_graphs_holds_across_eight_concurrent_contexts() {
    let model = Arc::new(SumModel::new(2, 4, false));
    // 8 contexts x 5 buckets would hold 40 graphs; the budget holds 6.
    let budget = 6 * PINNED_GRAPH;
    let s = session(&model, budget, 8);
    std::thread::scope(|scope| {
        for t in 0..8u32 {
            let (s, model) = (&s, &model);
            scope.spawn(move || {
                for i in 0..60u32 {
                    run_checked(s, model, 1 + ((t * 5 + i * 3) % 16) as usize, t * 100 + i);
                }
            });
        }
    });
    let st = s.stats();
    assert!(st.graph_bytes_peak <= budget, "measured graph memory stayed under the budget: {st:?}");
    assert!(st.graph_bytes <= budget && st.graph_bytes > 0, "{st:?}");
    assert!(st.evicted_graphs > 0, "graphs were evicted to stay under it: {st:?}");
    assert_eq!(st.failed, 0);
}

#[test]
fn a_capture_trims_the_least_recently_used_graph_of_another_context() {
    let model = Arc::new(SumModel::new(2, 4, false));
    let s = session(&model, PINNED_GRAPH, 2);
    // A request holds the first context and captures its graph of bucket 1 there.
    let mut held = s.request(1).unwrap();
    held.run().unwrap();
    assert_eq!((s.stats().captures, s.stats().graph_bytes), (1, PINNED_GRAPH));
    // A run on the second context needs room: its own cache is empty, so the other context's
    // idle graph goes.
    run_checked(&s, &model, 2, 7);
    let st = s.stats();
    assert_eq!((st.captures, st.evicted_graphs, st.graph_bytes), (2, 1, PINNED_GRAPH), "{st:?}");
    // The held request finds its graph gone, captures again and trims the other context's.
    held.run().unwrap();
    let st = s.stats();
    assert_eq!((st.captures, st.evicted_graphs, st.graph_bytes_peak), (3, 2, PINNED_GRAPH), "{st:?}");
}

#[test]
fn a_graph_larger_than_the_budget_runs_once_and_is_not_kept() {
    let model = Arc::new(SumModel::new(2, 4, false));
    let s = session(&model, PINNED_GRAPH - 1, 1);
    for seed in 0..3 {
        run_checked(&s, &model, 3, seed);
    }
    let st = s.stats();
    assert_eq!((st.captures, st.graphs_over_budget, st.graph_bytes, st.graph_bytes_peak), (3, 3, 0, 0), "{st:?}");
}
