//! Nodes of a graph: their kinds, parameters, provenance and memory accesses.

use serde::{Deserialize, Serialize};

/// The index of a node inside one [`crate::Graph`]. Typed, so it is never confused with a count or
/// with an index of something else. A `NodeId` is only meaningful for the graph that issued it;
/// the runtime pairs it with a graph identity to refuse nodes of other graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The position of the node in [`crate::Graph::nodes`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// Launch dimensions (x, y, z).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dim3 {
    /// Extent along x.
    pub x: u32,
    /// Extent along y.
    pub y: u32,
    /// Extent along z.
    pub z: u32,
}

impl Dim3 {
    /// `(x, y, z)`.
    pub const fn new(x: u32, y: u32, z: u32) -> Self {
        Self { x, y, z }
    }
    /// `(x, 1, 1)`.
    pub const fn linear(x: u32) -> Self {
        Self { x, y: 1, z: 1 }
    }
    /// x * y * z, without overflow.
    pub fn volume(&self) -> u64 {
        self.x as u64 * self.y as u64 * self.z as u64
    }
}

impl std::fmt::Display for Dim3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({},{},{})", self.x, self.y, self.z)
    }
}

/// One kernel argument as the bytes the kernel receives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelArg {
    /// Byte offset of the argument in the kernel's parameter buffer.
    pub offset: u32,
    /// The argument's value, little-endian bytes as passed to the launch.
    #[serde(with = "crate::hex")]
    pub bytes: Vec<u8>,
}

/// Parameters of a kernel node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelParams {
    /// The kernel's symbol name (mangled for C++ kernels).
    pub name: String,
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
    /// Argument values, in order. Empty when unknown (e.g. imported from a DOT file without them).
    pub args: Vec<KernelArg>,
    /// The thread block cluster shape the kernel requires (compiled in with `__cluster_dims__`),
    /// or `None` when it requires none or it is not known. An executable's node cannot take a
    /// kernel of another cluster shape in place (see the update pre-check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Dim3>,
}

/// Which kind of memory an address lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemorySpace {
    /// Device memory (a `CUdeviceptr`).
    Device,
    /// Host memory (pageable or pinned).
    Host,
    /// A CUDA array.
    Array,
    /// Not known (e.g. unified addressing without a query).
    Unknown,
}

/// One side of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemRef {
    /// Where the memory lives.
    pub space: MemorySpace,
    /// The address (device pointer, host pointer); 0 when unknown.
    pub address: u64,
}

/// Parameters of a 1-D (or flattened) copy node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemcpyParams {
    /// Where the bytes come from.
    pub src: MemRef,
    /// Where the bytes go.
    pub dst: MemRef,
    /// Bytes copied.
    pub bytes: u64,
}

/// Parameters of a memset node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemsetParams {
    /// The device address of the first element.
    pub dst: u64,
    /// 1, 2 or 4.
    pub element_size: u32,
    /// The value written to each element (its low `element_size` bytes).
    pub value: u32,
    /// Elements per row.
    pub width: u64,
    /// Rows.
    pub height: u64,
    /// Bytes between rows (ignored when height is 1).
    pub pitch: u64,
}

impl MemsetParams {
    /// Total bytes written (saturating at `u64::MAX` for absurd parameters).
    pub fn bytes(&self) -> u64 {
        self.width
            .saturating_mul(self.element_size as u64)
            .saturating_mul(self.height.max(1))
    }
}

/// Conditional node flavour (CUDA 12.4+ IF, 12.4+ WHILE, 12.8+ SWITCH).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConditionalKind {
    /// Runs its body once when the condition is non-zero.
    If,
    /// Runs its body while the condition is non-zero.
    While,
    /// Runs the body the condition selects.
    Switch,
}

/// What a node does, with its parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum NodeKind {
    /// A kernel launch.
    Kernel(KernelParams),
    /// A memory copy.
    Memcpy(MemcpyParams),
    /// A memory set.
    Memset(MemsetParams),
    /// A host function; `name` is what is known of it (a label or a symbol), may be empty.
    Host {
        /// The host function's label or symbol.
        name: String,
    },
    /// Records an event; `event` is its label.
    EventRecord {
        /// The event's label.
        event: String,
    },
    /// Waits for an event; `event` is its label.
    EventWait {
        /// The event's label.
        event: String,
    },
    /// Does nothing; joins or forks dependencies.
    Empty,
    /// A child graph, embedded whole.
    ChildGraph {
        /// The embedded graph.
        graph: Box<crate::Graph>,
    },
    /// Allocates graph-owned memory.
    MemAlloc {
        /// The address the allocation got.
        address: u64,
        /// Its size in bytes.
        bytes: u64,
    },
    /// Frees graph-owned memory.
    MemFree {
        /// The address freed.
        address: u64,
    },
    /// A conditional node (`CU_GRAPH_COND_TYPE_*`): runs its bodies as its condition handle,
    /// set by kernels (`cudaGraphSetConditional`), decides.
    Conditional {
        /// Its flavour.
        conditional: ConditionalKind,
        /// Number of body graphs.
        bodies: u32,
        /// The body graphs when known, in the driver's order: IF the body run when the
        /// condition is non-zero, then the ELSE body when there is one; WHILE the loop body;
        /// SWITCH the body of case 0, 1, .... Empty when they are not modelled (read back from
        /// a live graph: the driver has no call that returns them).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        body_graphs: Vec<crate::Graph>,
    },
    /// A node kind graphsmith does not model in detail (batch memory ops, external semaphores, ...).
    Other {
        /// The kind's name, e.g. `"batch_mem_op"`.
        name: String,
    },
}

impl NodeKind {
    /// The graphs nested in this node: a child graph's graph, a conditional node's modelled
    /// bodies; empty for other kinds.
    pub fn nested_graphs(&self) -> &[crate::Graph] {
        match self {
            NodeKind::ChildGraph { graph } => std::slice::from_ref(&**graph),
            NodeKind::Conditional { body_graphs, .. } => body_graphs,
            _ => &[],
        }
    }

    /// A short lowercase name of the kind: `kernel`, `memcpy`, ...
    pub fn name(&self) -> &'static str {
        match self {
            NodeKind::Kernel(_) => "kernel",
            NodeKind::Memcpy(_) => "memcpy",
            NodeKind::Memset(_) => "memset",
            NodeKind::Host { .. } => "host",
            NodeKind::EventRecord { .. } => "event_record",
            NodeKind::EventWait { .. } => "event_wait",
            NodeKind::Empty => "empty",
            NodeKind::ChildGraph { .. } => "child_graph",
            NodeKind::MemAlloc { .. } => "mem_alloc",
            NodeKind::MemFree { .. } => "mem_free",
            NodeKind::Conditional { .. } => "conditional",
            NodeKind::Other { .. } => "other",
        }
    }
}

/// Where a node came from: the caller's source line and the named ranges open at that moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Provenance {
    /// Source file of the call that made the node.
    pub file: String,
    /// Its line, from 1.
    pub line: u32,
    /// Its column, from 1.
    pub column: u32,
    /// Named ranges open when the node was made, outermost first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<String>,
    /// The thread that made the node, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
}

impl std::fmt::Display for Provenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        if !self.ranges.is_empty() {
            write!(f, " in {}", self.ranges.join(" > "))?;
        }
        Ok(())
    }
}

/// How a node touches memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessMode {
    /// Only reads.
    Read,
    /// Only writes.
    Write,
    /// Reads and writes.
    ReadWrite,
    /// Direction not known (a pointer argument of a kernel without a signature): treated as a
    /// possible write by analyses, and reported as such.
    Unknown,
}

impl AccessMode {
    /// Whether this access may write.
    pub fn may_write(self) -> bool {
        !matches!(self, AccessMode::Read)
    }
}

/// One memory access of a node: a byte range of a buffer.
///
/// Buffers are identified by their base device (or host) address, which is unique among live
/// allocations; `label` is the buffer's human name for reports.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Access {
    /// The base address of the buffer (its identity).
    pub buffer: u64,
    /// The buffer's label, e.g. `"q"`; may be empty.
    #[serde(default)]
    pub label: String,
    /// Offset of the first byte accessed, from `buffer`.
    pub offset: u64,
    /// Bytes accessed.
    pub len: u64,
    /// Whether the node reads or writes the range.
    pub mode: AccessMode,
}

impl Access {
    /// Whether two accesses touch at least one common byte of the same buffer.
    pub fn overlaps(&self, other: &Access) -> bool {
        self.buffer == other.buffer
            && self.offset < other.offset.saturating_add(other.len)
            && other.offset < self.offset.saturating_add(self.len)
    }
}

/// A node of a graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The node's id: its position in [`crate::Graph::nodes`].
    pub id: NodeId,
    /// A human label, e.g. `"attention"`. Never empty: defaults to `<kind>#<index>`.
    pub label: String,
    /// What the node does.
    #[serde(flatten)]
    pub kind: NodeKind,
    /// Where it was made, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// The memory it touches, when known. For a kernel that opted into programmatic dependent
    /// launch, what it touches after its wait (`cudaGridDependencySynchronize`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accesses: Vec<Access>,
    /// The memory a kernel that opted into programmatic dependent launch touches *before* its
    /// wait (e.g. weights it prefetches while its predecessor still runs). An incoming
    /// [`crate::EdgeType::Programmatic`] edge does not order these; a full edge does. Empty for
    /// every other node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accesses_before_wait: Vec<Access>,
    /// A kernel that opted into programmatic dependent launch and lets its dependents start
    /// only after its own wait (`griddepcontrol.launch_dependents` after
    /// `griddepcontrol.wait`). Its outgoing [`crate::EdgeType::Programmatic`] edges then also
    /// order everything before its wait (what its own predecessors did) before the start of
    /// their targets, so a target may read that before its own wait; what this node itself
    /// does stays ordered only before the target's wait. `false` (the default) assumes the
    /// earliest trigger, at the kernel's start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub triggers_after_wait: bool,
}
