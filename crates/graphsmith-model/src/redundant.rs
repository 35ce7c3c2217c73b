//! Redundant edges: edges that another path already implies.

use std::collections::HashSet;

use crate::graph::{Edge, Graph, ModelError};
use crate::node::NodeId;
use crate::reach::Clocks;
use crate::topo::{self, Adjacency};

const NONE: u32 = u32::MAX;

impl Graph {
    /// The edges `u -> v` that another path `u -> w -> ... -> v` already implies: removing one
    /// of them (alone) changes no ordering. Listed once each, in the order of [`Graph::edges`].
    ///
    /// Such an edge is harmless for correctness, but costs the driver a dependency to track and
    /// usually shows that a dependency was added "to be safe" rather than from the data flow.
    ///
    /// An edge `u -> v` is redundant exactly when `u` reaches another predecessor of `v`. The
    /// check runs in the same sweep as the reachability clocks (see the crate's `reach` notes):
    /// for each node with `k ≥ 2` predecessors, the predecessors' clocks give, per chain of a
    /// predecessor, the two largest positions and which predecessor gave the largest: by a scan
    /// of the clocks (O(k·s), `s` the clock size, about the number of streams for captured
    /// graphs) or, when the clocks are large, by binary search (O(k² log s)). Memory O(N) plus the
    /// clocks of the sweep's frontier. A cycle or a bad edge is a [`ModelError`].
    ///
    /// ```
    /// # use graphsmith_model::{Edge, Graph, NodeKind};
    /// let mut g = Graph::new("g");
    /// let a = g.add_node("a", NodeKind::Empty);
    /// let b = g.add_node("b", NodeKind::Empty);
    /// let c = g.add_node("c", NodeKind::Empty);
    /// g.add_edge(a, b).unwrap();
    /// g.add_edge(b, c).unwrap();
    /// g.add_edge(a, c).unwrap(); // implied by a -> b -> c
    /// assert_eq!(g.redundant_edges().unwrap(), vec![Edge::full(a, c)]);
    /// ```
    ///
    /// Only full edges ([`crate::EdgeType::Full`]) count, as paths and as candidates: a
    /// programmatic or launch-order edge orders less than a full one, so it neither implies a
    /// full edge nor is ever reported.
    pub fn redundant_edges(&self) -> Result<Vec<Edge>, ModelError> {
        let all = self.adjacency()?;
        // A topological order of the whole graph is one of any subset of its edges.
        let order = topo::topological_order(self, &all)?;
        let full;
        let adj = if self.edges.iter().all(|e| e.ty.is_full()) {
            &all
        } else {
            let pairs = self.edges.iter().filter(|e| e.ty.is_full());
            full = Adjacency::from_pairs(self.nodes.len(), pairs.map(|e| (e.from, e.to)));
            &full
        };
        let mut clocks = Clocks::new(adj);
        let mut found: HashSet<Edge> = HashSet::new();
        // slot[chain]: index into `tops` while a node's predecessors are examined.
        let mut slot: Vec<u32> = Vec::new();
        let mut tops: Vec<Top> = Vec::new();
        for &v in &order {
            // Before the visit, which may move a predecessor's clock into `v`'s.
            let preds = adj.predecessors(v);
            if preds.len() >= 2 {
                for &u in preds {
                    let (c, _) = clocks.chain_position(u);
                    if slot.len() <= c as usize {
                        slot.resize(c as usize + 1, NONE);
                    }
                    if slot[c as usize] == NONE {
                        slot[c as usize] = tops.len() as u32;
                        tops.push(Top::default());
                    }
                }
                // Few predecessors with large clocks: look up their chains (O(k² log s));
                // else scan the clocks (O(k·s)).
                let entries: usize = preds.iter().map(|&p| clocks.clock(p).len()).sum();
                if preds.len() * tops.len() * 16 < entries {
                    for &p in preds {
                        for &u in preds {
                            let (c, _) = clocks.chain_position(u);
                            let s = slot[c as usize] as usize;
                            if tops[s].seen != Some(p) {
                                tops[s].seen = Some(p);
                                tops[s].offer(clocks.entry(p, c), p);
                            }
                        }
                    }
                } else {
                    for &p in preds {
                        for &(c, i) in clocks.clock(p) {
                            if let Some(&s) = slot.get(c as usize) {
                                if s != NONE {
                                    tops[s as usize].offer(i, p);
                                }
                            }
                        }
                    }
                }
                for &u in preds {
                    let (c, i) = clocks.chain_position(u);
                    let top = &tops[slot[c as usize] as usize];
                    let other = if top.from == Some(u) {
                        top.second
                    } else {
                        top.best
                    };
                    if other >= i {
                        found.insert(Edge::full(u, v));
                    }
                }
                for &u in preds {
                    let (c, _) = clocks.chain_position(u);
                    slot[c as usize] = NONE;
                }
                tops.clear();
            }
            clocks.visit(v);
            clocks.finish(v);
        }
        let mut seen = HashSet::new();
        Ok(self
            .edges
            .iter()
            .copied()
            .filter(|e| found.contains(e) && seen.insert(*e))
            .collect())
    }
}

/// The two largest positions offered for one chain, and who offered the largest.
#[derive(Default)]
struct Top {
    best: u32,
    second: u32,
    from: Option<NodeId>,
    /// The last predecessor whose offer was taken (several predecessors may share a chain).
    seen: Option<NodeId>,
}

impl Top {
    fn offer(&mut self, position: u32, by: NodeId) {
        if position > self.best {
            self.second = self.best;
            self.best = position;
            self.from = Some(by);
        } else if position > self.second {
            self.second = position;
        }
    }
}
