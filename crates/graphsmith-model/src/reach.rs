//! Reachability queries during one sweep over a topological order: vector clocks over a greedy
//! chain cover.
//!
//! The nodes are split into *chains*: sequences in which each node reaches the next (CUDA graphs
//! made by stream capture or by layer-by-layer builders split into about as many chains as they
//! have streams). A node's *clock* holds, for every chain that reaches it, the position of the
//! last node of that chain that reaches it. Then "does `a` reach `b`?" is one binary search in
//! `b`'s clock: `clock[b][chain(a)] >= position(a)`.
//!
//! Clocks are sparse (only the chains that reach the node), built when the sweep visits the node
//! from its predecessors' clocks, and freed as soon as all successors have been visited, so only
//! the clocks of the sweep's frontier are alive at once.
//!
//! **Cost.** Let `s` be the average clock size (the number of chains that reach a node, at most
//! the number of chains `C`). Building every clock takes O(N + E·s) time; memory is O(N) plus
//! the clocks of the frontier (O(frontier·s)); a query takes O(log s). For graphs of `S` streams,
//! `C` stays close to `S` and the sweep is linear in N + E. The worst case is a graph with many
//! mutually unordered nodes (`C` large) whose descendants all join them (`s` large too): e.g.
//! `k` independent nodes, a join, and then a chain of `m` nodes costs O(k·m). The chain cover is
//! greedy, not minimal (a minimal one needs a bipartite matching over the transitive closure).

use crate::node::NodeId;
use crate::topo::Adjacency;

/// "No chain / no entry" marker.
const NONE: u32 = u32::MAX;

/// The state of a sweep: which nodes were visited, their chains and the live clocks.
pub(crate) struct Clocks<'a> {
    adj: &'a Adjacency,
    /// Chain of each visited node (`NONE` before its visit).
    chain: Vec<u32>,
    /// Position of each visited node on its chain, from 1.
    index: Vec<u32>,
    /// Position of the last node of each chain.
    tail: Vec<u32>,
    /// Sorted `(chain, position)` pairs; emptied when no successor needs it any more.
    clock: Vec<Vec<(u32, u32)>>,
    /// Successors of each node that have not been visited yet.
    pending: Vec<u32>,
    /// Largest position per chain while merging many clocks (0: none yet), and the chains
    /// touched, reused.
    best: Vec<u32>,
    touched: Vec<u32>,
}

impl<'a> Clocks<'a> {
    pub(crate) fn new(adj: &'a Adjacency) -> Self {
        let n = adj.len();
        Self {
            adj,
            chain: vec![NONE; n],
            index: vec![0; n],
            tail: Vec::new(),
            clock: vec![Vec::new(); n],
            pending: (0..n as u32)
                .map(|i| adj.successors(NodeId(i)).len() as u32)
                .collect(),
            best: Vec::new(),
            touched: Vec::new(),
        }
    }

    /// Visits `v`: all its predecessors must have been visited. Builds its clock from theirs and
    /// puts it on a chain. Call [`Clocks::finish`] once the queries that end at `v` are done.
    /// Afterwards the clock of a predecessor whose last successor is `v` may be gone.
    pub(crate) fn visit(&mut self, v: NodeId) {
        let preds = self.adj.predecessors(v);
        let mut clock = self.merged(preds);
        // Extend a chain whose last node reaches `v`: first try a predecessor's own chain, then
        // any chain in the clock (a chain that a fork left behind); else start a new chain.
        let extend = preds
            .iter()
            .find(|p| {
                let c = self.chain[p.index()];
                c != NONE && self.tail[c as usize] == self.index[p.index()]
            })
            .map(|p| self.chain[p.index()])
            .or_else(|| {
                clock
                    .iter()
                    .find(|&&(c, i)| self.tail[c as usize] == i)
                    .map(|&(c, _)| c)
            });
        let c = match extend {
            Some(c) => c,
            None => {
                self.tail.push(0);
                (self.tail.len() - 1) as u32
            }
        };
        let i = self.tail[c as usize] + 1;
        self.tail[c as usize] = i;
        self.chain[v.index()] = c;
        self.index[v.index()] = i;
        match clock.binary_search_by_key(&c, |&(chain, _)| chain) {
            Ok(at) => clock[at].1 = i,
            Err(at) => clock.insert(at, (c, i)),
        }
        self.clock[v.index()] = clock;
    }

    /// Whether `a` reaches `b` (a path `a -> ... -> b`, or `a == b`). Both must have been
    /// visited, and `b` not yet freed (it is until its last successor is finished).
    pub(crate) fn reaches(&self, a: NodeId, b: NodeId) -> bool {
        if a == b {
            return true;
        }
        let c = self.chain[a.index()];
        if c == NONE {
            return false;
        }
        lookup(&self.clock[b.index()], c).is_some_and(|i| i >= self.index[a.index()])
    }

    /// The chain of a visited node and its position on it.
    pub(crate) fn chain_position(&self, v: NodeId) -> (u32, u32) {
        (self.chain[v.index()], self.index[v.index()])
    }

    /// The union of the clocks of `preds`, as the clock of a node being visited.
    ///
    /// When `v` is the last successor of a predecessor, no query needs that predecessor's clock
    /// any more (queries end at the node being visited; redundant edges look at predecessors'
    /// clocks before the visit), so the largest such clock is moved, not copied, and the others
    /// are merged into it in place when they are small. A node on a chain (one predecessor, whose
    /// only successor it is) thus costs O(log s), not O(s).
    fn merged(&mut self, preds: &[NodeId]) -> Vec<(u32, u32)> {
        let movable = preds
            .iter()
            .copied()
            .filter(|p| self.pending[p.index()] == 1)
            .max_by_key(|p| self.clock[p.index()].len());
        if let Some(m) = movable {
            let others: usize = preds
                .iter()
                .filter(|&&p| p != m)
                .map(|p| self.clock[p.index()].len())
                .sum();
            let base_len = self.clock[m.index()].len();
            if others.saturating_mul(8) <= base_len || preds.len() == 1 {
                let mut base = std::mem::take(&mut self.clock[m.index()]);
                for &p in preds.iter().filter(|&&p| p != m) {
                    for &(c, i) in &self.clock[p.index()] {
                        match base.binary_search_by_key(&c, |&(chain, _)| chain) {
                            Ok(at) => base[at].1 = base[at].1.max(i),
                            Err(at) => base.insert(at, (c, i)),
                        }
                    }
                }
                return base;
            }
        }
        match preds {
            [] => Vec::new(),
            [p] => self.clock[p.index()].clone(),
            [p, q] => {
                let mut out = Vec::new();
                merge_max(&self.clock[p.index()], &self.clock[q.index()], &mut out);
                out
            }
            many => self.merge_many(many),
        }
    }

    /// The union of the clocks of `preds` (three or more), in O(T + t log t) for `T` entries in
    /// all and `t` distinct chains, where merging them two at a time would cost O(k·T).
    fn merge_many(&mut self, preds: &[NodeId]) -> Vec<(u32, u32)> {
        if self.best.len() < self.tail.len() {
            self.best.resize(self.tail.len(), 0);
        }
        self.touched.clear();
        for p in preds {
            for &(c, i) in &self.clock[p.index()] {
                let slot = &mut self.best[c as usize];
                if *slot == 0 {
                    self.touched.push(c);
                }
                *slot = (*slot).max(i);
            }
        }
        self.touched.sort_unstable();
        let mut out = Vec::with_capacity(self.touched.len());
        for &c in &self.touched {
            out.push((c, std::mem::take(&mut self.best[c as usize])));
        }
        out
    }

    /// The position of the last node of chain `c` that reaches `v` (0 when none does); `v`'s
    /// clock must still be alive.
    pub(crate) fn entry(&self, v: NodeId, c: u32) -> u32 {
        lookup(&self.clock[v.index()], c).unwrap_or(0)
    }

    /// The clock of a visited node that is still alive: sorted `(chain, position)` pairs.
    pub(crate) fn clock(&self, v: NodeId) -> &[(u32, u32)] {
        &self.clock[v.index()]
    }

    /// Ends the visit of `v`: frees the clocks that no unvisited node needs any more.
    pub(crate) fn finish(&mut self, v: NodeId) {
        for &p in self.adj.predecessors(v) {
            let left = &mut self.pending[p.index()];
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.clock[p.index()] = Vec::new();
            }
        }
        if self.pending[v.index()] == 0 {
            self.clock[v.index()] = Vec::new();
        }
    }
}

/// The position for chain `c` in a sorted clock.
fn lookup(clock: &[(u32, u32)], c: u32) -> Option<u32> {
    clock
        .binary_search_by_key(&c, |&(chain, _)| chain)
        .ok()
        .map(|at| clock[at].1)
}

/// `out = a ∪ b`, the larger position where both have a chain. Linear.
fn merge_max(a: &[(u32, u32)], b: &[(u32, u32)], out: &mut Vec<(u32, u32)>) {
    out.clear();
    out.reserve(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (ca, pa) = a[i];
        let (cb, pb) = b[j];
        if ca < cb {
            out.push(a[i]);
            i += 1;
        } else if cb < ca {
            out.push(b[j]);
            j += 1;
        } else {
            out.push((ca, pa.max(pb)));
            i += 1;
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
}
