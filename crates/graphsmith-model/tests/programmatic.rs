//! Programmatic and launch-order edges: what the hazard checker takes them to order (with the
//! accesses a kernel makes before its wait), checked case by case and against a brute-force
//! reference on random graphs; their DOT and JSON; redundant edges and type conflicts.

mod common;

use std::collections::BTreeSet;

use graphsmith_model::{
    Access, AccessMode, Edge, EdgeType, Graph, HazardKind, ModelError, NodeId, NodeKind,
};
use proptest::prelude::*;

const BUF: u64 = 0x7f00_0000_0000;

fn access(mode: AccessMode) -> Access {
    Access {
        buffer: BUF,
        label: "x".into(),
        offset: 0,
        len: 256,
        mode,
    }
}

/// A node with accesses after its wait (`after`) and before it (`before`).
fn node(g: &mut Graph, label: &str, after: &[AccessMode], before: &[AccessMode]) -> NodeId {
    let id = g.add_node_with(
        label,
        common::kernel(label),
        None,
        after.iter().map(|&m| access(m)).collect(),
    );
    g.nodes[id.index()].accesses_before_wait = before.iter().map(|&m| access(m)).collect();
    id
}

use AccessMode::{Read, Write};

/// The hazards as `(first, second, kind)` labels.
fn races(g: &Graph) -> Vec<(String, String, HazardKind)> {
    g.hazards()
        .unwrap()
        .hazards
        .into_iter()
        .map(|h| (h.first.label, h.second.label, h.kind))
        .collect()
}

fn race(a: &str, b: &str, kind: HazardKind) -> Vec<(String, String, HazardKind)> {
    vec![(a.to_string(), b.to_string(), kind)]
}

#[test]
fn a_programmatic_edge_orders_what_the_consumer_does_after_its_wait() {
    let mut g = Graph::new("pdl");
    let a = node(&mut g, "producer", &[Write], &[]);
    let b = node(&mut g, "consumer", &[Read], &[]);
    g.add_typed_edge(a, b, EdgeType::Programmatic).unwrap();
    assert!(g.hazards().unwrap().is_clean());
}

#[test]
fn a_read_before_the_wait_races_with_the_producer() {
    let mut g = Graph::new("pdl");
    let a = node(&mut g, "producer", &[Write], &[]);
    let b = node(&mut g, "consumer", &[], &[Read]);
    g.add_typed_edge(a, b, EdgeType::Programmatic).unwrap();
    assert_eq!(
        races(&g),
        race("producer", "consumer", HazardKind::ReadAfterWrite)
    );
    let h = &g.hazards().unwrap().hazards[0];
    assert_eq!(h.fix, Edge::full(a, b));
    assert_eq!(
        h.to_string(),
        "read-after-write on 'x' (0x7f0000000000) bytes [0, 256): 'producer' (n0) writes, \
         'consumer' (n1) reads, unordered; fix: add edge 'producer' -> 'consumer' (n0 -> n1)"
    );
    // A write before the wait to what the producer reads races too.
    let mut g = Graph::new("pdl");
    let a = node(&mut g, "producer", &[Read], &[]);
    let b = node(&mut g, "consumer", &[], &[Write]);
    g.add_typed_edge(a, b, EdgeType::Programmatic).unwrap();
    assert_eq!(
        races(&g),
        race("producer", "consumer", HazardKind::WriteAfterRead)
    );
}

/// The decoder's pattern: `advance` writes a position, `qkv` (which triggers only after its
/// own wait) runs next, and `attention` reads the position before its wait. The late trigger
/// orders what came before `qkv`'s wait (`advance`) before `attention`'s start, but not what
/// `qkv` itself does.
#[test]
fn a_trigger_after_the_wait_orders_earlier_work_before_the_next_start() {
    let build = |late: bool| {
        let mut g = Graph::new("late");
        let a = node(&mut g, "advance", &[Write], &[]);
        let q = node(&mut g, "qkv", &[], &[]);
        let t = node(&mut g, "attention", &[], &[Read]);
        g.nodes[q.index()].triggers_after_wait = late;
        g.add_typed_edge(a, q, EdgeType::Programmatic).unwrap();
        g.add_typed_edge(q, t, EdgeType::Programmatic).unwrap();
        g
    };
    assert!(build(true).hazards().unwrap().is_clean());
    assert_eq!(
        races(&build(false)),
        race("advance", "attention", HazardKind::ReadAfterWrite)
    );
    // What the late node itself writes is still unordered before the next node's start.
    let mut g = build(true);
    g.nodes[1].accesses = vec![access(Write)];
    assert_eq!(
        races(&g),
        race("qkv", "attention", HazardKind::ReadAfterWrite)
    );
    // And the late trigger of the first node of a path orders nothing of its own.
    let mut g = Graph::new("late-first");
    let a = node(&mut g, "producer", &[Write], &[]);
    let b = node(&mut g, "consumer", &[], &[Read]);
    g.nodes[a.index()].triggers_after_wait = true;
    g.add_typed_edge(a, b, EdgeType::Programmatic).unwrap();
    assert_eq!(
        races(&g),
        race("producer", "consumer", HazardKind::ReadAfterWrite)
    );
    // JSON carries the flag, and leaves it out when false.
    let json = build(true).to_json();
    assert!(
        json.contains("\"triggers_after_wait\": true")
            || json.contains("\"triggers_after_wait\":true")
    );
    let back = Graph::from_json(&json).unwrap();
    assert!(back.nodes[1].triggers_after_wait && !back.nodes[0].triggers_after_wait);
    assert!(!build(false).to_json().contains("triggers_after_wait"));
}

#[test]
fn a_full_edge_orders_the_accesses_before_the_wait_too() {
    let mut g = Graph::new("full");
    let a = node(&mut g, "producer", &[Write], &[]);
    let b = node(&mut g, "consumer", &[Read], &[Read]);
    g.add_edge(a, b).unwrap();
    assert!(g.hazards().unwrap().is_clean());
}

#[test]
fn a_launch_order_edge_orders_no_memory() {
    let mut g = Graph::new("launch order");
    let a = node(&mut g, "producer", &[Write], &[]);
    let b = node(&mut g, "consumer", &[Read], &[]);
    g.add_typed_edge(a, b, EdgeType::LaunchOrder).unwrap();
    assert_eq!(
        races(&g),
        race("producer", "consumer", HazardKind::ReadAfterWrite)
    );
}

#[test]
fn orders_compose_along_paths() {
    // a -full-> b -prog-> c: c starts after b starts, so after a has finished.
    let mut g = Graph::new("full then programmatic");
    let a = node(&mut g, "a", &[Write], &[]);
    let b = node(&mut g, "b", &[], &[]);
    let c = node(&mut g, "c", &[], &[Read]);
    g.add_edge(a, b).unwrap();
    g.add_typed_edge(b, c, EdgeType::Programmatic).unwrap();
    assert!(g.hazards().unwrap().is_clean());
    // ... but what b writes, c's read before its wait may miss.
    g.nodes[b.index()].accesses = vec![access(Write)];
    assert_eq!(races(&g), race("b", "c", HazardKind::ReadAfterWrite));

    // a -prog-> b -prog-> c: c's wait returns after b finished, b's after a finished.
    let mut g = Graph::new("programmatic chain");
    let a = node(&mut g, "a", &[Write], &[]);
    let b = node(&mut g, "b", &[], &[]);
    let c = node(&mut g, "c", &[Read], &[Read]);
    g.add_typed_edge(a, b, EdgeType::Programmatic).unwrap();
    g.add_typed_edge(b, c, EdgeType::Programmatic).unwrap();
    assert_eq!(races(&g), race("a", "c", HazardKind::ReadAfterWrite));
    g.nodes[c.index()].accesses_before_wait.clear();
    assert!(g.hazards().unwrap().is_clean());

    // a -prog-> b -full-> c: c starts after b finished, b finished after its wait.
    let mut g = Graph::new("programmatic then full");
    let a = node(&mut g, "a", &[Write], &[]);
    let b = node(&mut g, "b", &[], &[Write]);
    let c = node(&mut g, "c", &[], &[Read]);
    g.add_typed_edge(a, b, EdgeType::Programmatic).unwrap();
    g.add_edge(b, c).unwrap();
    // b's own write before its wait races with a; c is ordered after both.
    assert_eq!(races(&g), race("a", "b", HazardKind::WriteAfterWrite));

    // a -launch order-> b -full-> c: nothing orders a's memory before c.
    let mut g = Graph::new("launch order then full");
    let a = node(&mut g, "a", &[Write], &[]);
    let b = node(&mut g, "b", &[], &[]);
    let c = node(&mut g, "c", &[Read], &[]);
    g.add_typed_edge(a, b, EdgeType::LaunchOrder).unwrap();
    g.add_edge(b, c).unwrap();
    assert_eq!(races(&g), race("a", "c", HazardKind::ReadAfterWrite));
}

#[test]
fn fork_join_with_programmatic_edges() {
    // a writes x; b and c read it after their waits; d writes it after its wait.
    let mut g = Graph::new("fork/join");
    let a = node(&mut g, "a", &[Write], &[]);
    let b = node(&mut g, "b", &[Read], &[]);
    let c = node(&mut g, "c", &[Read], &[]);
    let d = node(&mut g, "d", &[Write], &[]);
    for (x, y) in [(a, b), (a, c), (b, d), (c, d)] {
        g.add_typed_edge(x, y, EdgeType::Programmatic).unwrap();
    }
    assert!(g.hazards().unwrap().is_clean());
    // d writing before its wait races with the readers (and with a).
    g.nodes[d.index()].accesses_before_wait = vec![access(Write)];
    let found: BTreeSet<_> = races(&g).into_iter().map(|(a, b, _)| (a, b)).collect();
    let expected: BTreeSet<_> = [("a", "d"), ("b", "d"), ("c", "d")]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .into();
    assert_eq!(found, expected);
}

#[test]
fn accesses_before_the_wait_without_typed_edges_are_plain_accesses() {
    let mut g = Graph::new("plain");
    node(&mut g, "a", &[Write], &[]);
    node(&mut g, "b", &[], &[Read]);
    assert_eq!(races(&g), race("a", "b", HazardKind::ReadAfterWrite));
    let report = g.hazards().unwrap();
    assert_eq!((report.accesses, report.nodes_with_accesses), (2, 2));
}

#[test]
fn a_node_does_not_race_with_itself_across_its_wait() {
    let mut g = Graph::new("self");
    let a = node(&mut g, "a", &[Write], &[]);
    let b = node(&mut g, "b", &[Write, Read], &[Write, Read]);
    g.add_typed_edge(a, b, EdgeType::Programmatic).unwrap();
    assert!(races(&g).iter().all(|(x, y, _)| x != y));
}

#[test]
fn typed_edges_in_json_and_dot() {
    let mut g = Graph::new("pdl");
    let a = node(&mut g, "a", &[Write], &[]);
    let b = node(&mut g, "b", &[Read], &[Read]);
    let c = node(&mut g, "c", &[], &[]);
    let d = node(&mut g, "d", &[], &[]);
    g.add_typed_edge(a, b, EdgeType::Programmatic).unwrap();
    g.add_typed_edge(b, c, EdgeType::LaunchOrder).unwrap();
    g.add_edge(c, d).unwrap();
    let json = g.to_json();
    let compact: String = json.split_whitespace().collect();
    assert!(
        compact.contains(r#"{"from":0,"to":1,"type":"programmatic"}"#),
        "{json}"
    );
    assert!(
        compact.contains(r#"{"from":1,"to":2,"type":"launch_order"}"#),
        "{json}"
    );
    assert!(
        compact.contains(r#""accesses_before_wait":[{"buffer""#),
        "{json}"
    );
    // A full edge leaves its type out, so older files read the same.
    assert!(compact.contains(r#"{"from":2,"to":3}"#), "{json}");
    assert_eq!(Graph::from_json(&json).unwrap(), g);

    let dot = g.to_dot();
    assert!(
        dot.contains("n0 -> n1 [label=\"programmatic\", color=blue, fontcolor=blue, style=bold];")
    );
    assert!(dot.contains(
        "n1 -> n2 [label=\"launch order\", color=gray40, fontcolor=gray40, style=dotted];"
    ));
    assert!(dot.contains("n2 -> n3;"));
    let mut options = graphsmith_model::DotOptions::default();
    options.highlight_edges.push((a, b));
    assert!(g.to_dot_with(&options).contains(
        "n0 -> n1 [label=\"programmatic\", color=red, fontcolor=red, style=bold, penwidth=2];"
    ));
}

#[test]
fn json_with_two_edges_between_the_same_nodes_is_refused() {
    let text = r#"{"label":"g","nodes":[{"id":0,"label":"a","kind":"empty"},
        {"id":1,"label":"b","kind":"empty"}],
        "edges":[{"from":0,"to":1},{"from":0,"to":1,"type":"programmatic"}]}"#;
    assert!(Graph::from_json(text).is_err());
}

#[test]
fn an_edge_cannot_have_two_types() {
    let mut g = Graph::new("g");
    let a = g.add_node("a", NodeKind::Empty);
    let b = g.add_node("b", NodeKind::Empty);
    g.add_typed_edge(a, b, EdgeType::Programmatic).unwrap();
    g.add_typed_edge(a, b, EdgeType::Programmatic).unwrap();
    assert_eq!(g.edges.len(), 1);
    let err = g.add_edge(a, b).unwrap_err();
    assert!(matches!(err, ModelError::EdgeTypeConflict { .. }));
    assert_eq!(
        err.to_string(),
        "graph 'g': edge 'a' -> 'b' (n0 -> n1) is already a programmatic edge; it cannot also \
         be a full edge"
    );
}

#[test]
fn only_full_edges_are_redundant_or_imply_others() {
    let mut g = common::graph("g", 3, &[]);
    let (a, b, c) = (NodeId(0), NodeId(1), NodeId(2));
    g.add_typed_edge(a, b, EdgeType::Programmatic).unwrap();
    g.add_edge(b, c).unwrap();
    g.add_edge(a, c).unwrap();
    // a -> c is not implied: a -prog-> b -> c orders a before c, but only a full path counts.
    assert!(g.redundant_edges().unwrap().is_empty());
    let mut g = common::graph("g", 3, &[(0, 1), (1, 2)]);
    g.add_typed_edge(a, c, EdgeType::Programmatic).unwrap();
    assert!(g.redundant_edges().unwrap().is_empty());
}

// ---- Random graphs against a reference ----

/// What orders an access of `x` before an access of `y`, stated on paths: a path whose first
/// edges are programmatic, then one full edge, then any edges, orders everything `y` does; so
/// does a path whose first edges are programmatic and whose next programmatic edge leaves a
/// node other than `x` that triggers after its wait; a path of programmatic edges only orders
/// what `y` does after its wait. `reach[x][y] = (everything, after_wait)`.
fn reference_order(g: &Graph) -> Vec<Vec<(bool, bool)>> {
    let n = g.nodes.len();
    (0..n)
        .map(|s| {
            // State per node: reached along programmatic edges only / after a full edge.
            let mut prog = vec![false; n];
            let mut full = vec![false; n];
            let mut stack = vec![(s, false)];
            prog[s] = true;
            while let Some((v, after_full)) = stack.pop() {
                for e in g.edges.iter().filter(|e| e.from.index() == v) {
                    let w = e.to.index();
                    let late = v != s && g.nodes[v].triggers_after_wait;
                    let next = match (after_full, e.ty) {
                        (true, _) => Some(true),
                        (false, EdgeType::Full) => Some(true),
                        (false, EdgeType::Programmatic) if late => Some(true),
                        (false, EdgeType::Programmatic) => Some(false),
                        (false, EdgeType::LaunchOrder) => None,
                    };
                    match next {
                        Some(true) if !full[w] => {
                            full[w] = true;
                            stack.push((w, true));
                        }
                        Some(false) if !prog[w] => {
                            prog[w] = true;
                            stack.push((w, false));
                        }
                        _ => {}
                    }
                }
            }
            (0..n).map(|y| (full[y], full[y] || prog[y])).collect()
        })
        .collect()
}

type Key = (NodeId, NodeId, HazardKind);

fn reference_hazards(g: &Graph) -> BTreeSet<Key> {
    let order = reference_order(g);
    let topo = g.topological_order().unwrap();
    let mut rank = vec![0; g.nodes.len()];
    for (i, v) in topo.iter().enumerate() {
        rank[v.index()] = i;
    }
    let mut kinds: std::collections::BTreeMap<(NodeId, NodeId), HazardKind> = Default::default();
    for x in &g.nodes {
        for y in &g.nodes {
            if rank[x.id.index()] >= rank[y.id.index()] {
                continue;
            }
            let (everything, after_wait) = order[x.id.index()][y.id.index()];
            let xs = x.accesses.iter().chain(&x.accesses_before_wait);
            for a in xs.filter(|a| a.len > 0) {
                let ys = y.accesses.iter().map(|b| (b, after_wait));
                let ys = ys.chain(y.accesses_before_wait.iter().map(|b| (b, everything)));
                for (b, ordered) in ys.filter(|(b, _)| b.len > 0) {
                    if ordered || !a.overlaps(b) {
                        continue;
                    }
                    if let Some(kind) = HazardKind::of(a.mode, b.mode) {
                        let k = kinds.entry((x.id, y.id)).or_insert(kind);
                        *k = (*k).min(kind);
                    }
                }
            }
        }
    }
    kinds.into_iter().map(|((a, b), k)| (a, b, k)).collect()
}

fn typed_dag(max_nodes: usize) -> impl Strategy<Value = Graph> {
    let mode = prop_oneof![Just(Read), Just(Write), Just(AccessMode::ReadWrite)];
    let acc = (0u64..32, 1u64..16, mode).prop_map(|(offset, len, mode)| Access {
        buffer: BUF,
        label: String::new(),
        offset,
        len,
        mode,
    });
    let accs = proptest::collection::vec(acc, 0..3);
    let ty = prop_oneof![
        2 => Just(EdgeType::Full),
        2 => Just(EdgeType::Programmatic),
        1 => Just(EdgeType::LaunchOrder),
    ];
    (2usize..max_nodes).prop_flat_map(move |n| {
        let nodes = proptest::collection::vec((accs.clone(), accs.clone(), any::<bool>()), n);
        let edges = proptest::collection::vec((0..n, 0..n, ty.clone()), 0..2 * n);
        (nodes, edges).prop_map(|(nodes, edges)| {
            let mut g = Graph::new("random");
            for (i, (after, before, late)) in nodes.into_iter().enumerate() {
                let id = g.add_node_with(format!("v{i}"), NodeKind::Empty, None, after);
                g.nodes[id.index()].accesses_before_wait = before;
                g.nodes[id.index()].triggers_after_wait = late;
            }
            for (a, b, ty) in edges {
                if a < b {
                    let _ = g.add_typed_edge(NodeId(a as u32), NodeId(b as u32), ty);
                }
            }
            g
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn typed_edges_match_the_reference(g in typed_dag(14)) {
        let found: BTreeSet<Key> = g
            .hazards()
            .unwrap()
            .hazards
            .into_iter()
            .map(|h| (h.first.id, h.second.id, h.kind))
            .collect();
        prop_assert_eq!(found, reference_hazards(&g));
    }

    #[test]
    fn every_fix_edge_is_full_and_fixes(g in typed_dag(14)) {
        let mut g = g;
        for h in g.hazards().unwrap().hazards {
            // A typed edge between the two stays; a full edge after it would conflict.
            g.edges.retain(|e| (e.from, e.to) != (h.fix.from, h.fix.to));
            g.add_edge(h.fix.from, h.fix.to).unwrap();
        }
        prop_assert!(g.hazards().unwrap().is_clean());
    }

    #[test]
    fn typed_json_round_trips(g in typed_dag(10)) {
        prop_assert_eq!(Graph::from_json(&g.to_json()).unwrap(), g);
    }
}

#[test]
fn the_summary_counts_edge_types() {
    let mut g = common::graph("g", 4, &[(2, 3)]);
    g.add_typed_edge(NodeId(0), NodeId(1), EdgeType::Programmatic)
        .unwrap();
    g.add_typed_edge(NodeId(1), NodeId(2), EdgeType::LaunchOrder)
        .unwrap();
    let summary = g.summary().unwrap();
    assert_eq!(summary.edges, 3);
    assert!(summary
        .to_string()
        .contains("\n  edges   3 (launch_order 1, programmatic 1)\n  depth   4\n"));
    let plain = common::graph("g", 2, &[(0, 1)]).summary().unwrap();
    assert!(plain.edge_types.is_empty());
    assert!(plain.to_string().contains("\n  edges   1\n  depth   2\n"));
}
