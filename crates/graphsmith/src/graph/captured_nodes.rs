//! Which node each journaled operation of a capture became, worked out when the captured graph
//! is first read back, and the labels, lines, ranges and accesses handed to those nodes.
//!
//! The journal asks the driver for an operation's node (`cuStreamGetCaptureInfo`) only where it
//! cannot be found later: the first work on a stream, and work after anything else happened in
//! the capture (a wait, a record, a join, an operation on another stream, a library call, an
//! operation graphsmith only journaled). Such an entry is *anchored* to its node. Every other
//! work entry is *chained*: the operation just before it in the whole capture was one-node work
//! on the same stream, so its node is the one node that depends on exactly that node, is of the
//! operation's kind, has its target (a kernel's function, a copy's or set's destination) and
//! belongs to no other entry. A chained entry whose node is not found so (e.g. work issued
//! behind graphsmith's back in between, even a raw launch of the same node kind) stays
//! unlabelled, as do the chained entries after it up to the next anchor; the foreign node
//! keeps the label the read-back gave it.

use std::collections::HashMap;

use cudarc::driver::sys;
use graphsmith_analysis::Outcome;
use graphsmith_model::{self as model, Provenance};

use crate::context::{one_node_kind, Entry, Kind};
use crate::graph::KernelFn;

/// What matching needs of one node of the read-back graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeFacts {
    pub handle: usize,
    pub kind: &'static str,
    /// The node's one dependency (index), when it has exactly one.
    pub single_dep: Option<usize>,
    /// A kernel's function handle, a copy's or set's destination address, when known.
    pub target: Option<u64>,
}

/// What matching needs of one journal entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// Whether the entry is captured work (only those became nodes).
    pub work: bool,
    pub stream: Option<usize>,
    /// The node the driver named right after the operation.
    pub anchor: Option<usize>,
    /// The entry follows one-node work on the same stream, with nothing in between.
    pub chained: bool,
    /// The kind of node the operation makes, when it makes exactly one.
    pub kind: Option<&'static str>,
    /// A kernel's function handle, a copy's or set's destination address: a chained entry's
    /// node must have the same.
    pub target: Option<u64>,
}

impl Wanted {
    pub(crate) fn of(e: &Entry) -> Wanted {
        Wanted {
            work: e.kind == Kind::Work && e.outcome == Outcome::Captured,
            stream: e.stream,
            anchor: e.node,
            chained: e.chained,
            kind: one_node_kind(e.op),
            target: e.target,
        }
    }
}

/// The node (index into `nodes`) of each entry, `None` where unknown.
pub(crate) fn match_nodes(nodes: &[NodeFacts], entries: &[Wanted]) -> Vec<Option<usize>> {
    let by_handle: HashMap<usize, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.handle, i))
        .collect();
    // Nodes by their one dependency, in index order.
    let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if let Some(dep) = n.single_dep {
            children.entry(dep).or_default().push(i);
        }
    }
    let mut claimed = vec![false; nodes.len()];
    let mut last: HashMap<usize, Option<usize>> = HashMap::new();
    let mut out = Vec::with_capacity(entries.len());
    for w in entries {
        if !w.work {
            out.push(None);
            continue;
        }
        let found = match (w.anchor, w.chained) {
            (Some(handle), _) => by_handle.get(&handle).copied(),
            (None, true) => {
                let prev = w.stream.and_then(|s| last.get(&s).copied().flatten());
                let mut candidates = prev
                    .and_then(|p| children.get(&p))
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(|&c| {
                        !claimed[c]
                            && w.kind.is_none_or(|k| nodes[c].kind == k)
                            && w.target.is_none_or(|t| nodes[c].target == Some(t))
                    });
                match (candidates.next(), candidates.next()) {
                    (Some(c), None) => Some(c),
                    _ => None,
                }
            }
            (None, false) => None,
        };
        if let Some(i) = found {
            claimed[i] = true;
        }
        if let Some(s) = w.stream {
            last.insert(s, found);
        }
        out.push(found);
    }
    out
}

/// What matching needs of the read-back graph (`kernels`: each node's kernel, as read back).
fn node_facts(
    graph: &model::Graph,
    handles: &[sys::CUgraphNode],
    kernels: &[Option<KernelFn>],
) -> Vec<NodeFacts> {
    let mut deps: Vec<(usize, Option<usize>)> = vec![(0, None); graph.nodes.len()];
    for e in &graph.edges {
        if let Some(d) = deps.get_mut(e.to.index()) {
            d.0 += 1;
            d.1 = Some(e.from.index());
        }
    }
    graph
        .nodes
        .iter()
        .zip(handles)
        .zip(deps)
        .enumerate()
        .map(|(i, ((n, &h), (count, dep)))| NodeFacts {
            handle: h as usize,
            kind: n.kind.name(),
            single_dep: if count == 1 { dep } else { None },
            target: match &n.kind {
                model::NodeKind::Kernel(_) => kernels
                    .get(i)
                    .and_then(|k| k.as_ref())
                    .map(|k| k.func as u64),
                model::NodeKind::Memcpy(p) => Some(p.dst.address),
                model::NodeKind::Memset(p) => Some(p.dst),
                _ => None,
            },
        })
        .collect()
}

/// Labels the nodes of a captured graph, read back into `graph` (with the driver node and the
/// kernel of each model node in `handles` and `kernels`), with what the capture's journal
/// recorded: label, line, thread, ranges and accesses. Where two entries name one node, the
/// later wins.
pub(crate) fn label_captured(
    graph: &mut model::Graph,
    handles: &[sys::CUgraphNode],
    kernels: &[Option<KernelFn>],
    journal: Vec<Entry>,
) {
    let wanted: Vec<Wanted> = journal.iter().map(Wanted::of).collect();
    let found = match_nodes(&node_facts(graph, handles, kernels), &wanted);
    for (e, index) in journal.into_iter().zip(found) {
        let Some(node) = index.and_then(|i| graph.nodes.get_mut(i)) else {
            continue;
        };
        node.provenance = Some(Provenance {
            file: e.at.file.to_string(),
            line: e.at.line,
            column: e.at.column,
            ranges: e.ranges.to_vec(),
            thread: Some(e.thread.1.to_string()),
        });
        node.label = e.label.to_string();
        node.accesses = e.accesses.to_vec();
        node.accesses_before_wait = e
            .before_wait
            .as_deref()
            .map_or_else(Vec::new, <[_]>::to_vec);
        node.triggers_after_wait = e.triggers_after_wait;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(handle: usize, kind: &'static str, dep: Option<usize>) -> NodeFacts {
        NodeFacts {
            handle,
            kind,
            single_dep: dep,
            target: None,
        }
    }

    /// A node whose kernel function (or copy or set destination) is `target`.
    fn node_of(handle: usize, kind: &'static str, dep: Option<usize>, target: u64) -> NodeFacts {
        NodeFacts {
            target: Some(target),
            ..node(handle, kind, dep)
        }
    }

    fn work(stream: usize, anchor: Option<usize>, chained: bool) -> Wanted {
        Wanted {
            work: true,
            stream: Some(stream),
            anchor,
            chained,
            kind: Some("kernel"),
            target: None,
        }
    }

    /// Work of `kind` whose kernel function (or copy or set destination) is `target`.
    fn work_of(stream: usize, anchor: Option<usize>, kind: &'static str, target: u64) -> Wanted {
        Wanted {
            kind: Some(kind),
            target: Some(target),
            ..work(stream, anchor, anchor.is_none())
        }
    }

    fn other(stream: usize) -> Wanted {
        Wanted {
            work: false,
            stream: Some(stream),
            anchor: None,
            chained: false,
            kind: None,
            target: None,
        }
    }

    #[test]
    fn a_chain_follows_its_anchor() {
        let nodes = [
            node(10, "kernel", None),
            node(11, "kernel", Some(0)),
            node(12, "kernel", Some(1)),
        ];
        let entries = [
            work(1, Some(10), false),
            work(1, None, true),
            work(1, None, true),
        ];
        assert_eq!(
            match_nodes(&nodes, &entries),
            vec![Some(0), Some(1), Some(2)]
        );
    }

    #[test]
    fn nodes_in_any_order_are_found_by_their_dependency() {
        // The driver lists the nodes in another order than they were made.
        let nodes = [
            node(12, "kernel", Some(2)),
            node(11, "kernel", Some(2)),
            node(10, "kernel", None),
        ];
        let mut second_branch = work(2, Some(12), false);
        second_branch.chained = false;
        let entries = [
            work(1, Some(10), false),
            other(2),
            second_branch,
            other(1),
            work(1, Some(11), false),
        ];
        assert_eq!(
            match_nodes(&nodes, &entries),
            vec![Some(2), None, Some(0), None, Some(1)]
        );
    }

    #[test]
    fn a_fork_is_told_apart_by_what_is_claimed_and_by_kind() {
        // Root 0 has two children: a kernel (1, anchored on another stream) and a memset (2).
        let nodes = [
            node(10, "kernel", None),
            node(11, "kernel", Some(0)),
            node(12, "memset", Some(0)),
        ];
        let memset = Wanted {
            kind: Some("memset"),
            ..work(1, None, true)
        };
        let entries = [work(1, Some(10), false), memset];
        assert_eq!(match_nodes(&nodes, &entries), vec![Some(0), Some(2)]);
        // Two kernels depending on the root: a chained kernel is ambiguous until one is claimed.
        let ambiguous = [work(1, Some(10), false), work(1, None, true)];
        let nodes = [
            node(10, "kernel", None),
            node(11, "kernel", Some(0)),
            node(12, "kernel", Some(0)),
        ];
        assert_eq!(match_nodes(&nodes, &ambiguous), vec![Some(0), None]);
        let claimed = [
            work(2, Some(10), false),
            work(3, Some(12), false),
            work(2, None, true),
        ];
        assert_eq!(
            match_nodes(&nodes, &claimed),
            vec![Some(0), Some(2), Some(1)]
        );
    }

    #[test]
    fn a_lost_chain_stays_lost_until_the_next_anchor() {
        // Foreign work (node 1, a memcpy) between two graphsmith kernels on one stream.
        let nodes = [
            node(10, "kernel", None),
            node(11, "memcpy", Some(0)),
            node(12, "kernel", Some(1)),
            node(13, "kernel", Some(2)),
            node(14, "kernel", Some(3)),
        ];
        let entries = [
            work(1, Some(10), false),
            work(1, None, true),
            work(1, None, true),
            work(1, Some(14), false),
        ];
        assert_eq!(
            match_nodes(&nodes, &entries),
            vec![Some(0), None, None, Some(4)]
        );
    }

    #[test]
    fn a_raw_launch_of_the_same_kind_steals_no_label() {
        // Kernel A (function 1), then a kernel launched through raw driver calls (function 9,
        // not journaled), then graphsmith's B (function 2) and C (function 2) on one stream.
        let nodes = [
            node_of(10, "kernel", None, 1),
            node_of(11, "kernel", Some(0), 9),
            node_of(12, "kernel", Some(1), 2),
            node_of(13, "kernel", Some(2), 2),
        ];
        let entries = [
            work_of(1, Some(10), "kernel", 1),
            work_of(1, None, "kernel", 2),
            work_of(1, None, "kernel", 2),
        ];
        // The foreign node stays unlabelled, and so does the chain after it.
        assert_eq!(match_nodes(&nodes, &entries), vec![Some(0), None, None]);
        // Without the foreign launch the chain is followed.
        let nodes = [
            node_of(10, "kernel", None, 1),
            node_of(12, "kernel", Some(0), 2),
            node_of(13, "kernel", Some(1), 2),
        ];
        assert_eq!(
            match_nodes(&nodes, &entries),
            vec![Some(0), Some(1), Some(2)]
        );
        // A kernel whose function was not read back matches no entry that names one.
        let nodes = [node_of(10, "kernel", None, 1), node(11, "kernel", Some(0))];
        assert_eq!(match_nodes(&nodes, &entries[..2]), vec![Some(0), None]);
    }

    #[test]
    fn copies_and_sets_are_told_apart_by_their_destination() {
        // A graphsmith memset of 0x1000, a raw memset of 0x2000, then graphsmith's memset of
        // 0x3000 chained to the first; and the same with copies.
        for kind in ["memset", "memcpy"] {
            let nodes = [
                node_of(10, kind, None, 0x1000),
                node_of(11, kind, Some(0), 0x2000),
                node_of(12, kind, Some(1), 0x3000),
            ];
            let entries = [
                work_of(1, Some(10), kind, 0x1000),
                work_of(1, None, kind, 0x3000),
            ];
            assert_eq!(match_nodes(&nodes, &entries), vec![Some(0), None], "{kind}");
            let nodes = [
                node_of(10, kind, None, 0x1000),
                node_of(12, kind, Some(0), 0x3000),
            ];
            assert_eq!(
                match_nodes(&nodes, &entries),
                vec![Some(0), Some(1)],
                "{kind}"
            );
        }
    }

    #[test]
    fn entries_that_are_not_captured_work_get_no_node() {
        let nodes = [node(10, "kernel", None)];
        let mut failed = work(1, Some(10), false);
        failed.work = false;
        assert_eq!(match_nodes(&nodes, &[failed]), vec![None]);
        // An anchor the graph does not hold (a node of another graph) matches nothing.
        assert_eq!(match_nodes(&nodes, &[work(1, Some(99), false)]), vec![None]);
    }

    #[test]
    fn one_node_kinds() {
        assert_eq!(one_node_kind("Stream::launch"), Some("kernel"));
        assert_eq!(one_node_kind("Stream::memset"), Some("memset"));
        assert_eq!(one_node_kind("Stream::copy"), Some("memcpy"));
        assert_eq!(one_node_kind("Stream::library_call"), None);
    }
}
