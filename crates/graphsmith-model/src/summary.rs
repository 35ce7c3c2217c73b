//! A short numeric summary of a graph: counts, kinds, depth and width.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

use crate::graph::{Graph, ModelError};
use crate::topo;

/// The numbers a person wants first about a graph. Made by [`Graph::summary`].
///
/// `Display` prints a short table:
///
/// ```text
/// graph 'decode-step'
///   nodes   4
///   edges   4
///   depth   3
///   width   2
///   roots   1
///   leaves  1
///   kinds   kernel 3, memcpy 1
/// ```
///
/// With programmatic or launch-order edges, the edge line counts them:
/// `edges   4 (programmatic 3)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// The graph's label.
    pub label: String,
    /// Number of nodes.
    pub nodes: usize,
    /// Number of edges (distinct).
    pub edges: usize,
    /// Of those, the edges that are not full, by [`crate::EdgeType::name`] (`programmatic`,
    /// `launch_order`); empty when every edge is full.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub edge_types: BTreeMap<String, usize>,
    /// Number of nodes of each kind, by [`crate::NodeKind::name`]. Child graphs count as one
    /// `child_graph` node; their own nodes are not counted.
    pub by_kind: BTreeMap<String, usize>,
    /// Number of nodes on the longest path ([`Graph::depth`]).
    pub depth: usize,
    /// The largest number of nodes on one longest-path level ([`Graph::width`]).
    pub width: usize,
    /// Number of nodes without predecessors.
    pub roots: usize,
    /// Number of nodes without successors.
    pub leaves: usize,
}

impl Graph {
    /// Counts, kinds, depth and width of the graph, in O(N + E). A cycle, an edge naming an
    /// unknown node, or a self-loop is an error.
    pub fn summary(&self) -> Result<Summary, ModelError> {
        let adj = self.adjacency()?;
        let order = topo::topological_order(self, &adj)?;
        let levels = topo::levels(&adj, &order);
        let mut by_kind = BTreeMap::new();
        for node in &self.nodes {
            *by_kind.entry(node.kind.name().to_string()).or_insert(0) += 1;
        }
        let mut edge_types = BTreeMap::new();
        let mut seen = HashSet::new();
        for e in self.edges.iter().filter(|e| !e.ty.is_full()) {
            if seen.insert((e.from, e.to)) {
                *edge_types.entry(e.ty.name().to_string()).or_insert(0) += 1;
            }
        }
        let ids = (0..self.nodes.len() as u32).map(crate::NodeId);
        Ok(Summary {
            label: self.label.clone(),
            nodes: self.nodes.len(),
            edges: (0..self.nodes.len() as u32)
                .map(|i| adj.successors(crate::NodeId(i)).len())
                .sum(),
            edge_types,
            by_kind,
            depth: topo::depth(&levels),
            width: topo::width(&levels),
            roots: ids
                .clone()
                .filter(|&i| adj.predecessors(i).is_empty())
                .count(),
            leaves: ids.filter(|&i| adj.successors(i).is_empty()).count(),
        })
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "graph '{}'", self.label)?;
        writeln!(f, "  {:<7} {}", "nodes", self.nodes)?;
        write!(f, "  {:<7} {}", "edges", self.edges)?;
        if !self.edge_types.is_empty() {
            let types: Vec<String> = self
                .edge_types
                .iter()
                .map(|(ty, count)| format!("{ty} {count}"))
                .collect();
            write!(f, " ({})", types.join(", "))?;
        }
        writeln!(f)?;
        for (name, value) in [
            ("depth", self.depth),
            ("width", self.width),
            ("roots", self.roots),
            ("leaves", self.leaves),
        ] {
            writeln!(f, "  {name:<7} {value}")?;
        }
        let kinds: Vec<String> = self
            .by_kind
            .iter()
            .map(|(kind, count)| format!("{kind} {count}"))
            .collect();
        let kinds = if kinds.is_empty() {
            "none".to_string()
        } else {
            kinds.join(", ")
        };
        write!(f, "  {:<7} {kinds}", "kinds")
    }
}
