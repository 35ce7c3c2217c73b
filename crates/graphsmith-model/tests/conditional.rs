//! Conditional nodes with modelled bodies: hazards inside a body and between a body and the
//! rest of the graph, DOT, JSON, and the unknown-memory check.

mod common;

use graphsmith_model::{
    Access, AccessMode, ConditionalKind, Graph, HazardKind, HazardOptions, NodeKind,
};

fn access(buffer: u64, mode: AccessMode) -> Access {
    Access {
        buffer,
        label: format!("buf{buffer:x}"),
        offset: 0,
        len: 128,
        mode,
    }
}

const X: u64 = 0x1000;
const Y: u64 = 0x2000;

/// A body: `produce` writes `X`, `consume` reads it, ordered unless `racy`.
fn body(label: &str, racy: bool) -> Graph {
    let mut g = Graph::new(label);
    let p = g.add_node_with(
        "produce",
        common::kernel("p"),
        None,
        vec![access(X, AccessMode::Write)],
    );
    let c = g.add_node_with(
        "consume",
        common::kernel("c"),
        None,
        vec![access(X, AccessMode::Read)],
    );
    if !racy {
        g.add_edge(p, c).unwrap();
    }
    g
}

#[test]
fn a_race_inside_a_body_names_the_body() {
    for (kind, count) in [
        (ConditionalKind::If, 2),
        (ConditionalKind::While, 1),
        (ConditionalKind::Switch, 3),
    ] {
        let mut g = Graph::new("step");
        let mut bodies: Vec<Graph> = (0..count).map(|i| body(&format!("b{i}"), false)).collect();
        bodies[count - 1] = body("racy", true);
        g.add_conditional("cond", kind, bodies);
        let report = g.hazards().unwrap();
        assert_eq!(report.graphs, 1 + count, "{kind:?}");
        assert_eq!(report.hazards.len(), 1, "{kind:?}");
        let h = &report.hazards[0];
        assert_eq!(h.kind, HazardKind::ReadAfterWrite);
        assert_eq!(
            h.graph,
            format!(
                "graph 'step' > node 'cond' (n0) > body {} graph 'racy'",
                count - 1
            )
        );
        assert_eq!(
            (h.first.label.as_str(), h.second.label.as_str()),
            ("produce", "consume")
        );
    }
}

#[test]
fn a_body_races_with_an_unordered_node_of_the_parent() {
    let mut g = Graph::new("step");
    let before = g.add_node_with(
        "init",
        common::kernel("i"),
        None,
        vec![access(X, AccessMode::Write)],
    );
    let cond = g.add_conditional("loop", ConditionalKind::While, vec![body("body", false)]);
    let other = g.add_node_with(
        "other",
        common::kernel("o"),
        None,
        vec![access(Y, AccessMode::Write)],
    );
    g.add_edge(before, cond).unwrap();
    g.add_edge(before, other).unwrap();
    // `other` touches another buffer: no race.
    assert!(g.hazards().unwrap().is_clean());
    // Reading X unordered with the loop races with what its body writes.
    g.nodes[other.index()]
        .accesses
        .push(access(X, AccessMode::Read));
    let report = g.hazards().unwrap();
    assert_eq!(report.hazards.len(), 1);
    let h = &report.hazards[0];
    assert_eq!((h.first.id, h.second.id), (cond, other));
    assert_eq!(h.kind, HazardKind::ReadAfterWrite);
    assert!(h.path.is_empty());
    g.add_edge(cond, other).unwrap();
    assert!(g.hazards().unwrap().is_clean());
}

#[test]
fn the_conditional_node_touches_what_its_bodies_touch() {
    let mut g = Graph::new("g");
    let mut inner = Graph::new("inner");
    inner.add_node_with(
        "w",
        NodeKind::Empty,
        None,
        vec![access(Y, AccessMode::Write)],
    );
    let mut then = body("then", false);
    then.add_conditional("nested", ConditionalKind::If, vec![inner]);
    let c = g.add_conditional("if", ConditionalKind::If, vec![then, Graph::new("else")]);
    let buffers: Vec<_> = g.nodes[c.index()]
        .accesses
        .iter()
        .map(|a| (a.buffer, a.mode))
        .collect();
    assert_eq!(
        buffers,
        [
            (X, AccessMode::Write),
            (X, AccessMode::Read),
            (Y, AccessMode::Write)
        ]
    );
    assert!(matches!(
        &g.nodes[c.index()].kind,
        NodeKind::Conditional { bodies: 2, body_graphs, .. } if body_graphs.len() == 2
    ));
}

#[test]
fn bodies_in_json_and_dot() {
    let mut g = Graph::new("step");
    let c = g.add_conditional(
        "switch",
        ConditionalKind::Switch,
        vec![body("case0", false), body("case1", true)],
    );
    let after = g.add_node("after", NodeKind::Empty);
    g.add_edge(c, after).unwrap();
    let json = g.to_json();
    let back = Graph::from_json(&json).unwrap();
    assert_eq!(back, g);
    assert_eq!(back.hazards().unwrap(), g.hazards().unwrap());
    let dot = g.to_dot();
    assert!(
        dot.contains("conditional switch, 2 bodies\\nbody 0 'case0': 2 nodes, 1 edges\\nbody 1 'case1': 2 nodes, 0 edges"),
        "{dot}"
    );
    // A body with a bad edge is named by where it is.
    let mut bad = g.clone();
    if let NodeKind::Conditional { body_graphs, .. } = &mut bad.nodes[0].kind {
        body_graphs[1].edges.push(graphsmith_model::Edge::full(
            graphsmith_model::NodeId(0),
            graphsmith_model::NodeId(9),
        ));
    }
    let err = Graph::from_json(&bad.to_json()).unwrap_err().to_string();
    assert!(
        err.contains("graph 'step' > node 'switch' (n0) > body 1 graph 'case1'"),
        "{err}"
    );
}

#[test]
fn unknown_kernels_in_bodies_are_judged_by_the_bodies() {
    // A conditional whose bodies hold only known accesses is a node with known accesses.
    let mut g = Graph::new("g");
    g.add_conditional("c", ConditionalKind::If, vec![body("then", false)]);
    g.add_node("k", common::kernel("k"));
    let options = HazardOptions {
        unknown_kernel_memory: true,
    };
    let report = g.hazards_with(&options).unwrap();
    assert_eq!(report.hazards.len(), 1);
    assert_eq!(report.hazards[0].kind, HazardKind::PossibleKernelAccess);
    assert_eq!(report.unjudged_nested_pairs, 0);
    // Without modelled bodies it cannot be judged.
    let mut g = Graph::new("g");
    g.add_node(
        "c",
        NodeKind::Conditional {
            conditional: ConditionalKind::If,
            bodies: 1,
            body_graphs: vec![],
        },
    );
    g.add_node("k", common::kernel("k"));
    let report = g.hazards_with(&options).unwrap();
    assert!(report.hazards.is_empty());
    assert_eq!(report.unjudged_kernel_pairs, 1);
}
