//! JSON: exact round trip, the format's shape, and the errors for bad input.

mod common;

use common::{every_kind, graph};
use graphsmith_model::{Graph, JsonError, NodeId, NodeKind};

/// Asserts the full error text of parsing `text`.
fn check_err(text: &str, expected: &str) {
    match Graph::from_json(text) {
        Ok(g) => panic!("parsed, expected an error: {g:?}"),
        Err(e) => assert_eq!(e.to_string(), expected),
    }
}

#[test]
fn round_trip_of_every_kind_is_exact() {
    let g = every_kind();
    let text = g.to_json();
    let back = Graph::from_json(&text).unwrap();
    assert_eq!(back, g);
    assert_eq!(back.to_json(), text);
    // The nesting really is there.
    let NodeKind::ChildGraph { graph: middle } = &back.nodes[7].kind else {
        panic!("node 7 is not a child graph");
    };
    assert!(
        matches!(&middle.nodes[1].kind, NodeKind::ChildGraph { graph } if graph.label == "inner")
    );
}

#[test]
fn format_snapshot() {
    let mut g = graph("tiny", 2, &[(0, 1)]);
    g.nodes[0].kind = common::kernel("k");
    if let NodeKind::Kernel(p) = &mut g.nodes[0].kind {
        p.args.push(graphsmith_model::KernelArg {
            offset: 0,
            bytes: vec![1, 0xab],
        });
    }
    assert_eq!(
        g.to_json(),
        r#"{
  "label": "tiny",
  "nodes": [
    {
      "id": 0,
      "label": "a",
      "kind": "kernel",
      "name": "k",
      "grid": {
        "x": 4,
        "y": 1,
        "z": 1
      },
      "block": {
        "x": 128,
        "y": 1,
        "z": 1
      },
      "shared_mem_bytes": 0,
      "args": [
        {
          "offset": 0,
          "bytes": "01ab"
        }
      ]
    },
    {
      "id": 1,
      "label": "b",
      "kind": "empty"
    }
  ],
  "edges": [
    {
      "from": 0,
      "to": 1
    }
  ]
}"#
    );
}

#[test]
fn parse_errors_give_line_and_column() {
    check_err(
        "",
        "graph JSON, line 1, column 0: EOF while parsing a value",
    );
    check_err(
        "{\"label\": \"g\",\n \"nodes\": [}",
        "graph JSON, line 2, column 12: expected value",
    );
    check_err(
        "{\"label\": \"g\",\n \"edges\": []}",
        "graph JSON, line 2, column 13: missing field `nodes`",
    );
    check_err(
        "{\"label\": \"g\", \"edges\": [],\n\"nodes\": [{\"id\": 0, \"label\": \"x\", \"kind\": \"bogus\"}]}",
        "graph JSON, line 2, column 50: unknown variant `bogus`, expected one of `kernel`, `memcpy`, `memset`, `host`, `event_record`, `event_wait`, `empty`, `child_graph`, `mem_alloc`, `mem_free`, `conditional`, `other`",
    );
    check_err(
        r#"{"label": "g", "edges": [], "nodes": [{"id": 0, "label": "x", "kind": "kernel", "name": "k",
            "grid": {"x": 1, "y": 1, "z": 1}, "block": {"x": 1, "y": 1, "z": 1},
            "shared_mem_bytes": 0, "args": [{"offset": 0, "bytes": "abc"}]}]}"#,
        "graph JSON, line 3, column 75: hex string has odd length 3",
    );
    let err = Graph::from_json("{\n\n   nope").unwrap_err();
    assert!(
        matches!(
            err,
            JsonError::Parse {
                line: 3,
                column: 4,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn validation_errors_name_the_graph() {
    let node = |id: u32| format!(r#"{{"id": {id}, "label": "n{id}", "kind": "empty"}}"#);
    let doc = |nodes: &str, edges: &str| {
        format!(r#"{{"label": "g", "nodes": [{nodes}], "edges": [{edges}]}}"#)
    };
    let two = format!("{}, {}", node(0), node(1));
    check_err(
        &doc(&format!("{}, {}", node(0), node(5)), ""),
        "graph JSON, graph 'g': the node at position 1 has id n5; a node's id must equal its position",
    );
    check_err(
        &doc(&two, r#"{"from": 0, "to": 2}"#),
        "graph JSON, graph 'g': edge n0 -> n2 names node n2, but the graph has only 2 nodes",
    );
    check_err(
        &doc(&two, r#"{"from": 1, "to": 1}"#),
        "graph JSON, graph 'g': edge from node 'n1' (n1) to itself",
    );
    check_err(
        &doc(&two, r#"{"from": 0, "to": 1}, {"from": 0, "to": 1}"#),
        "graph JSON, graph 'g': edge n0 -> n1 is listed more than once",
    );

    // Inside child graphs, the location is the path of graphs and nodes.
    let mut inner = graph("inner", 2, &[(0, 1)]);
    inner.edges.push(common::edge(1, 9));
    let mut middle = graph("middle", 1, &[]);
    middle.add_node(
        "body",
        NodeKind::ChildGraph {
            graph: Box::new(inner),
        },
    );
    let mut outer = graph("outer", 3, &[]);
    outer.add_node(
        "step",
        NodeKind::ChildGraph {
            graph: Box::new(middle),
        },
    );
    check_err(
        &outer.to_json(),
        "graph JSON, graph 'outer' > node 'step' (n3) > graph 'middle' > node 'body' (n1) > graph 'inner': edge n1 -> n9 names node n9, but the graph has only 2 nodes",
    );
    assert_eq!(
        Graph::from_json(&outer.to_json()).unwrap_err(),
        JsonError::UnknownNode {
            location: "graph 'outer' > node 'step' (n3) > graph 'middle' > node 'body' (n1) > graph 'inner'"
                .to_string(),
            from: NodeId(1),
            to: NodeId(9),
            missing: NodeId(9),
            count: 2,
        }
    );
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let depth = 10_000;
    let open = r#"{"label": "g", "edges": [], "nodes": [{"id": 0, "label": "c", "kind": "child_graph", "graph": "#;
    let mut text = open.repeat(depth);
    text.push_str(r#"{"label": "leaf", "nodes": [], "edges": []}"#);
    text.push_str(&"}]}".repeat(depth));
    let err = Graph::from_json(&text).unwrap_err();
    assert!(
        matches!(&err, JsonError::Parse { message, .. } if message == "recursion limit exceeded"),
        "{err}"
    );
}

#[test]
fn cycles_are_not_a_json_error() {
    // A cyclic graph is representable; the topology functions report the cycle.
    let g = graph("ring", 2, &[(0, 1), (1, 0)]);
    let back = Graph::from_json(&g.to_json()).unwrap();
    assert_eq!(back, g);
    assert!(back.topological_order().is_err());
}

#[test]
fn forty_levels_of_child_graphs_round_trip() {
    let mut g = graph("leaf", 1, &[]);
    for level in 0..40 {
        let mut outer = graph(&format!("level {level}"), 1, &[]);
        let child = outer.add_node("child", NodeKind::ChildGraph { graph: Box::new(g) });
        outer.add_edge(NodeId(0), child).unwrap();
        g = outer;
    }
    assert_eq!(Graph::from_json(&g.to_json()).unwrap(), g);
}
