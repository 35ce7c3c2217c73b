//! # graphsmith-model
//!
//! The pure model of a CUDA graph: typed node ids, node kinds and their parameters, labels,
//! provenance (call site and named range stack), memory accesses, edges; topology algorithms;
//! DOT and JSON output.
//!
//! **Architecture invariant:** this crate never depends on CUDA. It builds and tests on any
//! machine, so every analysis of a graph can be tested without a GPU.
//!
//! ## Modules
//!
//! - `node`: [`Node`], [`NodeId`], [`NodeKind`] and the parameters of each kind, [`Provenance`],
//!   [`Access`].
//! - `graph`: [`Graph`] (nodes and edges), its construction, [`Edge`] and its [`EdgeType`]
//!   (full, programmatic, launch order), [`ModelError`].
//! - `topo`: [`Adjacency`] (CSR predecessors and successors), topological order, levels, depth,
//!   width, roots, leaves, critical path. All O(N + E) and iterative.
//! - `conditional`: [`Graph::add_conditional`], a conditional node with its body graphs
//!   ([`NodeKind::Conditional`]), whose accesses are those of its bodies.
//! - `summary`: [`Summary`], the numbers a person wants first about a graph.
//! - `dot`: Graphviz output, [`Graph::to_dot`], with highlights ([`DotOptions`]).
//! - `driver_dot`: [`Graph::from_driver_dot`], reading `cudaGraphDebugDotPrint` dumps (default
//!   and verbose) into the model ([`DotError`]).
//! - `hazards`: [`Graph::hazards`], pairs of nodes that no path orders and whose accesses
//!   conflict ([`HazardReport`], [`Hazard`], [`HazardKind`]); a programmatic edge orders only
//!   what its target does after its wait ([`Node::accesses_before_wait`] are not ordered),
//!   unless its source triggers after its own wait ([`Node::triggers_after_wait`]): then what
//!   came before that wait is ordered before the target's start.
//! - `hazard_report`: what the hazard check reports and how it is asked ([`HazardReport`],
//!   [`Hazard`], [`HazardKind`], [`HazardOptions`]), shared by `hazards` and `unknown_memory`.
//! - `unknown_memory`: with [`HazardOptions::unknown_kernel_memory`], possible hazards between
//!   kernels whose memory is unknown (read from a dump) and copies or sets, and the count of
//!   unordered pairs that cannot be judged.
//! - `redundant`: [`Graph::redundant_edges`], edges that other paths imply.
//! - `reach`: reachability during one topological sweep (vector clocks over a chain cover),
//!   used by `hazards` and `redundant`.
//! - `signature`: [`pointer_param_modes`], which pointer parameters of a C++ kernel are
//!   `const`, from its mangled name; [`char_pointer_arrays`], PyTorch's arrays of data
//!   pointers; [`demangle`].
//! - `json`: [`Graph::to_json`] and [`Graph::from_json`] with validation ([`JsonError`]).
//! - [`hex`]: serde helper for byte strings as hex.
//!
//! ```
//! use graphsmith_model::{Dim3, Graph, KernelParams, NodeKind};
//!
//! let mut g = Graph::new("step");
//! let kernel = |name: &str| {
//!     NodeKind::Kernel(KernelParams {
//!         name: name.to_string(),
//!         grid: Dim3::linear(4),
//!         block: Dim3::linear(128),
//!         shared_mem_bytes: 0,
//!         args: vec![],
//!         cluster: None,
//!     })
//! };
//! let a = g.add_node("a", kernel("produce"));
//! let b = g.add_node("b", kernel("consume"));
//! g.add_edge(a, b).unwrap();
//! assert_eq!(g.topological_order().unwrap(), vec![a, b]);
//! assert_eq!(g.summary().unwrap().depth, 2);
//! assert_eq!(Graph::from_json(&g.to_json()).unwrap(), g);
//! ```

#![warn(missing_docs)]

mod conditional;
mod dot;
mod driver_dot;
mod graph;
mod hazard_report;
mod hazards;
pub mod hex;
mod json;
mod node;
mod reach;
mod redundant;
mod signature;
mod summary;
mod topo;
mod unknown_memory;

pub use dot::DotOptions;
pub use driver_dot::DotError;
pub use graph::{Edge, EdgeType, Graph, ModelError};
pub use hazard_report::{Hazard, HazardKind, HazardNode, HazardOptions, HazardReport};
pub use json::JsonError;
pub use node::{
    Access, AccessMode, ConditionalKind, Dim3, KernelArg, KernelParams, MemRef, MemcpyParams,
    MemorySpace, MemsetParams, Node, NodeId, NodeKind, Provenance,
};
pub use signature::{char_pointer_arrays, demangle, demangled_name, pointer_param_modes};
pub use summary::Summary;
pub use topo::Adjacency;
