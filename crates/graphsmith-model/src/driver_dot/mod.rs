//! Reading `cudaGraphDebugDotPrint` dumps (default and verbose flags) into the model, so that a
//! graph dumped by any program can be analysed.
//!
//! A dump has one cluster per graph: `subgraph cluster_X { "graph_X_node_N" [...]; ... }`. The
//! first cluster is the dumped graph; a node whose label names `graph_M` embeds the graph of
//! cluster `M` (a child graph). Node kinds and parameters come from the labels; memcpy and
//! memset operands, printed by the verbose form only, become accesses.
//!
//! What a dump cannot tell: kernel arguments (so kernels have no accesses here: kernel hazards
//! need graphsmith's JSON or a live read-back), user labels (nodes are labelled
//! `<kernel or kind>#<N>`), and allocations (buffers are inferred as maximal overlapping
//! address ranges, each named by its first address).

mod kinds;
mod operands;
mod record;
mod syntax;

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use crate::graph::Graph;
use crate::node::{Access, AccessMode, NodeId, NodeKind};
use crate::signature::demangled_name;

/// Child graphs nest at most this deep in a dump (CUDA graphs nest a few levels; the bound
/// keeps hostile input from building a model too deep to drop or print).
pub const MAX_NESTING: usize = 64;

/// A dump's model holds at most this many nodes, child graphs included (each embedding is a copy
/// of the graph, so a few lines that embed a graph twice per level would otherwise build an
/// exponentially large model).
pub const MAX_MODEL_NODES: usize = 1 << 22;

/// Per-row ranges in a whole dump: past this many, further pitched operands are taken from their
/// first byte to their last (a cover), so that no dump can make the model much larger than
/// its text.
const MAX_ROW_RANGES: usize = 1 << 20;

/// Why a text is not a readable `cudaGraphDebugDotPrint` dump. Every error names a line (from
/// 1) of the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DotError {
    /// The text is not DOT, or uses DOT that a driver dump never does.
    #[error("driver DOT, line {line}: {message}")]
    Syntax {
        /// Where.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A node's name is not `graph_X_node_N`.
    #[error("driver DOT, line {line}: node name '{name}' is not of the form graph_X_node_N (is this a cudaGraphDebugDotPrint dump?)")]
    NodeName {
        /// Where.
        line: usize,
        /// The name.
        name: String,
    },
    /// The same node is defined twice.
    #[error("driver DOT, line {line}: node '{name}' is defined again (first at line {first})")]
    DuplicateNode {
        /// Where, the second time.
        line: usize,
        /// The node's name.
        name: String,
        /// Where, the first time.
        first: usize,
    },
    /// An edge names a node that no statement defines.
    #[error("driver DOT, line {line}: edge names node '{name}', which is not defined")]
    UndefinedNode {
        /// Where.
        line: usize,
        /// The missing node's name.
        name: String,
    },
    /// An edge joins nodes of two different graphs, or a node to itself.
    #[error("driver DOT, line {line}: edge '{from}' -> '{to}' {problem}")]
    BadEdge {
        /// Where.
        line: usize,
        /// The edge's source.
        from: String,
        /// The edge's target.
        to: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A node's label cannot be read.
    #[error("driver DOT, line {line}: node '{name}': {message}")]
    Label {
        /// Where.
        line: usize,
        /// The node's name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A node embeds a graph that the dump does not hold, or child graphs nest in a cycle or
    /// deeper than [`MAX_NESTING`].
    #[error("driver DOT, line {line}: node '{name}' embeds graph_{graph}: {problem}")]
    Child {
        /// Where.
        line: usize,
        /// The node's name.
        name: String,
        /// The embedded graph's number.
        graph: u64,
        /// What is wrong.
        problem: String,
    },
    /// The text holds no graph (no cluster and no node).
    #[error("driver DOT, line {line}: no graph in the dump (no cluster and no node)")]
    NoGraph {
        /// The last line.
        line: usize,
    },
}

impl DotError {
    /// The line (from 1) the error is about.
    pub fn line(&self) -> usize {
        match self {
            DotError::Syntax { line, .. }
            | DotError::NodeName { line, .. }
            | DotError::DuplicateNode { line, .. }
            | DotError::UndefinedNode { line, .. }
            | DotError::BadEdge { line, .. }
            | DotError::Label { line, .. }
            | DotError::Child { line, .. }
            | DotError::NoGraph { line } => *line,
        }
    }
}

/// One node of the dump, read.
struct RawNode {
    number: u64,
    name: String,
    line: usize,
    parsed: kinds::Parsed,
}

/// One graph (cluster) of the dump.
#[derive(Default)]
struct RawGraph {
    nodes: Vec<RawNode>,
    edges: Vec<(NodeId, NodeId)>,
}

/// `graph_X_node_N` -> `(X, N)`.
fn node_name(name: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix("graph_")?;
    let (x, n) = rest.split_once("_node_")?;
    Some((x.parse().ok()?, n.parse().ok()?))
}

impl Graph {
    /// Reads a dump of `cudaGraphDebugDotPrint` / `cuGraphDebugDotPrint`, with the default
    /// flags or `cudaGraphDebugDotFlagsVerbose`.
    ///
    /// The result has the dump's structure: node kinds (kernels with their names, and their
    /// launch dimensions where the verbose form gives them; `(0,0,0)` where it does not),
    /// edges, and child graphs embedded as [`NodeKind::ChildGraph`]. Node `N` of a graph is at
    /// position `N` when the numbers run `0..k` (always, for graphs from which no node was
    /// removed), else at its rank among them. Memcpy and memset nodes of a verbose dump get
    /// accesses (memcpy: source read, destination written; memset: destination written); a
    /// child-graph node gets the accesses of the nodes inside it.
    ///
    /// Never panics; any text that is not a dump is a [`DotError`] naming the line.
    ///
    /// ```
    /// # use graphsmith_model::Graph;
    /// let dump = "digraph dot {\nsubgraph cluster_1 {\nlabel=\"graph_1\" graph[style=\"dashed\"];\n\
    ///     \"graph_1_node_0\"[style=\"bold\" shape=\"octagon\" label=\"0\nmy_kernel\n\"];\n\
    ///     \"graph_1_node_1\"[style=\"solid\" shape=\"rectangle\" label=\"1\nEMPTY\n\"];\n\
    ///     \"graph_1_node_0\" -> \"graph_1_node_1\";\n}\n}\n";
    /// let g = Graph::from_driver_dot(dump).unwrap();
    /// assert_eq!(g.nodes[0].label, "my_kernel#0");
    /// assert_eq!(g.nodes[1].label, "empty#1");
    /// assert_eq!(g.edges.len(), 1);
    /// let err = Graph::from_driver_dot("digraph dot {\n\"a\";\n}\n").unwrap_err();
    /// assert_eq!(err.line(), 2);
    /// ```
    pub fn from_driver_dot(text: &str) -> Result<Graph, DotError> {
        let file = syntax::parse(text)?;
        let last_line = text.lines().count().max(1);

        // Graphs in order of first appearance: clusters first, then node names.
        let mut order: Vec<u64> = Vec::new();
        let mut graph_line: HashMap<u64, usize> = HashMap::new();
        for c in &file.clusters {
            if let Some(x) = c.name.strip_prefix("cluster_").and_then(|x| x.parse().ok()) {
                if let Entry::Vacant(slot) = graph_line.entry(x) {
                    slot.insert(c.line);
                    order.push(x);
                }
            }
        }
        let mut graphs: HashMap<u64, RawGraph> = HashMap::new();
        let mut defined: HashMap<&str, (u64, u64, usize)> = HashMap::new();
        let mut row_ranges = 0usize;
        for stmt in &file.nodes {
            let Some((x, n)) = node_name(&stmt.name) else {
                return Err(DotError::NodeName {
                    line: stmt.line,
                    name: stmt.name.clone(),
                });
            };
            if let Some(&(_, _, first)) = defined.get(stmt.name.as_str()) {
                return Err(DotError::DuplicateNode {
                    line: stmt.line,
                    name: stmt.name.clone(),
                    first,
                });
            }
            defined.insert(&stmt.name, (x, n, stmt.line));
            if let Entry::Vacant(slot) = graph_line.entry(x) {
                slot.insert(stmt.line);
                order.push(x);
            }
            let mut parsed =
                kinds::parse(stmt.attr("label").unwrap_or_default(), stmt.attr("shape")).map_err(
                    |message| DotError::Label {
                        line: stmt.line,
                        name: stmt.name.clone(),
                        message,
                    },
                )?;
            for o in &mut parsed.operands {
                if o.ranges.len() > 1 && row_ranges.saturating_add(o.ranges.len()) > MAX_ROW_RANGES
                {
                    o.ranges = vec![o.envelope];
                }
                row_ranges = row_ranges.saturating_add(o.ranges.len());
            }
            graphs.entry(x).or_default().nodes.push(RawNode {
                number: n,
                name: stmt.name.clone(),
                line: stmt.line,
                parsed,
            });
        }
        let Some(&top) = order.first() else {
            return Err(DotError::NoGraph { line: last_line });
        };
        // Positions: nodes sorted by number.
        let mut position: HashMap<String, NodeId> = HashMap::new();
        for g in graphs.values_mut() {
            g.nodes.sort_by_key(|n| n.number);
            for (i, n) in g.nodes.iter().enumerate() {
                position.insert(n.name.clone(), NodeId(i as u32));
            }
        }
        for e in &file.edges {
            let end = |name: &str| {
                defined
                    .get(name)
                    .and_then(|&(x, _, _)| Some((x, *position.get(name)?)))
                    .ok_or_else(|| DotError::UndefinedNode {
                        line: e.line,
                        name: name.to_string(),
                    })
            };
            let (gx, from) = end(&e.from)?;
            let (gy, to) = end(&e.to)?;
            let problem = if gx != gy {
                Some(format!("joins graph_{gx} and graph_{gy}"))
            } else if from == to {
                Some("goes from a node to itself".to_string())
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(DotError::BadEdge {
                    line: e.line,
                    from: e.from.clone(),
                    to: e.to.clone(),
                    problem,
                });
            }
            graphs.entry(gx).or_default().edges.push((from, to));
        }
        let regions = regions(graphs.values());
        assemble(top, graphs, &graph_line, &regions)
    }
}

/// Buffers of a dump: the maximal ranges of overlapping operands (each from its first byte to
/// its last, since all rows of one operand lie in one allocation), as sorted `(start, end)`
/// pairs.
fn regions<'a>(graphs: impl Iterator<Item = &'a RawGraph>) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = graphs
        .flat_map(|g| g.nodes.iter())
        .flat_map(|n| n.parsed.operands.iter())
        .filter(|o| o.envelope.1 > 0)
        .map(|o| (o.envelope.0, o.envelope.0.saturating_add(o.envelope.1)))
        .collect();
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (lo, hi) in ranges {
        match out.last_mut() {
            Some(last) if lo < last.1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// The access of `[address, address + len)` within its region.
fn access(regions: &[(u64, u64)], address: u64, len: u64, mode: AccessMode) -> Option<Access> {
    let i = regions.partition_point(|r| r.0 <= address).checked_sub(1)?;
    let (start, _) = regions[i];
    Some(Access {
        buffer: start,
        label: format!("0x{start:x}"),
        offset: address - start,
        len,
        mode,
    })
}

/// Builds the graph `top` with its child graphs embedded, children first (iteratively).
fn assemble(
    top: u64,
    mut raw: HashMap<u64, RawGraph>,
    graph_line: &HashMap<u64, usize>,
    regions: &[(u64, u64)],
) -> Result<Graph, DotError> {
    // How many nodes embed each graph: the last one takes it, the others clone it.
    let mut uses: HashMap<u64, usize> = HashMap::new();
    for g in raw.values() {
        for n in &g.nodes {
            for &m in n.parsed.child.iter().chain(&n.parsed.bodies) {
                *uses.entry(m).or_default() += 1;
            }
        }
    }
    // First the order, children first, with the size of each graph's model (checked before any
    // graph is built); then the graphs, in that order.
    let mut sizes: HashMap<u64, usize> = HashMap::new();
    let mut post: Vec<u64> = Vec::new();
    // Depth-first: (graph, whether its children are done). `open` holds the graphs on the path.
    let mut stack: Vec<(u64, bool)> = vec![(top, false)];
    let mut open: Vec<u64> = Vec::new();
    while let Some((x, ready)) = stack.pop() {
        if !ready {
            if sizes.contains_key(&x) {
                continue;
            }
            open.push(x);
            stack.push((x, true));
            let nodes = raw.get(&x).map(|g| &g.nodes[..]).unwrap_or_default();
            let inner = nodes.iter().rev().flat_map(|n| {
                n.parsed
                    .child
                    .iter()
                    .chain(&n.parsed.bodies)
                    .map(move |&m| (n, m))
            });
            for (n, m) in inner {
                let problem = if open.contains(&m) {
                    Some("the graph contains itself".to_string())
                } else if !raw.contains_key(&m) && !graph_line.contains_key(&m) {
                    Some("the dump has no such graph".to_string())
                } else if open.len() >= MAX_NESTING {
                    Some(format!(
                        "child graphs nest deeper than {MAX_NESTING} levels"
                    ))
                } else {
                    None
                };
                if let Some(problem) = problem {
                    return Err(DotError::Child {
                        line: n.line,
                        name: n.name.clone(),
                        graph: m,
                        problem,
                    });
                }
                if !sizes.contains_key(&m) {
                    stack.push((m, false));
                }
            }
            continue;
        }
        open.pop();
        if sizes.contains_key(&x) {
            continue;
        }
        let nodes = raw.get(&x).map(|g| &g.nodes[..]).unwrap_or_default();
        // Nodes of the model of this graph, embedded child graphs included.
        let mut size = nodes.len();
        for n in nodes {
            for m in n.parsed.child.iter().chain(&n.parsed.bodies) {
                size = size.saturating_add(sizes.get(m).copied().unwrap_or(0));
            }
            if size > MAX_MODEL_NODES {
                return Err(DotError::Child {
                    line: n.line,
                    name: n.name.clone(),
                    graph: n.parsed.child.unwrap_or(x),
                    problem: format!(
                        "embedding child graphs would make a model of more than \
                         {MAX_MODEL_NODES} nodes"
                    ),
                });
            }
        }
        sizes.insert(x, size);
        post.push(x);
    }
    let mut built: HashMap<u64, Graph> = HashMap::new();
    for x in post {
        let g = raw.remove(&x).unwrap_or_default();
        let mut graph = Graph::new(format!("graph_{x}"));
        for n in g.nodes {
            let mut kind = n.parsed.kind;
            let mut accesses: Vec<Access> = n
                .parsed
                .operands
                .iter()
                .flat_map(|o| o.ranges.iter().map(move |&(a, len)| (a, len, o.mode)))
                .filter(|r| r.1 > 0)
                .filter_map(|(a, len, mode)| access(regions, a, len, mode))
                .collect();
            // A child graph's node, and a conditional node (whose body may run), touch what the
            // nodes inside touch.
            let mut seen: HashSet<Access> = accesses.iter().cloned().collect();
            let mut add = |inner: &Graph, accesses: &mut Vec<Access>| {
                for a in inner.nodes.iter().flat_map(|n| &n.accesses) {
                    if seen.insert(a.clone()) {
                        accesses.push(a.clone());
                    }
                }
            };
            // The last node to use a graph takes it; the others clone it.
            let mut last_use = |m: u64| {
                let left = uses.entry(m).or_default();
                *left = left.saturating_sub(1);
                *left == 0
            };
            let mut bodies = Vec::with_capacity(n.parsed.bodies.len());
            for &m in &n.parsed.bodies {
                let body = if last_use(m) {
                    built.remove(&m)
                } else {
                    built.get(&m).cloned()
                }
                .unwrap_or_else(|| Graph::new(format!("graph_{m}")));
                add(&body, &mut accesses);
                bodies.push(body);
            }
            if let NodeKind::Conditional { body_graphs, .. } = &mut kind {
                *body_graphs = bodies;
            }
            if let Some(m) = n.parsed.child {
                let child = if last_use(m) {
                    built.remove(&m)
                } else {
                    built.get(&m).cloned()
                }
                .unwrap_or_else(|| Graph::new(format!("graph_{m}")));
                add(&child, &mut accesses);
                kind = NodeKind::ChildGraph {
                    graph: Box::new(child),
                };
            }
            let base = match &kind {
                NodeKind::Kernel(k) => demangled_name(&k.name).unwrap_or_else(|| k.name.clone()),
                _ => n.parsed.name.clone(),
            };
            let label = format!("{base}#{}", n.number);
            graph.add_node_with(label, kind, None, accesses);
        }
        for (from, to) in g.edges {
            // Both ends were checked against this graph's nodes above.
            let _ = graph.add_edge(from, to);
        }
        built.insert(x, graph);
    }
    Ok(built
        .remove(&top)
        .unwrap_or_else(|| Graph::new(format!("graph_{top}"))))
}
