//! JSON form of a graph: exact round trip, with a parser that says where the input is wrong.
//!
//! The format is serde's form of [`Graph`]: `{"label", "nodes": [...], "edges": [...]}`, each
//! node with `id`, `label`, `kind` and the fields of its kind, kernel arguments as hex strings.

use std::collections::HashSet;

use crate::graph::{Edge, Graph};
use crate::node::{NodeId, NodeKind};

/// Why a JSON text is not a valid graph.
///
/// Parse errors give the line and column (both from 1); validation errors give the graph's
/// `location`, e.g. `graph 'step'` or, inside a child graph,
/// `graph 'step' > node 'body' (n3) > graph 'inner'`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// The text is not JSON, or not JSON of a graph (a missing field, a wrong type).
    #[error("graph JSON, line {line}, column {column}: {message}")]
    Parse {
        /// Line of the error, from 1.
        line: usize,
        /// Column of the error, from 1.
        column: usize,
        /// What is wrong, from the JSON parser.
        message: String,
    },
    /// A node's `id` differs from its position in `nodes`.
    #[error("graph JSON, {location}: the node at position {position} has id {id}; a node's id must equal its position")]
    NodeId {
        /// Which graph.
        location: String,
        /// The node's position in `nodes`.
        position: usize,
        /// The id it claims.
        id: NodeId,
    },
    /// An edge names a node the graph does not have.
    #[error("graph JSON, {location}: edge {from} -> {to} names node {missing}, but the graph has only {count} nodes")]
    UnknownNode {
        /// Which graph.
        location: String,
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
    #[error("graph JSON, {location}: edge from node '{label}' ({id}) to itself")]
    SelfLoop {
        /// Which graph.
        location: String,
        /// The node.
        id: NodeId,
        /// The node's label.
        label: String,
    },
    /// The same edge is listed twice, of the same type or not (CUDA graphs have no
    /// multi-edges).
    #[error("graph JSON, {location}: edge {from} -> {to} is listed more than once")]
    DuplicateEdge {
        /// Which graph.
        location: String,
        /// The edge's source.
        from: NodeId,
        /// The edge's target.
        to: NodeId,
    },
}

impl Graph {
    /// The graph as pretty-printed JSON; [`Graph::from_json`] reads it back exactly.
    pub fn to_json(&self) -> String {
        // Every field of the model is a string, an integer, a sequence or a struct, so
        // serialization into a String has no way to fail.
        serde_json::to_string_pretty(self).expect("a graphsmith Graph always serializes to JSON")
    }

    /// Reads a graph written by [`Graph::to_json`] (or by hand), then checks it, child graphs
    /// included: node ids equal their positions, edges name existing nodes, no edge goes from a
    /// node to itself, and no edge is listed twice. Cycles are allowed here; the topology
    /// functions report them.
    ///
    /// Nesting is bounded by the JSON parser's recursion limit (128 levels, about 40 levels of
    /// child graphs); deeper input is a [`JsonError::Parse`], never a stack overflow.
    ///
    /// ```
    /// # use graphsmith_model::Graph;
    /// let err = Graph::from_json("{\"label\": \"g\",\n \"nodes\": [}").unwrap_err();
    /// assert_eq!(err.to_string(), "graph JSON, line 2, column 12: expected value");
    /// ```
    pub fn from_json(text: &str) -> Result<Graph, JsonError> {
        let graph: Graph = serde_json::from_str(text).map_err(|e| {
            let message = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            JsonError::Parse {
                line: e.line(),
                column: e.column(),
                message: message
                    .strip_suffix(&suffix)
                    .map(str::to_string)
                    .unwrap_or(message),
            }
        })?;
        validate(&graph)?;
        Ok(graph)
    }
}

/// Checks `graph` and every child graph in it, without recursion.
fn validate(graph: &Graph) -> Result<(), JsonError> {
    let mut todo = vec![(graph, format!("graph '{}'", graph.label))];
    while let Some((g, location)) = todo.pop() {
        for (position, node) in g.nodes.iter().enumerate() {
            if node.id.index() != position {
                return Err(JsonError::NodeId {
                    location,
                    position,
                    id: node.id,
                });
            }
        }
        let count = g.nodes.len();
        let mut seen: HashSet<(NodeId, NodeId)> = HashSet::with_capacity(g.edges.len());
        for &Edge { from, to, .. } in &g.edges {
            for missing in [from, to] {
                if missing.index() >= count {
                    return Err(JsonError::UnknownNode {
                        location,
                        from,
                        to,
                        missing,
                        count,
                    });
                }
            }
            if from == to {
                return Err(JsonError::SelfLoop {
                    location,
                    id: from,
                    label: g.nodes[from.index()].label.clone(),
                });
            }
            if !seen.insert((from, to)) {
                return Err(JsonError::DuplicateEdge { location, from, to });
            }
        }
        for node in g.nodes.iter().rev() {
            let body = matches!(node.kind, NodeKind::Conditional { .. });
            for (i, child) in node.kind.nested_graphs().iter().enumerate().rev() {
                let part = if body {
                    format!("body {i} graph")
                } else {
                    "graph".to_string()
                };
                let inner = format!(
                    "{location} > node '{}' ({}) > {part} '{}'",
                    node.label, node.id, child.label
                );
                todo.push((child, inner));
            }
        }
    }
    Ok(())
}
