//! DOT output: full-text snapshots, highlights, and escaping of nasty labels.

mod common;

use common::{every_kind, graph};
use graphsmith_model::{
    Dim3, DotOptions, Graph, KernelParams, MemRef, MemcpyParams, MemorySpace, MemsetParams, NodeId,
    NodeKind,
};

/// Asserts the full DOT text of `g` drawn with `options`.
fn check(g: &Graph, options: &DotOptions, expected: &str) {
    let actual = g.to_dot_with(options);
    assert_eq!(actual, expected, "\n--- actual ---\n{actual}");
}

fn demo() -> Graph {
    let mut g = Graph::new("demo");
    let upload = g.add_node(
        "upload",
        NodeKind::Memcpy(MemcpyParams {
            src: MemRef {
                space: MemorySpace::Host,
                address: 0x1000,
            },
            dst: MemRef {
                space: MemorySpace::Device,
                address: 0x2000,
            },
            bytes: 4096,
        }),
    );
    let zero = g.add_node(
        "zero",
        NodeKind::Memset(MemsetParams {
            dst: 0x3000,
            element_size: 4,
            value: 0,
            width: 256,
            height: 1,
            pitch: 0,
        }),
    );
    let attn = g.add_node(
        "attn",
        NodeKind::Kernel(KernelParams {
            name: "attn_fwd".to_string(),
            grid: Dim3::new(4, 2, 1),
            block: Dim3::linear(128),
            shared_mem_bytes: 0,
            args: vec![],
            cluster: None,
        }),
    );
    let join = g.add_node("join", NodeKind::Empty);
    for (a, b) in [(upload, attn), (zero, attn), (attn, join)] {
        g.add_edge(a, b).unwrap();
    }
    g
}

#[test]
fn snapshot_plain() {
    check(
        &demo(),
        &DotOptions::default(),
        r#"digraph "demo" {
  label="demo";
  labelloc=t;
  node [shape=box, fontname="monospace"];
  n0 [label="upload\nmemcpy 4096 B host -> device"];
  n1 [label="zero\nmemset 1024 B value 0x0 (4-byte)"];
  n2 [label="attn\nkernel attn_fwd\ngrid (4,2,1) block (128,1,1)"];
  n3 [label="join\nempty", shape=ellipse];
  n0 -> n2;
  n1 -> n2;
  n2 -> n3;
}
"#,
    );
    assert_eq!(demo().to_dot(), demo().to_dot_with(&DotOptions::default()));
}

#[test]
fn snapshot_with_highlights() {
    let options = DotOptions {
        highlight_nodes: vec![NodeId(2), NodeId(99)],
        highlight_edges: vec![(NodeId(0), NodeId(2)), (NodeId(0), NodeId(3))],
        missing_edges: vec![(NodeId(1), NodeId(3)), (NodeId(1), NodeId(42))],
    };
    check(
        &demo(),
        &options,
        r#"digraph "demo" {
  label="demo";
  labelloc=t;
  node [shape=box, fontname="monospace"];
  n0 [label="upload\nmemcpy 4096 B host -> device"];
  n1 [label="zero\nmemset 1024 B value 0x0 (4-byte)"];
  n2 [label="attn\nkernel attn_fwd\ngrid (4,2,1) block (128,1,1)", color=red, fontcolor=red, penwidth=2];
  n3 [label="join\nempty", shape=ellipse];
  n0 -> n2 [color=red, penwidth=2];
  n1 -> n2;
  n2 -> n3;
  n1 -> n3 [color=red, style=dashed];
}
"#,
    );
}

#[test]
fn every_kind_is_described() {
    let dot = every_kind().to_dot();
    for line in [
        r#"n0 [label="attention\nkernel _Z9attn_fwdPfS_i\ngrid (4,2,1) block (128,1,1) smem 49152 B cluster (2,1,1)"];"#,
        r#"n2 [label="zero\nmemset 2048 B value 0xdeadbeef (4-byte)"];"#,
        r#"n3 [label="callback\nhost log_step"];"#,
        r#"n4 [label="rec\nevent_record done", shape=ellipse];"#,
        r#"n5 [label="wait\nevent_wait ready", shape=ellipse];"#,
        r#"n6 [label="empty#6\nempty", shape=ellipse];"#,
        r#"n7 [label="sub\nchild_graph 'middle'\n2 nodes, 1 edges", shape=box3d];"#,
        r#"n8 [label="alloc\nmem_alloc 1099511627776 B at 0xfffffffffffffffe"];"#,
        r#"n9 [label="free\nmem_free 0xffffffffffffffff"];"#,
        r#"n10 [label="if\nconditional if, 1 bodies", shape=diamond];"#,
        r#"n12 [label="switch\nconditional switch, 3 bodies", shape=diamond];"#,
        r#"n13 [label="batch\nother batch_mem_op"];"#,
        r#"n14 [label="arrays\nmemcpy 4096 B array -> unknown"];"#,
    ] {
        assert!(dot.contains(line), "missing {line}\nin\n{dot}");
    }
}

#[test]
fn nasty_labels_are_escaped() {
    let mut g = Graph::new("say \"hi\"\\");
    g.add_node("a \"quoted\" label", NodeKind::Empty);
    g.add_node("back\\slash\\", NodeKind::Empty);
    g.add_node("two\nlines\r\nthree\rfour", NodeKind::Empty);
    g.add_node("bell\u{7} tab\t nul\0", NodeKind::Empty);
    g.add_node("\\N \\G \\l <html> {rec|ord} ünï 🦀", NodeKind::Empty);
    g.add_node(
        "ev",
        NodeKind::EventRecord {
            event: "e\"v\\".to_string(),
        },
    );
    check(
        &g,
        &DotOptions::default(),
        r#"digraph "say \"hi\"\\" {
  label="say \"hi\"\\";
  labelloc=t;
  node [shape=box, fontname="monospace"];
  n0 [label="a \"quoted\" label\nempty", shape=ellipse];
  n1 [label="back\\slash\\\nempty", shape=ellipse];
  n2 [label="two\nlines\nthree\nfour\nempty", shape=ellipse];
  n3 [label="bell\\u{07} tab\\u{09} nul\\u{00}\nempty", shape=ellipse];
  n4 [label="\\N \\G \\l <html> {rec|ord} ünï 🦀\nempty", shape=ellipse];
  n5 [label="ev\nevent_record e\"v\\", shape=ellipse];
}
"#,
    );
}

#[test]
fn every_quoted_string_is_closed() {
    // Whatever the labels, each line of the output has balanced unescaped quotes.
    let nasty = ["\"", "\\", "\\\"", "\"\\", "\n\"", "\\\\\"", "\r", "x\\"];
    let mut g = graph("q", 0, &[]);
    for label in nasty {
        g.add_node(label, NodeKind::Empty);
    }
    for line in g.to_dot().lines() {
        let mut quotes = 0;
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => quotes += 1,
                _ => {}
            }
        }
        assert_eq!(quotes % 2, 0, "unbalanced quotes in {line:?}");
    }
}
