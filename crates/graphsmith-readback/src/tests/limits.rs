//! Edges read into growing arrays, the limits on nodes, edges and depth, the plain-edge
//! fallback, address look-ups and node type names.

use graphsmith_analysis::readback::MAX_DEPTH;

use super::*;

/// A graph of `n` empty nodes in a chain.
fn chain(n: usize) -> Fake {
    let mut fake = Fake::default();
    for i in 1..=n {
        fake.nodes.insert(i, Node::Empty);
    }
    fake.graphs.insert(
        TOP,
        Graph {
            nodes: (1..=n).collect(),
            edges: (1..n).map(|i| (i, i + 1, 0, 0, 0)).collect(),
        },
    );
    fake
}

#[test]
fn edges_are_asked_again_with_more_room_until_they_fit() {
    fake::install(chain(101));
    let read = read(&fake::full_table(), Policy::Strict).unwrap();
    assert_eq!(read.raw.edges.len(), 100);
    assert_eq!(read.raw.edges[99], RawEdge::plain(99, 100));
    let asked = fake::calls()
        .iter()
        .filter(|c| **c == "cuGraphGetEdges_v2")
        .count();
    assert_eq!(asked, 2, "64, then 256 entries");
    // Exactly as many edges as the room: asked again, since the driver may have cut them short.
    fake::install(chain(65));
    assert_eq!(read_strict_edges(), 64);
}

fn read_strict_edges() -> usize {
    read(&fake::full_table(), Policy::Strict)
        .unwrap()
        .raw
        .edges
        .len()
}

#[test]
fn the_limits_stop_a_read() {
    let limits = Limits {
        max_nodes: 100,
        max_edges: 64,
    };
    fake::install(chain(65));
    assert_eq!(
        read_limited(&fake::full_table(), Policy::Lenient, limits).unwrap_err(),
        ReadError::TooManyEdges { max: 64 }
    );
    assert_eq!(
        ReadError::TooManyEdges { max: 64 }.to_string(),
        "the graph has more than 64 edges"
    );
    fake::install(chain(101));
    assert_eq!(
        read_limited(&fake::full_table(), Policy::Lenient, limits).unwrap_err(),
        ReadError::TooManyNodes { max: 100 }
    );
    // Child graphs count too: 13 nodes and the child's one.
    fake::install(every_kind());
    let limits = Limits {
        max_nodes: 13,
        max_edges: 64,
    };
    assert_eq!(
        read_limited(&fake::full_table(), Policy::Strict, limits).unwrap_err(),
        ReadError::TooManyNodes { max: 13 }
    );
}

#[test]
fn child_graphs_are_read_down_to_the_depth_limit() {
    let mut fake = Fake::default();
    // Graph g holds one child node g + 1 whose graph is g + 1, down to g = 20.
    for g in 0..20usize {
        let graph = if g == 0 { TOP } else { CHILD + g };
        fake.nodes.insert(100 + g, Node::Child(CHILD + g + 1));
        fake.graphs.insert(
            graph,
            Graph {
                nodes: vec![100 + g],
                edges: Vec::new(),
            },
        );
    }
    fake::install(fake);
    let read = read(&fake::full_table(), Policy::Strict).unwrap();
    let mut depth = 0;
    let mut graph = &read.raw;
    while let Some(child) = graph.nodes.first().and_then(|n| n.child.as_ref()) {
        graph = child;
        depth += 1;
    }
    assert_eq!(depth, MAX_DEPTH as usize + 1);
    assert!(graph.nodes.is_empty());
}

#[test]
fn without_edge_data_the_four_argument_call_reads_plain_edges() {
    fake::install(every_kind());
    let table = DriverTable {
        graph_get_edges_v2: None,
        ..fake::full_table()
    };
    let got = read(&table, Policy::Strict).unwrap();
    assert_eq!(got.raw.edges, [RawEdge::plain(0, 1), RawEdge::plain(1, 2)]);
    assert!(fake::calls().contains(&"cuGraphGetEdges"));
    // Neither: a lenient read has no edges, a strict one fails.
    let table = DriverTable {
        graph_get_edges_v2: None,
        graph_get_edges: None,
        ..fake::full_table()
    };
    fake::install(every_kind());
    assert!(read(&table, Policy::Lenient).unwrap().raw.edges.is_empty());
    fake::install(every_kind());
    assert_eq!(
        read(&table, Policy::Strict).unwrap_err(),
        ReadError::Missing {
            call: "cuGraphGetEdges_v2"
        }
    );
}

#[test]
fn an_address_is_looked_up_in_the_drivers_allocations() {
    let mut fake = Fake::default();
    fake.allocations.push((0x10000, 0x100));
    fake::install(fake);
    let table = fake::full_table();
    // SAFETY: the table holds the fake's functions.
    let reader = unsafe { Reader::new(&table, Policy::Lenient, Limits::BOUNDED) };
    assert_eq!(reader.allocation_of(0x10080), Some((0x10000, 0x100)));
    assert_eq!(reader.allocation_of(0x10100), None);
    let empty = DriverTable::default();
    // SAFETY: an empty table has no function to call.
    let reader = unsafe { Reader::new(&empty, Policy::Lenient, Limits::BOUNDED) };
    assert_eq!(reader.allocation_of(0x10080), None);
}

#[test]
fn other_nodes_are_named_by_kind_or_by_number() {
    assert_eq!(crate::node_type_name(1), "memcpy");
    assert_eq!(crate::node_type_name(10), "mem_alloc");
    assert_eq!(crate::node_type_name(13), "conditional");
    assert_eq!(crate::node_type_name(8), "node type 8");
    assert_eq!(crate::node_type_name(42), "node type 42");
}
