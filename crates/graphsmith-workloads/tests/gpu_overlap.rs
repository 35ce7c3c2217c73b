//! GPU tests: weight streaming (`src/overlap/`) gives the host reference bit for bit, overlapped
//! on two streams, as one graph and serialized on one stream, ring after ring, pass after pass.

use graphsmith::{Context, Stream};
use graphsmith_workloads::overlap::{reference, Shape, WeightStream};

/// Small enough for a quick host reference, with rows that are not a multiple of the block.
const SHAPE: Shape = Shape {
    hidden: 200,
    ffn: 536,
};

fn same_bits(what: &str, got: &[Vec<f32>], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len(), "{what}: layers");
    for (l, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: layer {l} length");
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                a.to_bits() == b.to_bits(),
                "{what}: layer {l} element {i} is {a} (bits {:#x}), expected {b}",
                a.to_bits()
            );
        }
    }
}

fn poisoned_outputs(ws: &mut WeightStream, stream: &Stream) {
    let poison = f32::from_bits(0x7fc0_dead);
    for out in ws.outputs_mut() {
        let n = out.len();
        stream.upload(out, &vec![poison; n]).expect("poison");
    }
}

fn outputs(ws: &WeightStream, stream: &Stream) -> Vec<Vec<f32>> {
    stream.synchronize().expect("synchronize");
    ws.outputs()
        .iter()
        .map(|o| stream.download(o).expect("download"))
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn overlapped_and_serialized_passes_match_the_host_bit_for_bit() {
    let ctx = Context::new(0).expect("a CUDA GPU is needed for this test");
    let compute = ctx.stream("compute").unwrap();
    let copy = ctx.stream("copy").unwrap();
    let layers = 5;
    let want = reference(&SHAPE, layers);
    assert!(
        want.iter().flatten().all(|v| v.is_finite() && *v != 0.0),
        "the reference is finite and non-zero"
    );
    for ring in [1, 2, 3] {
        let mut ws = WeightStream::new(&ctx, &compute, SHAPE, layers, ring, 2).unwrap();
        for pass in 0..3 {
            poisoned_outputs(&mut ws, &compute);
            ws.run_serialized(&compute).unwrap();
            same_bits(
                &format!("serialized, ring {ring}, pass {pass}"),
                &outputs(&ws, &compute),
                &want,
            );
            poisoned_outputs(&mut ws, &compute);
            ws.run_overlapped(&compute, &copy).unwrap();
            same_bits(
                &format!("overlapped, ring {ring}, pass {pass}"),
                &outputs(&ws, &compute),
                &want,
            );
            poisoned_outputs(&mut ws, &compute);
            ws.run_one_graph(&compute).unwrap();
            same_bits(
                &format!("one graph, ring {ring}, pass {pass}"),
                &outputs(&ws, &compute),
                &want,
            );
        }
        // Passes back to back without a host wait: the next pass's first copies must wait for
        // the layers of the one before that still read their slots.
        poisoned_outputs(&mut ws, &compute);
        for _ in 0..4 {
            ws.run_overlapped(&compute, &copy).unwrap();
        }
        same_bits(
            &format!("four passes in a row, ring {ring}"),
            &outputs(&ws, &compute),
            &want,
        );
    }
    assert!(ctx.drop_failures().is_empty(), "{:?}", ctx.drop_failures());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_ordering_of_the_trunk_after_the_branch_gives_the_host_reference() {
    let ctx = Context::new(0).expect("a CUDA GPU is needed for this test");
    for nodes in [1, 10, 100] {
        let rows = graphsmith_workloads::ordering::measure(&ctx, nodes, 1, 3).unwrap();
        assert_eq!(rows.len(), graphsmith_workloads::ordering::CONTENDERS.len());
        for r in &rows {
            assert!(r.correct, "{} at {nodes} nodes: wrong result", r.contender);
            assert!(
                r.end_to_end_us > 0.0,
                "{} at {nodes} nodes: {r:?}",
                r.contender
            );
        }
    }
}
