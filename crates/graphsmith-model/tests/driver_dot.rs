//! Reading `cudaGraphDebugDotPrint` dumps: the real H200 fixtures (driver 580, CUDA 13.0) in both
//! forms, checked in full and against graphsmith's own JSON of the same graphs; errors naming
//! the line; a fuzz that no input panics.

use std::fmt::Write;

use graphsmith_model::{AccessMode, Graph, NodeKind};
use proptest::prelude::*;

#[path = "common/driver_dot_fixtures.rs"]
mod fixtures;
use fixtures::{fixture, FIXTURES};

const NAMES: [&str; 4] = ["chain", "kinds", "attention-racy", "attention-fixed"];

/// One line per node (with its accesses) and per edge, child graphs indented.
fn describe(g: &Graph) -> String {
    let mut out = String::new();
    let mut todo = vec![(g, 0usize)];
    while let Some((g, depth)) = todo.pop() {
        let pad = "  ".repeat(depth);
        let _ = writeln!(out, "{pad}graph '{}'", g.label);
        for n in &g.nodes {
            let kind = match &n.kind {
                NodeKind::Kernel(k) => format!(
                    "kernel {} grid {} block {} smem {}",
                    k.name, k.grid, k.block, k.shared_mem_bytes
                ),
                NodeKind::Memcpy(m) => format!(
                    "memcpy {:?} 0x{:x} -> {:?} 0x{:x}, {} B",
                    m.src.space, m.src.address, m.dst.space, m.dst.address, m.bytes
                ),
                NodeKind::Memset(m) => format!(
                    "memset 0x{:x} value {} elem {} width {} height {}",
                    m.dst, m.value, m.element_size, m.width, m.height
                ),
                NodeKind::ChildGraph { graph } => {
                    todo.push((graph, depth + 1));
                    format!("child_graph '{}'", graph.label)
                }
                other => format!("{other:?}"),
            };
            let _ = writeln!(out, "{pad}  {} '{}' {kind}", n.id, n.label);
            for a in &n.accesses {
                let _ = writeln!(
                    out,
                    "{pad}    {:?} '{}' [{}, {})",
                    a.mode,
                    a.label,
                    a.offset,
                    a.offset + a.len
                );
            }
        }
        for e in &g.edges {
            let _ = writeln!(out, "{pad}  {} -> {}", e.from, e.to);
        }
    }
    out
}

/// Reads fixture `name` and asserts its full description.
fn check(name: &str, expected: &str) {
    let g = Graph::from_driver_dot(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let actual = describe(&g);
    assert_eq!(actual, expected, "\n--- {name} actual ---\n{actual}");
}

#[test]
fn chain_default() {
    check(
        "chain.dot",
        "graph 'graph_1'
  n0 'memset#0' memset 0x0 value 1065353216 elem 1 width 1024 height 1
  n1 'gs_axpy_f32#1' kernel gs_axpy_f32 grid (0,0,0) block (0,0,0) smem 0
  n2 'gs_add_scalar_f32#2' kernel gs_add_scalar_f32 grid (0,0,0) block (0,0,0) smem 0
  n3 'memcpy#3' memcpy Device 0x0 -> Device 0x0, 1024 B
  n0 -> n1
  n1 -> n2
  n2 -> n3
",
    );
}

#[test]
fn chain_verbose_has_operands_as_accesses() {
    check(
        "chain-verbose.dot",
        "graph 'graph_1'
  n0 'memset#0' memset 0x7f1fd5e00400 value 1065353216 elem 4 width 256 height 1
    Write '0x7f1fd5e00400' [0, 1024)
  n1 'gs_axpy_f32#1' kernel gs_axpy_f32 grid (1,1,1) block (256,1,1) smem 0
  n2 'gs_add_scalar_f32#2' kernel gs_add_scalar_f32 grid (1,1,1) block (256,1,1) smem 0
  n3 'memcpy#3' memcpy Device 0x7f1fd5e00400 -> Device 0x7f1fd5e00800, 1024 B
    Read '0x7f1fd5e00400' [0, 1024)
    Write '0x7f1fd5e00800' [0, 1024)
  n0 -> n1
  n1 -> n2
  n2 -> n3
",
    );
}

#[test]
fn kinds_default_and_verbose_embed_the_child_graph() {
    let child = "  graph 'graph_4'
    n0 'gs_add_scalar_f32#0' kernel gs_add_scalar_f32 grid (0,0,0) block (0,0,0) smem 0
";
    check(
        "kinds.dot",
        &format!(
            "graph 'graph_3'
  n0 'empty#0' Empty
  n1 'child_graph#1' child_graph 'graph_4'
  n2 'event_record#2' EventRecord {{ event: \"\" }}
  n3 'event_wait#3' EventWait {{ event: \"\" }}
  n4 'host#4' Host {{ name: \"\" }}
  n0 -> n1
  n1 -> n2
  n2 -> n3
  n3 -> n4
{child}"
        ),
    );
    check(
        "kinds-verbose.dot",
        &format!(
            "graph 'graph_3'
  n0 'empty#0' Empty
  n1 'child_graph#1' child_graph 'graph_4'
  n2 'event_record#2' EventRecord {{ event: \"0x00007F21F4C33E80\" }}
  n3 'event_wait#3' EventWait {{ event: \"0x00007F21F4C33E80\" }}
  n4 'host#4' Host {{ name: \"0x0000560B83EDDC40\" }}
  n0 -> n1
  n1 -> n2
  n2 -> n3
  n3 -> n4
{}",
            child
                .replace("(0,0,0)", "(1,1,1)")
                .replacen("(1,1,1) smem", "(256,1,1) smem", 1)
        ),
    );
}

#[test]
fn attention_racy_demangles_labels() {
    check(
        "attention-racy-verbose.dot",
        "graph 'graph_5'
  n0 'proj#0' kernel _Z4projPKfS0_Pfii grid (1,1,1) block (256,1,1) smem 0
  n1 'proj#1' kernel _Z4projPKfS0_Pfii grid (1,1,1) block (256,1,1) smem 0
  n2 'proj#2' kernel _Z4projPKfS0_Pfii grid (1,1,1) block (256,1,1) smem 0
  n3 'attention#3' kernel _Z9attentionPKfS0_S0_Pfi grid (1,1,1) block (256,1,1) smem 0
  n2 -> n3
",
    );
}

/// Every fixture, both forms, has the structure of graphsmith's own JSON of the same graph:
/// node kinds, kernel names, edges, child graphs; and the verbose form has the memcpy and
/// memset accesses of the JSON (by absolute address).
#[test]
fn dumps_agree_with_graphsmith_json() {
    for name in NAMES {
        let json = Graph::from_json(fixture(&format!("{name}.json"))).unwrap();
        for suffix in ["", "-verbose"] {
            let file = format!("{name}{suffix}.dot");
            let dot = Graph::from_driver_dot(fixture(&file)).unwrap();
            let mut todo = vec![(&json, &dot)];
            while let Some((j, d)) = todo.pop() {
                assert_eq!(j.nodes.len(), d.nodes.len(), "{file}");
                let mut je = j.edges.clone();
                let mut de = d.edges.clone();
                je.sort();
                de.sort();
                assert_eq!(je, de, "{file}: edges");
                for (jn, dn) in j.nodes.iter().zip(&d.nodes) {
                    assert_eq!(jn.kind.name(), dn.kind.name(), "{file}: {}", dn.label);
                    match (&jn.kind, &dn.kind) {
                        (NodeKind::Kernel(a), NodeKind::Kernel(b)) => {
                            assert_eq!(a.name, b.name, "{file}");
                            if suffix == "-verbose" {
                                assert_eq!((a.grid, a.block), (b.grid, b.block), "{file}");
                            }
                        }
                        (NodeKind::ChildGraph { graph: a }, NodeKind::ChildGraph { graph: b }) => {
                            todo.push((a, b));
                        }
                        (NodeKind::Memcpy(a), NodeKind::Memcpy(b)) if suffix == "-verbose" => {
                            assert_eq!(a, b, "{file}")
                        }
                        (NodeKind::Memset(a), NodeKind::Memset(b)) if suffix == "-verbose" => {
                            assert_eq!(a, b, "{file}")
                        }
                        _ => {}
                    }
                    let copy_or_set = matches!(jn.kind, NodeKind::Memcpy(_) | NodeKind::Memset(_));
                    if suffix == "-verbose" && copy_or_set {
                        let absolute = |n: &graphsmith_model::Node| {
                            let mut v: Vec<(u64, u64, AccessMode)> = n
                                .accesses
                                .iter()
                                .map(|a| (a.buffer + a.offset, a.len, a.mode))
                                .collect();
                            v.sort();
                            v
                        };
                        assert_eq!(absolute(jn), absolute(dn), "{file}: {}", dn.label);
                    }
                }
            }
        }
    }
}

#[test]
fn imported_dumps_have_no_hazards_without_kernel_accesses() {
    for name in NAMES {
        for suffix in ["", "-verbose"] {
            let g = Graph::from_driver_dot(fixture(&format!("{name}{suffix}.dot"))).unwrap();
            assert!(g.hazards().unwrap().is_clean(), "{name}{suffix}");
        }
    }
}

#[test]
fn copy_and_set_hazards_are_found_in_a_dump() {
    // The chain with its memset -> kernel edge removed and the kernels gone: the memset writes
    // what the memcpy reads, and nothing orders them.
    let text = fixture("chain-verbose.dot");
    let mut kept: Vec<&str> = Vec::new();
    let mut skip = false;
    for line in text.lines() {
        if line.starts_with("\"graph_1_node_1\"[") || line.starts_with("\"graph_1_node_2\"[") {
            skip = true;
        }
        if !skip && !line.contains(" -> ") {
            kept.push(line);
        }
        if skip && line.ends_with("}\"];") {
            skip = false;
        }
    }
    let racy = kept.join("\n");
    let g = Graph::from_driver_dot(&racy).unwrap();
    assert_eq!(g.nodes.len(), 2);
    let report = g.hazards().unwrap();
    assert_eq!(report.hazards.len(), 1);
    assert_eq!(
        report.hazards[0].to_string(),
        "read-after-write on '0x7f1fd5e00400' (0x7f1fd5e00400) bytes [0, 1024): 'memset#0' (n0) \
         writes, 'memcpy#3' (n1) reads, unordered; fix: add edge 'memset#0' -> 'memcpy#3' (n0 -> n1)"
    );
}

#[test]
fn overlapping_operands_share_a_buffer() {
    let node = |n: u32, dptr: u64, width: u64| {
        format!(
            "\"graph_1_node_{n}\"[shape=\"record\" label=\"{{MEMSET\n| {{{{ID | node handle | dptr | pitch | value | elementSize | width | height}} | {{{n} (topoId: 0) | 0x1 | 0x{dptr:x} | 0 | 0 | 1 | {width} | 1}}}}}}\"];\n"
        )
    };
    let text = format!(
        "digraph dot {{\nsubgraph cluster_1 {{\n{}{}{}}}\n}}\n",
        node(0, 0x1000, 256),
        node(1, 0x1080, 256),
        node(2, 0x1100, 16)
    );
    let g = Graph::from_driver_dot(&text).unwrap();
    let buffers: Vec<(u64, u64)> = g
        .nodes
        .iter()
        .map(|n| (n.accesses[0].buffer, n.accesses[0].offset))
        .collect();
    assert_eq!(buffers, vec![(0x1000, 0), (0x1000, 0x80), (0x1000, 0x100)]);
    let report = g.hazards().unwrap();
    let pairs: Vec<String> = report
        .hazards
        .iter()
        .map(|h| format!("{}-{} [{}, +{})", h.first.id, h.second.id, h.offset, h.len))
        .collect();
    assert_eq!(pairs, ["n0-n1 [128, +128)", "n1-n2 [256, +16)"]);
}

/// Asserts the error text of `text`.
fn check_error(text: &str, expected: &str) {
    let err = Graph::from_driver_dot(text).unwrap_err();
    assert_eq!(err.to_string(), expected);
}

#[test]
fn errors_name_the_line() {
    check_error(
        "digraph dot {\nsubgraph cluster_1 {\n\"graph_1_node_0\"[label=\"0\nEMPTY\n\"];\n\"n1\"[label=\"1\nEMPTY\"];\n}\n}\n",
        "driver DOT, line 6: node name 'n1' is not of the form graph_X_node_N (is this a cudaGraphDebugDotPrint dump?)",
    );
    check_error(
        "digraph dot {\n\"graph_1_node_0\"[label=\"0\nEMPTY\"];\n\"graph_1_node_0\" -> \"graph_1_node_9\";\n}\n",
        "driver DOT, line 4: edge names node 'graph_1_node_9', which is not defined",
    );
    check_error(
        "digraph dot {\n\"graph_1_node_0\"[label=\"0\nEMPTY\"];\n\"graph_1_node_0\"[label=\"0\nEMPTY\"];\n}\n",
        "driver DOT, line 4: node 'graph_1_node_0' is defined again (first at line 2)",
    );
    check_error(
        "digraph dot {\n\"graph_1_node_0\"[label=\"0\ngraph_1\"];\n}\n",
        "driver DOT, line 2: node 'graph_1_node_0' embeds graph_1: the graph contains itself",
    );
    check_error(
        "digraph dot {\n\"graph_1_node_0\"[label=\"0\ngraph_7\"];\n}\n",
        "driver DOT, line 2: node 'graph_1_node_0' embeds graph_7: the dump has no such graph",
    );
    check_error(
        "digraph dot {\n\"graph_1_node_0\"[label=\"0\"];\n}\n",
        "driver DOT, line 2: node 'graph_1_node_0': node label \"0\" has no kind (expected a number, then the kind on the next line)",
    );
    check_error(
        "digraph dot {\n\"graph_1_node_0\"[shape=\"record\" label=\"{KERNEL | {ID\"];\n}\n",
        "driver DOT, line 2: node 'graph_1_node_0': record label: 2 '{' not closed",
    );
    check_error(
        "digraph dot {\n\"graph_1_node_0\"[label=\"0\nEMPTY\"];\n\"graph_2_node_0\"[label=\"0\nEMPTY\"];\n\"graph_1_node_0\" -> \"graph_2_node_0\";\n}\n",
        "driver DOT, line 6: edge 'graph_1_node_0' -> 'graph_2_node_0' joins graph_1 and graph_2",
    );
    check_error(
        "digraph dot {\n}\n",
        "driver DOT, line 2: no graph in the dump (no cluster and no node)",
    );
    check_error(
        "{\"label\": \"g\"}",
        "driver DOT, line 1: expected 'digraph', found '{'",
    );
}

#[test]
fn deep_nesting_is_refused() {
    let mut text = String::from("digraph dot {\n");
    for i in 0..200 {
        let _ = writeln!(text, "\"graph_{i}_node_0\"[label=\"0\ngraph_{}\"];", i + 1);
    }
    text.push_str("\"graph_200_node_0\"[label=\"0\nEMPTY\"];\n}\n");
    let err = Graph::from_driver_dot(&text).unwrap_err();
    assert!(
        err.to_string().contains("nest deeper than 64 levels"),
        "{err}"
    );
}

#[test]
fn empty_cluster_is_an_empty_graph_and_child_graphs_can_repeat() {
    let g =
        Graph::from_driver_dot("digraph dot {\nsubgraph cluster_1 {\nlabel=\"graph_1\";\n}\n}\n")
            .unwrap();
    assert!(g.is_empty());
    let g = Graph::from_driver_dot(
        "digraph dot {\n\"graph_1_node_0\"[label=\"0\ngraph_2\"];\n\"graph_1_node_1\"[label=\"1\ngraph_2\"];\n\
         \"graph_2_node_0\"[label=\"0\nk\" shape=\"octagon\"];\n}\n",
    )
    .unwrap();
    assert_eq!(g.nodes.len(), 2);
    for n in &g.nodes {
        let NodeKind::ChildGraph { graph } = &n.kind else {
            panic!("not a child graph")
        };
        assert_eq!(graph.nodes[0].label, "k#0");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,200}") {
        let _ = Graph::from_driver_dot(&text);
    }

    #[test]
    fn dot_alphabet_never_panics(text in "[-{}\\[\\]=;,:<>|\"\\\\\\na-z_0-9 ]{0,300}") {
        let _ = Graph::from_driver_dot(&format!("digraph dot {{\n{text}"));
        let _ = Graph::from_driver_dot(&text);
    }

    #[test]
    fn mutated_fixtures_never_panic(
        which in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..4, any::<char>()), 1..8),
    ) {
        // Every dump: driver-API and runtime-API copies, PyTorch's, all node kinds.
        let dumps: Vec<&str> = FIXTURES
            .iter()
            .filter(|(name, _)| name.ends_with(".dot"))
            .map(|(_, text)| *text)
            .collect();
        let mut chars: Vec<char> = dumps[which.index(dumps.len())].chars().collect();
        for (at, op, c) in edits {
            if chars.is_empty() {
                break;
            }
            let i = at.index(chars.len());
            match op {
                0 => { chars.remove(i); }
                1 => chars.insert(i, c),
                2 => chars[i] = c,
                _ => {
                    // Duplicate a slice: repeated statements, nested braces.
                    let end = (i + 40).min(chars.len());
                    let piece: Vec<char> = chars[i..end].to_vec();
                    chars.splice(i..i, piece);
                }
            }
        }
        let text: String = chars.into_iter().collect();
        if let Ok(g) = Graph::from_driver_dot(&text) {
            // Whatever is read is a valid model.
            let _ = g.hazards();
            let _ = g.summary();
            let _ = g.to_dot();
        }
    }
}
