//! `--hazards`: the hazard check on each graph read back at instantiation.
//!
//! Two halves, like the rest of the crate. In the traced process the injection library reads
//! the instantiated `CUgraph` back with driver calls into a [`RawGraph`]
//! (`src/inject/readback/`); the one conversion, `graphsmith_analysis::readback` (shared with the
//! runtime), turns it into a `graphsmith_model::Graph` with memory accesses ([`build()`]); this
//! module runs the model's hazard checker
//! (`Graph::hazards`: pairs of nodes that no path of edges orders and whose accesses to one
//! buffer conflict) and keeps what the report needs ([`check`]), which the library records as
//! an [`crate::event::Event::Hazards`] event.

pub mod bounds;
mod text;

use graphsmith_model::{demangle, AccessMode, Graph, HazardKind, NodeId, NodeKind};
use serde::{Deserialize, Serialize};

pub use bounds::{check_bounded, Bounds, BoundsKind};
/// The one conversion of a read-back graph into the model, shared with the runtime.
pub use graphsmith_analysis::readback::{
    build, Built, Copy3D, CopySide, Operand, RawEdge, RawGraph, RawNode, Set2D,
};
pub use text::render_check;

/// Hazards recorded per graph at most; the rest are counted in [`CheckResult::total`].
pub const MAX_RECORDED: usize = 100;

/// The outcome of the hazard check of one instantiated graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum HazardCheck {
    /// The graph was read back and checked.
    Checked(CheckResult),
    /// It could not be: why (a driver call that failed, a missing driver function, ...).
    NotChecked { reason: String },
}

impl HazardCheck {
    /// Hazards found (0 when not checked).
    pub fn total(&self) -> u64 {
        match self {
            HazardCheck::Checked(c) => c.total,
            HazardCheck::NotChecked { .. } => 0,
        }
    }
}

/// What the check of one graph found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    /// Nodes read back, child graphs' included.
    pub nodes: u64,
    /// Edges read back, child graphs' included.
    pub edges: u64,
    /// Edges not taken as ordering: edges from a kernel's launch-order port, which order only
    /// the start of the dependent kernel (programmatic edges are taken as ordering what the
    /// dependent kernel does after its `cudaGridDependencySynchronize`; see `RawEdge::orders`).
    #[serde(default)]
    pub weak_edges: u64,
    pub kernels: u64,
    /// Kernel nodes whose parameters could not be read: their memory is not checked.
    #[serde(default)]
    pub kernels_unread: u64,
    /// Nodes with at least one memory access the check could resolve, and those accesses.
    pub nodes_with_accesses: u64,
    pub accesses: u64,
    /// Hazards found, possible ones included; `hazards` holds the first [`MAX_RECORDED`].
    pub total: u64,
    /// Of `total`, the possible ones (`HazardKind::is_possible`: a side's direction is
    /// unknown), reported apart from the certain ones.
    #[serde(default)]
    pub possible: u64,
    pub hazards: Vec<HazardRecord>,
    /// What bounded the kernels' pointers (PyTorch's blocks or the driver's allocations);
    /// `None` in logs written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<Bounds>,
}

/// Two nodes that no path of edges orders, with conflicting accesses to one buffer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HazardRecord {
    /// How the accesses conflict (`possible_write` when a side's direction is unknown, as for
    /// any non-`const` pointer argument of a kernel, or a pointer inside a struct parameter
    /// that no rule gives a direction).
    pub kind: HazardKind,
    /// The child-graph nodes leading from the instantiated graph to the graph holding both
    /// nodes (indices at each level); empty when they are in the instantiated graph itself.
    #[serde(default)]
    pub within: Vec<u32>,
    /// The node that comes first in topological order: the fix edge starts here.
    pub first: HazardSide,
    pub second: HazardSide,
    /// The buffer: the base address of the allocation holding the bytes (the tracer knows the
    /// driver's allocations, `cuMemGetAddressRange`: for PyTorch, a caching-allocator segment,
    /// not the block of one tensor).
    pub buffer: u64,
    /// The allocation's size, when the driver knew the allocation.
    pub buffer_bytes: Option<u64>,
    /// The overlapping bytes, from the buffer's base.
    pub offset: u64,
    pub len: u64,
    /// The edge that would order them, as node indices: `first -> second`.
    pub fix: (u32, u32),
    /// The region holding the bytes when the allocator's blocks bounded them (`block
    /// 0x...+SIZE (segment 0x...)`); `None` for a driver allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// One side of a hazard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HazardSide {
    /// The node's index in its graph (`cuGraphGetNodes` order), shown as `nN`.
    pub node: u32,
    /// `kernel`, `memcpy`, `memset`, `child_graph`, ...
    pub kind: String,
    /// A short name: the kernel's name without parameters, else the kind and index.
    pub label: String,
    /// For a kernel: its demangled C++ signature, or its symbol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// How it touches the overlapping bytes.
    pub mode: AccessMode,
}

/// The graph reached from `root` by following the child-graph nodes of `path`.
fn graph_at<'a>(root: &'a Graph, path: &[NodeId]) -> Option<&'a Graph> {
    let mut g = root;
    for id in path {
        match &g.node(*id)?.kind {
            NodeKind::ChildGraph { graph } => g = graph,
            _ => return None,
        }
    }
    Some(g)
}

fn side(graph: Option<&Graph>, id: NodeId, label: &str, mode: AccessMode) -> HazardSide {
    let node = graph.and_then(|g| g.node(id));
    let kernel = node.and_then(|n| match &n.kind {
        NodeKind::Kernel(k) if !k.name.is_empty() => {
            Some(demangle(&k.name).unwrap_or_else(|| k.name.clone()))
        }
        _ => None,
    });
    HazardSide {
        node: id.0,
        kind: node.map_or("?", |n| n.kind.name()).to_string(),
        label: label.to_string(),
        kernel,
        mode,
    }
}

/// Checks a built model: the hazards with what the report shows of them, and the counts.
pub fn check_built(built: &Built) -> HazardCheck {
    let report = match built.graph.hazards() {
        Ok(r) => r,
        Err(e) => {
            return HazardCheck::NotChecked {
                reason: format!("the graph read back is not a DAG: {e}"),
            }
        }
    };
    let s = &built.stats;
    let hazards = report
        .hazards
        .iter()
        .take(MAX_RECORDED)
        .map(|h| {
            let g = graph_at(&built.graph, &h.path);
            HazardRecord {
                kind: h.kind,
                within: h.path.iter().map(|id| id.0).collect(),
                first: side(g, h.first.id, &h.first.label, h.first.mode),
                second: side(g, h.second.id, &h.second.label, h.second.mode),
                buffer: h.buffer,
                buffer_bytes: built.sizes.get(&h.buffer).copied(),
                offset: h.offset,
                len: h.len,
                fix: (h.fix.from.0, h.fix.to.0),
                region: (!h.buffer_label.is_empty() && !h.buffer_label.starts_with("0x"))
                    .then(|| h.buffer_label.clone()),
            }
        })
        .collect();
    HazardCheck::Checked(CheckResult {
        nodes: s.nodes,
        edges: s.edges,
        weak_edges: s.weak_edges,
        kernels: s.kernels,
        kernels_unread: s.kernels_unread,
        nodes_with_accesses: report.nodes_with_accesses as u64,
        accesses: report.accesses as u64,
        total: report.hazards.len() as u64,
        possible: report.possible().count() as u64,
        hazards,
        bounds: None,
    })
}

/// Builds the model of a read-back graph and checks it. `resolve(address)` gives the
/// allocation holding an address as (base, size).
pub fn check(raw: &RawGraph, resolve: &mut dyn FnMut(u64) -> Option<(u64, u64)>) -> HazardCheck {
    check_built(&build(raw, "instantiated", resolve))
}

/// Base addresses and sizes of allocations, for tests and fixtures: resolves an address that
/// lies in one of them.
pub fn resolver(allocations: &[(u64, u64)]) -> impl FnMut(u64) -> Option<(u64, u64)> + '_ {
    move |address| {
        allocations
            .iter()
            .copied()
            .find(|&(base, size)| base <= address && address - base < size)
    }
}

#[cfg(test)]
mod tests;
