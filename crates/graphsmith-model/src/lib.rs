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
//! - `graph`: [`Graph`] (nodes and edges), its construction, [`Edge`], [`ModelError`].
//! - `topo`: [`Adjacency`] (CSR predecessors and successors), topological order, levels, depth,
//!   width, roots, leaves, critical path. All O(N + E) and iterative.
//! - `summary`: [`Summary`], the numbers a person wants first about a graph.
//! - `dot`: Graphviz output, [`Graph::to_dot`], with highlights ([`DotOptions`]).
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

mod dot;
mod graph;
pub mod hex;
mod json;
mod node;
mod summary;
mod topo;

pub use dot::DotOptions;
pub use graph::{Edge, Graph, ModelError};
pub use json::JsonError;
pub use node::{
    Access, AccessMode, ConditionalKind, Dim3, KernelArg, KernelParams, MemRef, MemcpyParams,
    MemorySpace, MemsetParams, Node, NodeId, NodeKind, Provenance,
};
pub use summary::Summary;
pub use topo::Adjacency;
