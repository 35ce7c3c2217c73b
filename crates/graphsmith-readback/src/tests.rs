//! The whole reader over a fake driver ([`fake`]): what each node kind reads into, the order of
//! the calls, the strict and lenient policies, the cap on parameter bytes, both forms of kernel
//! arguments, edges read into growing arrays, and the limits.

mod fake;
mod kernels;
mod kinds;
mod limits;

use std::ffi::CString;

use cudarc::driver::sys;
use graphsmith_analysis::{Copy3D, CopySide, RawEdge, RawGraph, RawNode, Set2D};
use graphsmith_model::{Dim3, KernelArg, KernelParams, NodeKind};

use crate::{DriverTable, Limits, Policy, Read, ReadError, Reader};
use fake::{Args, Fake, Function, Graph, Kernel, Node};

const TOP: usize = 0x1000;
const CHILD: usize = 0x2000;
const FUNC: usize = 0x3000;
const LIBRARY_FUNC: usize = 0x3100;
const KERN: usize = 0x4000;

fn read(table: &DriverTable, policy: Policy) -> Result<Read, ReadError> {
    read_limited(table, policy, Limits::GENEROUS)
}

fn read_limited(table: &DriverTable, policy: Policy, limits: Limits) -> Result<Read, ReadError> {
    // SAFETY: the table holds the fake driver's functions, each with its type's signature;
    // TOP is a graph of the fake installed on this thread.
    unsafe { Reader::new(table, policy, limits).read(TOP as sys::CUgraph) }
}

fn a_copy() -> Copy3D {
    let side = |device, x, y, z, pitch, height| CopySide {
        memory_type: 2,
        device,
        host: 0,
        x,
        y,
        z,
        pitch,
        height,
    };
    Copy3D {
        src: side(0xa000, 16, 1, 0, 256, 4),
        dst: side(0xb000, 32, 2, 1, 512, 8),
        width: 64,
        height: 2,
        depth: 1,
    }
}

fn a_set() -> Set2D {
    Set2D {
        dst: 0xc000,
        pitch: 128,
        value: 7,
        element_size: 4,
        width: 8,
        height: 3,
    }
}

fn kernel(func: usize, kern: usize, args: Args) -> Node {
    Node::Kernel(Kernel {
        func,
        kern,
        grid: [4, 2, 1],
        block: [128, 1, 1],
        shared: 1024,
        args,
    })
}

/// A pointer parameter and a 16-byte struct holding another pointer.
fn two_params() -> (Vec<(usize, usize)>, Vec<Vec<u8>>) {
    let pointer = 0xa000u64.to_le_bytes().to_vec();
    let mut pair = 0xb000u64.to_le_bytes().to_vec();
    pair.extend(5u64.to_le_bytes());
    (vec![(0, 8), (8, 16)], vec![pointer, pair])
}

fn function(name: &str, layout: Vec<(usize, usize)>, cluster: [i32; 3]) -> Function {
    Function {
        name: Some(CString::new(name).unwrap()),
        layout,
        cluster,
    }
}

/// A graph of every node kind (nodes 1..=13) with a child graph holding a library kernel, and
/// three edges, one programmatic with ports.
fn every_kind() -> Fake {
    let (layout, bytes) = two_params();
    let mut fake = Fake::default();
    let args = Args::Params(bytes.into_iter().map(Some).collect());
    fake.nodes.insert(1, kernel(FUNC, 0, args));
    fake.nodes.insert(2, Node::Copy(a_copy()));
    fake.nodes.insert(3, Node::Set(a_set()));
    fake.nodes.insert(4, Node::Host);
    fake.nodes.insert(5, Node::Child(CHILD));
    fake.nodes.insert(6, Node::Empty);
    fake.nodes.insert(7, Node::EventWait(0xe1));
    fake.nodes.insert(8, Node::EventRecord(0xe2));
    fake.nodes.insert(9, Node::Alloc(0xd000, 4096));
    fake.nodes.insert(10, Node::Free(0xd000));
    fake.nodes.insert(11, Node::Other(13));
    fake.nodes.insert(12, Node::Other(12));
    fake.nodes.insert(13, Node::Other(99));
    fake.nodes
        .insert(20, kernel(0, KERN, Args::Params(Vec::new())));
    fake.graphs.insert(
        TOP,
        Graph {
            nodes: (1..=13).collect(),
            edges: vec![(1, 2, 0, 0, 0), (2, 3, 1, 0, 1), (3, 99, 0, 0, 0)],
        },
    );
    fake.graphs.insert(
        CHILD,
        Graph {
            nodes: vec![20],
            edges: Vec::new(),
        },
    );
    fake.functions
        .insert(FUNC, function("step", layout, [2, 0, 0]));
    fake.functions
        .insert(LIBRARY_FUNC, function("inner", Vec::new(), [0, 0, 0]));
    fake.library_kernels.insert(KERN, LIBRARY_FUNC);
    fake
}

fn kernel_params(name: &str, args: Vec<KernelArg>, cluster: Option<Dim3>) -> KernelParams {
    KernelParams {
        name: name.into(),
        grid: Dim3::new(4, 2, 1),
        block: Dim3::new(128, 1, 1),
        shared_mem_bytes: 1024,
        args,
        cluster,
    }
}

fn the_two_args() -> Vec<KernelArg> {
    let (layout, bytes) = two_params();
    layout
        .iter()
        .zip(bytes)
        .map(|(&(offset, _), bytes)| KernelArg {
            offset: offset as u32,
            bytes,
        })
        .collect()
}

fn other(name: &str) -> RawNode {
    RawNode::plain(NodeKind::Other { name: name.into() })
}

fn child_graph() -> RawNode {
    RawNode {
        child: Some(RawGraph {
            nodes: vec![RawNode::plain(NodeKind::Kernel(kernel_params(
                "inner",
                Vec::new(),
                None,
            )))],
            edges: Vec::new(),
        }),
        ..RawNode::plain(NodeKind::Empty)
    }
}

fn copy_node() -> RawNode {
    RawNode {
        operands: a_copy().operands(),
        ..RawNode::plain(a_copy().kind())
    }
}

fn set_node() -> RawNode {
    RawNode {
        operands: vec![a_set().operand()],
        ..RawNode::plain(a_set().kind())
    }
}

fn edges() -> Vec<RawEdge> {
    vec![
        RawEdge::plain(0, 1),
        RawEdge {
            from: 1,
            to: 2,
            from_port: 1,
            to_port: 0,
            ty: 1,
        },
    ]
}
