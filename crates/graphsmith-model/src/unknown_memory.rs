//! Nodes whose memory is not known: kernels read from a dump, which holds no kernel arguments.
//!
//! With [`HazardOptions::unknown_kernel_memory`], a kernel node without accesses may touch any
//! byte. Then, in each graph:
//!
//! - a kernel node and a node with known accesses (a copy or a set, or a child graph holding
//!   only such) that no path orders are a **possible hazard** on each buffer the second node
//!   touches ([`HazardKind::PossibleKernelAccess`]): the planted race between a kernel and a copy
//!   is found, and a person confirms it;
//! - two unordered nodes that both run such kernels (kernel nodes, child graphs holding one, and
//!   conditional nodes, whose bodies are not modelled) cannot be judged: they are counted
//!   ([`HazardReport::unjudged_kernel_pairs`]), not reported;
//! - an unordered pair of a child graph or conditional running such kernels and a node with
//!   known accesses is counted too ([`HazardReport::unjudged_nested_pairs`]).
//!
//! **How.** During the hazard sweep each node of these classes is kept on the list of its chain
//! (`reach.rs`), positions ascending. The earlier nodes of a class that do not reach `v` are, per
//! chain, those after the clock entry of `v` for that chain: counted with one binary search per
//! chain of `v`'s clock (O(s log n)), listed in time proportional to the pairs found plus the
//! chains that hold the class.

use crate::graph::{Edge, Graph};
use crate::hazard_report::{union, Hazard, HazardKind, HazardNode, HazardOptions, HazardReport};
use crate::node::{AccessMode, Node, NodeId, NodeKind};
use crate::reach::Clocks;

/// What a node is to this check.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// A kernel node whose memory is unknown.
    Kernel,
    /// A child graph or conditional node that runs kernels whose memory is unknown.
    Nested,
    /// A node whose accesses are all known.
    Known,
    /// Touches no memory.
    None,
}

/// Whether `graph` (or a graph nested in it) holds a kernel without accesses or a conditional.
fn runs_unknown_kernels(graph: &Graph) -> bool {
    let mut todo = vec![graph];
    while let Some(g) = todo.pop() {
        for n in &g.nodes {
            match &n.kind {
                NodeKind::Kernel(_)
                    if n.accesses.is_empty() && n.accesses_before_wait.is_empty() =>
                {
                    return true
                }
                NodeKind::Conditional { body_graphs, .. } if body_graphs.is_empty() => return true,
                kind => todo.extend(kind.nested_graphs()),
            }
        }
    }
    false
}

fn class(node: &Node) -> Class {
    match &node.kind {
        NodeKind::Kernel(_) if node.accesses.is_empty() && node.accesses_before_wait.is_empty() => {
            Class::Kernel
        }
        NodeKind::Conditional { body_graphs, .. } if body_graphs.is_empty() => Class::Nested,
        kind if kind.nested_graphs().iter().any(runs_unknown_kernels) => Class::Nested,
        _ if node.accesses.iter().any(|a| a.len > 0) => Class::Known,
        _ => Class::None,
    }
}

/// The visited nodes of one class, per chain, positions ascending.
#[derive(Default)]
struct PerChain {
    lists: Vec<Vec<(u32, NodeId)>>,
    /// Chains with a non-empty list.
    chains: Vec<u32>,
    total: u64,
}

impl PerChain {
    fn add(&mut self, (chain, position): (u32, u32), v: NodeId) {
        let c = chain as usize;
        if self.lists.len() <= c {
            self.lists.resize_with(c + 1, Vec::new);
        }
        if self.lists[c].is_empty() {
            self.chains.push(chain);
        }
        self.lists[c].push((position, v));
        self.total += 1;
    }

    /// How many nodes of the lists do not reach `v` (being visited).
    fn unordered_count(&self, clocks: &Clocks, v: NodeId) -> u64 {
        let ordered: u64 = clocks
            .clock(v)
            .iter()
            .filter_map(|&(c, i)| {
                let list = self.lists.get(c as usize)?;
                Some(list.partition_point(|&(p, _)| p <= i) as u64)
            })
            .sum();
        self.total.saturating_sub(ordered)
    }

    /// The nodes of the lists that do not reach `v` (being visited).
    fn unordered<'a>(&'a self, clocks: &'a Clocks, v: NodeId) -> impl Iterator<Item = NodeId> + 'a {
        self.chains.iter().flat_map(move |&c| {
            let list = &self.lists[c as usize];
            let cut = list.partition_point(|&(p, _)| p <= clocks.entry(v, c));
            list[cut..].iter().map(|&(_, n)| n)
        })
    }
}

/// The state of the check over one graph's sweep.
pub(crate) struct UnknownMemory {
    on: bool,
    kernels: PerChain,
    nested: PerChain,
    known: PerChain,
    /// `(first, second)` pairs of a kernel and a node with known accesses, in sweep order.
    pairs: Vec<(NodeId, NodeId)>,
    kernel_pairs: u64,
    nested_pairs: u64,
}

impl UnknownMemory {
    pub(crate) fn new(options: &HazardOptions) -> Self {
        Self {
            on: options.unknown_kernel_memory,
            kernels: PerChain::default(),
            nested: PerChain::default(),
            known: PerChain::default(),
            pairs: Vec::new(),
            kernel_pairs: 0,
            nested_pairs: 0,
        }
    }

    /// Checks `v` (visited, its clock alive) against the earlier nodes, then keeps it.
    pub(crate) fn visit(&mut self, graph: &Graph, v: NodeId, clocks: &Clocks) {
        if !self.on {
            return;
        }
        let Some(node) = graph.nodes.get(v.index()) else {
            return;
        };
        let list = match class(node) {
            Class::Kernel => {
                self.pairs
                    .extend(self.known.unordered(clocks, v).map(|m| (m, v)));
                self.kernel_pairs = self
                    .kernel_pairs
                    .saturating_add(self.kernels.unordered_count(clocks, v))
                    .saturating_add(self.nested.unordered_count(clocks, v));
                &mut self.kernels
            }
            Class::Nested => {
                self.kernel_pairs = self
                    .kernel_pairs
                    .saturating_add(self.kernels.unordered_count(clocks, v))
                    .saturating_add(self.nested.unordered_count(clocks, v));
                self.nested_pairs = self
                    .nested_pairs
                    .saturating_add(self.known.unordered_count(clocks, v));
                &mut self.nested
            }
            Class::Known => {
                self.pairs
                    .extend(self.kernels.unordered(clocks, v).map(|k| (k, v)));
                self.nested_pairs = self
                    .nested_pairs
                    .saturating_add(self.nested.unordered_count(clocks, v));
                &mut self.known
            }
            Class::None => return,
        };
        list.add(clocks.chain_position(v), v);
    }

    /// Adds the possible hazards and the counts to `report`.
    pub(crate) fn finish(
        self,
        graph: &Graph,
        path: &[NodeId],
        location: &str,
        report: &mut HazardReport,
    ) {
        report.unjudged_kernel_pairs = report
            .unjudged_kernel_pairs
            .saturating_add(self.kernel_pairs);
        report.unjudged_nested_pairs = report
            .unjudged_nested_pairs
            .saturating_add(self.nested_pairs);
        for (first, second) in self.pairs {
            let (Some(a), Some(b)) = (
                graph.nodes.get(first.index()),
                graph.nodes.get(second.index()),
            ) else {
                continue;
            };
            let known = if a.accesses.is_empty() { b } else { a };
            // One hazard per buffer the known side touches: its modes, the range covering them.
            let mut buffers: Vec<(u64, &str, AccessMode, u64, u64)> = Vec::new();
            for x in known.accesses.iter().filter(|x| x.len > 0) {
                let hi = x.offset.saturating_add(x.len);
                match buffers.iter_mut().find(|e| e.0 == x.buffer) {
                    Some(e) => {
                        e.2 = union(e.2, x.mode);
                        e.3 = e.3.min(x.offset);
                        e.4 = e.4.max(hi);
                    }
                    None => buffers.push((x.buffer, &x.label, x.mode, x.offset, hi)),
                }
            }
            for (buffer, label, mode, lo, hi) in buffers {
                let side = |n: &Node| HazardNode {
                    id: n.id,
                    label: n.label.clone(),
                    mode: if std::ptr::eq(n, known) {
                        mode
                    } else {
                        AccessMode::Unknown
                    },
                };
                report.hazards.push(Hazard {
                    kind: HazardKind::PossibleKernelAccess,
                    path: path.to_vec(),
                    graph: location.to_string(),
                    first: side(a),
                    second: side(b),
                    buffer,
                    buffer_label: if label.is_empty() {
                        format!("0x{buffer:x}")
                    } else {
                        label.to_string()
                    },
                    offset: lo,
                    len: hi - lo,
                    fix: Edge::full(first, second),
                });
            }
        }
    }
}
