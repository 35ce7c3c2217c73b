//! Property tests: on random DAGs with random accesses, `hazards()` agrees with a brute-force
//! reference (all pairs of accesses, reachability by DFS), and `redundant_edges()` with
//! removing each edge and searching for another path.

mod common;

use std::collections::BTreeMap;

use graphsmith_model::{
    Access, AccessMode, Edge, Graph, Hazard, HazardKind, HazardNode, NodeId, NodeKind,
};
use proptest::prelude::*;

fn mode() -> impl Strategy<Value = AccessMode> {
    prop_oneof![
        3 => Just(AccessMode::Read),
        2 => Just(AccessMode::Write),
        1 => Just(AccessMode::ReadWrite),
        1 => Just(AccessMode::Unknown),
    ]
}

/// Accesses to three buffers with small, often overlapping ranges; some labels empty.
fn accesses() -> impl Strategy<Value = Vec<Access>> {
    let access = (1u64..4, any::<bool>(), 0u64..48, 0u64..24, mode()).prop_map(
        |(buffer, named, offset, len, mode)| Access {
            buffer,
            label: if named {
                format!("buf{buffer}")
            } else {
                String::new()
            },
            offset,
            len,
            mode,
        },
    );
    proptest::collection::vec(access, 0..4)
}

/// A random DAG (edges from lower to higher rank, ranks then permuted so edges also run from
/// higher to lower ids) with random accesses. `density` in 0..4 sets edges per node.
fn dag_with_accesses(max_nodes: usize) -> impl Strategy<Value = Graph> {
    (1usize..max_nodes, 0usize..4)
        .prop_flat_map(|(n, density)| {
            let pairs = proptest::collection::vec((0..n, 0..n), 0..n * density + 1);
            let perm = Just((0..n as u32).collect::<Vec<u32>>()).prop_shuffle();
            let acc = proptest::collection::vec(accesses(), n);
            (Just(n), pairs, perm, acc)
        })
        .prop_map(|(n, pairs, perm, acc)| {
            let mut g = Graph::new("random");
            for (i, a) in acc.into_iter().enumerate() {
                g.add_node_with(format!("v{i}"), NodeKind::Empty, None, a);
            }
            for (a, b) in pairs {
                if a != b {
                    let (lo, hi) = (a.min(b), a.max(b));
                    let _ = g.add_edge(NodeId(perm[lo]), NodeId(perm[hi]));
                }
            }
            let _ = n;
            g
        })
}

/// reach[a][b]: a path a -> ... -> b exists (a == b counts), by DFS from every node.
fn closure(g: &Graph) -> Vec<Vec<bool>> {
    let n = g.nodes.len();
    let mut succ = vec![Vec::new(); n];
    for e in &g.edges {
        succ[e.from.index()].push(e.to.index());
    }
    (0..n)
        .map(|s| {
            let mut seen = vec![false; n];
            let mut stack = vec![s];
            while let Some(v) = stack.pop() {
                if !std::mem::replace(&mut seen[v], true) {
                    stack.extend(&succ[v]);
                }
            }
            seen
        })
        .collect()
}

/// The reference: every pair of accesses of different unordered nodes, overlapping, one may
/// write; merged per (first, second, buffer) by the documented rules.
fn brute_hazards(g: &Graph) -> Vec<Hazard> {
    let reach = closure(g);
    let order = g.topological_order().unwrap();
    let mut rank = vec![0usize; g.nodes.len()];
    for (i, v) in order.iter().enumerate() {
        rank[v.index()] = i;
    }
    // Buffer labels: the first non-empty label of a non-empty access, in topological order.
    let mut labels: BTreeMap<u64, String> = BTreeMap::new();
    for v in &order {
        for a in g.nodes[v.index()].accesses.iter().filter(|a| a.len > 0) {
            let l = labels.entry(a.buffer).or_default();
            if l.is_empty() {
                *l = a.label.clone();
            }
        }
    }
    let mut merged: BTreeMap<(NodeId, NodeId, u64), Hazard> = BTreeMap::new();
    for x in &g.nodes {
        for y in &g.nodes {
            if rank[x.id.index()] >= rank[y.id.index()]
                || reach[x.id.index()][y.id.index()]
                || reach[y.id.index()][x.id.index()]
            {
                continue;
            }
            for a in x.accesses.iter().filter(|a| a.len > 0) {
                for b in y.accesses.iter().filter(|b| b.len > 0) {
                    let Some(kind) = HazardKind::of(a.mode, b.mode) else {
                        continue;
                    };
                    if !a.overlaps(b) {
                        continue;
                    }
                    let lo = a.offset.max(b.offset);
                    let hi = (a.offset + a.len).min(b.offset + b.len);
                    let union = |p: AccessMode, q: AccessMode| {
                        if p == q {
                            p
                        } else if p == AccessMode::Unknown || q == AccessMode::Unknown {
                            AccessMode::Unknown
                        } else {
                            AccessMode::ReadWrite
                        }
                    };
                    merged
                        .entry((x.id, y.id, a.buffer))
                        .and_modify(|h| {
                            h.kind = h.kind.min(kind);
                            h.first.mode = union(h.first.mode, a.mode);
                            h.second.mode = union(h.second.mode, b.mode);
                            let end = (h.offset + h.len).max(hi);
                            h.offset = h.offset.min(lo);
                            h.len = end - h.offset;
                        })
                        .or_insert_with(|| Hazard {
                            kind,
                            path: vec![],
                            graph: format!("graph '{}'", g.label),
                            first: HazardNode {
                                id: x.id,
                                label: x.label.clone(),
                                mode: a.mode,
                            },
                            second: HazardNode {
                                id: y.id,
                                label: y.label.clone(),
                                mode: b.mode,
                            },
                            buffer: a.buffer,
                            buffer_label: match labels[&a.buffer].as_str() {
                                "" => format!("0x{:x}", a.buffer),
                                l => l.to_string(),
                            },
                            offset: lo,
                            len: hi - lo,
                            fix: Edge::full(x.id, y.id),
                        });
                }
            }
        }
    }
    let mut out: Vec<Hazard> = merged.into_values().collect();
    out.sort_by_key(|h| (h.first.id, h.second.id, h.buffer, h.offset));
    out
}

/// Edges `u -> v` for which another path `u -> ... -> v` exists, by DFS without the edge.
fn brute_redundant(g: &Graph) -> Vec<Edge> {
    let n = g.nodes.len();
    let mut out = Vec::new();
    for e in &g.edges {
        let mut seen = vec![false; n];
        let mut stack: Vec<usize> = g
            .edges
            .iter()
            .filter(|f| f.from == e.from && f.to != e.to)
            .map(|f| f.to.index())
            .collect();
        let mut found = false;
        while let Some(v) = stack.pop() {
            if v == e.to.index() {
                found = true;
                break;
            }
            if !std::mem::replace(&mut seen[v], true) {
                stack.extend(
                    g.edges
                        .iter()
                        .filter(|f| f.from.index() == v)
                        .map(|f| f.to.index()),
                );
            }
        }
        if found {
            out.push(*e);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn hazards_match_brute_force(g in dag_with_accesses(40)) {
        let report = g.hazards().unwrap();
        prop_assert_eq!(&report.hazards, &brute_hazards(&g));
        prop_assert_eq!(report.graphs, 1);
        prop_assert_eq!(report.accesses, g.nodes.iter().flat_map(|n| &n.accesses).filter(|a| a.len > 0).count());
    }

    #[test]
    fn adding_every_fix_edge_leaves_no_hazard(g in dag_with_accesses(40)) {
        let mut g = g;
        for h in g.hazards().unwrap().hazards {
            g.add_edge(h.fix.from, h.fix.to).unwrap();
        }
        prop_assert!(g.hazards().unwrap().is_clean());
    }

    #[test]
    fn a_hazard_is_possible_exactly_when_each_conflict_involves_an_unknown_direction(
        g in dag_with_accesses(40)
    ) {
        let report = g.hazards().unwrap();
        for h in &report.hazards {
            let on = |id: NodeId| {
                g.nodes[id.index()]
                    .accesses
                    .iter()
                    .filter(|a| a.buffer == h.buffer && a.len > 0)
                    .cloned()
                    .collect::<Vec<_>>()
            };
            let (first, second) = (on(h.first.id), on(h.second.id));
            let mut certain = false;
            for a in &first {
                for b in second.iter().filter(|b| a.overlaps(b)) {
                    let kind = HazardKind::of(a.mode, b.mode);
                    certain |= kind.is_some_and(|k| !k.is_possible());
                }
            }
            prop_assert_eq!(h.kind.is_possible(), !certain, "{}", h);
        }
        prop_assert_eq!(
            report.certain().count() + report.possible().count(),
            report.hazards.len()
        );
    }

    #[test]
    fn redundant_edges_match_brute_force(g in dag_with_accesses(40)) {
        prop_assert_eq!(g.redundant_edges().unwrap(), brute_redundant(&g));
    }

    #[test]
    fn removing_redundant_edges_one_by_one_keeps_reachability(g in dag_with_accesses(30)) {
        // Removing all redundant edges at once keeps reachability in a DAG (the transitive
        // reduction is unique); check it against the closure.
        let before = closure(&g);
        let redundant = g.redundant_edges().unwrap();
        let mut reduced = g.clone();
        reduced.edges.retain(|e| !redundant.contains(e));
        prop_assert_eq!(closure(&reduced), before);
        prop_assert!(reduced.redundant_edges().unwrap().is_empty());
    }
}

/// Larger, denser graphs than the shrinking-friendly cases above, still checked in full.
#[test]
fn larger_random_graphs_match_brute_force() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(40));
    runner
        .run(&dag_with_accesses(160), |g| {
            prop_assert_eq!(g.hazards().unwrap().hazards, brute_hazards(&g));
            prop_assert_eq!(g.redundant_edges().unwrap(), brute_redundant(&g));
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_node_touching_one_buffer_twice_does_not_race_with_itself() {
    let mut g = common::graph("g", 0, &[]);
    let a = |mode, offset| Access {
        buffer: 1,
        label: String::new(),
        offset,
        len: 8,
        mode,
    };
    g.add_node_with(
        "x",
        NodeKind::Empty,
        None,
        vec![
            a(AccessMode::Write, 0),
            a(AccessMode::Read, 4),
            a(AccessMode::Write, 2),
        ],
    );
    assert!(g.hazards().unwrap().is_clean());
}

/// Turns the nodes whose flag is set into kernels without accesses (memory unknown, as read
/// from a dump).
fn with_kernels(mut g: Graph, kernels: &[bool]) -> Graph {
    for (n, &k) in g.nodes.iter_mut().zip(kernels.iter().cycle()) {
        if k {
            n.kind = common::kernel("k");
            n.accesses.clear();
        }
    }
    g
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// With unknown kernel memory: the possible hazards are exactly the unordered pairs of a
    /// kernel and a node with accesses (one per buffer of the latter), first in topological
    /// order first; the unjudged count is the number of unordered kernel pairs; the other
    /// hazards are those of `hazards()`.
    #[test]
    fn possible_kernel_hazards_match_brute_force(
        g in dag_with_accesses(30),
        kernels in proptest::collection::vec(any::<bool>(), 1..8),
    ) {
        let g = with_kernels(g, &kernels);
        let options = graphsmith_model::HazardOptions { unknown_kernel_memory: true };
        let report = g.hazards_with(&options).unwrap();
        let reach = closure(&g);
        let order = g.topological_order().unwrap();
        let mut rank = vec![0usize; g.nodes.len()];
        for (i, v) in order.iter().enumerate() {
            rank[v.index()] = i;
        }
        let is_kernel = |n: &graphsmith_model::Node| matches!(n.kind, NodeKind::Kernel(_));
        let mut expected = Vec::new();
        let mut kernel_pairs = 0u64;
        for x in &g.nodes {
            for y in &g.nodes {
                let (a, b) = (x.id.index(), y.id.index());
                if rank[a] >= rank[b] || reach[a][b] || reach[b][a] {
                    continue;
                }
                let known = |n: &graphsmith_model::Node| n.accesses.iter().any(|a| a.len > 0);
                if is_kernel(x) && is_kernel(y) {
                    kernel_pairs += 1;
                } else if (is_kernel(x) && known(y)) || (known(x) && is_kernel(y)) {
                    let other = if is_kernel(x) { y } else { x };
                    let mut buffers: Vec<u64> =
                        other.accesses.iter().filter(|a| a.len > 0).map(|a| a.buffer).collect();
                    buffers.sort();
                    buffers.dedup();
                    for buffer in buffers {
                        expected.push((x.id, y.id, buffer));
                    }
                }
            }
        }
        expected.sort();
        let mut possible: Vec<(NodeId, NodeId, u64)> = report
            .hazards
            .iter()
            .filter(|h| h.kind == HazardKind::PossibleKernelAccess)
            .map(|h| (h.first.id, h.second.id, h.buffer))
            .collect();
        possible.sort();
        prop_assert_eq!(possible, expected);
        prop_assert_eq!(report.unjudged_kernel_pairs, kernel_pairs);
        prop_assert_eq!(report.unjudged_nested_pairs, 0);
        let definite: Vec<&Hazard> = report
            .hazards
            .iter()
            .filter(|h| h.kind != HazardKind::PossibleKernelAccess)
            .collect();
        let plain = g.hazards().unwrap();
        prop_assert_eq!(definite, plain.hazards.iter().collect::<Vec<_>>());
    }
}
