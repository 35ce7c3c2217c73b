//! The pure half of `--hazards`: read-back data to model to hazards, without a GPU.

use graphsmith_model::{AccessMode, Dim3, HazardKind, KernelArg, KernelParams, NodeKind};

use super::*;

const BUF: u64 = 0x7f00_0000_0000;
const BUF_BYTES: u64 = 262_144;
const OTHER: u64 = 0x7f00_1000_0000;

/// An argument: a pointer (8 bytes) or an `int` (4 bytes).
pub(super) enum Arg {
    Ptr(u64),
    Int(i32),
}

pub(super) fn kernel(symbol: &str, args: &[Arg]) -> RawNode {
    let mut offset = 0;
    let args = args
        .iter()
        .map(|a| {
            let bytes = match a {
                Arg::Ptr(p) => p.to_le_bytes().to_vec(),
                Arg::Int(i) => i.to_le_bytes().to_vec(),
            };
            let arg = KernelArg { offset, bytes };
            offset += 8;
            arg
        })
        .collect();
    RawNode::plain(NodeKind::Kernel(KernelParams {
        name: symbol.to_string(),
        grid: Dim3::linear(256),
        block: Dim3::linear(256),
        shared_mem_bytes: 0,
        args,
        cluster: None,
    }))
}

/// `inc(float*, int)` and `scale(float*, int)`: both may write through their pointer.
fn inc(p: u64) -> RawNode {
    kernel("_Z3incPfi", &[Arg::Ptr(p), Arg::Int(65536)])
}
fn scale(p: u64) -> RawNode {
    kernel("_Z5scalePfi", &[Arg::Ptr(p), Arg::Int(65536)])
}
/// `sum(float const*, float*, int)`: reads the first pointer.
fn sum(src: u64, dst: u64) -> RawNode {
    kernel("_Z3sumPKfPfi", &[Arg::Ptr(src), Arg::Ptr(dst), Arg::Int(1)])
}

fn allocations() -> Vec<(u64, u64)> {
    vec![(BUF, BUF_BYTES), (OTHER, 4096)]
}

fn run(raw: &RawGraph) -> CheckResult {
    let allocs = allocations();
    let result = check(raw, &mut resolver(&allocs));
    match result {
        HazardCheck::Checked(c) => c,
        other => panic!("not checked: {other:?}"),
    }
}

/// The planted race of the GPU suite: a fork, `inc` on one branch and `scale` on the other,
/// both writing the buffer, then a join.
fn forked_race(joined_by_edge: bool) -> RawGraph {
    let mut edges = vec![
        RawEdge::plain(0, 1),
        RawEdge::plain(0, 2),
        RawEdge::plain(1, 3),
        RawEdge::plain(2, 3),
    ];
    if joined_by_edge {
        edges.push(RawEdge::plain(1, 2));
    }
    RawGraph {
        nodes: vec![inc(BUF), inc(BUF), scale(BUF), inc(BUF)],
        edges,
    }
}

#[test]
fn two_kernels_writing_one_buffer_on_forked_branches_race() {
    let c = run(&forked_race(false));
    assert_eq!((c.nodes, c.edges, c.kernels), (4, 4, 4));
    assert_eq!((c.nodes_with_accesses, c.accesses), (4, 4));
    assert_eq!(c.total, 1);
    let h = &c.hazards[0];
    assert_eq!(
        h.kind,
        HazardKind::PossibleWrite,
        "non-const pointers: direction unknown"
    );
    assert_eq!(
        (h.first.label.as_str(), h.second.label.as_str()),
        ("inc", "scale")
    );
    assert_eq!((h.first.node, h.second.node), (1, 2));
    assert_eq!(h.first.kernel.as_deref(), Some("inc(float*, int)"));
    assert_eq!(h.second.kernel.as_deref(), Some("scale(float*, int)"));
    assert_eq!(h.first.kind, "kernel");
    assert_eq!(h.first.mode, AccessMode::Unknown);
    assert_eq!((h.buffer, h.buffer_bytes), (BUF, Some(BUF_BYTES)));
    assert_eq!((h.offset, h.len), (0, BUF_BYTES));
    assert_eq!(h.fix, (1, 2));
    assert!(h.within.is_empty());
}

#[test]
fn an_edge_between_the_branches_orders_them() {
    let c = run(&forked_race(true));
    assert_eq!(c.total, 0);
    assert!(c.hazards.is_empty());
}

#[test]
fn a_programmatic_edge_orders_after_the_wait_and_a_launch_order_edge_does_not() {
    // Programmatic type from the programmatic port: the dependent kernel's
    // cudaGridDependencySynchronize returns once the primary has finished, so it orders.
    let mut raw = RawGraph {
        nodes: vec![inc(BUF), scale(BUF)],
        edges: vec![RawEdge {
            from: 0,
            to: 1,
            from_port: 1,
            to_port: 0,
            ty: 1,
        }],
    };
    let c = run(&raw);
    assert_eq!((c.edges, c.weak_edges, c.total), (1, 0, 0));
    // From the launch-order port: only the start is ordered, the memory is not.
    raw.edges[0].from_port = 2;
    let c = run(&raw);
    assert_eq!((c.edges, c.weak_edges, c.total), (1, 1, 1));
    raw.edges[0] = RawEdge::plain(0, 1);
    let c = run(&raw);
    assert_eq!((c.weak_edges, c.total), (0, 0));
}

#[test]
fn const_pointers_only_read() {
    // Two readers of BUF, unordered: no hazard. Their writes go to distinct allocations.
    let raw = RawGraph {
        nodes: vec![sum(BUF, OTHER), sum(BUF + 1024, OTHER + 2048)],
        edges: vec![],
    };
    let c = run(&raw);
    // The second pair still races on OTHER: [2048, 4096) is inside the first's [0, 4096).
    assert_eq!(c.total, 1);
    assert_eq!(c.hazards[0].buffer, OTHER);
    assert_eq!((c.hazards[0].offset, c.hazards[0].len), (2048, 2048));
    assert_eq!(
        c.hazards[0].first.kernel.as_deref(),
        Some("sum(float const*, float*, int)")
    );
}

#[test]
fn a_set_then_an_unordered_reader_is_read_after_write() {
    let set = Set2D {
        dst: BUF + 256,
        pitch: 0,
        value: 0,
        element_size: 4,
        width: 64,
        height: 1,
    };
    let raw = RawGraph {
        nodes: vec![
            RawNode {
                kind: set.kind(),
                operands: vec![set.operand()],
                child: None,
                args_unread: false,
            },
            sum(BUF, OTHER),
        ],
        edges: vec![],
    };
    let c = run(&raw);
    assert_eq!(c.total, 1);
    let h = &c.hazards[0];
    assert_eq!(h.kind, HazardKind::ReadAfterWrite);
    assert_eq!(
        (h.first.kind.as_str(), h.first.mode),
        ("memset", AccessMode::Write)
    );
    assert_eq!(h.first.kernel, None);
    assert_eq!(h.second.mode, AccessMode::Read);
    assert_eq!((h.offset, h.len), (256, 256), "the set's 64 floats");
}

#[test]
fn copy_and_set_extents() {
    let copy = Copy3D {
        src: CopySide {
            memory_type: 2,
            device: BUF,
            x: 16,
            ..CopySide::default()
        },
        dst: CopySide {
            memory_type: 1,
            host: 0x5000,
            ..CopySide::default()
        },
        width: 100,
        height: 1,
        depth: 1,
    };
    assert_eq!(
        copy.operands(),
        vec![Operand {
            address: BUF + 16,
            len: 100,
            mode: AccessMode::Read
        }],
        "the host side touches no device allocation"
    );
    let pitched = Copy3D {
        src: CopySide {
            memory_type: 4,
            device: BUF,
            y: 2,
            pitch: 512,
            height: 8,
            ..CopySide::default()
        },
        dst: CopySide {
            memory_type: 2,
            device: OTHER,
            pitch: 256,
            height: 4,
            ..CopySide::default()
        },
        width: 128,
        height: 3,
        depth: 2,
    };
    let ops = pitched.operands();
    // src: starts 2 rows in; one full slice (512 * 8), two more rows, one row's width.
    assert_eq!(ops[0].address, BUF + 1024);
    assert_eq!(ops[0].len, 512 * 8 + 2 * 512 + 128);
    assert_eq!(
        (ops[1].address, ops[1].len),
        (OTHER, 256 * 4 + 2 * 256 + 128)
    );
    assert_eq!(ops[1].mode, AccessMode::Write);
    let set = Set2D {
        dst: BUF,
        pitch: 1024,
        value: 7,
        element_size: 2,
        width: 100,
        height: 3,
    };
    assert_eq!(set.operand().len, 2 * 1024 + 200);
    match set.kind() {
        NodeKind::Memset(m) => assert_eq!((m.value, m.element_size), (7, 2)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_child_graph_is_checked_inside_and_against_its_siblings() {
    // Inside the child: two unordered writers of OTHER. Beside it: `scale` writes BUF, which
    // the child's first node also writes.
    let child = RawGraph {
        nodes: vec![inc(BUF), inc(OTHER), scale(OTHER)],
        edges: vec![RawEdge::plain(0, 1), RawEdge::plain(0, 2)],
    };
    let raw = RawGraph {
        nodes: vec![
            RawNode {
                child: Some(child),
                ..RawNode::plain(NodeKind::Empty)
            },
            scale(BUF),
        ],
        edges: vec![],
    };
    let c = run(&raw);
    assert_eq!((c.nodes, c.kernels), (5, 4));
    assert_eq!(c.total, 2);
    let outer = c.hazards.iter().find(|h| h.within.is_empty()).unwrap();
    assert_eq!(outer.first.kind, "child_graph");
    assert_eq!(outer.second.label, "scale");
    assert_eq!(outer.buffer, BUF);
    let inner = c.hazards.iter().find(|h| h.within == [0]).unwrap();
    assert_eq!((inner.first.node, inner.second.node), (1, 2));
    assert_eq!(inner.second.kernel.as_deref(), Some("scale(float*, int)"));
    assert_eq!(inner.buffer, OTHER);
}

#[test]
fn only_pointer_arguments_into_known_allocations_count() {
    let mut asked = Vec::new();
    let allocs = allocations();
    let mut find = resolver(&allocs);
    let mut resolve = |a: u64| {
        asked.push(a);
        find(a)
    };
    let raw = RawGraph {
        nodes: vec![
            // An extern "C" kernel: no signature, so an unknown direction.
            kernel(
                "gs_axpy",
                &[Arg::Ptr(BUF), Arg::Ptr(0x1234), Arg::Ptr(0), Arg::Int(5)],
            ),
            kernel("gs_axpy", &[Arg::Ptr(BUF), Arg::Ptr(0x1234)]),
            RawNode {
                args_unread: true,
                ..kernel("gs_opaque", &[])
            },
        ],
        edges: vec![RawEdge::plain(0, 1)],
    };
    let built = build(&raw, "g", &mut resolve);
    assert_eq!(
        built.graph.nodes[0].accesses.len(),
        1,
        "0x1234 is in no allocation"
    );
    assert_eq!(built.graph.nodes[0].accesses[0].mode, AccessMode::Unknown);
    assert_eq!(built.graph.nodes[0].label, "gs_axpy");
    assert_eq!(built.stats.kernels_unread, 1);
    // Each address is asked about once; 0, words below 64 KiB (sizes, strides: no device
    // allocation lies there) and 4-byte arguments never.
    assert_eq!(asked, vec![BUF]);
    match check_built(&built) {
        HazardCheck::Checked(c) => assert_eq!((c.total, c.kernels_unread), (0, 1)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_answer_that_does_not_hold_the_address_is_ignored() {
    let raw = RawGraph {
        nodes: vec![inc(BUF + 64), scale(BUF + 64)],
        edges: vec![],
    };
    let mut wrong = |_: u64| Some((BUF + 128, 16));
    let built = build(&raw, "g", &mut wrong);
    assert!(built.graph.nodes.iter().all(|n| n.accesses.is_empty()));
}

#[test]
fn bad_edges_are_dropped_and_the_result_round_trips_through_json() {
    let mut raw = forked_race(false);
    raw.edges.push(RawEdge::plain(3, 3));
    raw.edges.push(RawEdge::plain(0, 99));
    let allocs = allocations();
    let c = check(&raw, &mut resolver(&allocs));
    assert_eq!(c.total(), 1);
    let text = serde_json::to_string(&c).unwrap();
    assert!(text.contains(r#""state":"checked""#), "{text}");
    assert!(text.contains(r#""kind":"possible_write""#), "{text}");
    let back: HazardCheck = serde_json::from_str(&text).unwrap();
    assert_eq!(back, c);
}

#[test]
fn the_text_names_both_nodes_the_buffer_and_the_fix() {
    let allocs = allocations();
    let c = check(&forked_race(false), &mut resolver(&allocs));
    let mut out = String::new();
    render_check(&mut out, &c, "    ");
    let expected = format!(
        "    warning: 1 possible hazard: nodes that no path of edges orders touch the same bytes through a pointer of unknown direction, which may write (4 nodes, 4 edges; 4 nodes with 4 memory accesses checked)
      hazard 1: possible write on allocation {BUF:#x} (262144 bytes), bytes [0, 262144)
        n1 kernel inc(float*, int) may read or write
        n2 kernel scale(float*, int) may read or write
        no path of edges orders them; fix: add the edge n1 -> n2 ('inc' -> 'scale')
"
    );
    assert_eq!(out, expected);
    let clean = check(&forked_race(true), &mut resolver(&allocs));
    let mut out = String::new();
    render_check(&mut out, &clean, "");
    assert_eq!(
        out,
        "hazards: none (4 nodes, 5 edges; 4 nodes with 4 memory accesses checked)\n"
    );
    let mut out = String::new();
    render_check(
        &mut out,
        &HazardCheck::NotChecked {
            reason: "cuGraphGetEdges_v2 returned 1".into(),
        },
        "",
    );
    assert_eq!(out, "hazards: not checked: cuGraphGetEdges_v2 returned 1\n");
}

/// `at::native::vectorized_elementwise_kernel<4, F, std::array<char*, 2>>(int, F,
/// std::array<char*, 2>)`, its array `{out, in}` one 16-byte struct parameter.
fn elementwise(out: u64, input: u64) -> RawNode {
    const SYMBOL: &str = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_21CUDAFunctorOnSelf_addIfEESt5arrayIPcLm2EEEEviT0_T1_";
    let mut node = kernel(SYMBOL, &[Arg::Int(1024), Arg::Int(0)]);
    if let NodeKind::Kernel(k) = &mut node.kind {
        let bytes = [out, input].iter().flat_map(|p| p.to_le_bytes()).collect();
        k.args.push(KernelArg { offset: 16, bytes });
    }
    node
}

#[test]
fn certain_and_possible_hazards_are_reported_apart() {
    // n0 (elementwise, in place) writes OTHER, n1 (elementwise) reads it: certain. n1 writes
    // BUF, n2 (`inc`, a non-const pointer: unknown direction) touches it: possible.
    let raw = RawGraph {
        nodes: vec![elementwise(OTHER, OTHER), elementwise(BUF, OTHER), inc(BUF)],
        edges: vec![],
    };
    let c = run(&raw);
    assert_eq!((c.total, c.possible), (2, 1), "{c:?}");
    let mut out = String::new();
    render_check(&mut out, &HazardCheck::Checked(c), "");
    const K: &str = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, (unsigned long)2> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, (unsigned long)2>)";
    const E: &str = "at::native::vectorized_elementwise_kernel";
    let expected = format!(
        "warning: 1 hazard: nodes that no path of edges orders touch the same bytes, and one of them writes (3 nodes, 0 edges; 3 nodes with 5 memory accesses checked)
  hazard 1: read-after-write on allocation {OTHER:#x} (4096 bytes), bytes [0, 4096)
    n0 kernel {K} writes
    n1 kernel {K} reads
    no path of edges orders them; fix: add the edge n0 -> n1 ('{E}' -> '{E}')
warning: 1 possible hazard: nodes that no path of edges orders touch the same bytes through a pointer of unknown direction, which may write (3 nodes, 0 edges; 3 nodes with 5 memory accesses checked)
  hazard 2: possible write on allocation {BUF:#x} (262144 bytes), bytes [0, 262144)
    n1 kernel {K} writes
    n2 kernel inc(float*, int) may read or write
    no path of edges orders them; fix: add the edge n1 -> n2 ('{E}' -> 'inc')
"
    );
    assert_eq!(out, expected);
}
