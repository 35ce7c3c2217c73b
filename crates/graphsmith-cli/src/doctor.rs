//! `graphsmith doctor FILE`: reads a graph (graphsmith JSON, or a `cudaGraphDebugDotPrint`
//! dump) and reports its shape, its hazards (nodes that race) and its redundant edges.
//!
//! Exit codes: 0 clean, 1 hazards found, 2 the input could not be read (or an output file
//! could not be written); the message names the line where the input is wrong.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use graphsmith::model::{
    AccessMode, Graph, Hazard, HazardKind, HazardOptions, HazardReport, NodeId, NodeKind, Summary,
};

/// What `doctor` was asked to do.
pub(crate) struct Options {
    pub file: PathBuf,
    pub json: bool,
    pub svg: Option<PathBuf>,
    pub dot: Option<PathBuf>,
}

/// The two input formats.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    DriverDot,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Json => "graphsmith JSON",
            Format::DriverDot => "cudaGraphDebugDotPrint DOT",
        }
    }
    fn key(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::DriverDot => "driver_dot",
        }
    }
}

/// Everything `doctor` found about one graph.
struct Findings {
    format: Format,
    graph: Graph,
    summary: Summary,
    critical_path: Vec<NodeId>,
    hazards: HazardReport,
    redundant: Vec<graphsmith::model::Edge>,
    notes: Vec<String>,
}

pub(crate) fn run(options: Options) -> ExitCode {
    let shown = options.file.display().to_string();
    let findings = match analyse(&options.file) {
        Ok(f) => f,
        Err(message) => {
            eprintln!("error: {shown}: {message}");
            return ExitCode::from(2);
        }
    };
    let mut notes = findings.notes.clone();
    let drawn = findings.graph.to_dot_with(&findings.hazards.dot_options());
    if let Some(path) = &options.dot {
        if let Err(e) = std::fs::write(path, &drawn) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
        notes.push(format!("wrote DOT to {}", path.display()));
    }
    if let Some(svg) = &options.svg {
        match render_svg(&drawn, svg) {
            Ok(note) => notes.push(note),
            Err(message) => {
                eprintln!("error: {message}");
                return ExitCode::from(2);
            }
        }
    }
    let code = if findings.hazards.is_clean() { 0 } else { 1 };
    if options.json {
        println!("{}", json_report(&shown, &findings, &notes, code));
    } else {
        print!("{}", text_report(&shown, &findings, &notes));
    }
    ExitCode::from(code)
}

/// Reads and analyses `path`; the error is a message for the user.
fn analyse(path: &Path) -> Result<Findings, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let start = text.trim_start();
    let format = if start.starts_with('{') {
        Format::Json
    } else if ["digraph", "strict", "graph", "//", "/*"]
        .iter()
        .any(|w| start.starts_with(w))
    {
        Format::DriverDot
    } else {
        let line = text.len() - start.len();
        let line = text[..line].matches('\n').count() + 1;
        return Err(format!(
            "line {line}: neither graphsmith JSON (starts with '{{') nor a DOT dump (starts with 'digraph')"
        ));
    };
    let graph = match format {
        Format::Json => Graph::from_json(&text).map_err(|e| e.to_string())?,
        Format::DriverDot => Graph::from_driver_dot(&text).map_err(|e| e.to_string())?,
    };
    let summary = graph.summary().map_err(|e| e.to_string())?;
    let critical_path = graph.longest_path().map_err(|e| e.to_string())?;
    // A dump holds no kernel arguments: its kernels may touch any byte.
    let options = HazardOptions {
        unknown_kernel_memory: format == Format::DriverDot,
    };
    let hazards = graph.hazards_with(&options).map_err(|e| e.to_string())?;
    let redundant = graph.redundant_edges().map_err(|e| e.to_string())?;
    let mut notes = Vec::new();
    let kernels_without_accesses = count_kernels_without_accesses(&graph);
    if kernels_without_accesses > 0 && format == Format::DriverDot {
        notes.push(format!(
            "{kernels_without_accesses} kernel node(s) have no known memory accesses (a DOT \
             dump does not hold kernel arguments): a kernel that no path orders with a copy or \
             set is reported as a possible hazard on the copy's or set's bytes; graphsmith JSON \
             from the runtime or a live read-back has kernel accesses"
        ));
    } else if kernels_without_accesses > 0 {
        notes.push(format!(
            "{kernels_without_accesses} kernel node(s) have no known memory accesses (the JSON \
             lists none): their hazards cannot be checked; graphsmith JSON from the runtime or a \
             live read-back has them"
        ));
    }
    if hazards.unjudged_kernel_pairs > 0 {
        notes.push(format!(
            "{} unordered pair(s) of nodes that both run kernels (kernel nodes, or child graphs \
             and conditionals holding kernels) cannot be judged from a dump: not counted as \
             hazards",
            hazards.unjudged_kernel_pairs
        ));
    }
    if hazards.unjudged_nested_pairs > 0 {
        notes.push(format!(
            "{} unordered pair(s) of a copy or set and a child graph or conditional that runs \
             kernels cannot be judged from a dump: not counted as hazards",
            hazards.unjudged_nested_pairs
        ));
    }
    let (copies, without) = count_copies_without_accesses(&graph);
    if format == Format::DriverDot && without > 0 {
        notes.push(format!(
            "{without} of {copies} memcpy/memset node(s) have no operands: only a verbose dump \
             (cudaGraphDebugDotFlagsVerbose) prints them, so their hazards cannot be checked"
        ));
    }
    Ok(Findings {
        format,
        graph,
        summary,
        critical_path,
        hazards,
        redundant,
        notes,
    })
}

/// Kernel nodes without accesses, child graphs included.
fn count_kernels_without_accesses(graph: &Graph) -> usize {
    let mut count = 0;
    let mut todo = vec![graph];
    while let Some(g) = todo.pop() {
        for n in &g.nodes {
            match &n.kind {
                NodeKind::Kernel(_) if n.accesses.is_empty() => count += 1,
                kind => todo.extend(kind.nested_graphs()),
            }
        }
    }
    count
}

/// Memcpy and memset nodes, and how many of them have no accesses, child graphs included.
fn count_copies_without_accesses(graph: &Graph) -> (usize, usize) {
    let (mut all, mut without) = (0, 0);
    let mut todo = vec![graph];
    while let Some(g) = todo.pop() {
        for n in &g.nodes {
            match &n.kind {
                NodeKind::Memcpy(_) | NodeKind::Memset(_) => {
                    all += 1;
                    if n.accesses.is_empty() {
                        without += 1;
                    }
                }
                kind => todo.extend(kind.nested_graphs()),
            }
        }
    }
    (all, without)
}

/// Runs Graphviz `dot -Tsvg`; without Graphviz, writes the DOT beside the SVG's path instead.
fn render_svg(drawn: &str, svg: &Path) -> Result<String, String> {
    let child = Command::new("dot")
        .arg("-Tsvg")
        .arg("-o")
        .arg(svg)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let fallback = svg.with_extension("dot");
            std::fs::write(&fallback, drawn)
                .map_err(|e| format!("cannot write {}: {e}", fallback.display()))?;
            return Ok(format!(
                "Graphviz `dot` not found: install graphviz for --svg; wrote DOT to {} instead",
                fallback.display()
            ));
        }
        Err(e) => return Err(format!("cannot run Graphviz `dot`: {e}")),
    };
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        stdin
            .write_all(drawn.as_bytes())
            .map_err(|e| format!("cannot send the graph to Graphviz `dot`: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("Graphviz `dot` failed: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "Graphviz `dot` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(format!("wrote SVG to {}", svg.display()))
}

/// Whether a path of any edges leads from the hazard's first node to its second (in the graph
/// that holds them): then the race comes from what programmatic or launch-order edges leave
/// unordered, e.g. a read before the second kernel's grid-dependency wait.
fn joined_by_weaker_edges(root: &Graph, h: &Hazard) -> bool {
    let mut graph = root;
    for id in &h.path {
        let Some(node) = graph.node(*id) else {
            return false;
        };
        // The bodies of a conditional share one path entry: with several, the plainer wording.
        match node.kind.nested_graphs() {
            [inner] => graph = inner,
            _ => return false,
        }
    }
    if graph.edges.iter().all(|e| e.ty.is_full()) {
        return false;
    }
    let Ok(adj) = graph.adjacency() else {
        return false;
    };
    let mut seen = vec![false; graph.len()];
    let mut stack = vec![h.first.id];
    while let Some(v) = stack.pop() {
        if v == h.second.id {
            return true;
        }
        if let Some(flag) = seen.get_mut(v.index()) {
            if !std::mem::replace(flag, true) {
                stack.extend_from_slice(adj.successors(v));
            }
        }
    }
    false
}

fn label(graph: &Graph, id: NodeId) -> &str {
    graph.node(id).map_or("?", |n| n.label.as_str())
}

/// The critical path as labels; long paths show their first and last nodes.
fn path_text(graph: &Graph, path: &[NodeId]) -> String {
    let names: Vec<&str> = path.iter().map(|&id| label(graph, id)).collect();
    if names.len() <= 12 {
        return names.join(" -> ");
    }
    format!(
        "{} -> ... ({} more) ... -> {}",
        names[..5].join(" -> "),
        names.len() - 10,
        names[names.len() - 5..].join(" -> ")
    )
}

fn text_report(file: &str, f: &Findings, notes: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{file} ({})", f.format.name());
    let _ = writeln!(out, "{}", f.summary);
    let _ = writeln!(
        out,
        "critical path ({} nodes): {}",
        f.critical_path.len(),
        path_text(&f.graph, &f.critical_path)
    );
    let r = &f.hazards;
    let _ = writeln!(
        out,
        "memory: {} accesses by {} nodes in {} graph(s)",
        r.accesses, r.nodes_with_accesses, r.graphs
    );
    out.push('\n');
    let unjudged = r
        .unjudged_kernel_pairs
        .saturating_add(r.unjudged_nested_pairs);
    if r.hazards.is_empty() && unjudged > 0 {
        let _ = writeln!(
            out,
            "hazards: none found; {unjudged} unordered pair(s) with kernels not judged (see the notes)"
        );
    } else if r.hazards.is_empty() {
        out.push_str("hazards: none\n");
    } else {
        let possible = r.hazards.iter().filter(|h| h.kind.is_possible()).count();
        if possible == 0 {
            let _ = writeln!(out, "hazards: {}", r.hazards.len());
        } else {
            let _ = writeln!(
                out,
                "hazards: {} ({} certain, {possible} possible: to be confirmed)",
                r.hazards.len(),
                r.hazards.len() - possible
            );
        }
        for (i, h) in r.hazards.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {}. {} on '{}' (0x{:x}) bytes [{}, {})",
                i + 1,
                h.kind,
                h.buffer_label,
                h.buffer,
                h.offset,
                h.offset.saturating_add(h.len)
            );
            let why = if joined_by_weaker_edges(&f.graph, h) {
                "only programmatic or launch-order paths join them, which do not order these \
                 accesses"
            } else {
                "no path orders them"
            };
            let _ = writeln!(
                out,
                "     '{}' ({}) {}, '{}' ({}) {}; {why}",
                h.first.label,
                h.first.id,
                h.first.mode.verb(),
                h.second.label,
                h.second.id,
                h.second.mode.verb()
            );
            if let Some(why) = only_possible(h) {
                let _ = writeln!(out, "     only possible: {why}");
            }
            if !h.path.is_empty() {
                let _ = writeln!(out, "     in {}", h.graph);
            }
            // CUDA has no multi-edges: a weaker edge between the two is made full, not doubled.
            let existing = h.path.is_empty()
                && f.graph
                    .edges
                    .iter()
                    .any(|e| (e.from, e.to) == (h.fix.from, h.fix.to) && !e.ty.is_full());
            let verb = if existing {
                "make the edge full:"
            } else {
                "add edge"
            };
            let _ = writeln!(
                out,
                "     fix: {verb} {} -> {} ({} -> {})",
                h.first.label, h.second.label, h.fix.from, h.fix.to
            );
        }
    }
    if f.redundant.is_empty() {
        out.push_str("redundant edges: none\n");
    } else {
        let _ = writeln!(
            out,
            "redundant edges (other paths imply them): {}",
            f.redundant.len()
        );
        for e in &f.redundant {
            let _ = writeln!(
                out,
                "  {} -> {} ({} -> {})",
                label(&f.graph, e.from),
                label(&f.graph, e.to),
                e.from,
                e.to
            );
        }
    }
    for note in notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// Why a possible kernel hazard is only possible; `None` for other hazards.
fn only_possible(h: &Hazard) -> Option<String> {
    if h.kind == HazardKind::PossibleWrite {
        let unknown = if h.first.mode == AccessMode::Unknown {
            &h.first.label
        } else {
            &h.second.label
        };
        return Some(format!(
            "whether '{unknown}' writes these bytes is unknown (a pointer found inside a kernel \
             parameter): a race only if it does"
        ));
    }
    if h.kind != HazardKind::PossibleKernelAccess {
        return None;
    }
    let kernel = if h.first.mode == AccessMode::Unknown {
        &h.first.label
    } else {
        &h.second.label
    };
    Some(format!(
        "a dump holds no kernel arguments, so whether '{kernel}' touches these bytes is unknown"
    ))
}

fn json_report(file: &str, f: &Findings, notes: &[String], code: u8) -> String {
    // Each hazard as the model serializes it, with `only_possible` where it is only possible.
    let hazards: Vec<serde_json::Value> = f
        .hazards
        .hazards
        .iter()
        .map(|h| {
            let mut value = serde_json::to_value(h).unwrap_or(serde_json::Value::Null);
            if let (Some(why), Some(map)) = (only_possible(h), value.as_object_mut()) {
                map.insert("only_possible".into(), why.into());
            }
            value
        })
        .collect();
    let path: Vec<serde_json::Value> = f
        .critical_path
        .iter()
        .map(|&id| serde_json::json!({ "id": id, "label": label(&f.graph, id) }))
        .collect();
    let redundant: Vec<serde_json::Value> = f
        .redundant
        .iter()
        .map(|e| {
            serde_json::json!({
                "from": e.from,
                "to": e.to,
                "from_label": label(&f.graph, e.from),
                "to_label": label(&f.graph, e.to),
            })
        })
        .collect();
    let report = serde_json::json!({
        "file": file,
        "format": f.format.key(),
        "summary": f.summary,
        "critical_path": path,
        "memory": {
            "graphs": f.hazards.graphs,
            "nodes_with_accesses": f.hazards.nodes_with_accesses,
            "accesses": f.hazards.accesses,
        },
        "hazards": hazards,
        "unjudged_pairs": {
            "kernel_pairs": f.hazards.unjudged_kernel_pairs,
            "nested_pairs": f.hazards.unjudged_nested_pairs,
        },
        "redundant_edges": redundant,
        "notes": notes,
        "exit_code": code,
    });
    serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
