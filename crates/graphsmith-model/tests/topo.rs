//! Topology on hand-made graphs: order, levels, depth, width, roots, leaves, critical path,
//! summary, and the errors for cycles, unknown nodes and self-loops.

mod common;

use common::{edge, every_kind, graph, ids, kernel};
use graphsmith_model::{Graph, ModelError, NodeId, NodeKind};

/// Everything the topology module says about a graph, checked in one go.
struct Expect<'a> {
    order: &'a [u32],
    levels: &'a [u32],
    depth: usize,
    width: usize,
    roots: &'a [u32],
    leaves: &'a [u32],
    longest: &'a [u32],
}

fn check(g: &Graph, want: Expect) {
    assert_eq!(g.topological_order().unwrap(), ids(want.order), "order");
    assert_eq!(g.levels().unwrap(), want.levels, "levels");
    assert_eq!(g.depth().unwrap(), want.depth, "depth");
    assert_eq!(g.width().unwrap(), want.width, "width");
    assert_eq!(g.roots(), ids(want.roots), "roots");
    assert_eq!(g.leaves(), ids(want.leaves), "leaves");
    assert_eq!(g.longest_path().unwrap(), ids(want.longest), "longest path");
}

#[test]
fn empty() {
    let g = Graph::new("empty");
    check(
        &g,
        Expect {
            order: &[],
            levels: &[],
            depth: 0,
            width: 0,
            roots: &[],
            leaves: &[],
            longest: &[],
        },
    );
    assert_eq!(
        g.summary().unwrap().to_string(),
        "graph 'empty'\n  nodes   0\n  edges   0\n  depth   0\n  width   0\n  roots   0\n  leaves  0\n  kinds   none"
    );
}

#[test]
fn chain() {
    check(
        &graph("chain", 3, &[(0, 1), (1, 2)]),
        Expect {
            order: &[0, 1, 2],
            levels: &[0, 1, 2],
            depth: 3,
            width: 1,
            roots: &[0],
            leaves: &[2],
            longest: &[0, 1, 2],
        },
    );
}

#[test]
fn diamond() {
    check(
        &graph("diamond", 4, &[(0, 1), (0, 2), (1, 3), (2, 3)]),
        Expect {
            order: &[0, 1, 2, 3],
            levels: &[0, 1, 1, 2],
            depth: 3,
            width: 2,
            roots: &[0],
            leaves: &[3],
            longest: &[0, 1, 3],
        },
    );
}

#[test]
fn fork_join_with_a_long_branch() {
    // 0 forks to 1..=4, 4 goes through 5, all join at 6.
    let g = graph(
        "fork-join",
        7,
        &[
            (0, 1),
            (0, 2),
            (0, 3),
            (0, 4),
            (4, 5),
            (1, 6),
            (2, 6),
            (3, 6),
            (5, 6),
        ],
    );
    check(
        &g,
        Expect {
            order: &[0, 1, 2, 3, 4, 5, 6],
            levels: &[0, 1, 1, 1, 1, 2, 3],
            depth: 4,
            width: 4,
            roots: &[0],
            leaves: &[6],
            longest: &[0, 4, 5, 6],
        },
    );
}

#[test]
fn disconnected() {
    let g = graph("parts", 6, &[(0, 1), (3, 4), (4, 5)]);
    check(
        &g,
        Expect {
            order: &[0, 1, 2, 3, 4, 5],
            levels: &[0, 1, 0, 0, 1, 2],
            depth: 3,
            width: 3,
            roots: &[0, 2, 3],
            leaves: &[1, 2, 5],
            longest: &[3, 4, 5],
        },
    );
}

#[test]
fn backward_ids_take_the_smallest_ready_node_first() {
    // 3 -> 0 and 4 -> 2 -> 1: only 3 and 4 are ready at first.
    let g = graph("backward", 5, &[(3, 0), (4, 2), (2, 1)]);
    check(
        &g,
        Expect {
            order: &[3, 0, 4, 2, 1],
            levels: &[1, 2, 1, 0, 0],
            depth: 3,
            width: 2,
            roots: &[3, 4],
            leaves: &[0, 1],
            longest: &[4, 2, 1],
        },
    );
    // A node that becomes ready goes before larger ids that were ready earlier.
    let g = graph("tie", 5, &[(3, 0)]);
    assert_eq!(g.topological_order().unwrap(), ids(&[1, 2, 3, 0, 4]));
}

#[test]
fn adjacency_lists_neighbours_once_in_edge_order() {
    let mut g = graph("adj", 4, &[(0, 3), (0, 1), (2, 1)]);
    g.edges.push(edge(0, 3)); // a duplicate written directly
    let adj = g.adjacency().unwrap();
    assert_eq!(adj.len(), 4);
    assert_eq!(adj.successors(NodeId(0)), ids(&[3, 1]).as_slice());
    assert_eq!(adj.predecessors(NodeId(1)), ids(&[0, 2]).as_slice());
    assert_eq!(adj.predecessors(NodeId(3)), ids(&[0]).as_slice());
    assert!(adj.successors(NodeId(99)).is_empty());
    assert_eq!(adj.roots(), ids(&[0, 2]));
    assert_eq!(adj.leaves(), ids(&[1, 3]));
    assert_eq!(g.summary().unwrap().edges, 3);
}

#[test]
fn cycle_names_a_node_on_the_cycle() {
    // 0 -> 1 -> 2 -> 3 -> 1, and 3 -> 4 downstream of the cycle.
    let g = graph("cyc", 5, &[(0, 1), (1, 2), (2, 3), (3, 1), (3, 4)]);
    let err = g.topological_order().unwrap_err();
    assert_eq!(
        err.to_string(),
        "graph 'cyc' has a cycle through node 'b' (n1)"
    );

    // The smallest node left (1) is downstream of the cycle 2 -> 3 -> 4 -> 2.
    let g = graph("cyc2", 5, &[(2, 3), (3, 4), (4, 2), (4, 1)]);
    let err = g.depth().unwrap_err();
    assert_eq!(
        err,
        ModelError::Cycle {
            graph: "cyc2".to_string(),
            id: NodeId(4),
            label: "e".to_string(),
        }
    );
    for result in [
        g.levels().map(|_| ()),
        g.width().map(|_| ()),
        g.summary().map(|_| ()),
        g.longest_path().map(|_| ()),
    ] {
        assert!(matches!(result, Err(ModelError::Cycle { .. })));
    }
}

#[test]
fn unknown_nodes_and_self_loops_are_errors() {
    let mut g = graph("bad", 2, &[(0, 1)]);
    let err = g.add_edge(NodeId(1), NodeId(7)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "graph 'bad': edge n1 -> n7 names node n7, but the graph has only 2 nodes"
    );
    assert_eq!(g.edges.len(), 1);

    // Edges written directly are checked by every analysis.
    g.edges.push(edge(5, 0));
    let err = g.topological_order().unwrap_err();
    assert_eq!(
        err.to_string(),
        "graph 'bad': edge n5 -> n0 names node n5, but the graph has only 2 nodes"
    );
    assert!(g.summary().is_err());
    assert!(g.to_dot().contains("n5 -> n0")); // drawing does not judge
    assert_eq!(g.roots(), ids(&[0]), "roots ignore edges to unknown nodes");

    let mut g = graph("loop", 2, &[]);
    g.edges.push(edge(1, 1));
    assert_eq!(
        g.adjacency().unwrap_err().to_string(),
        "graph 'loop': edge from node 'b' (n1) to itself"
    );
}

#[test]
fn duplicate_edges_are_ignored_however_the_graph_was_made() {
    let mut g = graph("dup", 3, &[(0, 1), (0, 1), (1, 2)]);
    assert_eq!(g.edges, vec![edge(0, 1), edge(1, 2)]);

    let mut parsed = Graph::from_json(&g.to_json()).unwrap();
    parsed.add_edge(NodeId(1), NodeId(2)).unwrap();
    parsed.add_edge(NodeId(0), NodeId(2)).unwrap();
    assert_eq!(parsed.edges, vec![edge(0, 1), edge(1, 2), edge(0, 2)]);

    let mut cloned = g.clone();
    cloned.add_edge(NodeId(0), NodeId(1)).unwrap();
    assert_eq!(cloned.edges.len(), 2);

    // Edges rewritten in place: a stale index never drops a new edge.
    g.edges[0] = edge(0, 2);
    g.add_edge(NodeId(0), NodeId(1)).unwrap();
    assert_eq!(g.edges, vec![edge(0, 2), edge(1, 2), edge(0, 1)]);
    g.edges.clear();
    g.add_edge(NodeId(1), NodeId(2)).unwrap();
    assert_eq!(g.edges, vec![edge(1, 2)]);
}

#[test]
fn critical_path_follows_weights() {
    // 0 -> {1, 2} -> 3, with 2 heavy.
    let mut g = Graph::new("weighted");
    let a = g.add_node("a", kernel("small"));
    let b = g.add_node("b", kernel("small"));
    let c = g.add_node("c", kernel("big"));
    let d = g.add_node("d", kernel("small"));
    for (x, y) in [(a, b), (a, c), (b, d), (c, d)] {
        g.add_edge(x, y).unwrap();
    }
    let by_name = |n: &graphsmith_model::Node| match &n.kind {
        NodeKind::Kernel(p) if p.name == "big" => 10.0,
        _ => 1.0,
    };
    assert_eq!(g.critical_path(by_name).unwrap(), vec![a, c, d]);
    assert_eq!(
        g.longest_path().unwrap(),
        vec![a, b, d],
        "ties: smaller ids"
    );
    // NaN and negative weights count as zero; the path still spans a root to a leaf.
    assert_eq!(g.critical_path(|_| f64::NAN).unwrap(), vec![a, b, d]);
    let heavy_leaf = |n: &graphsmith_model::Node| if n.label == "d" { 1.0 } else { -5.0 };
    assert_eq!(g.critical_path(heavy_leaf).unwrap(), vec![a, b, d]);
}

#[test]
fn summary_numbers_and_table() {
    let g = every_kind();
    let s = g.summary().unwrap();
    assert_eq!((s.nodes, s.edges, s.depth, s.width), (15, 15, 15, 1));
    assert_eq!((s.roots, s.leaves), (1, 1));
    assert_eq!(s.by_kind["conditional"], 3);
    assert_eq!(s.by_kind["memcpy"], 2);
    assert_eq!(s.by_kind.values().sum::<usize>(), 15);

    let g = graph("fork", 4, &[(0, 1), (0, 2), (0, 3)]);
    assert_eq!(
        g.summary().unwrap().to_string(),
        "graph 'fork'\n  nodes   4\n  edges   3\n  depth   2\n  width   3\n  roots   1\n  leaves  3\n  kinds   empty 4"
    );
    assert_eq!(
        serde_json::to_string(&g.summary().unwrap()).unwrap(),
        r#"{"label":"fork","nodes":4,"edges":3,"by_kind":{"empty":4},"depth":2,"width":3,"roots":1,"leaves":3}"#
    );
}

#[test]
fn a_million_nodes_do_not_overflow_the_stack() {
    // A chain whose ids run backwards (node i waits for node i + 1), so the general path runs.
    const N: u32 = 1_000_000;
    let mut g = Graph::new("long");
    for _ in 0..N {
        g.add_node("", NodeKind::Empty);
    }
    for i in 0..N - 1 {
        g.add_edge(NodeId(i + 1), NodeId(i)).unwrap();
    }
    let order = g.topological_order().unwrap();
    assert_eq!(order.first(), Some(&NodeId(N - 1)));
    assert_eq!(order.last(), Some(&NodeId(0)));
    let s = g.summary().unwrap();
    assert_eq!((s.depth, s.width, s.edges), (N as usize, 1, N as usize - 1));
    assert_eq!(g.longest_path().unwrap().len(), N as usize);

    // Closing the chain into a ring is reported, not overflowed.
    g.add_edge(NodeId(0), NodeId(N - 1)).unwrap();
    assert!(matches!(g.depth(), Err(ModelError::Cycle { .. })));
}
