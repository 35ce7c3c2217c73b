//! The one conversion of a graph read back from the driver into the model: from a [`RawGraph`]
//! (what the driver said about each node and edge) to a `graphsmith_model::Graph` with memory
//! accesses, which the model's hazard checker takes. Both the runtime (`read_raw_graph`, the
//! read-back of a capture) and the tracer (`trace --hazards`) only fill a [`RawGraph`] with
//! driver calls and call [`build`] (or [`build_with`]). Pure: the only questions it asks about
//! memory (which region of a [`MemoryMap`], else which allocation, holds an address) are data
//! and a function the caller passes, so all of it is tested without a GPU.
//!
//! **Regions before allocations.** A [`MemoryMap`] names regions finer than the driver's
//! allocations: PyTorch's caching allocator carves one `cudaMalloc` segment into blocks, one
//! tensor each, so two tensors of one segment must not look like one buffer. An address in a
//! region is an access of that region (labelled with the region's label); an address in none
//! asks the caller's resolver, whose answer is not taken when it overlaps a region (a whole
//! segment would then alias its blocks).
//!
//! Accesses, for a graph whose nodes carry no journal:
//! - a copy reads its device source bytes and writes its device destination bytes (host and
//!   array sides touch no device allocation and are left out), each side from its first byte
//!   (base + x + y * pitch + z * pitch * height) over the rows and slices of the copy with that
//!   side's pitch ([`Copy3D`]); all arithmetic saturates;
//! - a set writes its device bytes, rows apart by its pitch ([`Set2D`]);
//! - a kernel ([`readback/kernel.rs`]): every parameter's bytes are scanned. A pointer-sized
//!   parameter is a pointer, as before; in a larger one (a struct passed by value, such as
//!   PyTorch's `at::detail::Array<char*, N>`, offset calculators and `TensorInfo`) each
//!   8-byte-aligned word is looked at. A word that lies in a known region or allocation
//!   touches it **from the pointer to the region's end** (the kernel's real extent is unknown;
//!   a pointer is the first byte a kernel reaches through it, and starting there keeps two
//!   views of one tensor at different offsets apart where they do not overlap). Direction: a
//!   pointer parameter's from the demangled C++ signature (`const T*` reads); in PyTorch's
//!   elementwise kernels the array of data pointers holds the output first (written), then
//!   the inputs (read); any other pointer is of unknown direction, a *possible* write, whose
//!   hazards are reported apart from certain ones;
//! - a child graph node touches everything its graph touches (so that it is checked against
//!   its siblings; its own nodes are checked against each other inside it).

use std::collections::HashMap;

use graphsmith_model::{
    demangled_name, Access, AccessMode, EdgeType, Graph, MemRef, MemcpyParams, MemorySpace,
    MemsetParams, NodeId, NodeKind,
};

mod kernel;
mod memory_map;

pub use kernel::is_elementwise;
pub use memory_map::{MemoryMap, Region};

/// Child graphs nest at most this deep: a filler reads no child graph at depth `MAX_DEPTH` (the
/// top graph is depth 0) and [`build`] reads one there as an empty graph that says so.
pub const MAX_DEPTH: u32 = 8;

/// A graph as read back from the driver: its nodes in `cuGraphGetNodes` order and its edges.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawGraph {
    pub nodes: Vec<RawNode>,
    pub edges: Vec<RawEdge>,
}

/// One node as read back.
#[derive(Clone, Debug, PartialEq)]
pub struct RawNode {
    /// What it does. A kernel's `args` hold every argument's bytes in parameter order (all of
    /// them: pointers hide inside struct parameters; an empty placeholder only where a
    /// parameter could not be read, so that argument `i` stays parameter `i`). A child graph
    /// node's kind is filled in from `child`.
    pub kind: NodeKind,
    /// The device bytes a copy or set touches.
    pub operands: Vec<Operand>,
    /// For a child graph node: its graph.
    pub child: Option<RawGraph>,
    /// A kernel whose parameters could not be read: its memory accesses are unknown.
    pub args_unread: bool,
}

impl RawNode {
    /// A node of a kind that touches no memory the check knows of (empty, host, event, ...).
    pub fn plain(kind: NodeKind) -> RawNode {
        RawNode {
            kind,
            operands: Vec::new(),
            child: None,
            args_unread: false,
        }
    }
}

/// Device bytes a copy or set touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    pub address: u64,
    pub len: u64,
    pub mode: AccessMode,
}

/// An edge, with its `CUgraphEdgeData` (all zero for a plain dependency).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawEdge {
    pub from: usize,
    pub to: usize,
    pub from_port: u8,
    pub to_port: u8,
    pub ty: u8,
}

impl RawEdge {
    /// A plain edge.
    pub fn plain(from: usize, to: usize) -> RawEdge {
        RawEdge {
            from,
            to,
            ..RawEdge::default()
        }
    }

    /// Whether the edge orders `from` (and its memory) before `to`, as the hazard check takes it:
    /// - a default edge from port 0 (`from` has finished) orders everything;
    /// - a programmatic edge (`CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC`) from the programmatic
    ///   port lets `to` start early, but `to`'s `cudaGridDependencySynchronize` returns only once
    ///   `from` has completed and flushed its memory: it orders what `to` does after that wait.
    ///   Kernels that opt into programmatic launch (cuBLAS's on Hopper, for one) wait before they
    ///   touch what their predecessor wrote, so the check takes such an edge as ordering;
    /// - an edge from the launch-order port orders only the start of `to`, nothing in memory.
    pub fn orders(&self) -> bool {
        matches!(
            self.edge_type(),
            Some(EdgeType::Full | EdgeType::Programmatic)
        )
    }

    /// The model's type of the edge: a default edge from port 0 is [`EdgeType::Full`]; a
    /// programmatic one from the programmatic port [`EdgeType::Programmatic`]; any edge from the
    /// launch-order port [`EdgeType::LaunchOrder`] (it orders starts, no memory). `None` for
    /// other combinations (an incoming port other than 0, unknown types or ports), which the
    /// model leaves out.
    pub fn edge_type(&self) -> Option<EdgeType> {
        const DEFAULT: u8 = 0;
        const PROGRAMMATIC: u8 = 1;
        const LAUNCH_ORDER_PORT: u8 = 2;
        if self.to_port != 0 {
            return None;
        }
        match (self.ty, self.from_port) {
            (DEFAULT, 0) => Some(EdgeType::Full),
            (PROGRAMMATIC, PROGRAMMATIC) => Some(EdgeType::Programmatic),
            (DEFAULT | PROGRAMMATIC, LAUNCH_ORDER_PORT) => Some(EdgeType::LaunchOrder),
            _ => None,
        }
    }
}

/// One side of a copy, from `CUDA_MEMCPY3D` (`memory_type` as the raw `CUmemorytype` integer,
/// never as a Rust enum: the driver may write any value there). `height` is the side's
/// `srcHeight`/`dstHeight` (rows per slice), `pitch` its row pitch in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopySide {
    pub memory_type: u32,
    pub device: u64,
    pub host: u64,
    pub x: u64,
    pub y: u64,
    pub z: u64,
    pub pitch: u64,
    pub height: u64,
}

/// `CU_MEMORYTYPE_HOST`.
pub const MEMORYTYPE_HOST: u32 = 1;
/// `CU_MEMORYTYPE_DEVICE`.
pub const MEMORYTYPE_DEVICE: u32 = 2;
/// `CU_MEMORYTYPE_ARRAY`.
pub const MEMORYTYPE_ARRAY: u32 = 3;
/// `CU_MEMORYTYPE_UNIFIED`.
pub const MEMORYTYPE_UNIFIED: u32 = 4;

use MEMORYTYPE_ARRAY as ARRAY;
use MEMORYTYPE_DEVICE as DEVICE;
use MEMORYTYPE_HOST as HOST;
use MEMORYTYPE_UNIFIED as UNIFIED;

impl CopySide {
    /// Where this side lies (a memory type the driver does not define is `Unknown`).
    pub fn space(&self) -> MemorySpace {
        match self.memory_type {
            DEVICE | UNIFIED => MemorySpace::Device,
            HOST => MemorySpace::Host,
            ARRAY => MemorySpace::Array,
            _ => MemorySpace::Unknown,
        }
    }

    /// The first byte the copy touches on this side.
    pub fn start(&self) -> u64 {
        let base = match self.space() {
            MemorySpace::Device => self.device,
            MemorySpace::Host => self.host,
            _ => 0,
        };
        let row = self.y.saturating_mul(self.pitch);
        let slice = self
            .z
            .saturating_mul(self.pitch)
            .saturating_mul(self.height);
        base.saturating_add(self.x)
            .saturating_add(row)
            .saturating_add(slice)
    }
}

/// The fields of a copy node's `CUDA_MEMCPY3D` that say what it touches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Copy3D {
    pub src: CopySide,
    pub dst: CopySide,
    pub width: u64,
    pub height: u64,
    pub depth: u64,
}

impl Copy3D {
    /// The model's node kind.
    pub fn kind(&self) -> NodeKind {
        let side = |s: &CopySide| MemRef {
            space: s.space(),
            address: s.start(),
        };
        NodeKind::Memcpy(MemcpyParams {
            src: side(&self.src),
            dst: side(&self.dst),
            bytes: self
                .width
                .saturating_mul(self.height.max(1))
                .saturating_mul(self.depth.max(1)),
        })
    }

    /// The device bytes it reads and writes: from each device side's first byte, over the rows
    /// and slices of the copy (with that side's pitch).
    pub fn operands(&self) -> Vec<Operand> {
        let extent = |s: &CopySide| {
            if self.height <= 1 && self.depth <= 1 {
                return self.width;
            }
            let slices = self.depth.max(1) - 1;
            let rows = self.height.max(1) - 1;
            slices
                .saturating_mul(s.pitch.saturating_mul(s.height))
                .saturating_add(rows.saturating_mul(s.pitch))
                .saturating_add(self.width)
        };
        let mut out = Vec::new();
        for (side, mode) in [
            (&self.src, AccessMode::Read),
            (&self.dst, AccessMode::Write),
        ] {
            if side.space() == MemorySpace::Device && extent(side) > 0 {
                out.push(Operand {
                    address: side.start(),
                    len: extent(side),
                    mode,
                });
            }
        }
        out
    }
}

/// A set node's `CUDA_MEMSET_NODE_PARAMS`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Set2D {
    pub dst: u64,
    pub pitch: u64,
    pub value: u32,
    pub element_size: u32,
    pub width: u64,
    pub height: u64,
}

impl Set2D {
    /// The model's node kind.
    pub fn kind(&self) -> NodeKind {
        NodeKind::Memset(MemsetParams {
            dst: self.dst,
            element_size: self.element_size,
            value: self.value,
            width: self.width,
            height: self.height,
            pitch: self.pitch,
        })
    }

    /// The device bytes it writes.
    pub fn operand(&self) -> Operand {
        let row = self.width.saturating_mul(self.element_size as u64);
        let len = if self.height <= 1 {
            row
        } else {
            (self.height - 1)
                .saturating_mul(self.pitch)
                .saturating_add(row)
        };
        Operand {
            address: self.dst,
            len,
            mode: AccessMode::Write,
        }
    }
}

/// What [`build`] counted on the way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Nodes, child graphs' included.
    pub nodes: u64,
    /// Edges, child graphs' included.
    pub edges: u64,
    /// Edges not taken as ordering ([`RawEdge::orders`]).
    pub weak_edges: u64,
    pub kernels: u64,
    /// Kernels whose parameters could not be read.
    pub kernels_unread: u64,
}

/// The model graph, with what was counted and the size of each allocation or region an access
/// resolved to (by base address).
pub struct Built {
    pub graph: Graph,
    pub stats: Stats,
    pub sizes: HashMap<u64, u64>,
}

/// Where an address lies: a region of the map or an allocation the resolver named.
#[derive(Clone, Debug)]
struct Found {
    base: u64,
    size: u64,
    /// The region's label; empty for an allocation.
    label: String,
}

/// Answers "which region or allocation holds this address", once per address.
struct Resolver<'a> {
    map: &'a MemoryMap,
    resolve: &'a mut dyn FnMut(u64) -> Option<(u64, u64)>,
    cache: HashMap<u64, Option<Found>>,
    sizes: HashMap<u64, u64>,
}

impl Resolver<'_> {
    fn allocation(&mut self, address: u64) -> Option<Found> {
        if let Some(hit) = self.cache.get(&address) {
            return hit.clone();
        }
        let found = match self.map.find(address) {
            Some(i) => {
                let r = &self.map.regions()[i];
                Some(Found {
                    base: r.base,
                    size: r.size,
                    label: r.label.clone(),
                })
            }
            None => (self.resolve)(address)
                .filter(|&(base, size)| {
                    // A sane answer holds the address and does not alias a region.
                    base <= address && address - base < size && !self.map.overlaps(base, size)
                })
                .map(|(base, size)| Found {
                    base,
                    size,
                    label: String::new(),
                }),
        };
        self.cache.insert(address, found.clone());
        if let Some(f) = &found {
            self.sizes.insert(f.base, f.size);
        }
        found
    }

    /// A copy's or set's operand: in its region or allocation when one holds it, else a buffer
    /// of its own.
    fn operand(&mut self, op: &Operand) -> Access {
        let (buffer, offset, label) = match self.allocation(op.address) {
            Some(f) => (f.base, op.address - f.base, f.label),
            None => (op.address, 0, String::new()),
        };
        Access {
            buffer,
            label,
            offset,
            len: op.len,
            mode: op.mode,
        }
    }
}

/// A short label for a kernel: its C++ name without parameters, or its symbol; NCCL's kernels
/// (`ncclDevKernel_*`, before NCCL 2.19 `ncclKernel_*`) as `nccl <collective>`. A collective
/// reads and writes its send and receive buffers through NCCL's work structures in device
/// memory, not through its arguments, so no access is found for it here: only the hazard
/// check's `unknown_kernel_memory` mode counts it (as touching any memory).
///
/// ```
/// use graphsmith_analysis::readback::kernel_label;
/// let nccl = "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE";
/// assert_eq!(kernel_label(nccl), "nccl AllReduce_Sum_f32_RING_LL");
/// assert_eq!(kernel_label("gs_axpy_f32"), "gs_axpy_f32");
/// ```
pub fn kernel_label(symbol: &str) -> String {
    let name = demangled_name(symbol).unwrap_or_else(|| symbol.to_string());
    match ["ncclDevKernel_", "ncclKernel_"]
        .iter()
        .find_map(|p| name.strip_prefix(p))
    {
        Some(collective) => format!("nccl {collective}"),
        None => name,
    }
}

/// Builds the model of a read-back graph. `resolve(address)` gives the allocation holding an
/// address as (base, size), when there is one.
pub fn build(
    raw: &RawGraph,
    label: &str,
    resolve: &mut dyn FnMut(u64) -> Option<(u64, u64)>,
) -> Built {
    build_with(raw, label, &MemoryMap::default(), resolve)
}

/// [`build`] with a memory map: an address in one of `map`'s regions is an access of that
/// region (with its label); `resolve` is asked only about the others.
pub fn build_with(
    raw: &RawGraph,
    label: &str,
    map: &MemoryMap,
    resolve: &mut dyn FnMut(u64) -> Option<(u64, u64)>,
) -> Built {
    let mut r = Resolver {
        map,
        resolve,
        cache: HashMap::new(),
        sizes: HashMap::new(),
    };
    let mut stats = Stats::default();
    let graph = build_at(raw, label, &mut r, &mut stats, 0);
    Built {
        graph,
        stats,
        sizes: r.sizes,
    }
}

fn build_at(
    raw: &RawGraph,
    label: &str,
    r: &mut Resolver<'_>,
    stats: &mut Stats,
    depth: u32,
) -> Graph {
    let mut graph = Graph::new(label);
    for (i, node) in raw.nodes.iter().enumerate() {
        stats.nodes += 1;
        let mut accesses: Vec<Access> = node.operands.iter().map(|op| r.operand(op)).collect();
        let (kind, name) = match (&node.kind, &node.child) {
            (NodeKind::Kernel(k), _) => {
                stats.kernels += 1;
                if node.args_unread {
                    stats.kernels_unread += 1;
                }
                accesses.extend(r.kernel(k));
                (node.kind.clone(), kernel_label(&k.name))
            }
            (_, Some(child)) => {
                let inner = if depth < MAX_DEPTH {
                    build_at(child, &format!("child of n{i}"), r, stats, depth + 1)
                } else {
                    Graph::new(format!("child of n{i} (not read: nested too deep)"))
                };
                accesses.extend(inner.nodes.iter().flat_map(|n| n.accesses.iter().cloned()));
                let kind = NodeKind::ChildGraph {
                    graph: Box::new(inner),
                };
                (kind, String::new())
            }
            (kind, None) => (kind.clone(), String::new()),
        };
        graph.add_node_with(name, kind, None, accesses);
    }
    let count = raw.nodes.len();
    for e in &raw.edges {
        stats.edges += 1;
        if !e.orders() {
            stats.weak_edges += 1;
        }
        let Some(ty) = e.edge_type() else {
            continue;
        };
        if e.from < count && e.to < count && e.from != e.to {
            // Both ends exist and differ; the driver has no multi-edges, so a second edge
            // between the same nodes (which add_typed_edge refuses) cannot come from it.
            let _ = graph.add_typed_edge(NodeId(e.from as u32), NodeId(e.to as u32), ty);
        }
    }
    graph
}

#[cfg(test)]
mod tests;
