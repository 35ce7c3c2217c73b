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
        let accesses = body_accesses(&bodies);
        let kind = NodeKind::Conditional {
            conditional,
            bodies: bodies.len().min(u32::MAX as usize) as u32,
            body_graphs: bodies,
        };
        self.add_node_with(label, kind, None, accesses)
    }
}

impl Graph {
    /// Replaces body `index` of conditional node `node` with `body` and recomputes the node's
    /// accesses from its bodies (as [`Graph::add_conditional`] does). `false`, and nothing
    /// changed, when `node` is not a conditional node with a body `index`; body graphs a
    /// conditional node did not model yet (read back) are filled with empty graphs up to
    /// `index`, within its body count.
    ///
    /// ```
    /// # use graphsmith_model::{ConditionalKind, Graph, NodeKind};
    /// let mut g = Graph::new("step");
    /// let c = g.add_conditional("loop", ConditionalKind::While, vec![Graph::new("body")]);
    /// let mut body = Graph::new("body");
    /// body.add_node("k", NodeKind::Empty);
    /// assert!(g.set_conditional_body(c, 0, body));
    /// assert!(!g.set_conditional_body(c, 1, Graph::new("no such body")));
    /// assert_eq!(g.nodes[c.index()].kind.nested_graphs()[0].nodes.len(), 1);
    /// ```
    pub fn set_conditional_body(&mut self, node: NodeId, index: usize, body: Graph) -> bool {
        let Some(n) = self.nodes.get_mut(node.index()) else {
            return false;
        };
        let NodeKind::Conditional {
            bodies,
            body_graphs,
            ..
        } = &mut n.kind
        else {
            return false;
        };
        if index >= *bodies as usize {
            return false;
        }
        while body_graphs.len() <= index {
            body_graphs.push(Graph::new(format!("body {}", body_graphs.len())));
        }
        body_graphs[index] = body;
        n.accesses = body_accesses(body_graphs);
        true
    }
}

/// Every access of every node of `bodies`, at any depth, each once.
fn body_accesses(bodies: &[Graph]) -> Vec<Access> {
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
    accesses
}
