//! The lines of the human report for one graph's hazard check.

use std::fmt::Write;

use super::{CheckResult, HazardCheck, HazardRecord, HazardSide, MAX_RECORDED};

/// Hazards shown in full per graph; the JSON report holds up to [`MAX_RECORDED`].
pub const HAZARDS_SHOWN: usize = 10;

fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else if what.ends_with('s') {
        format!("{n} {what}es")
    } else {
        format!("{n} {what}s")
    }
}

/// What was checked, in a few words.
fn facts(c: &CheckResult) -> String {
    format!(
        "{}, {}; {} with {} checked",
        plural(c.nodes, "node"),
        plural(c.edges, "edge"),
        plural(c.nodes_with_accesses, "node"),
        plural(c.accesses, "memory access")
    )
}

fn side(s: &HazardSide) -> String {
    match &s.kernel {
        Some(k) => format!("n{} kernel {k} {}", s.node, s.mode.verb()),
        None => format!("n{} {} {}", s.node, s.kind, s.mode.verb()),
    }
}

fn hazard(out: &mut String, number: usize, h: &HazardRecord, indent: &str) {
    let within = if h.within.is_empty() {
        String::new()
    } else {
        let path: Vec<String> = h.within.iter().map(|n| format!("n{n}")).collect();
        format!(" inside the child graph of {}", path.join(" > "))
    };
    let size = h
        .buffer_bytes
        .map_or(String::new(), |b| format!(" ({})", plural(b, "byte")));
    let on = match &h.region {
        Some(region) => region.clone(),
        None => format!("allocation {:#x}{size}", h.buffer),
    };
    let _ = writeln!(
        out,
        "{indent}  hazard {number}{within}: {} on {on}, bytes [{}, {})",
        h.kind,
        h.offset,
        h.offset.saturating_add(h.len)
    );
    let _ = writeln!(out, "{indent}    {}", side(&h.first));
    let _ = writeln!(out, "{indent}    {}", side(&h.second));
    let _ = writeln!(
        out,
        "{indent}    no path of edges orders them; fix: add the edge n{} -> n{} ('{}' -> '{}')",
        h.fix.0, h.fix.1, h.first.label, h.second.label
    );
}

/// Appends the lines of one graph's check, each starting with `indent`.
pub fn render_check(out: &mut String, check: &HazardCheck, indent: &str) {
    let c = match check {
        HazardCheck::NotChecked { reason } => {
            let _ = writeln!(out, "{indent}hazards: not checked: {reason}");
            return;
        }
        HazardCheck::Checked(c) => c,
    };
    if c.total == 0 && c.accesses == 0 {
        let _ = writeln!(
            out,
            "{indent}hazards: none found, but no node's memory could be resolved ({}, {}; a kernel's memory is seen only through argument words that point into live allocations)",
            plural(c.nodes, "node"),
            plural(c.edges, "edge")
        );
    } else if c.total == 0 {
        let _ = writeln!(out, "{indent}hazards: none ({})", facts(c));
    } else {
        // Logs written before `possible` was recorded: count the recorded ones.
        let recorded = c.hazards.iter().filter(|h| h.kind.is_possible()).count() as u64;
        let possible = c.possible.max(recorded).min(c.total);
        let certain = c.total - possible;
        let mut number = 0;
        for (is_possible, count) in [(false, certain), (true, possible)] {
            if count == 0 {
                continue;
            }
            let (what, why) = if is_possible {
                (
                    "possible hazard",
                    "touch the same bytes through a pointer of unknown direction, which may write",
                )
            } else {
                ("hazard", "touch the same bytes, and one of them writes")
            };
            let _ = writeln!(
                out,
                "{indent}warning: {}: nodes that no path of edges orders {why} ({})",
                plural(count, what),
                facts(c)
            );
            let group = c
                .hazards
                .iter()
                .filter(|h| h.kind.is_possible() == is_possible);
            let recorded = group.clone().count() as u64;
            let mut shown = 0u64;
            for h in group.take(HAZARDS_SHOWN) {
                number += 1;
                shown += 1;
                hazard(out, number, h, indent);
            }
            if count > shown {
                let _ = writeln!(
                    out,
                    "{indent}  ... {} more{}",
                    plural(count - shown, what),
                    if count > recorded {
                        format!(" (the JSON report holds the first {MAX_RECORDED} hazards)")
                    } else {
                        " (see the JSON report)".to_string()
                    }
                );
            }
        }
    }
    if let Some(bounds) = &c.bounds {
        let _ = writeln!(out, "{indent}  {}", bounds.line());
    }
    if c.weak_edges > 0 {
        let _ = writeln!(
            out,
            "{indent}  note: {} not taken as ordering (they order only the start of the dependent kernel, not memory)",
            plural(c.weak_edges, "launch-order edge")
        );
    }
    if c.kernels_unread > 0 {
        let _ = writeln!(
            out,
            "{indent}  note: the parameters of {} could not be read: their memory is not checked",
            plural(c.kernels_unread, "kernel node")
        );
    }
}
