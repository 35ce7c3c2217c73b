//! The doctor's report as text.

use std::fmt::Write as _;

use graphsmith_model::{AccessMode, Graph, Hazard, HazardKind, NodeId};

use super::{label, Findings};

/// The report as text (see [`Findings::text`]).
pub(crate) fn render(file: &str, f: &Findings, extra_notes: &[String], strict: bool) -> String {
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
    out.push_str(&summary_line(f, strict));
    out.push('\n');
    for (i, h) in r.hazards.iter().enumerate() {
        hazard(&mut out, &f.graph, i + 1, h);
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
    for note in f.notes.iter().chain(extra_notes) {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// The hazards' summary line: `hazards: none`, `hazards: none found; N unordered pair(s) ...`,
/// `hazards: N` (certain ones only), or `hazards: C certain, P possible (...)` saying whether
/// the possible ones fail (they do with `strict`).
pub(crate) fn summary_line(f: &Findings, strict: bool) -> String {
    let (certain, possible, unjudged) = (f.certain(), f.possible(), f.unjudged());
    if certain + possible == 0 && unjudged > 0 {
        return format!(
            "hazards: none found; {unjudged} unordered pair(s) with kernels not judged (see the \
             notes)"
        );
    }
    if certain + possible == 0 {
        return "hazards: none".into();
    }
    if possible == 0 {
        return format!("hazards: {certain}");
    }
    let rule = if strict {
        "--strict: possible ones fail too"
    } else {
        "possible ones do not fail; --strict fails on them"
    };
    format!("hazards: {certain} certain, {possible} possible ({rule})")
}

/// One hazard, numbered `n`: kind, buffer and bytes, both nodes and why they race, why it is
/// only possible, where it is, and the fix.
fn hazard(out: &mut String, root: &Graph, n: usize, h: &Hazard) {
    let _ = writeln!(
        out,
        "  {n}. {} on '{}' (0x{:x}) bytes [{}, {})",
        h.kind,
        h.buffer_label,
        h.buffer,
        h.offset,
        h.offset.saturating_add(h.len)
    );
    let why = if joined_by_weaker_edges(root, h) {
        "only programmatic or launch-order paths join them, which do not order these accesses"
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
        && root
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

/// Why a possible hazard is only possible; `None` for a certain one.
pub(crate) fn only_possible(h: &Hazard) -> Option<String> {
    let unknown = if h.first.mode == AccessMode::Unknown {
        &h.first.label
    } else {
        &h.second.label
    };
    match h.kind {
        HazardKind::PossibleWrite => Some(format!(
            "whether '{unknown}' writes these bytes is unknown (a pointer found inside a kernel \
             parameter): a race only if it does"
        )),
        HazardKind::PossibleKernelAccess => Some(format!(
            "a dump holds no kernel arguments, so whether '{unknown}' touches these bytes is \
             unknown"
        )),
        _ => None,
    }
}
