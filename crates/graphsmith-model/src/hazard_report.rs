//! What the hazard check reports and how it is asked: [`HazardKind`], [`Hazard`] and its two
//! [`HazardNode`]s, [`HazardReport`] and [`HazardOptions`]. The check itself is in `hazards.rs`
//! (the sweep) and `unknown_memory.rs` (kernels whose memory is not known); both build these.

use serde::{Deserialize, Serialize};

use crate::dot::DotOptions;
use crate::graph::Edge;
use crate::node::{AccessMode, NodeId};

/// How two unordered accesses conflict, named for the order the fix edge imposes: the second
/// node's access happens after the first node's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HazardKind {
    /// Both nodes write the bytes: which value survives depends on timing.
    WriteAfterWrite,
    /// The first node writes, the second reads: the reader may see the old bytes.
    ReadAfterWrite,
    /// The first node reads, the second writes: the reader may see the new bytes.
    WriteAfterRead,
    /// One side's direction is unknown (a pointer argument of a kernel without a signature, a
    /// pointer found inside a struct parameter that no rule gives a direction), so it may
    /// write: a *possible* hazard ([`HazardKind::is_possible`]), reported apart from certain
    /// ones so that it is never dropped, to be confirmed by a person. A pair with any certain
    /// conflict on the buffer takes the certain kind instead.
    PossibleWrite,
    /// One side is a kernel whose memory is not known (read from a dump, which holds no kernel
    /// arguments), the other a node with known accesses (a copy or a set): the kernel may touch
    /// those bytes. Only with [`HazardOptions::unknown_kernel_memory`]; a person confirms it.
    PossibleKernelAccess,
}

impl HazardKind {
    /// Whether the hazard is only *possible*: [`HazardKind::PossibleWrite`] (a side's direction
    /// is unknown) or [`HazardKind::PossibleKernelAccess`] (a kernel's memory is unknown). The
    /// others are certain: both sides' directions and bytes are known.
    pub fn is_possible(self) -> bool {
        matches!(
            self,
            HazardKind::PossibleWrite | HazardKind::PossibleKernelAccess
        )
    }

    /// The kind of the conflict between an access of the first node and one of the second;
    /// `None` when both only read.
    pub fn of(first: AccessMode, second: AccessMode) -> Option<HazardKind> {
        if first == AccessMode::Unknown || second == AccessMode::Unknown {
            return Some(HazardKind::PossibleWrite);
        }
        match (first.may_write(), second.may_write()) {
            (true, true) => Some(HazardKind::WriteAfterWrite),
            (true, false) => Some(HazardKind::ReadAfterWrite),
            (false, true) => Some(HazardKind::WriteAfterRead),
            (false, false) => None,
        }
    }
}

impl std::fmt::Display for HazardKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HazardKind::WriteAfterWrite => "write-after-write",
            HazardKind::ReadAfterWrite => "read-after-write",
            HazardKind::WriteAfterRead => "write-after-read",
            HazardKind::PossibleWrite => "possible write",
            HazardKind::PossibleKernelAccess => "possible (kernel memory unknown)",
        })
    }
}

/// One side of a hazard: a node and how it touches the racing bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HazardNode {
    /// The node.
    pub id: NodeId,
    /// Its label.
    pub label: String,
    /// How it touches the overlapping bytes (the union of its conflicting accesses: a node that
    /// both reads and writes them shows `ReadWrite`).
    pub mode: AccessMode,
}

/// Two nodes that no path orders, with conflicting accesses to one buffer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hazard {
    /// How the accesses conflict (the most certain kind among the conflicting access pairs:
    /// write-after-write, then read-after-write, then write-after-read, then possible write).
    pub kind: HazardKind,
    /// The child-graph and conditional nodes that lead from the analysed graph to the graph
    /// holding both nodes (for a conditional, [`Hazard::graph`] names the body); empty when they
    /// are in the analysed graph itself.
    pub path: Vec<NodeId>,
    /// Where the nodes are, e.g. `graph 'step'`, `graph 'step' > node 'body' (n3) > graph
    /// 'inner'` or `graph 'step' > node 'loop' (n2) > body 0 graph 'decode'`.
    pub graph: String,
    /// The node that comes first in topological order: the fix edge starts here.
    pub first: HazardNode,
    /// The other node: the fix edge ends here.
    pub second: HazardNode,
    /// The buffer's identity (its base address).
    pub buffer: u64,
    /// The buffer's label, or its address in hex when no access names it.
    pub buffer_label: String,
    /// First overlapping byte, from the buffer's base (the smallest range that covers every
    /// overlap of the two nodes' conflicting accesses).
    pub offset: u64,
    /// Number of bytes in that range.
    pub len: u64,
    /// The edge that would order the two nodes: `first -> second`.
    pub fix: Edge,
}

impl std::fmt::Display for Hazard {
    /// One line, e.g. `read-after-write on 'q' (0x7f1f00) bytes [0, 256): 'q-proj' (n0) writes,
    /// 'attention' (n3) reads, unordered; fix: add edge 'q-proj' -> 'attention' (n0 -> n3)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} on '{}' (0x{:x}) bytes [{}, {}): '{}' ({}) {}, '{}' ({}) {}, unordered; \
             fix: add edge '{}' -> '{}' ({} -> {})",
            self.kind,
            self.buffer_label,
            self.buffer,
            self.offset,
            self.offset.saturating_add(self.len),
            self.first.label,
            self.first.id,
            self.first.mode.verb(),
            self.second.label,
            self.second.id,
            self.second.mode.verb(),
            self.first.label,
            self.second.label,
            self.fix.from,
            self.fix.to,
        )?;
        if !self.path.is_empty() {
            write!(f, " in {}", self.graph)?;
        }
        Ok(())
    }
}

impl AccessMode {
    /// How a node touches bytes, as a verb for reports: `reads`, `writes`, `reads and writes`,
    /// `may read or write`.
    pub fn verb(self) -> &'static str {
        match self {
            AccessMode::Read => "reads",
            AccessMode::Write => "writes",
            AccessMode::ReadWrite => "reads and writes",
            AccessMode::Unknown => "may read or write",
        }
    }
}

/// What [`Graph::hazards`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HazardReport {
    /// The hazards, sorted by graph path, then by the ids of the first and second node, then by
    /// buffer and offset.
    pub hazards: Vec<Hazard>,
    /// Graphs analysed: the graph and every child graph inside it.
    pub graphs: usize,
    /// Nodes with at least one memory access, in all those graphs.
    pub nodes_with_accesses: usize,
    /// Accesses of non-zero length, in all those graphs.
    pub accesses: usize,
    /// With [`HazardOptions::unknown_kernel_memory`]: pairs of nodes that no path orders and
    /// that both run kernels whose memory is unknown (kernel nodes, child graphs holding one,
    /// conditional nodes). They cannot be judged, so they are counted, not reported.
    #[serde(default)]
    pub unjudged_kernel_pairs: u64,
    /// With [`HazardOptions::unknown_kernel_memory`]: pairs of nodes that no path orders, one a
    /// child graph or conditional node running kernels whose memory is unknown, the other a node
    /// with known accesses. Counted, not reported.
    #[serde(default)]
    pub unjudged_nested_pairs: u64,
}

/// How [`Graph::hazards_with`] treats what the model does not know.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HazardOptions {
    /// Kernel nodes without accesses may touch any memory (set it for graphs read from a
    /// `cudaGraphDebugDotPrint` dump, which holds no kernel arguments). A kernel and a copy or
    /// set that no path orders are then a [`HazardKind::PossibleKernelAccess`] hazard on each
    /// buffer of the copy or set, and unordered pairs that cannot be judged are counted in
    /// [`HazardReport::unjudged_kernel_pairs`] and [`HazardReport::unjudged_nested_pairs`].
    /// Off: such kernels touch nothing.
    pub unknown_kernel_memory: bool,
}

impl HazardReport {
    /// Whether no hazard was found, possible ones included.
    pub fn is_clean(&self) -> bool {
        self.hazards.is_empty()
    }

    /// The certain hazards (both sides' directions known), in report order.
    pub fn certain(&self) -> impl Iterator<Item = &Hazard> + '_ {
        self.hazards.iter().filter(|h| !h.kind.is_possible())
    }

    /// The possible hazards ([`HazardKind::is_possible`]), in report order.
    pub fn possible(&self) -> impl Iterator<Item = &Hazard> + '_ {
        self.hazards.iter().filter(|h| h.kind.is_possible())
    }

    /// Highlights for [`Graph::to_dot_with`]: the racing nodes of the analysed graph in red and
    /// each fix as a dashed red edge. Hazards inside child graphs are not drawn (the DOT output
    /// draws a child graph as one node).
    pub fn dot_options(&self) -> DotOptions {
        let mut nodes = Vec::new();
        let mut missing = Vec::new();
        for h in self.hazards.iter().filter(|h| h.path.is_empty()) {
            nodes.extend([h.first.id, h.second.id]);
            missing.push((h.fix.from, h.fix.to));
        }
        nodes.sort();
        nodes.dedup();
        missing.sort();
        missing.dedup();
        DotOptions {
            highlight_nodes: nodes,
            highlight_edges: Vec::new(),
            missing_edges: missing,
        }
    }
}

/// The mode of a node that touches bytes in both ways.
pub(crate) fn union(a: AccessMode, b: AccessMode) -> AccessMode {
    if a == b {
        a
    } else if a == AccessMode::Unknown || b == AccessMode::Unknown {
        AccessMode::Unknown
    } else {
        AccessMode::ReadWrite
    }
}
