//! Topology of a graph: adjacency, topological order, levels, depth, width, critical path.
//!
//! Every algorithm here is iterative (no recursion, so a graph of millions of nodes cannot
//! overflow the stack) and runs in O(N + E), except [`Graph::topological_order`], which needs a
//! priority queue for its tie rule when some edge goes from a higher id to a lower one
//! (O(E + N log N)); graphs whose edges all go forward, as builders and captures make them,
//! take a linear fast path.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::graph::{Graph, ModelError};
use crate::node::{Node, NodeId};

/// Predecessors and successors of every node of a graph, in compressed (CSR) arrays.
///
/// Built once in O(N + E) by [`Graph::adjacency`]; every query is then O(1). Duplicate edges
/// are listed once; neighbours are listed in the order their edges appear in [`Graph::edges`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adjacency {
    succ_start: Vec<usize>,
    succ: Vec<NodeId>,
    pred_start: Vec<usize>,
    pred: Vec<NodeId>,
}

impl Adjacency {
    /// Builds the adjacency of `graph`. An edge that names a node the graph does not have, or
    /// that goes from a node to itself, is an error.
    pub fn new(graph: &Graph) -> Result<Self, ModelError> {
        let n = graph.nodes.len();
        for e in &graph.edges {
            for id in [e.from, e.to] {
                if id.index() >= n {
                    return Err(ModelError::UnknownNode {
                        graph: graph.label.clone(),
                        from: e.from,
                        to: e.to,
                        missing: id,
                        count: n,
                    });
                }
            }
            if e.from == e.to {
                return Err(ModelError::SelfLoop {
                    graph: graph.label.clone(),
                    id: e.from,
                    label: graph.nodes[e.from.index()].label.clone(),
                });
            }
        }
        let (succ_start, succ) = csr(n, graph.edges.iter().map(|e| (e.from, e.to)));
        let (pred_start, pred) = csr(n, graph.edges.iter().map(|e| (e.to, e.from)));
        Ok(Self {
            succ_start,
            succ,
            pred_start,
            pred,
        })
    }

    /// The adjacency of `n` nodes joined by `pairs` (`from`, `to`), all `< n` and acyclic: for
    /// graphs derived from a checked one (a subset of its edges, the hazard checker's events).
    pub(crate) fn from_pairs(
        n: usize,
        pairs: impl Iterator<Item = (NodeId, NodeId)> + Clone,
    ) -> Self {
        let (succ_start, succ) = csr(n, pairs.clone());
        let (pred_start, pred) = csr(n, pairs.map(|(a, b)| (b, a)));
        Self {
            succ_start,
            succ,
            pred_start,
            pred,
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.succ_start.len().saturating_sub(1)
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The nodes `id` has an edge to; empty for an id the graph does not have.
    pub fn successors(&self, id: NodeId) -> &[NodeId] {
        row(&self.succ_start, &self.succ, id)
    }

    /// The nodes that have an edge to `id`; empty for an id the graph does not have.
    pub fn predecessors(&self, id: NodeId) -> &[NodeId] {
        row(&self.pred_start, &self.pred, id)
    }

    /// Nodes without predecessors, by id.
    pub fn roots(&self) -> Vec<NodeId> {
        self.ids()
            .filter(|&id| self.predecessors(id).is_empty())
            .collect()
    }

    /// Nodes without successors, by id.
    pub fn leaves(&self) -> Vec<NodeId> {
        self.ids()
            .filter(|&id| self.successors(id).is_empty())
            .collect()
    }

    fn ids(&self) -> impl Iterator<Item = NodeId> {
        (0..self.len() as u32).map(NodeId)
    }
}

fn row<'a>(start: &[usize], items: &'a [NodeId], id: NodeId) -> &'a [NodeId] {
    match (start.get(id.index()), start.get(id.index() + 1)) {
        (Some(&a), Some(&b)) => &items[a..b],
        _ => &[],
    }
}

/// Compressed rows of `pairs` (row, item) for rows `0..n`, items in input order, duplicates
/// dropped. All ids must be `< n`.
fn csr(
    n: usize,
    pairs: impl Iterator<Item = (NodeId, NodeId)> + Clone,
) -> (Vec<usize>, Vec<NodeId>) {
    let mut start = vec![0usize; n + 1];
    for (r, _) in pairs.clone() {
        start[r.index() + 1] += 1;
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut items = vec![NodeId(0); start[n]];
    for (r, x) in pairs {
        items[fill[r.index()]] = x;
        fill[r.index()] += 1;
    }
    // Drop duplicates row by row, stamping each item with the row that saw it last: O(N + E).
    let mut seen = vec![usize::MAX; n];
    let mut out = Vec::with_capacity(items.len());
    let mut out_start = Vec::with_capacity(n + 1);
    out_start.push(0);
    for r in 0..n {
        for &x in &items[start[r]..start[r + 1]] {
            if seen[x.index()] != r {
                seen[x.index()] = r;
                out.push(x);
            }
        }
        out_start.push(out.len());
    }
    (out_start, out)
}

impl Graph {
    /// The predecessors and successors of every node, built once in O(N + E).
    pub fn adjacency(&self) -> Result<Adjacency, ModelError> {
        Adjacency::new(self)
    }

    /// All nodes, each after all of its predecessors (Kahn's algorithm). Stable: whenever
    /// several nodes are ready, the one with the smallest id comes first, so a graph whose edges
    /// all go from lower to higher ids yields `n0, n1, n2, ...`.
    ///
    /// A cycle is [`ModelError::Cycle`], naming a node that lies on it.
    pub fn topological_order(&self) -> Result<Vec<NodeId>, ModelError> {
        topological_order(self, &self.adjacency()?)
    }

    /// The longest-path level of each node, indexed by position: 0 for a node without
    /// predecessors, else one more than the largest level among its predecessors.
    pub fn levels(&self) -> Result<Vec<u32>, ModelError> {
        let adj = self.adjacency()?;
        Ok(levels(&adj, &topological_order(self, &adj)?))
    }

    /// The number of nodes on the longest path; 0 for an empty graph.
    pub fn depth(&self) -> Result<usize, ModelError> {
        Ok(depth(&self.levels()?))
    }

    /// The largest number of nodes that share one longest-path level (see [`Graph::levels`]);
    /// 0 for an empty graph.
    ///
    /// Nodes of one level never depend on each other, so this is a cheap lower bound of the
    /// graph's true width (its maximum antichain, the most nodes that may run at once), which
    /// would take a bipartite matching to compute.
    pub fn width(&self) -> Result<usize, ModelError> {
        Ok(width(&self.levels()?))
    }

    /// Nodes without predecessors, by id. Edges that name unknown nodes are ignored.
    pub fn roots(&self) -> Vec<NodeId> {
        self.nodes_with_no_edge(|e| e.to)
    }

    /// Nodes without successors, by id. Edges that name unknown nodes are ignored.
    pub fn leaves(&self) -> Vec<NodeId> {
        self.nodes_with_no_edge(|e| e.from)
    }

    fn nodes_with_no_edge(&self, end: impl Fn(&crate::Edge) -> NodeId) -> Vec<NodeId> {
        let n = self.nodes.len();
        let mut has = vec![false; n];
        for e in &self.edges {
            if e.from.index() < n && e.to.index() < n {
                has[end(e).index()] = true;
            }
        }
        (0..n as u32)
            .map(NodeId)
            .filter(|id| !has[id.index()])
            .collect()
    }

    /// The path of largest total `weight` (e.g. estimated duration), from a root to a leaf;
    /// empty for an empty graph. Weights that are negative or NaN count as 0. Among equal
    /// paths the one that ends at, and passes through, smaller ids wins.
    ///
    /// ```
    /// # use graphsmith_model::{Graph, NodeKind};
    /// let mut g = Graph::new("g");
    /// let a = g.add_node("a", NodeKind::Empty);
    /// let b = g.add_node("b", NodeKind::Empty);
    /// let c = g.add_node("c", NodeKind::Empty);
    /// g.add_edge(a, c).unwrap();
    /// g.add_edge(b, c).unwrap();
    /// let heavy_b = |n: &graphsmith_model::Node| if n.label == "b" { 5.0 } else { 1.0 };
    /// assert_eq!(g.critical_path(heavy_b).unwrap(), vec![b, c]);
    /// ```
    pub fn critical_path(&self, weight: impl Fn(&Node) -> f64) -> Result<Vec<NodeId>, ModelError> {
        let adj = self.adjacency()?;
        let order = topological_order(self, &adj)?;
        let w = |id: NodeId| {
            let x = weight(&self.nodes[id.index()]);
            if x > 0.0 {
                x
            } else {
                0.0
            }
        };
        // dist[v]: heaviest path ending at v, including v; via[v]: its previous node.
        let mut dist = vec![0.0f64; self.nodes.len()];
        let mut via: Vec<Option<NodeId>> = vec![None; self.nodes.len()];
        for &v in &order {
            let mut best: Option<(f64, NodeId)> = None;
            for &p in adj.predecessors(v) {
                let d = dist[p.index()];
                let better = match best {
                    None => true,
                    Some((bd, bp)) => d > bd || (d == bd && p < bp),
                };
                if better {
                    best = Some((d, p));
                }
            }
            dist[v.index()] = best.map_or(0.0, |(d, _)| d) + w(v);
            via[v.index()] = best.map(|(_, p)| p);
        }
        // Weights are never negative, so the heaviest path may always be taken to end at a leaf.
        let mut end: Option<NodeId> = None;
        for leaf in adj.leaves() {
            let better = match end {
                None => true,
                Some(e) => dist[leaf.index()] > dist[e.index()],
            };
            if better {
                end = Some(leaf);
            }
        }
        let mut path = Vec::new();
        let mut at = end;
        while let Some(v) = at {
            path.push(v);
            at = via[v.index()];
        }
        path.reverse();
        Ok(path)
    }

    /// The critical path with weight 1 per node: a longest path, with [`Graph::depth`] nodes.
    pub fn longest_path(&self) -> Result<Vec<NodeId>, ModelError> {
        self.critical_path(|_| 1.0)
    }
}

pub(crate) fn topological_order(graph: &Graph, adj: &Adjacency) -> Result<Vec<NodeId>, ModelError> {
    let n = adj.len();
    // Fast path: when every edge goes forward, ids are already the smallest-first order.
    if graph.edges.iter().all(|e| e.from < e.to) {
        return Ok((0..n as u32).map(NodeId).collect());
    }
    let mut indegree: Vec<usize> = (0..n as u32)
        .map(|i| adj.predecessors(NodeId(i)).len())
        .collect();
    let mut ready: BinaryHeap<Reverse<NodeId>> = adj.roots().into_iter().map(Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse(u)) = ready.pop() {
        order.push(u);
        for &v in adj.successors(u) {
            indegree[v.index()] -= 1;
            if indegree[v.index()] == 0 {
                ready.push(Reverse(v));
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    let id = node_on_cycle(adj, &indegree);
    Err(ModelError::Cycle {
        graph: graph.label.clone(),
        id,
        label: graph.nodes[id.index()].label.clone(),
    })
}

/// After Kahn's algorithm stalled, every node left (`indegree > 0`) has a predecessor that is
/// also left. Walking backwards through such predecessors from the smallest node left must
/// revisit a node, and the first node revisited lies on a cycle.
fn node_on_cycle(adj: &Adjacency, indegree: &[usize]) -> NodeId {
    let left = |id: NodeId| indegree[id.index()] > 0;
    let mut visited = vec![false; indegree.len()];
    let mut at = (0..indegree.len() as u32)
        .map(NodeId)
        .find(|&id| left(id))
        .unwrap_or(NodeId(0));
    while !visited[at.index()] {
        visited[at.index()] = true;
        match adj.predecessors(at).iter().copied().find(|&p| left(p)) {
            Some(p) => at = p,
            None => break, // unreachable by the argument above; stop rather than loop
        }
    }
    at
}

pub(crate) fn levels(adj: &Adjacency, order: &[NodeId]) -> Vec<u32> {
    let mut level = vec![0u32; adj.len()];
    for &u in order {
        let next = level[u.index()] + 1;
        for &v in adj.successors(u) {
            level[v.index()] = level[v.index()].max(next);
        }
    }
    level
}

pub(crate) fn depth(levels: &[u32]) -> usize {
    levels.iter().max().map_or(0, |&l| l as usize + 1)
}

pub(crate) fn width(levels: &[u32]) -> usize {
    let mut count = vec![0usize; depth(levels)];
    for &l in levels {
        count[l as usize] += 1;
    }
    count.into_iter().max().unwrap_or(0)
}
