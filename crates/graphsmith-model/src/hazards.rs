//! Hazards: pairs of nodes that no path orders and whose memory accesses conflict.
//!
//! Two accesses *conflict* when they touch at least one common byte of the same buffer
//! ([`Access::overlaps`]) and at least one of them may write ([`AccessMode::may_write`]:
//! `Write`, `ReadWrite` or `Unknown`). Two nodes *race* when they have conflicting accesses
//! and neither reaches the other. A race is reported once per pair of nodes and buffer, as a
//! [`Hazard`] naming both nodes, the buffer, the overlapping bytes and the edge that fixes it.
//!
//! ## How
//!
//! One sweep over a topological order. Reachability comes from vector clocks over a chain
//! cover (`reach.rs`): O(log s) per query. Accesses are grouped by buffer; for each buffer the
//! earlier accesses form a forest in which every child reaches its parent. A new access `x` of
//! node `b` looks at the roots only: a root that reaches `b` becomes a child of `x` (its whole
//! subtree is ordered before `b` and is never looked at again for `b`); a root that does not
//! reach `b` is a race candidate, and only then is its subtree searched, skipping subtrees whose
//! byte range cannot overlap `x` and those whose root reaches `b`. Read-only accesses only look
//! at may-write accesses, so many readers of one buffer cost O(1) each.
//!
//! ## Programmatic and launch-order edges
//!
//! When a graph has edges other than full ones ([`EdgeType`]), the sweep runs over three
//! moments per node, its start, its wait and its end (see `check_events`): accesses before a
//! kernel's wait sit at its start, the others at its wait, and every access is over at its
//! node's end. The same forest works on moments; a graph of full edges only takes the
//! one-moment sweep.
//!
//! ## Cost
//!
//! For well-ordered buffers (each access ordered after the previous writer, readers between
//! writers) every access does O(1) queries, so the whole check is O(N + E·s + A log s) for `A`
//! accesses, `s` the average clock size. Races cost in proportion to what they report. The worst
//! case is `k` accesses to one buffer that are mutually unordered yet do not conflict (e.g. `k`
//! concurrent kernels writing disjoint slices of one buffer): O(k²) reachability queries.

use std::collections::HashMap;

use crate::graph::{Edge, EdgeType, Graph, ModelError};
use crate::hazard_report::{union, Hazard, HazardKind, HazardNode, HazardOptions, HazardReport};
use crate::node::{AccessMode, NodeId, NodeKind};
use crate::reach::Clocks;
use crate::topo::{self, Adjacency};
use crate::unknown_memory::UnknownMemory;

impl Graph {
    /// Every pair of nodes that no path orders and whose accesses conflict, in this graph and,
    /// separately, inside each child graph. Uses [`crate::Node::accesses`] only: whoever builds
    /// the model supplies them (graphsmith's launches, memcpy and memset operands, kernel
    /// arguments matched to allocations).
    ///
    /// A cycle or a bad edge, in this graph or a child graph, is a [`ModelError`].
    ///
    /// ```
    /// # use graphsmith_model::{Access, AccessMode, Graph, HazardKind, NodeKind};
    /// let access = |mode| Access { buffer: 0x1000, label: "q".into(), offset: 0, len: 256, mode };
    /// let mut g = Graph::new("g");
    /// let w = g.add_node_with("proj", NodeKind::Empty, None, vec![access(AccessMode::Write)]);
    /// let r = g.add_node_with("attn", NodeKind::Empty, None, vec![access(AccessMode::Read)]);
    /// let report = g.hazards().unwrap();
    /// assert_eq!(report.hazards[0].kind, HazardKind::ReadAfterWrite);
    /// assert_eq!((report.hazards[0].fix.from, report.hazards[0].fix.to), (w, r));
    /// g.add_edge(w, r).unwrap();
    /// assert!(g.hazards().unwrap().is_clean());
    /// ```
    pub fn hazards(&self) -> Result<HazardReport, ModelError> {
        self.hazards_with(&HazardOptions::default())
    }

    /// [`Graph::hazards`], with `options` for what the model does not know (kernels read from a
    /// dump).
    ///
    /// ```
    /// # use graphsmith_model::{Access, AccessMode, Dim3, Graph, HazardKind, HazardOptions,
    /// #     KernelParams, NodeKind};
    /// let mut g = Graph::new("dump");
    /// let set = Access { buffer: 0x1000, label: String::new(), offset: 0, len: 256,
    ///     mode: AccessMode::Write };
    /// let s = g.add_node_with("memset#0", NodeKind::Empty, None, vec![set]);
    /// let kernel = NodeKind::Kernel(KernelParams { name: "k".into(), grid: Dim3::linear(1),
    ///     block: Dim3::linear(32), shared_mem_bytes: 0, args: vec![], cluster: None });
    /// let k = g.add_node("k#1", kernel.clone());
    /// g.add_node("k#2", kernel);
    /// assert!(g.hazards().unwrap().is_clean());
    /// let options = HazardOptions { unknown_kernel_memory: true };
    /// let report = g.hazards_with(&options).unwrap();
    /// assert_eq!(report.hazards.len(), 2); // the memset against each kernel
    /// assert_eq!(report.hazards[0].kind, HazardKind::PossibleKernelAccess);
    /// assert_eq!((report.hazards[0].fix.from, report.hazards[0].fix.to), (s, k));
    /// assert_eq!(report.unjudged_kernel_pairs, 1); // k#1 and k#2
    /// ```
    pub fn hazards_with(&self, options: &HazardOptions) -> Result<HazardReport, ModelError> {
        let mut report = HazardReport::default();
        let mut todo = vec![(self, Vec::new(), format!("graph '{}'", self.label))];
        while let Some((graph, path, location)) = todo.pop() {
            check_graph(graph, &path, &location, options, &mut report)?;
            for node in graph.nodes.iter().rev() {
                let body = matches!(node.kind, NodeKind::Conditional { .. });
                for (i, child) in node.kind.nested_graphs().iter().enumerate().rev() {
                    let mut inner = path.clone();
                    inner.push(node.id);
                    let part = if body {
                        format!("body {i} graph")
                    } else {
                        "graph".to_string()
                    };
                    let where_ = format!(
                        "{location} > node '{}' ({}) > {part} '{}'",
                        node.label, node.id, child.label
                    );
                    todo.push((child, inner, where_));
                }
            }
        }
        report.hazards.sort_by(|a, b| {
            (&a.path, a.first.id, a.second.id, a.buffer, a.offset).cmp(&(
                &b.path,
                b.first.id,
                b.second.id,
                b.buffer,
                b.offset,
            ))
        });
        Ok(report)
    }
}

/// A conflict between two accesses: `a` (earlier in the sweep) and `b`.
struct Conflict {
    a: NodeId,
    a_mode: AccessMode,
    b: NodeId,
    b_mode: AccessMode,
    buffer: u32,
    lo: u64,
    hi: u64,
}

fn check_graph(
    graph: &Graph,
    path: &[NodeId],
    location: &str,
    options: &HazardOptions,
    report: &mut HazardReport,
) -> Result<(), ModelError> {
    let adj = graph.adjacency()?;
    let order = topo::topological_order(graph, &adj)?;
    report.graphs += 1;
    let mut sweep = Sweep::default();
    let mut unknown = UnknownMemory::new(options);
    if graph.edges.iter().all(|e| e.ty.is_full()) {
        // Every edge orders everything: one moment per node.
        let mut clocks = Clocks::new(&adj);
        for &v in &order {
            clocks.visit(v);
            unknown.visit(graph, v, &clocks);
            let node = &graph.nodes[v.index()];
            sweep.count(node, report);
            let accesses = node.accesses.iter().chain(&node.accesses_before_wait);
            sweep.add(accesses, v, v, &clocks, report);
            clocks.finish(v);
        }
    } else {
        check_events(graph, &order, &mut sweep, report)?;
        if options.unknown_kernel_memory {
            // Kernels whose memory is unknown are taken to touch it after their wait: only
            // launch-order edges, which order no memory, are left out.
            let pairs = graph.edges.iter().filter(|e| e.ty != EdgeType::LaunchOrder);
            let ordering = Adjacency::from_pairs(graph.len(), pairs.map(|e| (e.from, e.to)));
            let mut clocks = Clocks::new(&ordering);
            for &v in &order {
                clocks.visit(v);
                unknown.visit(graph, v, &clocks);
                clocks.finish(v);
            }
        }
    }
    report.hazards.extend(merge(
        graph,
        path,
        location,
        &sweep.buffers,
        sweep.conflicts,
    ));
    unknown.finish(graph, path, location, report);
    Ok(())
}

/// The sweep of a graph with programmatic or launch-order edges, over three moments per node
/// `v`: its start `3v`, its wait `3v + 1` and its end `3v + 2` (see [`EdgeType`]). A full edge
/// `u -> v` orders the end of `u` before the start of `v`; a programmatic edge orders the start
/// of `u` before the start of `v` and the end of `u` before the wait of `v` (the wait of `v`
/// returns once `u` has finished), and, when `u` triggers only after its own wait
/// ([`crate::Node::triggers_after_wait`]), the wait of `u` before the start of `v`; a
/// launch-order edge orders the starts only. `accesses_before_wait` happen at the start,
/// `accesses` at the wait, and every access is over at its node's end, so an access is ordered
/// before an access at moment `m` exactly when the end of its node reaches `m`.
fn check_events(
    graph: &Graph,
    order: &[NodeId],
    sweep: &mut Sweep,
    report: &mut HazardReport,
) -> Result<(), ModelError> {
    let n = graph.len();
    let limit = u32::MAX as usize / 3;
    if n > limit {
        return Err(ModelError::TooManyNodes {
            graph: graph.label.clone(),
            limit: limit as u64,
        });
    }
    let start = |v: NodeId| NodeId(3 * v.0);
    let wait = |v: NodeId| NodeId(3 * v.0 + 1);
    let end = |v: NodeId| NodeId(3 * v.0 + 2);
    // Edges first, then each node's start -> wait -> end: a moment then lists the moments of
    // its predecessors along edges before its own node's earlier moment, and the sweep extends
    // their chain (`reach.rs` extends the chain of the first predecessor that ends one), so a
    // programmatic chain takes a few chains, not one per node.
    let mut pairs = Vec::with_capacity(2 * n + 3 * graph.edges.len());
    for e in &graph.edges {
        match e.ty {
            EdgeType::Full => pairs.push((end(e.from), start(e.to))),
            EdgeType::Programmatic => {
                pairs.push((start(e.from), start(e.to)));
                pairs.push((end(e.from), wait(e.to)));
                if graph.nodes[e.from.index()].triggers_after_wait {
                    pairs.push((wait(e.from), start(e.to)));
                }
            }
            EdgeType::LaunchOrder => pairs.push((start(e.from), start(e.to))),
        }
    }
    for i in 0..n as u32 {
        pairs.push((start(NodeId(i)), wait(NodeId(i))));
        pairs.push((wait(NodeId(i)), end(NodeId(i))));
    }
    let events = Adjacency::from_pairs(3 * n, pairs.iter().copied());
    let mut clocks = Clocks::new(&events);
    // Start, wait, end, nodes in topological order: a topological order of the moments.
    for &v in order {
        let node = &graph.nodes[v.index()];
        sweep.count(node, report);
        for (moment, accesses) in [
            (start(v), &node.accesses_before_wait),
            (wait(v), &node.accesses),
        ] {
            clocks.visit(moment);
            sweep.add(accesses.iter(), end(v), moment, &clocks, report);
            clocks.finish(moment);
        }
        clocks.visit(end(v));
        clocks.finish(end(v));
    }
    for c in &mut sweep.conflicts {
        c.a = NodeId(c.a.0 / 3);
        c.b = NodeId(c.b.0 / 3);
    }
    // A node's accesses before and after its own wait are not a race between nodes.
    sweep.conflicts.retain(|c| c.a != c.b);
    Ok(())
}

/// The buffers seen by a sweep and the conflicts found.
#[derive(Default)]
struct Sweep {
    index: HashMap<u64, u32>,
    buffers: Vec<BufferState>,
    conflicts: Vec<Conflict>,
}

impl Sweep {
    /// Counts a node with accesses.
    fn count(&mut self, node: &crate::Node, report: &mut HazardReport) {
        let all = node.accesses.iter().chain(&node.accesses_before_wait);
        if all.clone().any(|a| a.len > 0) {
            report.nodes_with_accesses += 1;
        }
    }

    /// Adds the accesses of one moment: each is ordered after the earlier accesses whose
    /// `source` reaches `target`, and is itself over at `source`.
    fn add<'a>(
        &mut self,
        accesses: impl Iterator<Item = &'a crate::Access>,
        source: NodeId,
        target: NodeId,
        clocks: &Clocks,
        report: &mut HazardReport,
    ) {
        for access in accesses.filter(|a| a.len > 0) {
            report.accesses += 1;
            let buffers = &mut self.buffers;
            let b = *self.index.entry(access.buffer).or_insert_with(|| {
                buffers.push(BufferState::new(access.buffer));
                (buffers.len() - 1) as u32
            });
            let state = &mut self.buffers[b as usize];
            if state.label.is_empty() && !access.label.is_empty() {
                state.label = access.label.clone();
            }
            let lo = access.offset;
            let hi = access.offset.saturating_add(access.len);
            let at = Moment { source, target };
            state.add(at, lo, hi, access.mode, clocks, b, &mut self.conflicts);
        }
    }
}

/// Where an access sits in the sweep: queries end at `target`; later accesses ask whether
/// `source` reaches them. Both are the node itself when every edge is full.
#[derive(Clone, Copy)]
struct Moment {
    source: NodeId,
    target: NodeId,
}

/// One [`Hazard`] per pair of nodes and buffer, from the access-level conflicts.
fn merge(
    graph: &Graph,
    path: &[NodeId],
    location: &str,
    buffers: &[BufferState],
    mut conflicts: Vec<Conflict>,
) -> Vec<Hazard> {
    conflicts.sort_by_key(|c| (c.a, c.b, c.buffer));
    let mut out: Vec<Hazard> = Vec::new();
    let mut last: Option<(NodeId, NodeId, u32)> = None;
    for c in conflicts {
        let Some(kind) = HazardKind::of(c.a_mode, c.b_mode) else {
            continue;
        };
        let key = (c.a, c.b, c.buffer);
        if let (Some(prev), Some(h)) = (last, out.last_mut()) {
            if prev == key {
                h.kind = h.kind.min(kind);
                h.first.mode = union(h.first.mode, c.a_mode);
                h.second.mode = union(h.second.mode, c.b_mode);
                let lo = h.offset.min(c.lo);
                let hi = h.offset.saturating_add(h.len).max(c.hi);
                h.offset = lo;
                h.len = hi - lo;
                continue;
            }
        }
        last = Some(key);
        let state = &buffers[c.buffer as usize];
        let side = |id: NodeId, mode| HazardNode {
            id,
            label: graph.nodes[id.index()].label.clone(),
            mode,
        };
        out.push(Hazard {
            kind,
            path: path.to_vec(),
            graph: location.to_string(),
            first: side(c.a, c.a_mode),
            second: side(c.b, c.b_mode),
            buffer: state.address,
            buffer_label: if state.label.is_empty() {
                format!("0x{:x}", state.address)
            } else {
                state.label.clone()
            },
            offset: c.lo,
            len: c.hi - c.lo,
            fix: Edge::full(c.a, c.b),
        });
    }
    out
}

const NONE: u32 = u32::MAX;

/// One access in a buffer's forest. Every child reaches its parent.
struct Entry {
    node: NodeId,
    lo: u64,
    hi: u64,
    mode: AccessMode,
    /// Byte range covering this entry and every descendant.
    hull: (u64, u64),
    /// Byte range covering this entry and its may-write descendants.
    write_hull: (u64, u64),
    /// First may-write child (list linked through `next`).
    write_child: u32,
    /// First read-only child; read-only entries never have children.
    read_child: u32,
    next: u32,
}

/// The accesses to one buffer seen so far.
struct BufferState {
    address: u64,
    label: String,
    entries: Vec<Entry>,
    /// May-write entries that reach no later may-write entry of this buffer (as far as known).
    write_roots: Vec<u32>,
    /// Read-only entries not yet under a may-write entry.
    read_roots: Vec<u32>,
    /// Reused work lists.
    keep: Vec<u32>,
    stack: Vec<u32>,
}

fn overlaps((lo, hi): (u64, u64), x_lo: u64, x_hi: u64) -> bool {
    lo < x_hi && x_lo < hi
}

fn cover(a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
    (a.0.min(b.0), a.1.max(b.1))
}

impl BufferState {
    fn new(address: u64) -> Self {
        Self {
            address,
            label: String::new(),
            entries: Vec::new(),
            write_roots: Vec::new(),
            read_roots: Vec::new(),
            keep: Vec::new(),
            stack: Vec::new(),
        }
    }

    /// Adds the access `[lo, hi)` at `at` (its target is the moment being visited) and records
    /// its conflicts with every earlier access that does not reach it.
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        at: Moment,
        lo: u64,
        hi: u64,
        mode: AccessMode,
        clocks: &Clocks,
        buffer: u32,
        out: &mut Vec<Conflict>,
    ) {
        let (b, target) = (at.source, at.target);
        let x = self.entries.len() as u32;
        self.entries.push(Entry {
            node: b,
            lo,
            hi,
            mode,
            hull: (lo, hi),
            write_hull: (lo, hi),
            write_child: NONE,
            read_child: NONE,
            next: NONE,
        });
        let report = |e: &Entry, out: &mut Vec<Conflict>| {
            if e.lo < hi && lo < e.hi && (e.mode.may_write() || mode.may_write()) {
                out.push(Conflict {
                    a: e.node,
                    a_mode: e.mode,
                    b,
                    b_mode: mode,
                    buffer,
                    lo: e.lo.max(lo),
                    hi: e.hi.min(hi),
                });
            }
        };
        let writes = mode.may_write();
        // May-write roots: adopted when they reach `b` (only by a may-write access), searched
        // when they do not.
        let roots = std::mem::take(&mut self.write_roots);
        self.keep.clear();
        for &r in &roots {
            let node = self.entries[r as usize].node;
            if clocks.reaches(node, target) {
                if writes {
                    self.adopt(x, r, true);
                } else {
                    self.keep.push(r);
                }
                continue;
            }
            self.keep.push(r);
            let reach = if writes {
                self.entries[r as usize].hull
            } else {
                self.entries[r as usize].write_hull
            };
            if !overlaps(reach, lo, hi) {
                continue;
            }
            // Search the subtree of `r` for entries that do not reach `b`.
            self.stack.clear();
            self.stack.push(r);
            while let Some(e) = self.stack.pop() {
                let entry = &self.entries[e as usize];
                report(entry, out);
                if writes {
                    let mut c = entry.read_child;
                    while c != NONE {
                        let child = &self.entries[c as usize];
                        if overlaps((child.lo, child.hi), lo, hi)
                            && !clocks.reaches(child.node, target)
                        {
                            report(child, out);
                        }
                        c = child.next;
                    }
                }
                let mut c = entry.write_child;
                while c != NONE {
                    let child = &self.entries[c as usize];
                    let span = if writes { child.hull } else { child.write_hull };
                    if overlaps(span, lo, hi) && !clocks.reaches(child.node, target) {
                        self.stack.push(c);
                    }
                    c = child.next;
                }
            }
        }
        self.write_roots = std::mem::take(&mut self.keep);
        self.keep = roots;
        if !writes {
            self.read_roots.push(x);
            return;
        }
        // Read-only roots: only a may-write access conflicts with them.
        let roots = std::mem::take(&mut self.read_roots);
        self.keep.clear();
        for &r in &roots {
            let entry = &self.entries[r as usize];
            if clocks.reaches(entry.node, target) {
                self.adopt(x, r, false);
            } else {
                report(entry, out);
                self.keep.push(r);
            }
        }
        self.read_roots = std::mem::take(&mut self.keep);
        self.keep = roots;
        self.write_roots.push(x);
    }

    /// Makes `child` (which reaches the node of `parent`) a child of `parent`.
    fn adopt(&mut self, parent: u32, child: u32, may_write: bool) {
        let (hull, write_hull) = {
            let c = &self.entries[child as usize];
            (c.hull, c.write_hull)
        };
        let p = &mut self.entries[parent as usize];
        p.hull = cover(p.hull, hull);
        let head = if may_write {
            p.write_hull = cover(p.write_hull, write_hull);
            std::mem::replace(&mut p.write_child, child)
        } else {
            std::mem::replace(&mut p.read_child, child)
        };
        self.entries[child as usize].next = head;
    }
}
