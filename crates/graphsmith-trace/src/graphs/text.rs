//! The `--graphs` section of the human report: per process, one line of totals and one row per
//! graph, most costly first.

use std::fmt::Write;

use super::cost::{GraphCost, GraphCosts, Made, ProcessCosts};

/// Rows shown per process in text (the JSON report and the plot have them all).
pub const ROWS_SHOWN: usize = 40;

/// `1.23 ms`, `456 µs`, `2.50 s`.
pub fn duration(ns: u64) -> String {
    let ns = ns as f64;
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.0} µs", ns / 1e3)
    }
}

/// `1.5 MiB`, `12 KiB`, `0 B`.
pub fn bytes(n: u64) -> String {
    let f = n as f64;
    if n >= 1 << 30 {
        format!("{:.2} GiB", f / (1u64 << 30) as f64)
    } else if n >= 1 << 20 {
        format!("{:.1} MiB", f / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.0} KiB", f / 1024.0)
    } else {
        format!("{n} B")
    }
}

fn opt(ns: Option<u64>) -> String {
    ns.map_or("-".to_string(), duration)
}

/// What made the graph: `capture #3`, `built`, `?`.
pub fn made(g: &GraphCost) -> String {
    match g.made {
        Made::Capture { capture, ended } => {
            format!("capture #{capture}{}", if ended { "" } else { " (failed)" })
        }
        Made::Built => "built".to_string(),
        Made::Unseen => "unseen".to_string(),
    }
}

/// `bench.py:41 in capture` (the file's name only: the JSON report has its path), or `?`.
pub fn began_at(g: &GraphCost) -> String {
    match &g.began_at {
        Some(w) => {
            let file = w.file.rsplit('/').next().unwrap_or(&w.file);
            match w.line {
                Some(l) => format!("{file}:{l} in {}", w.function),
                None => format!("{file} in {}", w.function),
            }
        }
        None => "?".to_string(),
    }
}

/// The `--graphs` section.
pub fn render_costs(costs: &GraphCosts) -> String {
    let mut out = String::new();
    if costs.processes.is_empty() {
        let _ = writeln!(
            out,
            "\ngraph costs: no graph was captured, built or instantiated"
        );
    }
    for p in &costs.processes {
        process(&mut out, p);
    }
    out
}

fn process(out: &mut String, p: &ProcessCosts) {
    let t = &p.totals;
    let _ = writeln!(
        out,
        "\ngraph costs, process {} ({}): {} graph{}, most costly first",
        p.pid,
        p.exe.as_deref().unwrap_or("?"),
        t.graphs,
        if t.graphs == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        out,
        "  total: capture {}, instantiate {}, upload {}: {} of host time ({} from the first begin to the last instantiation or upload)",
        duration(t.capture_ns),
        duration(t.instantiate_ns),
        duration(t.upload_ns),
        duration(t.cost_ns),
        duration(t.span_ns)
    );
    if t.tracer_ns > 0 {
        let _ = writeln!(
            out,
            "  the tracer's own time inside captures ({}: Python stacks, backtraces, bookkeeping) is left out of capture times",
            duration(t.tracer_ns)
        );
    }
    let _ = writeln!(
        out,
        "  total: {} allocated while capturing ({} by driver allocations, {} in memory nodes), {} nodes, {} replays",
        bytes(t.total_bytes),
        bytes(t.allocated_bytes),
        bytes(t.node_bytes),
        t.nodes,
        t.replays
    );
    let _ = writeln!(
        out,
        "  {:>4}  {:<18} {:<36} {:>9} {:>11} {:>9} {:>9} {:>6} {:>10} {:>8} {:>11}",
        "rank",
        "made by",
        "began at",
        "capture",
        "instantiate",
        "upload",
        "total",
        "nodes",
        "memory",
        "replays",
        "device mean"
    );
    for g in p.graphs.iter().take(ROWS_SHOWN) {
        let _ = writeln!(
            out,
            "  {:>4}  {:<18} {:<36} {:>9} {:>11} {:>9} {:>9} {:>6} {:>10} {:>8} {:>11}",
            g.rank,
            made(g),
            clip(&began_at(g), 36),
            opt(g.capture_ns),
            if g.instantiations.is_empty() {
                "-".to_string()
            } else {
                duration(g.instantiate_ns)
            },
            if g.upload_ns == 0 {
                "-".to_string()
            } else {
                duration(g.upload_ns)
            },
            duration(g.cost_ns),
            g.node_total,
            bytes(g.memory.total_bytes),
            g.replays,
            opt(g.device_mean_ns)
        );
    }
    if p.graphs.len() > ROWS_SHOWN {
        let _ = writeln!(
            out,
            "  ... {} more graphs (see the JSON report)",
            p.graphs.len() - ROWS_SHOWN
        );
    }
    let kinds = node_kinds(p);
    if !kinds.is_empty() {
        let _ = writeln!(out, "  nodes by kind, all graphs: {kinds}");
    }
    let others: u64 = p
        .graphs
        .iter()
        .map(|g| g.memory.other_thread_allocations)
        .sum();
    if p.other_thread_allocations > 0 || others > 0 {
        let _ = writeln!(
            out,
            "  note: {} driver allocation{} ({}) by other threads while a capture ran: not counted in any graph's memory",
            p.other_thread_allocations,
            if p.other_thread_allocations == 1 { "" } else { "s" },
            bytes(p.other_thread_bytes)
        );
    }
    match &p.device_time_off {
        Some(why) => {
            let _ = writeln!(out, "  device time: not measured: {why}");
        }
        None => {
            let _ = writeln!(
                out,
                "  device time: CUPTI graph trace, {} record{}{}{}",
                p.device_records,
                if p.device_records == 1 { "" } else { "s" },
                if p.device_dropped > 0 {
                    format!(", {} dropped by CUPTI", p.device_dropped)
                } else {
                    String::new()
                },
                if p.device_unmatched > 0 {
                    format!(", {} of launches not seen", p.device_unmatched)
                } else {
                    String::new()
                }
            );
        }
    }
}

fn node_kinds(p: &ProcessCosts) -> String {
    let mut all: std::collections::BTreeMap<&str, u64> = Default::default();
    for g in &p.graphs {
        for (k, n) in &g.nodes {
            *all.entry(k.as_str()).or_insert(0) += n;
        }
    }
    all.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Cuts a long location short (its file and line come first).
fn clip(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let head: String = s.chars().take(width - 3).collect();
    format!("{head}...")
}
