//! Hazards and redundant edges on hand-made graphs and on an attention block whose Q, K and V
//! projections run on forked streams (read back from the driver), each asserted on the full text
//! of the report.

mod common;

use common::{graph, kernel};
use graphsmith_model::{Access, AccessMode, Edge, Graph, HazardKind, ModelError, NodeId, NodeKind};

/// The read-back graphs (tests/fixtures/driver-dot/*.json), compiled in so that the test binary
/// runs anywhere (a machine with an NVIDIA GPU gets test binaries without the source tree).
fn fixture_json(name: &str) -> Graph {
    let text = match name {
        "attention-racy" => include_str!("fixtures/driver-dot/attention-racy.json"),
        "attention-fixed" => include_str!("fixtures/driver-dot/attention-fixed.json"),
        "chain" => include_str!("fixtures/driver-dot/chain.json"),
        "kinds" => include_str!("fixtures/driver-dot/kinds.json"),
        _ => panic!("no fixture {name}.json"),
    };
    Graph::from_json(text).unwrap_or_else(|e| panic!("{name}.json: {e}"))
}

/// Asserts the hazards of `g`, one `Display` line each.
fn check(g: &Graph, expected: &[&str]) {
    let report = g.hazards().unwrap();
    let actual: Vec<String> = report.hazards.iter().map(|h| h.to_string()).collect();
    assert_eq!(actual, expected, "\n--- actual ---\n{}", actual.join("\n"));
}

fn acc(buffer: u64, label: &str, offset: u64, len: u64, mode: AccessMode) -> Access {
    Access {
        buffer,
        label: label.to_string(),
        offset,
        len,
        mode,
    }
}

/// A graph of kernels named `a`, `b`, ... with the given accesses and edges.
fn with_accesses(nodes: &[Vec<Access>], edges: &[(u32, u32)]) -> Graph {
    let mut g = Graph::new("g");
    for (i, accesses) in nodes.iter().enumerate() {
        let name = ((b'a' + i as u8) as char).to_string();
        g.add_node_with(&name, kernel(&name), None, accesses.clone());
    }
    for &(a, b) in edges {
        g.add_edge(NodeId(a), NodeId(b)).unwrap();
    }
    g
}

use AccessMode::{Read, ReadWrite, Unknown, Write};

#[test]
fn attention_on_forked_streams_races_on_q_and_k() {
    // Q, K, V projections on forked streams; attention joins only the V stream.
    check(
        &fixture_json("attention-racy"),
        &[
            "read-after-write on 'q' (0x7f1fd5e0ce00) bytes [0, 256): 'q-proj' (n0) writes, \
             'attention' (n3) reads, unordered; fix: add edge 'q-proj' -> 'attention' (n0 -> n3)",
            "read-after-write on 'k' (0x7f1fd5e0d000) bytes [0, 256): 'k-proj' (n1) writes, \
             'attention' (n3) reads, unordered; fix: add edge 'k-proj' -> 'attention' (n1 -> n3)",
        ],
    );
}

#[test]
fn attention_with_the_multi_input_dependency_is_clean() {
    check(&fixture_json("attention-fixed"), &[]);
    check(&fixture_json("chain"), &[]);
    check(&fixture_json("kinds"), &[]);
}

#[test]
fn the_fix_edges_make_the_racy_attention_clean() {
    let mut g = fixture_json("attention-racy");
    for h in g.hazards().unwrap().hazards {
        g.add_edge(h.fix.from, h.fix.to).unwrap();
    }
    check(&g, &[]);
}

#[test]
fn every_kind_of_conflict() {
    let g = with_accesses(
        &[
            vec![acc(1, "x", 0, 8, Write)],
            vec![acc(1, "x", 4, 8, Write)],
            vec![acc(2, "y", 0, 8, Read)],
            vec![acc(2, "y", 0, 8, ReadWrite)],
            vec![acc(3, "", 0, 8, Unknown)],
            vec![acc(3, "", 0, 8, Read)],
            vec![acc(4, "z", 0, 8, Read)],
            vec![acc(4, "z", 0, 8, Read)],
        ],
        &[],
    );
    check(
        &g,
        &[
            "write-after-write on 'x' (0x1) bytes [4, 8): 'a' (n0) writes, 'b' (n1) writes, \
             unordered; fix: add edge 'a' -> 'b' (n0 -> n1)",
            "write-after-read on 'y' (0x2) bytes [0, 8): 'c' (n2) reads, 'd' (n3) reads and \
             writes, unordered; fix: add edge 'c' -> 'd' (n2 -> n3)",
            "possible write on '0x3' (0x3) bytes [0, 8): 'e' (n4) may read or write, 'f' (n5) \
             reads, unordered; fix: add edge 'e' -> 'f' (n4 -> n5)",
        ],
    );
}

#[test]
fn disjoint_ranges_zero_lengths_and_other_buffers_do_not_race() {
    let g = with_accesses(
        &[
            vec![acc(1, "x", 0, 8, Write), acc(2, "y", 0, 0, Write)],
            vec![acc(1, "x", 8, 8, Write), acc(2, "y", 0, 8, Write)],
            vec![acc(3, "z", 0, 8, Write)],
        ],
        &[],
    );
    check(&g, &[]);
}

#[test]
fn ordered_through_nodes_without_accesses() {
    // a -> join -> b, and a -> e1 -> e2 -> c: all ordered by paths through empty nodes.
    let mut g = with_accesses(
        &[
            vec![acc(1, "x", 0, 8, Write)],
            vec![],
            vec![acc(1, "x", 0, 8, Read)],
            vec![],
            vec![],
            vec![acc(1, "x", 0, 8, Write)],
        ],
        &[(0, 1), (1, 2), (0, 3), (3, 4), (4, 5), (2, 5)],
    );
    check(&g, &[]);
    g.edges.retain(|e| *e != Edge::full(NodeId(2), NodeId(5)));
    check(
        &g,
        &[
            "write-after-read on 'x' (0x1) bytes [0, 8): 'c' (n2) reads, 'f' (n5) writes, \
           unordered; fix: add edge 'c' -> 'f' (n2 -> n5)",
        ],
    );
}

#[test]
fn one_hazard_per_pair_and_buffer_with_merged_modes_and_range() {
    let g = with_accesses(
        &[
            vec![
                acc(1, "x", 0, 4, Read),
                acc(1, "x", 16, 4, Write),
                acc(2, "y", 0, 4, Write),
            ],
            vec![acc(1, "x", 0, 32, Write), acc(2, "y", 0, 4, Read)],
        ],
        &[],
    );
    check(
        &g,
        &[
            "write-after-write on 'x' (0x1) bytes [0, 20): 'a' (n0) reads and writes, 'b' (n1) \
             writes, unordered; fix: add edge 'a' -> 'b' (n0 -> n1)",
            "read-after-write on 'y' (0x2) bytes [0, 4): 'a' (n0) writes, 'b' (n1) reads, \
             unordered; fix: add edge 'a' -> 'b' (n0 -> n1)",
        ],
    );
}

#[test]
fn fix_goes_along_the_topological_order() {
    // c -> a: the order is b, c, a, so b (n1) comes first although its id is larger.
    let mut g = with_accesses(
        &[
            vec![acc(1, "x", 0, 8, Read)],
            vec![acc(1, "x", 0, 8, Write)],
            vec![],
        ],
        &[(2, 0)],
    );
    let report = g.hazards().unwrap();
    let h = &report.hazards[0];
    assert_eq!(h.kind, HazardKind::ReadAfterWrite);
    assert_eq!(
        (h.first.label.as_str(), h.second.label.as_str()),
        ("b", "a")
    );
    assert_eq!(h.fix, Edge::full(NodeId(1), NodeId(0)));
    // b -> c -> a orders them.
    g.add_edge(NodeId(1), NodeId(2)).unwrap();
    check(&g, &[]);
}

#[test]
fn hazards_inside_child_graphs_name_their_place() {
    let inner = with_accesses(
        &[
            vec![acc(9, "tmp", 0, 4, Write)],
            vec![acc(9, "tmp", 0, 4, Read)],
        ],
        &[],
    );
    let mut g = Graph::new("outer");
    g.add_node("start", NodeKind::Empty);
    g.add_node_with(
        "body",
        NodeKind::ChildGraph {
            graph: Box::new(inner),
        },
        None,
        vec![acc(9, "tmp", 0, 4, ReadWrite)],
    );
    g.add_edge(NodeId(0), NodeId(1)).unwrap();
    check(
        &g,
        &[
            "read-after-write on 'tmp' (0x9) bytes [0, 4): 'a' (n0) writes, 'b' (n1) reads, \
           unordered; fix: add edge 'a' -> 'b' (n0 -> n1) in graph 'outer' > node 'body' (n1) > \
           graph 'g'",
        ],
    );
    let report = g.hazards().unwrap();
    assert_eq!(report.graphs, 2);
    assert_eq!(report.hazards[0].path, vec![NodeId(1)]);
    // Child-graph hazards are not drawn on the outer graph.
    assert_eq!(report.dot_options(), Default::default());
}

#[test]
fn counts_and_errors() {
    let report = fixture_json("attention-racy").hazards().unwrap();
    assert_eq!(
        (report.graphs, report.nodes_with_accesses, report.accesses),
        (1, 4, 13)
    );
    let mut g = graph("cyclic", 2, &[(0, 1)]);
    g.edges.push(Edge::full(NodeId(1), NodeId(0)));
    assert!(matches!(g.hazards(), Err(ModelError::Cycle { .. })));
    assert!(matches!(g.redundant_edges(), Err(ModelError::Cycle { .. })));
}

#[test]
fn dot_draws_racing_nodes_and_fix_edges() {
    let g = fixture_json("attention-racy");
    let options = g.hazards().unwrap().dot_options();
    assert_eq!(options.highlight_nodes, common::ids(&[0, 1, 3]));
    let dot = g.to_dot_with(&options);
    let expected = "digraph \"attention-racy\" {
  label=\"attention-racy\";
  labelloc=t;
  node [shape=box, fontname=\"monospace\"];
  n0 [label=\"q-proj\\nkernel _Z4projPKfS0_Pfii\\ngrid (1,1,1) block (256,1,1)\", color=red, fontcolor=red, penwidth=2];
  n1 [label=\"k-proj\\nkernel _Z4projPKfS0_Pfii\\ngrid (1,1,1) block (256,1,1)\", color=red, fontcolor=red, penwidth=2];
  n2 [label=\"v-proj\\nkernel _Z4projPKfS0_Pfii\\ngrid (1,1,1) block (256,1,1)\"];
  n3 [label=\"attention\\nkernel _Z9attentionPKfS0_S0_Pfi\\ngrid (1,1,1) block (256,1,1)\", color=red, fontcolor=red, penwidth=2];
  n2 -> n3;
  n0 -> n3 [color=red, style=dashed];
  n1 -> n3 [color=red, style=dashed];
}
";
    assert_eq!(dot, expected, "\n--- actual ---\n{dot}");
}

/// Asserts the redundant edges of a graph of empty nodes.
fn check_redundant(n: usize, edges: &[(u32, u32)], expected: &[(u32, u32)]) {
    let g = graph("g", n, edges);
    let actual: Vec<(u32, u32)> = g
        .redundant_edges()
        .unwrap()
        .iter()
        .map(|e| (e.from.0, e.to.0))
        .collect();
    assert_eq!(actual, expected);
}

#[test]
fn redundant_edges() {
    check_redundant(0, &[], &[]);
    check_redundant(3, &[(0, 1), (1, 2), (0, 2)], &[(0, 2)]);
    // Diamond: no edge is implied by the others.
    check_redundant(4, &[(0, 1), (0, 2), (1, 3), (2, 3)], &[]);
    // Diamond with the shortcut, and a long way round.
    check_redundant(
        6,
        &[
            (0, 1),
            (0, 2),
            (1, 3),
            (2, 3),
            (0, 3),
            (3, 4),
            (4, 5),
            (0, 5),
            (2, 5),
        ],
        &[(0, 3), (0, 5), (2, 5)],
    );
    // Edges against id order.
    check_redundant(3, &[(2, 1), (1, 0), (2, 0)], &[(2, 0)]);
    for name in ["chain", "kinds", "attention-racy", "attention-fixed"] {
        assert_eq!(
            fixture_json(name).redundant_edges().unwrap(),
            vec![],
            "{name}"
        );
    }
}
