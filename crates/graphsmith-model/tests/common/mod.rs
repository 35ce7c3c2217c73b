//! Builders shared by the integration tests.
#![allow(dead_code)]

use graphsmith_model::{
    Access, AccessMode, ConditionalKind, Dim3, Edge, Graph, KernelArg, KernelParams, MemRef,
    MemcpyParams, MemorySpace, MemsetParams, NodeId, NodeKind, Provenance,
};

/// A kernel node kind with a 1-D launch and no arguments.
pub fn kernel(name: &str) -> NodeKind {
    NodeKind::Kernel(KernelParams {
        name: name.to_string(),
        grid: Dim3::linear(4),
        block: Dim3::linear(128),
        shared_mem_bytes: 0,
        args: vec![],
        cluster: None,
    })
}

/// A graph of `n` empty nodes labelled `a`, `b`, ... (then `n26`, ...) with the given edges.
pub fn graph(label: &str, n: usize, edges: &[(u32, u32)]) -> Graph {
    let mut g = Graph::new(label);
    for i in 0..n {
        let name = if i < 26 {
            ((b'a' + i as u8) as char).to_string()
        } else {
            format!("n{i}")
        };
        g.add_node(name, NodeKind::Empty);
    }
    for &(from, to) in edges {
        g.add_edge(NodeId(from), NodeId(to)).expect("test edge");
    }
    g
}

/// Ids from plain numbers.
pub fn ids(raw: &[u32]) -> Vec<NodeId> {
    raw.iter().copied().map(NodeId).collect()
}

/// An edge from plain numbers.
pub fn edge(from: u32, to: u32) -> Edge {
    Edge::full(NodeId(from), NodeId(to))
}

/// A graph with every node kind, a nested child graph (two levels), provenance with ranges and
/// thread, accesses of every mode, and kernel argument bytes.
pub fn every_kind() -> Graph {
    let mut inner = Graph::new("inner");
    let i0 = inner.add_node("inner-set", memset());
    let i1 = inner.add_node("", NodeKind::Empty);
    inner.add_edge(i0, i1).expect("edge");

    let mut middle = Graph::new("middle");
    let m0 = middle.add_node("", kernel("mid"));
    let m1 = middle.add_node(
        "nested",
        NodeKind::ChildGraph {
            graph: Box::new(inner),
        },
    );
    middle.add_edge(m0, m1).expect("edge");

    let mut g = Graph::new("every-kind");
    let provenance = Provenance {
        file: "src/model.rs".to_string(),
        line: 42,
        column: 7,
        ranges: vec!["decode".to_string(), "layer 3".to_string()],
        thread: Some("worker-1".to_string()),
    };
    let accesses = vec![
        access(AccessMode::Read, 0),
        access(AccessMode::Write, 64),
        access(AccessMode::ReadWrite, 128),
        access(AccessMode::Unknown, 192),
    ];
    let k = g.add_node_with(
        "attention",
        NodeKind::Kernel(KernelParams {
            name: "_Z9attn_fwdPfS_i".to_string(),
            grid: Dim3::new(4, 2, 1),
            block: Dim3::new(128, 1, 1),
            shared_mem_bytes: 49152,
            args: vec![
                KernelArg {
                    offset: 0,
                    bytes: vec![0x00, 0x10, 0x20, 0x30, 0xde, 0xad, 0xbe, 0xef],
                },
                KernelArg {
                    offset: 8,
                    bytes: vec![],
                },
                KernelArg {
                    offset: 16,
                    bytes: vec![0xff, 0x7f, 0x80, 0x01],
                },
            ],
            cluster: Some(Dim3::new(2, 1, 1)),
        }),
        Some(provenance),
        accesses,
    );
    let ids = [
        k,
        g.add_node("upload", memcpy(MemorySpace::Host, MemorySpace::Device)),
        g.add_node("zero", memset()),
        g.add_node(
            "callback",
            NodeKind::Host {
                name: "log_step".to_string(),
            },
        ),
        g.add_node(
            "rec",
            NodeKind::EventRecord {
                event: "done".to_string(),
            },
        ),
        g.add_node(
            "wait",
            NodeKind::EventWait {
                event: "ready".to_string(),
            },
        ),
        g.add_node("", NodeKind::Empty),
        g.add_node(
            "sub",
            NodeKind::ChildGraph {
                graph: Box::new(middle),
            },
        ),
        g.add_node(
            "alloc",
            NodeKind::MemAlloc {
                address: u64::MAX - 1,
                bytes: 1 << 40,
            },
        ),
        g.add_node("free", NodeKind::MemFree { address: u64::MAX }),
        g.add_node(
            "if",
            NodeKind::Conditional {
                conditional: ConditionalKind::If,
                bodies: 1,
                body_graphs: vec![],
            },
        ),
        g.add_node(
            "while",
            NodeKind::Conditional {
                conditional: ConditionalKind::While,
                bodies: 1,
                body_graphs: vec![],
            },
        ),
        g.add_node(
            "switch",
            NodeKind::Conditional {
                conditional: ConditionalKind::Switch,
                bodies: 3,
                body_graphs: vec![],
            },
        ),
        g.add_node(
            "batch",
            NodeKind::Other {
                name: "batch_mem_op".to_string(),
            },
        ),
        g.add_node("arrays", memcpy(MemorySpace::Array, MemorySpace::Unknown)),
    ];
    for pair in ids.windows(2) {
        g.add_edge(pair[0], pair[1]).expect("edge");
    }
    g.add_edge(ids[0], ids[5]).expect("edge");
    g
}

fn access(mode: AccessMode, offset: u64) -> Access {
    Access {
        buffer: 0x7f00_0000_0000,
        label: format!("buf-{offset}"),
        offset,
        len: 64,
        mode,
    }
}

fn memcpy(src: MemorySpace, dst: MemorySpace) -> NodeKind {
    NodeKind::Memcpy(MemcpyParams {
        src: MemRef {
            space: src,
            address: 0x1000,
        },
        dst: MemRef {
            space: dst,
            address: 0x2000,
        },
        bytes: 4096,
    })
}

fn memset() -> NodeKind {
    NodeKind::Memset(MemsetParams {
        dst: 0x3000,
        element_size: 4,
        value: 0xdeadbeef,
        width: 256,
        height: 2,
        pitch: 1024,
    })
}
