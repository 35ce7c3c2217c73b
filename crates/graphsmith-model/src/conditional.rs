//! Conditional nodes with their bodies: building one whose accesses are those of its bodies.

use crate::graph::Graph;
use crate::node::{Access, ConditionalKind, NodeId, NodeKind};

impl Graph {
    /// Adds a conditional node with its body graphs (IF: the body run when the condition is
    /// non-zero, then an ELSE body if any; WHILE: the loop body; SWITCH: one body per case).
    /// The node's accesses are those of every node of its bodies, at any depth (each once): a
    /// conditional node may touch whatever its bodies touch, so it races with an unordered node
    /// of this graph over those bytes. The bodies themselves are checked for hazards inside
    /// each of them ([`Graph::hazards`]); the nodes of one WHILE iteration all finish before the
    /// next starts, so iterations never race with each other.
    ///
    /// ```
    /// # use graphsmith_model::{Access, AccessMode, ConditionalKind, Graph, NodeKind};
    /// let write = Access { buffer: 0x1000, label: "x".into(), offset: 0, len: 64,
    ///     mode: AccessMode::Write };
    /// let mut body = Graph::new("then");
    /// body.add_node_with("fill", NodeKind::Empty, None, vec![write.clone()]);
    /// let mut g = Graph::new("step");
    /// let c = g.add_conditional("if-ready", ConditionalKind::If, vec![body]);
    /// let reader = g.add_node_with("read", NodeKind::Empty, None,
    ///     vec![Access { mode: AccessMode::Read, ..write }]);
    /// assert_eq!(g.hazards().unwrap().hazards[0].fix.to, reader);
    /// g.add_edge(c, reader).unwrap();
    /// assert!(g.hazards().unwrap().is_clean());
    /// ```
    pub fn add_conditional(
        &mut self,
        label: impl Into<String>,
        conditional: ConditionalKind,
        bodies: Vec<Graph>,
    ) -> NodeId {
        let mut accesses: Vec<Access> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut todo: Vec<&Graph> = bodies.iter().collect();
        while let Some(g) = todo.pop() {
            for n in &g.nodes {
                for a in n.accesses.iter().chain(&n.accesses_before_wait) {
                    if seen.insert(a.clone()) {
                        accesses.push(a.clone());
                    }
                }
                todo.extend(n.kind.nested_graphs());
            }
        }
        let kind = NodeKind::Conditional {
            conditional,
            bodies: bodies.len().min(u32::MAX as usize) as u32,
            body_graphs: bodies,
        };
        self.add_node_with(label, kind, None, accesses)
    }
}
