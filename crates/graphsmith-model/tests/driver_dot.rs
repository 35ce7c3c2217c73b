//! Reading `cudaGraphDebugDotPrint` dumps: the real H200 fixtures (driver 580, CUDA 13.0) in both
//! forms, checked in full and against graphsmith's own JSON of the same graphs; errors naming
//! the line; a fuzz that no input panics.

use std::fmt::Write;

use graphsmith_model::{AccessMode, Graph, NodeKind};
use proptest::prelude::*;

#[path = "common/driver_dot_fixtures.rs"]
mod fixtures;
#[path = "common/manifests.rs"]
mod manifests;
use fixtures::{fixture, FIXTURES};
use graphsmith_model::{HazardKind, HazardOptions, NodeId};
use manifests::{cases, merged, node_of_handle, Case, Side};

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
                NodeKind::Conditional {
                    conditional,
                    bodies,
                    body_graphs,
                } => {
                    todo.extend(body_graphs.iter().rev().map(|b| (b, depth + 1)));
                    let labels: Vec<String> = body_graphs
                        .iter()
                        .map(|b| format!("'{}'", b.label))
                        .collect();
                    format!(
                        "conditional {conditional:?}, {bodies} bodies: {}",
                        labels.join(", ")
                    )
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
fn exponential_embedding_is_refused() {
    // Each graph embeds the next one twice: 2^60 nodes if built.
    let mut text = String::from("digraph dot {\n");
    for i in 0..60 {
        for n in 0..2 {
            let _ = writeln!(
                text,
                "\"graph_{i}_node_{n}\"[label=\"{n}\ngraph_{}\"];",
                i + 1
            );
        }
    }
    text.push_str("\"graph_60_node_0\"[label=\"0\nEMPTY\"];\n}\n");
    let err = Graph::from_driver_dot(&text).unwrap_err();
    assert!(
        err.to_string()
            .contains("embedding child graphs would make a model of more than 4194304 nodes"),
        "{err}"
    );
}

#[test]
fn tall_pitched_operands_stay_bounded() {
    // 300 memsets of 4,096 rows each (pitch 512): per-row ranges until the dump's budget of
    // 2^20 is spent, then one range from the first byte to the last, never fewer bytes.
    let mut text = String::from("digraph dot {\nsubgraph cluster_1 {\n");
    for n in 0..300u64 {
        let dptr = 0x1000_0000 + n * 0x100_0000;
        let _ = writeln!(
            text,
            "\"graph_1_node_{n}\"[shape=\"record\" label=\"{{MEMSET | {{{{ID | node handle | dptr | pitch | value | elementSize | width | height}} | {{{n} (topoId: 0) | 0x1 | 0x{dptr:x} | 512 | 0 | 1 | 64 | 4096}}}}}}\"];"
        );
    }
    text.push_str("}\n}\n");
    let g = Graph::from_driver_dot(&text).unwrap();
    let counts: Vec<usize> = g.nodes.iter().map(|n| n.accesses.len()).collect();
    assert_eq!(counts[0], 4096);
    assert_eq!(counts.iter().filter(|&&c| c == 4096).count(), 256);
    assert!(counts[256..].iter().all(|&c| c == 1));
    let last = &g.nodes[299].accesses[0];
    assert_eq!((last.offset, last.len), (0, 4095 * 512 + 64));
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

/// Every case of both manifests: the runtime-API programs' and PyTorch's.
fn all_cases() -> Vec<Case> {
    let mut all = cases("runtime-api", fixture("runtime-api/manifest.json"));
    all.extend(cases("torch", fixture("torch/manifest.json")));
    all
}

/// The model ids of a case's two nodes in `dump`: through the node handles of the manifest, or,
/// for PyTorch (no handles), through the node kinds (the first side is the copy or the kernel
/// that the manifest names first; the dumps hold two nodes).
fn racing_nodes(case: &Case, dump: &str, g: &Graph) -> (NodeId, NodeId) {
    if let (Some(a), Some(b)) = (case.first.handle, case.second.handle) {
        let id = |h| {
            NodeId(
                node_of_handle(dump, h).unwrap_or_else(|| panic!("{}: handle 0x{h:x}", case.name)),
            )
        };
        return (id(a), id(b));
    }
    assert_eq!(g.nodes.len(), 2, "{}", case.name);
    let first = g
        .nodes
        .iter()
        .position(|n| n.kind.name() == case.first.kind)
        .unwrap_or_else(|| panic!("{}: no {} node", case.name, case.first.kind));
    (NodeId(first as u32), NodeId(1 - first as u32))
}

fn copy_or_set(side: &Side) -> bool {
    side.kind == "memcpy" || side.kind == "memset"
}

/// The absolute byte ranges, merged, of a node's accesses of the given modes.
fn absolute(g: &Graph, id: NodeId, modes: &[AccessMode]) -> Vec<(u64, u64)> {
    merged(
        g.nodes[id.index()]
            .accesses
            .iter()
            .filter(|a| modes.contains(&a.mode))
            .map(|a| (a.buffer + a.offset, a.buffer + a.offset + a.len))
            .collect(),
    )
}

/// Each copy and set of every case (1-D copies of every kind and from both APIs, 2-D and 3-D
/// copies with pitch and positions, 1-D and 2-D memsets) touches exactly the bytes the
/// manifest gives, row by row: the raced side's written (or read) ranges are the manifest's.
#[test]
fn every_copy_and_set_touches_the_manifests_bytes() {
    let mut checked = 0;
    for case in all_cases() {
        for file in [&case.racy, &case.fixed] {
            let dump = fixture(file);
            let g = Graph::from_driver_dot(dump).unwrap_or_else(|e| panic!("{file}: {e}"));
            let (a, b) = racing_nodes(&case, dump, &g);
            for (side, id) in [(&case.first, a), (&case.second, b)] {
                if !copy_or_set(side) {
                    continue;
                }
                let modes: &[AccessMode] = match side.access.as_str() {
                    "read" => &[AccessMode::Read],
                    _ => &[AccessMode::Write],
                };
                assert_eq!(
                    absolute(&g, id, modes),
                    merged(side.ranges.clone()),
                    "{file}: {} {id}",
                    side.kind
                );
                checked += 1;
            }
        }
    }
    // 18 copy/set sides in the 12 runtime-API cases and 3 PyTorch copies, racy and fixed.
    assert_eq!(checked, 2 * (18 + 3), "sides checked");
}

/// Every planted race of both manifests is reported with both nodes and the manifest's bytes;
/// every fixed twin is clean. A race between two copies or sets is a hazard on exactly the
/// overlap; a race between a kernel and a copy or set is a possible hazard on the copy's or
/// set's bytes (a dump holds no kernel arguments), which contain the overlap. A race between two
/// kernels (`torch-index-put`) cannot be seen in a dump: it is counted as an unjudged pair.
#[test]
fn every_planted_race_is_found_and_every_fixed_twin_is_clean() {
    let options = HazardOptions {
        unknown_kernel_memory: true,
    };
    let mut kernel_only = Vec::new();
    for case in all_cases() {
        let dump = fixture(&case.racy);
        let g = Graph::from_driver_dot(dump).unwrap();
        let (a, b) = racing_nodes(&case, dump, &g);
        let report = g.hazards_with(&options).unwrap();
        let fixed = Graph::from_driver_dot(fixture(&case.fixed)).unwrap();
        let fixed_report = fixed.hazards_with(&options).unwrap();
        assert!(
            fixed_report.is_clean(),
            "{}: {:?}",
            case.fixed,
            fixed_report.hazards
        );
        assert!(
            fixed
                .edges
                .iter()
                .any(|e| (e.from, e.to) == (a, b) || (e.from, e.to) == (b, a)),
            "{}: the fixed twin joins the nodes",
            case.name
        );
        if !copy_or_set(&case.first) && !copy_or_set(&case.second) {
            assert!(report.is_clean(), "{}", case.name);
            assert_eq!(report.unjudged_kernel_pairs, 1, "{}", case.name);
            assert_eq!(fixed_report.unjudged_kernel_pairs, 0, "{}", case.name);
            kernel_only.push(case.name.clone());
            continue;
        }
        let pair = |h: &&graphsmith_model::Hazard| {
            let ids = [h.first.id, h.second.id];
            ids.contains(&a) && ids.contains(&b)
        };
        let found: Vec<_> = report
            .hazards
            .iter()
            .filter(pair)
            .filter(|h| {
                h.buffer + h.offset < case.overlap.1 && case.overlap.0 < h.buffer + h.offset + h.len
            })
            .collect();
        assert_eq!(found.len(), 1, "{}: {:?}", case.name, report.hazards);
        let h = found[0];
        assert_eq!((h.fix.from, h.fix.to), (h.first.id, h.second.id));
        let range = (h.buffer + h.offset, h.buffer + h.offset + h.len);
        if copy_or_set(&case.first) && copy_or_set(&case.second) {
            assert_ne!(h.kind, HazardKind::PossibleKernelAccess, "{}", case.name);
            assert_eq!(range, case.overlap, "{}: the overlap", case.name);
        } else {
            assert_eq!(h.kind, HazardKind::PossibleKernelAccess, "{}", case.name);
            let copy = if copy_or_set(&case.first) {
                &case.first
            } else {
                &case.second
            };
            let ranges = merged(copy.ranges.clone());
            let envelope = (ranges[0].0, ranges[ranges.len() - 1].1);
            assert_eq!(range, envelope, "{}: the copy's or set's bytes", case.name);
            assert!(
                range.0 <= case.overlap.0 && case.overlap.1 <= range.1,
                "{}",
                case.name
            );
        }
        // Every other hazard of the racy dump is a possible one on another pair or buffer.
        for other in report.hazards.iter().filter(|x| !std::ptr::eq(*x, h)) {
            assert_eq!(
                other.kind,
                HazardKind::PossibleKernelAccess,
                "{}: {other}",
                case.name
            );
        }
    }
    assert_eq!(kernel_only, ["torch-index-put"]);
}

/// A 2-D copy and a 2-D memset on other columns of the same rows of a pitched buffer do not
/// race: accesses are per row, not from the first byte to the last.
#[test]
fn pitched_rows_on_other_columns_do_not_race() {
    // memcpy2d-htod's copy writes bytes [32, 128) of rows 3..7 (pitch 512); a memset of bytes
    // [160, 224) of rows 3..7 touches the same rows, other columns.
    let text = fixture("runtime-api/memcpy2d-htod-racy.dot").replace(
        "0x00007F9900802A40 | 512 | 90 | 1 | 64 | 4",
        "0x00007F99008026A0 | 512 | 90 | 1 | 64 | 4",
    );
    assert_ne!(text, fixture("runtime-api/memcpy2d-htod-racy.dot"));
    let g = Graph::from_driver_dot(&text).unwrap();
    let written = |n: usize| {
        g.nodes[n]
            .accesses
            .iter()
            .find(|a| a.mode == AccessMode::Write)
            .map(|a| a.buffer)
    };
    assert_eq!(written(0), written(1), "one buffer:\n{}", describe(&g));
    assert!(g.hazards().unwrap().is_clean(), "{}", describe(&g));
    // Moved onto the copied columns, it races on exactly the 4 rows' 64 shared bytes each.
    let text = text.replace("0x00007F99008026A0", "0x00007F9900802640");
    let report = Graph::from_driver_dot(&text).unwrap().hazards().unwrap();
    assert_eq!(report.hazards.len(), 1);
    let h = &report.hazards[0];
    assert_eq!((h.offset, h.len), (0x20, 3 * 512 + 64));
}

#[test]
fn runtime_api_2d_copy_reads_pitch_positions_and_rows() {
    // cudaMemcpy2DAsync from pitched q2 (x=16, y=2) into pitched p2 (x=8, y=1): the dump prints
    // the pointers already moved; 6 rows of 128 bytes, pitch 512, on each side. The memset
    // (cudaMemset2DAsync, rows 4-5) writes 2 rows of 64 bytes.
    check(
        "runtime-api/memcpy2d-dtod-racy.dot",
        "graph 'graph_8'
  n0 'memcpy#0' memcpy Device 0x7f9900804410 -> Device 0x7f9900802208, 768 B
    Read '0x7f9900804410' [0, 128)
    Read '0x7f9900804410' [512, 640)
    Read '0x7f9900804410' [1024, 1152)
    Read '0x7f9900804410' [1536, 1664)
    Read '0x7f9900804410' [2048, 2176)
    Read '0x7f9900804410' [2560, 2688)
    Write '0x7f9900802208' [0, 128)
    Write '0x7f9900802208' [512, 640)
    Write '0x7f9900802208' [1024, 1152)
    Write '0x7f9900802208' [1536, 1664)
    Write '0x7f9900802208' [2048, 2176)
    Write '0x7f9900802208' [2560, 2688)
  n1 'memset#1' memset 0x7f9900802800 value 0 elem 1 width 64 height 2
    Write '0x7f9900802208' [1528, 1592)
    Write '0x7f9900802208' [2040, 2104)
",
    );
}

#[test]
fn runtime_api_3d_copy_reads_slices() {
    // cudaMemcpy3DAsync between cudaMalloc3D buffers (pitch 512, 8 rows a slice), srcPos
    // (8,1,1), dstPos (16,2,1), extent (64,3,2): 2 slices of 3 rows, slices 4096 bytes apart.
    check(
        "runtime-api/memcpy3d-racy.dot",
        "graph 'graph_10'
  n0 'memcpy#0' memcpy Device 0x7f9900807208 -> Device 0x7f990080b410, 384 B
    Read '0x7f9900807208' [0, 64)
    Read '0x7f9900807208' [512, 576)
    Read '0x7f9900807208' [1024, 1088)
    Read '0x7f9900807208' [4096, 4160)
    Read '0x7f9900807208' [4608, 4672)
    Read '0x7f9900807208' [5120, 5184)
    Write '0x7f990080b410' [0, 64)
    Write '0x7f990080b410' [512, 576)
    Write '0x7f990080b410' [1024, 1088)
    Write '0x7f990080b410' [4096, 4160)
    Write '0x7f990080b410' [4608, 4672)
    Write '0x7f990080b410' [5120, 5184)
  n1 'touch#1' kernel _Z5touchPfi grid (1,1,1) block (128,1,1) smem 0
",
    );
}

#[test]
fn runtime_api_kinds_host_alloc_free_events_child_and_conditionals() {
    // A conditional node holds its body graphs (the WHILE body's `set_cond` kernel sets its
    // condition) and takes their accesses (none here: kernels only); a child graph's node
    // those of the nodes inside.
    check(
        "runtime-api/kinds-racy.dot",
        "graph 'graph_12'
  n0 'host#0' Host { name: \"0x0000557FE4260FD0\" }
  n1 'mem_alloc#1' MemAlloc { address: 12918456320, bytes: 4096 }
  n2 'touch#2' kernel _Z5touchPfi grid (8,1,1) block (128,1,1) smem 0
  n3 'mem_free#3' MemFree { address: 12918456320 }
  n4 'touch#4' kernel _Z5touchPfi grid (2,1,1) block (128,1,1) smem 0
  n5 'memcpy#5' memcpy Device 0x7f990080e000 -> Host 0x7f9900a00000, 512 B
    Read '0x7f990080e000' [0, 512)
    Write '0x7f9900a00000' [0, 512)
  n6 'event_record#6' EventRecord { event: \"0x000055801DD5C450\" }
  n7 'event_wait#7' EventWait { event: \"0x000055801DD5C650\" }
  n8 'child_graph#8' child_graph 'graph_14'
    Write '0x7f990080f000' [0, 4096)
  n9 'conditional#9' conditional If, 1 bodies: 'graph_15'
  n10 'conditional#10' conditional While, 1 bodies: 'graph_16'
  n0 -> n1
  n1 -> n2
  n2 -> n3
  n3 -> n4
  n3 -> n5
  graph 'graph_16'
    n0 'touch#0' kernel _Z5touchPfi grid (1,1,1) block (128,1,1) smem 0
    n1 'set_cond#1' kernel _Z8set_condyj grid (1,1,1) block (1,1,1) smem 0
    n0 -> n1
  graph 'graph_15'
    n0 'touch#0' kernel _Z5touchPfi grid (1,1,1) block (128,1,1) smem 0
  graph 'graph_14'
    n0 'memset#0' memset 0x7f990080f000 value 0 elem 4 width 1024 height 1
      Write '0x7f990080f000' [0, 4096)
    n1 'touch#1' kernel _Z5touchPfi grid (8,1,1) block (128,1,1) smem 0
    n0 -> n1
",
    );
    // The racy twin: kernel n4 against the copy n5 (a possible hazard on each buffer the copy
    // touches); unordered pairs of nodes running kernels, and of the child graph or
    // conditionals against the copy, are counted.
    let g = Graph::from_driver_dot(fixture("runtime-api/kinds-racy.dot")).unwrap();
    let report = g
        .hazards_with(&HazardOptions {
            unknown_kernel_memory: true,
        })
        .unwrap();
    let lines: Vec<String> = report.hazards.iter().map(|h| h.to_string()).collect();
    assert_eq!(
        lines,
        [
            "possible (kernel memory unknown) on '0x7f990080e000' (0x7f990080e000) bytes [0, 512): \
             'touch#4' (n4) may read or write, 'memcpy#5' (n5) reads, unordered; fix: add edge \
             'touch#4' -> 'memcpy#5' (n4 -> n5)",
            "possible (kernel memory unknown) on '0x7f9900a00000' (0x7f9900a00000) bytes [0, 512): \
             'touch#4' (n4) may read or write, 'memcpy#5' (n5) writes, unordered; fix: add edge \
             'touch#4' -> 'memcpy#5' (n4 -> n5)",
        ]
    );
    // n2, n4 and the three nested nodes n8, n9, n10: 10 pairs, less n2-n4 (ordered); the
    // nested ones against the copy n5: 3.
    assert_eq!(
        (report.unjudged_kernel_pairs, report.unjudged_nested_pairs),
        (9, 3)
    );
}

/// Each copy and set layout of the runtime API (and PyTorch's copies), read from the real
/// dumps: the spaces from the `kind` row, the bytes from `Extent`, and one access per row on
/// each side (their bytes are checked against the manifests above).
#[test]
fn each_copy_and_set_layout_of_the_runtime_api() {
    // (dump, node, what it is, accesses read, accesses written)
    let expected = [
        (
            "runtime-api/kinds-racy.dot",
            5,
            "memcpy Device -> Host, 512 B",
            1,
            1,
        ),
        (
            "runtime-api/memcpy-default-racy.dot",
            0,
            "memcpy Host -> Device, 1024 B",
            1,
            1,
        ),
        (
            "runtime-api/memcpy-default-racy.dot",
            1,
            "memset elem 1 width 1024 height 1 pitch 0",
            0,
            1,
        ),
        (
            "runtime-api/memcpy-dtod-racy.dot",
            0,
            "memcpy Device -> Device, 512 B",
            1,
            1,
        ),
        (
            "runtime-api/memcpy-dtoh-racy.dot",
            0,
            "memcpy Device -> Host, 2048 B",
            1,
            1,
        ),
        (
            "runtime-api/memcpy-dtoh-racy.dot",
            1,
            "memset elem 1 width 1024 height 1 pitch 0",
            0,
            1,
        ),
        (
            "runtime-api/memcpy-htod-racy.dot",
            0,
            "memcpy Host -> Device, 1024 B",
            1,
            1,
        ),
        (
            "runtime-api/memcpy2d-dtod-racy.dot",
            0,
            "memcpy Device -> Device, 768 B",
            6,
            6,
        ),
        (
            "runtime-api/memcpy2d-dtod-racy.dot",
            1,
            "memset elem 1 width 64 height 2 pitch 512",
            0,
            2,
        ),
        (
            "runtime-api/memcpy2d-htod-racy.dot",
            0,
            "memcpy Host -> Device, 384 B",
            4,
            4,
        ),
        (
            "runtime-api/memcpy2d-htod-racy.dot",
            1,
            "memset elem 1 width 64 height 4 pitch 512",
            0,
            4,
        ),
        (
            "runtime-api/memcpy3d-racy.dot",
            0,
            "memcpy Device -> Device, 384 B",
            6,
            6,
        ),
        (
            "runtime-api/memset1d-2d-racy.dot",
            0,
            "memset elem 1 width 528 height 1 pitch 0",
            0,
            1,
        ),
        (
            "runtime-api/memset1d-2d-racy.dot",
            1,
            "memset elem 1 width 48 height 4 pitch 512",
            0,
            4,
        ),
        (
            "runtime-api/node1d-default-racy.dot",
            0,
            "memcpy Host -> Device, 1024 B",
            1,
            1,
        ),
        (
            "runtime-api/node1d-default-racy.dot",
            1,
            "memset elem 4 width 128 height 1 pitch 0",
            0,
            1,
        ),
        (
            "runtime-api/node1d-dtod-racy.dot",
            0,
            "memcpy Device -> Device, 1024 B",
            1,
            1,
        ),
        (
            "runtime-api/node3d-htod-racy.dot",
            0,
            "memcpy Host -> Device, 128 B",
            4,
            4,
        ),
        (
            "torch/torch-copy-dtod-racy.dot",
            0,
            "memcpy Device -> Device, 4096 B",
            1,
            1,
        ),
        (
            "torch/torch-copy-htod-racy.dot",
            0,
            "memcpy Host -> Device, 4096 B",
            1,
            1,
        ),
        (
            "torch/torch-zero-racy.dot",
            0,
            "memcpy Device -> Device, 4096 B",
            1,
            1,
        ),
    ];
    let mut actual = Vec::new();
    for (name, _) in FIXTURES.iter().filter(|(n, _)| {
        n.ends_with("-racy.dot") && (n.starts_with("runtime-api/") || n.starts_with("torch/"))
    }) {
        let g = Graph::from_driver_dot(fixture(name)).unwrap();
        for n in &g.nodes {
            let rows = |m: AccessMode| n.accesses.iter().filter(|a| a.mode == m).count();
            let what = match &n.kind {
                NodeKind::Memcpy(m) => format!(
                    "memcpy {:?} -> {:?}, {} B",
                    m.src.space, m.dst.space, m.bytes
                ),
                NodeKind::Memset(m) => format!(
                    "memset elem {} width {} height {} pitch {}",
                    m.element_size, m.width, m.height, m.pitch
                ),
                _ => continue,
            };
            actual.push((
                *name,
                n.id.0,
                what,
                rows(AccessMode::Read),
                rows(AccessMode::Write),
            ));
        }
    }
    let expected: Vec<(&str, u32, String, usize, usize)> = expected
        .iter()
        .map(|&(f, n, w, r, wr)| (f, n, w.to_string(), r, wr))
        .collect();
    assert_eq!(actual, expected);
}
