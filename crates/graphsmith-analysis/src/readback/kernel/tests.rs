//! CPU tests of kernel accesses through struct parameters: pointers bounded by the regions of a
//! memory map (two blocks of one segment stay two buffers), PyTorch's elementwise rule, and
//! unknown directions as possible hazards.

use graphsmith_model::{AccessMode, Dim3, HazardKind, KernelArg, KernelParams, NodeKind};

use super::super::*;

/// One allocator segment of 1 MiB holding two blocks of 4 KiB, one after the other.
const SEGMENT: u64 = 0x7f00_0000_0000;
const SEGMENT_BYTES: u64 = 1 << 20;
const X: u64 = SEGMENT;
const Y: u64 = SEGMENT + 4096;
const BLOCK: u64 = 4096;

/// `void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>,
/// std::array<char*, 2> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2>)`
const VECTORIZED: &str = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_21CUDAFunctorOnSelf_addIfEESt5arrayIPcLm2EEEEviT0_T1_";
/// `void at::native::elementwise_kernel<128, 4, foo::Closure>(int, foo::Closure)`: a closure
/// type, no array in the signature.
const LEGACY: &str = "_ZN2at6native18elementwise_kernelILi128ELi4EN3foo7ClosureEEEviT1_";
/// `void reduce(foo::Args)`: not an elementwise kernel.
const OTHER: &str = "_Z6reduceN3foo4ArgsE";

fn map() -> MemoryMap {
    MemoryMap::new([
        Region::new(
            X,
            BLOCK,
            format!("block {X:#x}+4096 (segment {SEGMENT:#x})"),
        ),
        Region::new(
            Y,
            BLOCK,
            format!("block {Y:#x}+4096 (segment {SEGMENT:#x})"),
        ),
    ])
}

/// The driver knows only the segment.
fn segment(address: u64) -> Option<(u64, u64)> {
    (SEGMENT..SEGMENT + SEGMENT_BYTES)
        .contains(&address)
        .then_some((SEGMENT, SEGMENT_BYTES))
}

fn words(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A kernel node whose parameters are `(offset, bytes)`.
fn kernel(symbol: &str, params: Vec<(u32, Vec<u8>)>) -> RawNode {
    let args = params
        .into_iter()
        .map(|(offset, bytes)| KernelArg { offset, bytes })
        .collect();
    RawNode::plain(NodeKind::Kernel(KernelParams {
        name: symbol.into(),
        grid: Dim3::linear(1),
        block: Dim3::linear(128),
        shared_mem_bytes: 0,
        args,
        cluster: None,
    }))
}

/// `vectorized_elementwise_kernel(int n, functor (4 bytes), std::array<char*, 2> {out, in})`.
fn elementwise(out: u64, input: u64) -> RawNode {
    kernel(
        VECTORIZED,
        vec![
            (0, 1024u32.to_le_bytes().to_vec()),
            (4, 1.0f32.to_le_bytes().to_vec()),
            (8, words(&[out, input])),
        ],
    )
}

fn graph(nodes: Vec<RawNode>) -> RawGraph {
    RawGraph {
        nodes,
        edges: vec![],
    }
}

/// (buffer, offset, len, mode, label) of node `i`'s accesses.
fn accesses(raw: &RawGraph, i: usize) -> Vec<(u64, u64, u64, AccessMode, String)> {
    let built = build_with(raw, "g", &map(), &mut segment);
    built.graph.nodes[i]
        .accesses
        .iter()
        .map(|a| (a.buffer, a.offset, a.len, a.mode, a.label.clone()))
        .collect()
}

fn label(base: u64) -> String {
    format!("block {base:#x}+4096 (segment {SEGMENT:#x})")
}

#[test]
fn a_struct_holding_pointers_into_two_blocks_of_one_segment_touches_two_buffers() {
    // reduce(Args { int64 n; float* in (+16 bytes); float* out; int64 strides[2] })
    let args = words(&[1024, X + 16, Y, 4, 1 << 40]);
    let raw = graph(vec![kernel(OTHER, vec![(0, args)])]);
    assert_eq!(
        accesses(&raw, 0),
        [
            (X, 16, BLOCK - 16, AccessMode::Unknown, label(X)),
            (Y, 0, BLOCK, AccessMode::Unknown, label(Y)),
        ]
    );
    // Without the map, the driver's segment is one buffer holding both.
    let built = build(&raw, "g", &mut segment);
    let buffers: Vec<u64> = built.graph.nodes[0]
        .accesses
        .iter()
        .map(|a| a.buffer)
        .collect();
    assert_eq!(buffers, [SEGMENT, SEGMENT]);
}

#[test]
fn words_are_read_8_byte_aligned_in_the_parameter_buffer() {
    // A 20-byte struct at offset 4: its first aligned word is at byte 4 of the struct.
    let mut bytes = 7u32.to_le_bytes().to_vec();
    bytes.extend(words(&[Y, X]));
    let raw = graph(vec![kernel(OTHER, vec![(0, vec![0; 4]), (4, bytes)])]);
    let got: Vec<u64> = accesses(&raw, 0).iter().map(|a| a.0).collect();
    assert_eq!(got, [Y, X]);
    // A misaligned pointer is not a word: nothing is found.
    let mut bytes = vec![0u8; 4];
    bytes.extend(words(&[Y]));
    let raw = graph(vec![kernel(OTHER, vec![(0, bytes)])]);
    assert_eq!(accesses(&raw, 0), []);
}

#[test]
fn an_elementwise_kernel_writes_its_first_data_pointer_and_reads_the_others() {
    let raw = graph(vec![elementwise(Y, X + 64)]);
    assert_eq!(
        accesses(&raw, 0),
        [
            (Y, 0, BLOCK, AccessMode::Write, label(Y)),
            (X, 64, BLOCK - 64, AccessMode::Read, label(X)),
        ]
    );
    // In place (`b.mul_(2)`): the same block written and read.
    let raw = graph(vec![elementwise(X, X)]);
    let modes: Vec<AccessMode> = accesses(&raw, 0).iter().map(|a| a.3).collect();
    assert_eq!(modes, [AccessMode::Write, AccessMode::Read]);
}

#[test]
fn a_closure_of_an_elementwise_kernel_gets_the_rule_only_when_its_pointers_lead() {
    let raw = graph(vec![kernel(LEGACY, vec![(0, words(&[Y, X, 3]))])]);
    let modes: Vec<AccessMode> = accesses(&raw, 0).iter().map(|a| a.3).collect();
    assert_eq!(modes, [AccessMode::Write, AccessMode::Read]);
    // An offset calculator first: the closure's layout is not recognised.
    let raw = graph(vec![kernel(LEGACY, vec![(0, words(&[3, Y, X]))])]);
    let modes: Vec<AccessMode> = accesses(&raw, 0).iter().map(|a| a.3).collect();
    assert_eq!(modes, [AccessMode::Unknown, AccessMode::Unknown]);
    // A gap between the pointers: not one run.
    let raw = graph(vec![kernel(LEGACY, vec![(0, words(&[Y, 3, X]))])]);
    let modes: Vec<AccessMode> = accesses(&raw, 0).iter().map(|a| a.3).collect();
    assert_eq!(modes, [AccessMode::Unknown, AccessMode::Unknown]);
    assert!(is_elementwise(VECTORIZED) && is_elementwise(LEGACY) && !is_elementwise(OTHER));
}

#[test]
fn a_race_between_elementwise_kernels_is_certain_and_names_both_kernels() {
    // Unordered: one writes Y, the other reads Y (and writes X).
    let raw = graph(vec![elementwise(Y, Y), elementwise(X, Y)]);
    let built = build_with(&raw, "g", &map(), &mut segment);
    let report = built.graph.hazards().unwrap();
    assert_eq!(report.hazards.len(), 1, "{report:?}");
    let h = &report.hazards[0];
    assert_eq!(h.kind, HazardKind::ReadAfterWrite);
    assert_eq!(h.buffer, Y);
    assert_eq!(h.buffer_label, label(Y));
    assert_eq!(h.first.label, "at::native::vectorized_elementwise_kernel");
    assert_eq!(h.second.label, "at::native::vectorized_elementwise_kernel");
    assert_eq!(report.certain().count(), 1);
    // Ordered, it is clean.
    let mut ordered = raw.clone();
    ordered.edges.push(RawEdge::plain(0, 1));
    let built = build_with(&ordered, "g", &map(), &mut segment);
    assert!(built.graph.hazards().unwrap().is_clean());
}

#[test]
fn two_kernels_writing_two_blocks_of_one_segment_in_parallel_do_not_race() {
    let raw = graph(vec![elementwise(X, X), elementwise(Y, Y)]);
    let built = build_with(&raw, "g", &map(), &mut segment);
    assert!(built.graph.hazards().unwrap().is_clean());
    // Bounded by the segment only (what the tracer sees), they would.
    let built = build(&raw, "g", &mut segment);
    assert!(!built.graph.hazards().unwrap().is_clean());
}

#[test]
fn a_conflict_of_unknown_direction_is_a_possible_hazard_not_a_certain_one() {
    let reduce = kernel(OTHER, vec![(0, words(&[1024, X, 4]))]);
    let raw = graph(vec![reduce, elementwise(Y, X)]);
    let built = build_with(&raw, "g", &map(), &mut segment);
    let report = built.graph.hazards().unwrap();
    assert_eq!(report.hazards.len(), 1);
    assert_eq!(report.hazards[0].kind, HazardKind::PossibleWrite);
    assert_eq!(report.certain().count(), 0);
    assert_eq!(report.possible().count(), 1);
}

#[test]
fn the_driver_answers_only_outside_the_map_and_never_aliases_a_region() {
    // A pointer past the two blocks, still in the segment: the driver's answer (the segment)
    // overlaps the blocks, so it is not taken.
    let raw = graph(vec![kernel(
        OTHER,
        vec![(0, words(&[SEGMENT + 3 * BLOCK, 5]))],
    )]);
    assert_eq!(accesses(&raw, 0), []);
    // Outside any region, an allocation the driver knows is used.
    let other = |a: u64| {
        (0x7e00_0000_0000..0x7e00_0000_1000)
            .contains(&a)
            .then_some((0x7e00_0000_0000, 0x1000))
    };
    let raw = graph(vec![kernel(
        OTHER,
        vec![(0, words(&[0x7e00_0000_0010, 5]))],
    )]);
    let built = build_with(&raw, "g", &map(), &mut { other });
    let got: Vec<(u64, u64)> = built.graph.nodes[0]
        .accesses
        .iter()
        .map(|a| (a.buffer, a.offset))
        .collect();
    assert_eq!(got, [(0x7e00_0000_0000, 0x10)]);
    // Small words (sizes, strides) are never looked up.
    let mut asked = Vec::new();
    let raw = graph(vec![kernel(OTHER, vec![(0, words(&[0, 1, 4096, 65535]))])]);
    build(&raw, "g", &mut |a| {
        asked.push(a);
        None
    });
    assert_eq!(asked, Vec::<u64>::new());
}
