//! The graph: nodes and edges, with construction that never panics on bad input.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::node::{Access, Node, NodeId, NodeKind, Provenance};

/// An edge: `to` may start only after `from` has finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Edge {
    /// The node that must finish first.
    pub from: NodeId,
    /// The node that waits for `from`.
    pub to: NodeId,
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
    positions: HashMap<Edge, usize>,
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
            self.positions.entry(e).or_insert(i);
        }
        self.seen = edges.len();
    }

    /// Whether `edges` holds `edge`.
    fn contains(&mut self, edges: &[Edge], edge: Edge) -> bool {
        if self.seen != edges.len() {
            self.rebuild(edges);
        }
        match self.positions.get(&edge) {
            None => false,
            Some(&i) if edges.get(i) == Some(&edge) => true,
            Some(_) => {
                self.rebuild(edges);
                self.positions.contains_key(&edge)
            }
        }
    }

    /// Records that `edge` was just pushed at position `at`.
    fn pushed(&mut self, edge: Edge, at: usize) {
        self.positions.insert(edge, at);
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

    /// Adds the edge `from -> to`. Unknown nodes and self-loops are errors; a duplicate edge is
    /// accepted once (CUDA has no multi-edges) and ignored after. Amortized O(1).
    pub fn add_edge(&mut self, from: NodeId, to: NodeId) -> Result<(), ModelError> {
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
        let edge = Edge { from, to };
        if !self.edge_index.contains(&self.edges, edge) {
            self.edge_index.pushed(edge, self.edges.len());
            self.edges.push(edge);
        }
        Ok(())
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
