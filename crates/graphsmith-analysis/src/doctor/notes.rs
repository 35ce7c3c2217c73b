//! The doctor's notes: what the input could not tell. Counts walk every nested graph, child
//! graphs and conditional bodies alike.

use graphsmith_model::{Graph, HazardReport, Node, NodeKind};

use super::Format;

/// Notes on what the hazard check of `graph` (from `format`, with `hazards` found) could not
/// see: kernels without accesses, unordered pairs that could not be judged, and a dump's copies
/// and sets without operands.
pub(crate) fn notes(graph: &Graph, format: Format, hazards: &HazardReport) -> Vec<String> {
    let mut notes = Vec::new();
    let (mut kernels_without, mut copies, mut copies_without) = (0usize, 0usize, 0usize);
    each_node(graph, &mut |n| match n.kind {
        NodeKind::Kernel(_) if n.accesses.is_empty() => kernels_without += 1,
        NodeKind::Memcpy(_) | NodeKind::Memset(_) => {
            copies += 1;
            if n.accesses.is_empty() {
                copies_without += 1;
            }
        }
        _ => {}
    });
    if kernels_without > 0 {
        let why = match format {
            Format::DriverDot => {
                "(a DOT dump does not hold kernel arguments): a kernel that no path orders with \
                 a copy or set is reported as a possible hazard on the copy's or set's bytes; \
                 graphsmith JSON from the runtime or a live read-back has kernel accesses"
            }
            Format::Json => {
                "(the JSON lists none): their hazards cannot be checked; graphsmith JSON from \
                 the runtime or a live read-back has them"
            }
            Format::Live => {
                "(no 8-byte word of their arguments, struct parameters included, points into a \
                 known allocator block or device allocation): their hazards cannot be checked"
            }
        };
        notes.push(format!(
            "{kernels_without} kernel node(s) have no known memory accesses {why}"
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
    if format == Format::DriverDot && copies_without > 0 {
        notes.push(format!(
            "{copies_without} of {copies} memcpy/memset node(s) have no operands: only a \
             verbose dump (cudaGraphDebugDotFlagsVerbose) prints them, so their hazards cannot \
             be checked"
        ));
    }
    notes
}

/// The note for regions of a read-back's memory map that were left out: `dropped` of the
/// `given` regions (empty, or overlapping another).
pub fn dropped_regions(dropped: usize, given: usize) -> String {
    format!(
        "{dropped} of {given} memory region(s) were left out (empty, or overlapping another \
         region): pointers into them are bounded by the driver's allocations instead"
    )
}

/// Calls `visit` on every node of `graph` and of every graph nested in it (child graphs and
/// conditional bodies, at any depth).
pub(crate) fn each_node(graph: &Graph, visit: &mut dyn FnMut(&Node)) {
    let mut todo = vec![graph];
    while let Some(g) = todo.pop() {
        for n in &g.nodes {
            visit(n);
            todo.extend(n.kind.nested_graphs());
        }
    }
}
