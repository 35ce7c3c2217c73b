//! The graph: nodes and edges, with construction that never panics on bad input.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::node::{Access, Node, NodeId, NodeKind, Provenance};

/// What an edge orders: the type and outgoing port of its `CUgraphEdgeData`.
///
/// The hazard checker models a node as three moments, its *start*, its *wait* (for a kernel
/// that opted into programmatic dependent launch, the return of its
/// `cudaGridDependencySynchronize` / `griddepcontrol.wait`; for any other node the wait is its
/// start) and its *end*. [`crate::Node::accesses_before_wait`] happen between the first two,
/// [`crate::Node::accesses`] after the wait, and all are over at the end.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum EdgeType {
    /// `CU_GRAPH_DEPENDENCY_TYPE_DEFAULT` from the default port: `to` starts only after `from`
    /// has finished, so everything `from` does is ordered before everything `to` does.
    #[default]
    Full,
    /// `CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC` from `CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC`
    /// (what a launch with the programmatic stream-serialization attribute captures): `to` may
    /// start once `from` triggers (`cudaTriggerProgrammaticLaunchCompletion`) or finishes, but
    /// its wait returns only after `from` has finished and flushed its memory. It orders
    /// `from` before what `to` does after its wait, and nothing `to` does before it; when
    /// `from` triggers only after its own wait ([`crate::Node::triggers_after_wait`]), what came
    /// before `from`'s wait is also ordered before all of `to`.
    Programmatic,
    /// An edge from `CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER`: `to` starts after every block of
    /// `from` has started. It orders the starts only, no memory.
    LaunchOrder,
}

impl EdgeType {
    /// Whether this is a [`EdgeType::Full`] edge (JSON leaves the type out then).
    pub fn is_full(&self) -> bool {
        *self == EdgeType::Full
    }

    /// A short lowercase name: `full`, `programmatic`, `launch_order`.
    pub fn name(self) -> &'static str {
        match self {
            EdgeType::Full => "full",
            EdgeType::Programmatic => "programmatic",
            EdgeType::LaunchOrder => "launch_order",
        }
    }
}

/// An edge: by default (`ty` [`EdgeType::Full`]) `to` may start only after `from` has finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Edge {
    /// The node that must finish (or, for weaker types, start or trigger) first.
    pub from: NodeId,
    /// The node that waits for `from`.
    pub to: NodeId,
    /// What the edge orders; `type` in JSON, [`EdgeType::Full`] when absent.
    #[serde(rename = "type", default, skip_serializing_if = "EdgeType::is_full")]
    pub ty: EdgeType,
}

impl Edge {
    /// A full edge `from -> to`.
    pub const fn full(from: NodeId, to: NodeId) -> Edge {
        Edge {
            from,
            to,
            ty: EdgeType::Full,
        }
    }
}

/// Errors of model construction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// An edge names a node the graph does not have.
    #[error("graph '{graph}': edge {from} -> {to} names node {missing}, but the graph has only {count} nodes")]
    UnknownNode {
        /// The graph's label.
        graph: String,
        /// The edge's source.
        from: NodeId,
        /// The edge's target.
        to: NodeId,
        /// The end of the edge that does not exist.
        missing: NodeId,
        /// How many nodes the graph has.
        count: usize,
    },
    /// An edge goes from a node to itself.
    #[error("graph '{graph}': edge from node '{label}' ({id}) to itself")]
    SelfLoop {
        /// The graph's label.
        graph: String,
        /// The node.
        id: NodeId,
        /// The node's label.
        label: String,
    },
    /// The edges form a cycle, so the graph has no topological order.
    #[error("graph '{graph}' has a cycle through node '{label}' ({id})")]
    Cycle {
        /// The graph's label.
        graph: String,
        /// A node that lies on the cycle.
        id: NodeId,
        /// That node's label.
        label: String,
    },
    /// An edge joins two nodes that another edge of a different type already joins (CUDA has
    /// no multi-edges).
    #[error("graph '{graph}': edge '{from_label}' -> '{to_label}' ({from} -> {to}) is already a {existing} edge; it cannot also be a {requested} edge")]
    EdgeTypeConflict {
        /// The graph's label.
        graph: String,
        /// The edge's source.
        from: NodeId,
        /// The source's label.
        from_label: String,
        /// The edge's target.
        to: NodeId,
        /// The target's label.
        to_label: String,
        /// The type the graph holds (its [`EdgeType::name`]).
        existing: &'static str,
        /// The type asked for.
        requested: &'static str,
    },
    /// The graph would have more nodes than a [`NodeId`] can number.
    #[error("graph '{graph}': too many nodes (the limit is {limit})")]
    TooManyNodes {
        /// The graph's label.
        graph: String,
        /// The largest number of nodes allowed.
        limit: u64,
    },
}

/// A CUDA graph as plain data: what it does, in which order, touching which memory, made where.
///
/// The same model describes a graph graphsmith built, one it captured, one read back from any
/// `CUgraph`, and one imported from a DOT dump, so that every analysis works on all of them.
///
/// `edges` never holds the same edge twice when it is built with [`Graph::add_edge`]; code that
/// writes `edges` directly takes that duty on itself (analyses tolerate duplicates).
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct Graph {
    /// A human label for the graph, e.g. `"decode-step"`.
    pub label: String,
    /// The nodes; `nodes[i].id == NodeId(i)`.
    pub nodes: Vec<Node>,
    /// The edges, in the order they were added.
    pub edges: Vec<Edge>,
    /// Finds duplicate edges in O(1) for `add_edge`; not part of the graph's value.
    #[serde(skip)]
    edge_index: EdgeIndex,
}

// Written by hand so that the private edge index takes no part in equality.
impl PartialEq for Graph {
    fn eq(&self, other: &Self) -> bool {
        self.label == other.label && self.nodes == other.nodes && self.edges == other.edges
    }
}

// Written by hand so that the private edge index does not show up in debug output.
impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("label", &self.label)
            .field("nodes", &self.nodes)
            .field("edges", &self.edges)
            .finish()
    }
}

/// The position of each edge of `Graph::edges`, for O(1) duplicate detection in `add_edge`.
///
/// Built lazily: a deserialized or cloned graph starts with an empty index, and the index is
/// rebuilt whenever the number of edges differs from the number it has seen (someone wrote
/// `Graph::edges` directly). A hit is confirmed against `edges` before it is trusted, so a stale
/// index can never make `add_edge` drop a new edge; at worst, after `edges` was rewritten in
/// place, it lets a duplicate through.
#[derive(Default)]
struct EdgeIndex {
    positions: HashMap<(NodeId, NodeId), usize>,
    /// `edges.len()` when the index was last in step with it.
    seen: usize,
}

impl Clone for EdgeIndex {
    /// A clone starts empty and is rebuilt on its first use: cloned graphs are rarely edited.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl EdgeIndex {
    fn rebuild(&mut self, edges: &[Edge]) {
        self.positions.clear();
        self.positions.reserve(edges.len());
        for (i, &e) in edges.iter().enumerate() {
            self.positions.entry((e.from, e.to)).or_insert(i);
        }
        self.seen = edges.len();
    }

    /// The edge of `edges` from `from` to `to`, of any type.
    fn find(&mut self, edges: &[Edge], from: NodeId, to: NodeId) -> Option<Edge> {
        if self.seen != edges.len() {
            self.rebuild(edges);
        }
        let same = |e: &&Edge| e.from == from && e.to == to;
        match self.positions.get(&(from, to)) {
            None => None,
            Some(&i) if edges.get(i).filter(same).is_some() => edges.get(i).copied(),
            Some(_) => {
                self.rebuild(edges);
                let i = *self.positions.get(&(from, to))?;
                edges.get(i).copied()
            }
        }
    }

    /// Records that `edge` was just pushed at position `at`.
    fn pushed(&mut self, edge: Edge, at: usize) {
        self.positions.insert((edge.from, edge.to), at);
        self.seen = at + 1;
    }
}

impl Graph {
    /// An empty graph with a label.
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            nodes: Vec::new(),
            edges: Vec::new(),
            edge_index: EdgeIndex::default(),
        }
    }

    /// Adds a node and returns its id. An empty label becomes `<kind>#<index>`.
    pub fn add_node(&mut self, label: impl Into<String>, kind: NodeKind) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        let mut label = label.into();
        if label.is_empty() {
            label = format!("{}#{}", kind.name(), id.0);
        }
        self.nodes.push(Node {
            id,
            label,
            kind,
            provenance: None,
            accesses: Vec::new(),
            accesses_before_wait: Vec::new(),
            triggers_after_wait: false,
        });
        id
    }

    /// Adds a node with provenance and accesses.
    pub fn add_node_with(
        &mut self,
        label: impl Into<String>,
        kind: NodeKind,
        provenance: Option<Provenance>,
        accesses: Vec<Access>,
    ) -> NodeId {
        let id = self.add_node(label, kind);
        let node = &mut self.nodes[id.index()];
        node.provenance = provenance;
        node.accesses = accesses;
        id
    }

    /// Adds the full edge `from -> to`. Unknown nodes and self-loops are errors; a duplicate edge
    /// is accepted once (CUDA has no multi-edges) and ignored after. Amortized O(1).
    pub fn add_edge(&mut self, from: NodeId, to: NodeId) -> Result<(), ModelError> {
        self.add_typed_edge(from, to, EdgeType::Full)
    }

    /// Adds the edge `from -> to` of type `ty`, as [`Graph::add_edge`] does; an edge that
    /// already joins the two nodes with another type is an [`ModelError::EdgeTypeConflict`].
    ///
    /// ```
    /// # use graphsmith_model::{EdgeType, Graph, NodeKind};
    /// let mut g = Graph::new("pdl");
    /// let a = g.add_node("a", NodeKind::Empty);
    /// let b = g.add_node("b", NodeKind::Empty);
    /// g.add_typed_edge(a, b, EdgeType::Programmatic).unwrap();
    /// assert_eq!(g.edges[0].ty, EdgeType::Programmatic);
    /// assert!(g.add_edge(a, b).is_err());
    /// ```
    pub fn add_typed_edge(
        &mut self,
        from: NodeId,
        to: NodeId,
        ty: EdgeType,
    ) -> Result<(), ModelError> {
        let count = self.nodes.len();
        for id in [from, to] {
            if id.index() >= count {
                return Err(ModelError::UnknownNode {
                    graph: self.label.clone(),
                    from,
                    to,
                    missing: id,
                    count,
                });
            }
        }
        if from == to {
            return Err(ModelError::SelfLoop {
                graph: self.label.clone(),
                id: from,
                label: self.nodes[from.index()].label.clone(),
            });
        }
        match self.edge_index.find(&self.edges, from, to) {
            Some(existing) if existing.ty == ty => Ok(()),
            Some(existing) => Err(ModelError::EdgeTypeConflict {
                graph: self.label.clone(),
                from,
                from_label: self.nodes[from.index()].label.clone(),
                to,
                to_label: self.nodes[to.index()].label.clone(),
                existing: existing.ty.name(),
                requested: ty.name(),
            }),
            None => {
                let edge = Edge { from, to, ty };
                self.edge_index.pushed(edge, self.edges.len());
                self.edges.push(edge);
                Ok(())
            }
        }
    }

    /// The node with this id, if it exists.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.index())
    }

    /// The first node with this label.
    pub fn find(&self, label: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.label == label)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}
