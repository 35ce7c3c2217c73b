//! Graphviz DOT output: one box per node showing its label, kind and key parameters.
//!
//! Node `i` gets the DOT id `n<i>`, so the ids are stable across runs and match
//! [`NodeId`]'s `Display`. Every string from the model is escaped, so labels with quotes,
//! backslashes or newlines cannot break the file.

use std::collections::HashSet;
use std::fmt::Write;

use crate::graph::{EdgeType, Graph};
use crate::node::{ConditionalKind, MemorySpace, Node, NodeId, NodeKind};

/// What to draw on top of the plain graph, e.g. the findings of a hazard check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DotOptions {
    /// Nodes drawn in red (e.g. nodes that race). Unknown ids are ignored.
    pub highlight_nodes: Vec<NodeId>,
    /// Existing edges drawn in thick red. Pairs that are not edges of the graph are ignored.
    pub highlight_edges: Vec<(NodeId, NodeId)>,
    /// Edges the graph lacks, drawn dashed red (e.g. a dependency that would fix a race).
    /// Pairs that name unknown nodes are ignored.
    pub missing_edges: Vec<(NodeId, NodeId)>,
}

impl Graph {
    /// The graph in Graphviz DOT (`dot -Tsvg`), with no highlights.
    ///
    /// ```
    /// # use graphsmith_model::{Graph, NodeKind};
    /// let mut g = Graph::new("g");
    /// let a = g.add_node("a", NodeKind::Empty);
    /// let b = g.add_node("b \"quoted\"", NodeKind::Empty);
    /// g.add_edge(a, b).unwrap();
    /// let dot = g.to_dot();
    /// assert!(dot.contains(r#"n1 [label="b \"quoted\"\nempty""#));
    /// assert!(dot.contains("n0 -> n1;"));
    /// ```
    ///
    /// A full edge is a plain arrow; a programmatic edge is bold blue and labelled
    /// `programmatic`, a launch-order edge dotted grey and labelled `launch order`.
    pub fn to_dot(&self) -> String {
        self.to_dot_with(&DotOptions::default())
    }

    /// The graph in Graphviz DOT, with the nodes and edges of `options` drawn in red.
    pub fn to_dot_with(&self, options: &DotOptions) -> String {
        let n = self.nodes.len();
        let mut red_node = vec![false; n];
        for id in &options.highlight_nodes {
            if let Some(flag) = red_node.get_mut(id.index()) {
                *flag = true;
            }
        }
        let red_edges: HashSet<(NodeId, NodeId)> =
            options.highlight_edges.iter().copied().collect();

        let mut out = String::new();
        // Writing to a String cannot fail; the results are ignored for that reason.
        let _ = writeln!(out, "digraph \"{}\" {{", escape(&self.label));
        let _ = writeln!(out, "  label=\"{}\";", escape(&self.label));
        out.push_str("  labelloc=t;\n");
        out.push_str("  node [shape=box, fontname=\"monospace\"];\n");
        for node in &self.nodes {
            let _ = write!(out, "  {} [label=\"{}\"", node.id, node_label(node));
            if let Some(shape) = shape(&node.kind) {
                let _ = write!(out, ", shape={shape}");
            }
            if red_node.get(node.id.index()).copied().unwrap_or(false) {
                out.push_str(", color=red, fontcolor=red, penwidth=2");
            }
            out.push_str("];\n");
        }
        for e in &self.edges {
            let _ = write!(out, "  {} -> {}", e.from, e.to);
            let red = red_edges.contains(&(e.from, e.to));
            match (e.ty, red) {
                (EdgeType::Full, false) => {}
                (EdgeType::Full, true) => out.push_str(" [color=red, penwidth=2]"),
                (ty, red) => {
                    let (color, style) = match ty {
                        EdgeType::Programmatic => ("blue", "bold"),
                        _ => ("gray40", "dotted"),
                    };
                    let color = if red { "red" } else { color };
                    let _ = write!(
                        out,
                        " [label=\"{}\", color={color}, fontcolor={color}, style={style}{}]",
                        ty.name().replace('_', " "),
                        if red { ", penwidth=2" } else { "" }
                    );
                }
            }
            out.push_str(";\n");
        }
        for &(from, to) in &options.missing_edges {
            if from.index() < n && to.index() < n {
                let _ = writeln!(out, "  {from} -> {to} [color=red, style=dashed];");
            }
        }
        out.push_str("}\n");
        out
    }
}

/// The escaped label of a node: its label, then one line per key fact of its kind.
fn node_label(node: &Node) -> String {
    let mut lines = vec![node.label.clone()];
    lines.extend(describe(&node.kind));
    lines
        .iter()
        .map(|line| escape(line))
        .collect::<Vec<_>>()
        .join("\\n")
}

/// Kind and key parameters of a node, one string per line, unescaped.
fn describe(kind: &NodeKind) -> Vec<String> {
    let named = |kind: &str, name: &str| {
        if name.is_empty() {
            kind.to_string()
        } else {
            format!("{kind} {name}")
        }
    };
    match kind {
        NodeKind::Kernel(p) => {
            let mut launch = format!("grid {} block {}", p.grid, p.block);
            if p.shared_mem_bytes > 0 {
                let _ = write!(launch, " smem {} B", p.shared_mem_bytes);
            }
            if let Some(c) = p.cluster {
                let _ = write!(launch, " cluster {c}");
            }
            vec![named("kernel", &p.name), launch]
        }
        NodeKind::Memcpy(p) => vec![format!(
            "memcpy {} B {} -> {}",
            p.bytes,
            space(p.src.space),
            space(p.dst.space)
        )],
        NodeKind::Memset(p) => vec![format!(
            "memset {} B value 0x{:x} ({}-byte)",
            p.bytes(),
            p.value,
            p.element_size
        )],
        NodeKind::Host { name } => vec![named("host", name)],
        NodeKind::EventRecord { event } => vec![named("event_record", event)],
        NodeKind::EventWait { event } => vec![named("event_wait", event)],
        NodeKind::Empty => vec!["empty".to_string()],
        NodeKind::ChildGraph { graph } => vec![
            format!("child_graph '{}'", graph.label),
            format!("{} nodes, {} edges", graph.nodes.len(), graph.edges.len()),
        ],
        NodeKind::MemAlloc { address, bytes } => {
            vec![format!("mem_alloc {bytes} B at 0x{address:x}")]
        }
        NodeKind::MemFree { address } => vec![format!("mem_free 0x{address:x}")],
        NodeKind::Conditional {
            conditional,
            bodies,
            body_graphs,
        } => {
            let flavour = match conditional {
                ConditionalKind::If => "if",
                ConditionalKind::While => "while",
                ConditionalKind::Switch => "switch",
            };
            let mut lines = vec![format!("conditional {flavour}, {bodies} bodies")];
            for (i, body) in body_graphs.iter().enumerate() {
                lines.push(format!(
                    "body {i} '{}': {} nodes, {} edges",
                    body.label,
                    body.nodes.len(),
                    body.edges.len()
                ));
            }
            lines
        }
        NodeKind::Other { name } => vec![named("other", name)],
    }
}

fn space(space: MemorySpace) -> &'static str {
    match space {
        MemorySpace::Device => "device",
        MemorySpace::Host => "host",
        MemorySpace::Array => "array",
        MemorySpace::Unknown => "unknown",
    }
}

/// The DOT shape of a kind when it is not the default box.
fn shape(kind: &NodeKind) -> Option<&'static str> {
    match kind {
        NodeKind::ChildGraph { .. } => Some("box3d"),
        NodeKind::Conditional { .. } => Some("diamond"),
        NodeKind::EventRecord { .. } | NodeKind::EventWait { .. } | NodeKind::Empty => {
            Some("ellipse")
        }
        _ => None,
    }
}

/// Escapes `text` for a double-quoted DOT string so that Graphviz shows it as written: quotes
/// and backslashes are escaped, a line break (`\n`, `\r\n` or `\r`) becomes DOT's `\n`, and
/// any other control character is shown as `\u{XX}`.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                out.push_str("\\n");
            }
            c if c.is_control() => {
                let _ = write!(out, "\\\\u{{{:02x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}
