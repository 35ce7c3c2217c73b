//! GPU test (issue 5): an attention block whose Q, K and V projections run on forked streams,
//! captured. The racy graph (attention waits only for its neighbour) has two hazards, found from
//! the capture journal with the nodes' labels, and again from a plain read-back of the CUgraph
//! (kernel pointer arguments matched to live allocations, directions from the C++ signatures);
//! the fixed graph is clean.

mod common;

use common::Gpu;
use graphsmith::model::{HazardKind, NodeKind};
use graphsmith_workloads::Attention;

fn kernel_name(g: &graphsmith::model::Graph, id: graphsmith::model::NodeId) -> String {
    match &g.node(id).unwrap().kind {
        NodeKind::Kernel(k) => k.name.clone(),
        other => other.name().to_string(),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn racy_attention_is_reported_and_the_fixed_graph_is_clean() {
    let gpu = Gpu::new();
    let sides = [
        gpu.ctx.stream("q-stream").unwrap(),
        gpu.ctx.stream("k-stream").unwrap(),
        gpu.ctx.stream("v-stream").unwrap(),
    ];
    let mut attn = Attention::new(&gpu.ctx, &gpu.stream, 64).unwrap();
    let racy = attn.capture(&gpu.stream, &sides, true).unwrap();
    let fixed = attn.capture(&gpu.stream, &sides, false).unwrap();

    // From the journal: labels and the accesses of each launch's borrows.
    let report = racy.model().hazards().unwrap();
    for h in &report.hazards {
        println!("journal: {h}");
    }
    let pairs: Vec<(String, String, String, HazardKind)> = report
        .hazards
        .iter()
        .map(|h| {
            (
                h.first.label.clone(),
                h.second.label.clone(),
                h.buffer_label.clone(),
                h.kind,
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            (
                "q-proj".to_string(),
                "attention".to_string(),
                "q".to_string(),
                HazardKind::ReadAfterWrite
            ),
            (
                "k-proj".to_string(),
                "attention".to_string(),
                "k".to_string(),
                HazardKind::ReadAfterWrite
            ),
        ]
    );
    assert!(
        fixed.model().hazards().unwrap().is_clean(),
        "{:?}",
        fixed.model().hazards().unwrap().hazards
    );

    // From a plain read-back, as for a graph another library captured: no labels, pointer
    // arguments matched to allocations; `float* out` of proj has no const, so its direction is
    // unknown and the hazards are reported as possible, never dropped.
    let back = racy.read_back().unwrap();
    let report = back.hazards().unwrap();
    for h in &report.hazards {
        println!("read-back: {h}");
    }
    assert_eq!(report.hazards.len(), 2, "{:?}", report.hazards);
    for h in &report.hazards {
        assert_eq!(
            kernel_name(&back, h.first.id),
            graphsmith_workloads::PROJ_KERNEL
        );
        assert_eq!(
            kernel_name(&back, h.second.id),
            graphsmith_workloads::ATTENTION_KERNEL
        );
    }
    let back_fixed = fixed.read_back().unwrap().hazards().unwrap();
    assert!(back_fixed.is_clean(), "{:?}", back_fixed.hazards);
}
