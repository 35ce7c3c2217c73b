//! CPU tests of the conversion: every copy layout (1-D, 2-D with pitch and x/y offsets, 3-D with
//! z offsets; host, device, unified, array and unknown sides), 1-D and 2-D sets, kernels,
//! child graphs, edges, and the allocation resolver.

use graphsmith_model::{AccessMode, Dim3, KernelArg, KernelParams, MemorySpace, NodeKind};

use super::*;

const A: u64 = 0x7f00_0000_0000;
const A_BYTES: u64 = 1 << 20;
const B: u64 = 0x7f00_1000_0000;
const B_BYTES: u64 = 1 << 20;

fn device(base: u64) -> CopySide {
    CopySide {
        memory_type: MEMORYTYPE_DEVICE,
        device: base,
        ..CopySide::default()
    }
}

fn resolve(address: u64) -> Option<(u64, u64)> {
    [(A, A_BYTES), (B, B_BYTES)]
        .into_iter()
        .find(|&(base, size)| address >= base && address - base < size)
}

fn copy_node(c: &Copy3D) -> RawNode {
    RawNode {
        operands: c.operands(),
        ..RawNode::plain(c.kind())
    }
}

fn set_node(s: &Set2D) -> RawNode {
    RawNode {
        operands: vec![s.operand()],
        ..RawNode::plain(s.kind())
    }
}

/// (buffer, offset, len, mode) of each access of node `i` after [`build`].
fn accesses(raw: &RawGraph, i: usize) -> Vec<(u64, u64, u64, AccessMode)> {
    let built = build(raw, "g", &mut resolve);
    built.graph.nodes[i]
        .accesses
        .iter()
        .map(|a| (a.buffer, a.offset, a.len, a.mode))
        .collect()
}

fn one(node: RawNode) -> RawGraph {
    RawGraph {
        nodes: vec![node],
        edges: vec![],
    }
}

#[test]
fn a_1d_device_to_device_copy_reads_and_writes_its_bytes() {
    let c = Copy3D {
        src: CopySide { x: 64, ..device(A) },
        dst: device(B),
        width: 4096,
        height: 1,
        depth: 1,
    };
    assert_eq!(
        accesses(&one(copy_node(&c)), 0),
        [
            (A, 64, 4096, AccessMode::Read),
            (B, 0, 4096, AccessMode::Write)
        ]
    );
    let NodeKind::Memcpy(m) = c.kind() else {
        panic!("not a copy")
    };
    assert_eq!((m.src.address, m.dst.address, m.bytes), (A + 64, B, 4096));
    assert_eq!(
        (m.src.space, m.dst.space),
        (MemorySpace::Device, MemorySpace::Device)
    );
}

#[test]
fn a_2d_copy_uses_each_sides_pitch_and_x_y_offsets() {
    // 3 rows of 100 bytes, from (x 16, y 2) of a 512-byte-pitch source into (x 8, y 5) of a
    // 256-byte-pitch destination.
    let c = Copy3D {
        src: CopySide {
            x: 16,
            y: 2,
            pitch: 512,
            ..device(A)
        },
        dst: CopySide {
            x: 8,
            y: 5,
            pitch: 256,
            ..device(B)
        },
        width: 100,
        height: 3,
        depth: 1,
    };
    let src_start = 16 + 2 * 512;
    let dst_start = 8 + 5 * 256;
    assert_eq!(
        accesses(&one(copy_node(&c)), 0),
        [
            (A, src_start, 2 * 512 + 100, AccessMode::Read),
            (B, dst_start, 2 * 256 + 100, AccessMode::Write)
        ]
    );
    let NodeKind::Memcpy(m) = c.kind() else {
        panic!("not a copy")
    };
    assert_eq!(m.src.address, A + src_start);
    assert_eq!(m.dst.address, B + dst_start);
    assert_eq!(m.bytes, 300);
}

#[test]
fn a_3d_copy_uses_z_offsets_and_slice_heights() {
    let c = Copy3D {
        src: CopySide {
            x: 4,
            y: 1,
            z: 2,
            pitch: 256,
            height: 8,
            ..device(A)
        },
        dst: CopySide {
            z: 1,
            pitch: 128,
            height: 4,
            ..device(B)
        },
        width: 64,
        height: 3,
        depth: 2,
    };
    let src_start = 4 + 256 + 2 * 256 * 8;
    let dst_start = 128 * 4;
    assert_eq!(
        accesses(&one(copy_node(&c)), 0),
        [
            (A, src_start, 256 * 8 + 2 * 256 + 64, AccessMode::Read),
            (B, dst_start, 128 * 4 + 2 * 128 + 64, AccessMode::Write)
        ]
    );
    let NodeKind::Memcpy(m) = c.kind() else {
        panic!("not a copy")
    };
    assert_eq!(m.bytes, 64 * 3 * 2);
}

#[test]
fn host_array_and_unknown_sides_touch_no_device_memory() {
    let host = CopySide {
        memory_type: MEMORYTYPE_HOST,
        host: 0x5000,
        y: 1,
        pitch: 64,
        ..CopySide::default()
    };
    let array = CopySide {
        memory_type: MEMORYTYPE_ARRAY,
        ..CopySide::default()
    };
    let unknown = CopySide {
        memory_type: 77,
        device: A,
        ..CopySide::default()
    };
    let unified = CopySide {
        memory_type: MEMORYTYPE_UNIFIED,
        device: B,
        ..CopySide::default()
    };
    // Host to device, 2-D.
    let h2d = Copy3D {
        src: host,
        dst: device(A),
        width: 32,
        height: 2,
        depth: 1,
    };
    assert_eq!(
        accesses(&one(copy_node(&h2d)), 0),
        [(A, 0, 32, AccessMode::Write)]
    );
    let NodeKind::Memcpy(m) = h2d.kind() else {
        panic!("not a copy")
    };
    assert_eq!(
        (m.src.space, m.src.address),
        (MemorySpace::Host, 0x5000 + 64)
    );
    // Device to host.
    let d2h = Copy3D {
        src: device(B),
        dst: host,
        width: 32,
        height: 1,
        depth: 1,
    };
    assert_eq!(
        accesses(&one(copy_node(&d2h)), 0),
        [(B, 0, 32, AccessMode::Read)]
    );
    // Array to unified memory; a memory type the driver does not define is no device side.
    let a2u = Copy3D {
        src: array,
        dst: unified,
        width: 16,
        height: 1,
        depth: 1,
    };
    assert_eq!(
        accesses(&one(copy_node(&a2u)), 0),
        [(B, 0, 16, AccessMode::Write)]
    );
    let NodeKind::Memcpy(m) = a2u.kind() else {
        panic!("not a copy")
    };
    assert_eq!(m.src.space, MemorySpace::Array);
    assert_eq!(unknown.space(), MemorySpace::Unknown);
    let odd = Copy3D {
        src: unknown,
        dst: array,
        width: 16,
        height: 1,
        depth: 1,
    };
    assert!(odd.operands().is_empty());
}

#[test]
fn sets_write_one_row_or_rows_a_pitch_apart() {
    let flat = Set2D {
        dst: A + 8,
        pitch: 0,
        value: 0xff,
        element_size: 4,
        width: 100,
        height: 1,
    };
    assert_eq!(
        accesses(&one(set_node(&flat)), 0),
        [(A, 8, 400, AccessMode::Write)]
    );
    let rows = Set2D {
        dst: B,
        pitch: 1024,
        value: 7,
        element_size: 2,
        width: 100,
        height: 3,
    };
    assert_eq!(
        accesses(&one(set_node(&rows)), 0),
        [(B, 0, 2 * 1024 + 200, AccessMode::Write)]
    );
    match rows.kind() {
        NodeKind::Memset(m) => assert_eq!((m.value, m.element_size, m.pitch), (7, 2, 1024)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn absurd_parameters_saturate_instead_of_overflowing() {
    let c = Copy3D {
        src: CopySide {
            x: u64::MAX,
            y: u64::MAX,
            z: u64::MAX,
            pitch: u64::MAX,
            height: u64::MAX,
            ..device(A)
        },
        dst: device(B),
        width: u64::MAX,
        height: u64::MAX,
        depth: u64::MAX,
    };
    let ops = c.operands();
    assert_eq!(ops[0].address, u64::MAX);
    assert_eq!(ops[0].len, u64::MAX);
    let NodeKind::Memcpy(m) = c.kind() else {
        panic!("not a copy")
    };
    assert_eq!(m.bytes, u64::MAX);
    let s = Set2D {
        dst: A,
        pitch: u64::MAX,
        value: 0,
        element_size: 4,
        width: u64::MAX,
        height: 3,
    };
    assert_eq!(s.operand().len, u64::MAX);
}

fn kernel(symbol: &str, ptrs: &[u64]) -> RawNode {
    let args = ptrs
        .iter()
        .enumerate()
        .map(|(i, p)| KernelArg {
            offset: 8 * i as u32,
            bytes: p.to_le_bytes().to_vec(),
        })
        .collect();
    RawNode::plain(NodeKind::Kernel(KernelParams {
        name: symbol.into(),
        grid: Dim3::linear(1),
        block: Dim3::linear(32),
        shared_mem_bytes: 0,
        args,
        cluster: None,
    }))
}

#[test]
fn kernels_touch_allocations_through_pointer_arguments_with_signature_directions() {
    // copy(const float*, float*): the first pointer is read, the second's direction is unknown.
    let raw = one(kernel("_Z4copyPKfPf", &[A + 16, B, 0x1234]));
    assert_eq!(
        accesses(&raw, 0),
        [
            (A, 16, A_BYTES - 16, AccessMode::Read),
            (B, 0, B_BYTES, AccessMode::Unknown)
        ]
    );
    let built = build(&raw, "g", &mut resolve);
    assert_eq!(built.graph.nodes[0].label, "copy");
    assert_eq!(built.stats.kernels, 1);
    assert_eq!(built.sizes.get(&A), Some(&A_BYTES));
}

#[test]
fn child_graphs_nest_up_to_the_limit_and_edges_keep_order_only_when_full() {
    let mut inner = one(set_node(&Set2D {
        dst: A,
        pitch: 0,
        value: 0,
        element_size: 1,
        width: 10,
        height: 1,
    }));
    for _ in 0..MAX_DEPTH + 2 {
        inner = one(RawNode {
            child: Some(inner),
            ..RawNode::plain(NodeKind::Empty)
        });
    }
    let mut raw = inner;
    raw.nodes.push(RawNode::plain(NodeKind::Empty));
    raw.nodes.push(RawNode::plain(NodeKind::Empty));
    raw.edges = vec![
        RawEdge::plain(1, 2),
        RawEdge {
            from: 0,
            to: 2,
            from_port: 1,
            ..RawEdge::default()
        },
        RawEdge::plain(2, 2),
        RawEdge::plain(7, 0),
    ];
    let built = build(&raw, "g", &mut resolve);
    assert_eq!(built.stats.weak_edges, 1);
    assert_eq!(built.graph.edges.len(), 1);
    let mut depth = 0;
    let mut g = &built.graph;
    while let NodeKind::ChildGraph { graph } = &g.nodes[0].kind {
        depth += 1;
        g = graph;
        if g.nodes.is_empty() {
            assert!(g.label.contains("nested too deep"), "{}", g.label);
            break;
        }
    }
    assert_eq!(depth, MAX_DEPTH + 1);
}

#[test]
fn edge_data_becomes_the_model_edge_type() {
    let mut raw = RawGraph::default();
    for _ in 0..6 {
        raw.nodes.push(RawNode::plain(NodeKind::Empty));
    }
    let edge = |from, to, from_port, to_port, ty| RawEdge {
        from,
        to,
        from_port,
        to_port,
        ty,
    };
    raw.edges = vec![
        edge(0, 1, 0, 0, 0), // full
        edge(1, 2, 1, 0, 1), // programmatic, from the programmatic port
        edge(2, 3, 2, 0, 1), // programmatic type, launch-order port
        edge(3, 4, 2, 0, 0), // default type, launch-order port
        edge(4, 5, 1, 0, 0), // default type from the programmatic port: left out
        edge(0, 5, 0, 1, 0), // an incoming port other than 0: left out
    ];
    let mut resolve = |_| None;
    let built = build(&raw, "g", &mut resolve);
    let types: Vec<_> = built
        .graph
        .edges
        .iter()
        .map(|e| (e.from.0, e.to.0, e.ty))
        .collect();
    assert_eq!(
        types,
        [
            (0, 1, EdgeType::Full),
            (1, 2, EdgeType::Programmatic),
            (2, 3, EdgeType::LaunchOrder),
            (3, 4, EdgeType::LaunchOrder),
        ]
    );
    assert_eq!((built.stats.edges, built.stats.weak_edges), (6, 4));
}
