//! The human report `graphsmith trace` prints (on stderr, so that the command's stdout stays
//! its own).

use std::fmt::Write;

use crate::analysis::{Attached, CaptureReport, GraphReport, Outcome, ProcessReport, Report};
use crate::event::{Call, Frame, Origin, PyFrame, PyMissing, Thread};
use crate::explain::code_label;
use crate::hazard::render_check;

/// Frames of a backtrace shown in text (the JSON report has them all).
pub const FRAMES_SHOWN: usize = 12;
/// Native frames shown in text after a Python stack (the Python frames say where the call
/// came from; the native ones only how it got to CUDA).
pub const FRAMES_SHOWN_AFTER_PYTHON: usize = 6;
/// Lines of a Python stack shown in text (a run of torch frames is one line).
pub const PY_LINES_SHOWN: usize = 16;
/// Escapes shown in full per process; the rest are counted.
pub const ESCAPES_SHOWN: usize = 10;
/// Failures outside captures listed per process.
pub const OTHERS_SHOWN: usize = 5;

/// The whole human report.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let command: Vec<String> = report
        .command
        .iter()
        .map(|a| {
            if a.is_empty() || a.contains(char::is_whitespace) {
                format!("'{a}'")
            } else {
                a.clone()
            }
        })
        .collect();
    let command = command.join(" ");
    let how = match (report.exit.code, report.exit.signal) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        (None, None) => "ended".to_string(),
    };
    let _ = writeln!(out, "graphsmith trace: `{command}` {how}");
    for note in &report.notes {
        let _ = writeln!(out, "note: {note}");
    }
    if report.unreadable_lines > 0 {
        let _ = writeln!(
            out,
            "note: {} event line(s) could not be read (cut short by a crash?)",
            report.unreadable_lines
        );
    }
    if report.processes.is_empty() {
        let _ = writeln!(
            out,
            "no process of the command initialised CUDA: nothing to report"
        );
    }
    for p in &report.processes {
        process(&mut out, p, report.strict, report.hazards_requested);
    }
    let graphs: usize = report.processes.iter().map(|p| p.graphs.len()).sum();
    let captures: usize = report.processes.iter().map(|p| p.captures.len()).sum();
    let others: usize = report
        .processes
        .iter()
        .map(|p| p.other_failures.len())
        .sum();
    let escapes = report.escapes();
    let _ = writeln!(
        out,
        "\nsummary: {} ({} failed), {}{}, {} instantiated{}, {} outside captures",
        plural(captures, "capture"),
        report.failed_captures(),
        plural(escapes, "silent escape"),
        if escapes > 0 && report.strict {
            " (errors: --strict)"
        } else {
            ""
        },
        plural(graphs, "graph"),
        hazard_summary(report, graphs),
        plural(others, "failing call"),
    );
    match report.freed_launches() {
        0 => {}
        1 => {
            let _ = writeln!(
                out,
                "error: 1 graph launch on memory freed since instantiation (--freed)"
            );
        }
        n => {
            let _ = writeln!(
                out,
                "error: {n} graph launches on memory freed since instantiation (--freed)"
            );
        }
    }
    out
}

/// The hazard part of the summary: what was found, or that nothing was checked.
fn hazard_summary(report: &Report, graphs: usize) -> String {
    let checked = report.graphs_checked();
    match (graphs, checked, report.hazards_requested) {
        (0, _, _) => return String::new(),
        (_, 0, false) => return " (hazards not checked: run with --hazards)".to_string(),
        (_, 0, true) => return " (none could be checked for hazards)".to_string(),
        _ => {}
    }
    let found = match report.hazards() {
        0 => "no hazard".to_string(),
        n => plural(n, "hazard"),
    };
    if checked == graphs {
        format!(" ({found})")
    } else {
        format!(" ({found} in the {checked} checked)")
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn thread(t: &Thread) -> String {
    if t.name.is_empty() {
        format!("{}", t.tid)
    } else {
        format!("{} \"{}\"", t.tid, t.name)
    }
}

fn ranges(r: &[String]) -> String {
    if r.is_empty() {
        "(none)".to_string()
    } else {
        r.join(" > ")
    }
}

fn process(out: &mut String, p: &ProcessReport, strict: bool, hazards: bool) {
    let exe = p.exe.as_deref().unwrap_or("?");
    let _ = writeln!(out);
    match &p.attached {
        Attached::Yes { cupti, version } => {
            let _ = writeln!(
                out,
                "process {} ({exe}): traced through CUPTI {version} ({cupti}); NVTX: {}",
                p.pid,
                match p.nvtx_instances {
                    0 => "no instance attached (no range pushed, or NVTX_INJECTION64_PATH taken)"
                        .to_string(),
                    n => format!("{} attached", plural(n as usize, "instance")),
                }
            );
        }
        Attached::No { reason, detail } => {
            let _ = writeln!(
                out,
                "process {} ({exe}): NOT traced ({reason}): {detail}; it ran untraced",
                p.pid
            );
        }
        Attached::NoCuda => {
            let _ = writeln!(out, "process {}: never initialised CUDA", p.pid);
        }
    }
    if !p.exited_normally {
        let _ = writeln!(
            out,
            "  the process did not exit normally (crash, signal or _exit): the report holds what was recorded until then"
        );
    }
    for c in &p.captures {
        capture(out, c, p, hazards);
    }
    for g in p.graphs.iter().filter(|g| g.from_capture.is_none()) {
        let _ = writeln!(out);
        graph(out, g, "", hazards);
    }
    crate::freed::render(out, &p.freed);
    let label = if strict { "error" } else { "warning" };
    for e in p.escapes.iter().take(ESCAPES_SHOWN) {
        escape(out, e, p, label);
    }
    if p.escapes.len() > ESCAPES_SHOWN {
        let _ = writeln!(
            out,
            "\n{label}: {} more silent escapes (see the JSON report)",
            p.escapes.len() - ESCAPES_SHOWN
        );
    }
    if !p.other_failures.is_empty() {
        let _ = writeln!(
            out,
            "\n{} outside captures:",
            plural(p.other_failures.len(), "failing call")
        );
        for c in p.other_failures.iter().take(OTHERS_SHOWN) {
            let _ = writeln!(
                out,
                "  {} returned {} on thread {}",
                c.name(),
                code_label(c.code, c.code_name.as_deref()),
                thread(&c.thread)
            );
        }
        if p.other_failures.len() > OTHERS_SHOWN {
            let _ = writeln!(out, "  ... {} more", p.other_failures.len() - OTHERS_SHOWN);
        }
    }
}

fn capture(out: &mut String, c: &CaptureReport, p: &ProcessReport, hazards: bool) {
    let b = &c.begin;
    let status = match c.outcome {
        Outcome::Captured if c.first.is_some() => "captured, but calls failed during it",
        Outcome::Captured => "captured",
        Outcome::Failed => "FAILED (no graph)",
        Outcome::NotEnded => "NEVER ENDED (the process exited while capturing)",
    };
    let _ = writeln!(out, "\ncapture #{}: {status}", c.number);
    let _ = writeln!(
        out,
        "  began: {} on stream {:#x}, {} mode, thread {}, ranges: {}",
        b.runtime.as_deref().or(b.driver.as_deref()).unwrap_or("?"),
        b.stream,
        b.mode.name(),
        thread(&b.thread),
        ranges(&b.ranges)
    );
    python_stack(out, &b.python, b.python_missing, "    ");
    if let Some(first) = &c.first {
        let _ = writeln!(
            out,
            "  first failing call: {} returned {}{}",
            first.name(),
            code_label(first.code, first.code_name.as_deref()),
            called_at(first.user_frame(), ", ", "")
        );
        call_details(out, first, "    ");
        if let Some(e) = &c.explained {
            let _ = writeln!(
                out,
                "    catalogue: [{}] {} (graphsmith explain {})",
                e.id, e.title, e.id
            );
            let _ = writeln!(out, "    fix: {}", e.fix);
        }
    }
    if !c.cascade.is_empty() {
        let parts: Vec<String> = c
            .cascade
            .iter()
            .map(|i| {
                if i.count == 1 {
                    format!("{} {}", i.call, i.code)
                } else {
                    format!("{} {} x{}", i.call, i.code, i.count)
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "  then {} more failing call{}: {}",
            c.cascade_total(),
            if c.cascade_total() == 1 { "" } else { "s" },
            parts.join(", ")
        );
    }
    for s in &c.unjoined {
        let _ = writeln!(
            out,
            "  forked stream {:#x} never joined back: {} calls captured on it, first {}, last {} on thread {} (ranges: {})",
            s.stream,
            s.calls,
            s.first,
            s.last,
            thread(&s.last_thread),
            ranges(&s.last_ranges)
        );
    }
    if let Some(e) = &c.end {
        let name = e.runtime.as_deref().or(e.driver.as_deref()).unwrap_or("?");
        if e.code == 0 {
            let calls: u64 = e.streams.iter().map(|s| s.calls).sum();
            let _ = writeln!(
                out,
                "  ended: {name} on thread {} -> graph {:#x} ({} captured on {})",
                thread(&e.thread),
                e.graph.unwrap_or(0),
                plural(calls as usize, "call"),
                plural(e.streams.len().max(1), "stream")
            );
        } else {
            let _ = writeln!(
                out,
                "  ended: {name} on thread {} returned {}",
                thread(&e.thread),
                code_label(e.code, None)
            );
        }
    }
    for g in p.graphs.iter().filter(|g| g.from_capture == Some(c.number)) {
        graph(out, g, "  ", hazards);
    }
}

fn graph(out: &mut String, g: &GraphReport, indent: &str, hazards: bool) {
    let i = &g.instantiate;
    let name = i.runtime.as_deref().or(i.driver.as_deref()).unwrap_or("?");
    if i.code != 0 {
        let _ = writeln!(
            out,
            "{indent}instantiation of graph {:#x} failed: {name} returned {}",
            i.graph,
            code_label(i.code, None)
        );
        return;
    }
    let total: u64 = i.nodes.values().sum();
    let kinds: Vec<String> = i.nodes.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let _ = writeln!(
        out,
        "{indent}graph {:#x} instantiated ({name}, exec {:#x}): {}{}; launched {}",
        i.graph,
        i.exec.unwrap_or(0),
        plural(total as usize, "node"),
        if kinds.is_empty() {
            String::new()
        } else {
            format!(" ({})", kinds.join(", "))
        },
        plural(g.launches as usize, "time")
    );
    let inner = format!("{indent}  ");
    match &g.hazards {
        Some(check) => render_check(out, check, &inner),
        None if hazards => {
            let _ = writeln!(
                out,
                "{inner}hazards: not checked: no result was recorded (the process ended during the check?)"
            );
        }
        None => {}
    }
}

fn escape(out: &mut String, e: &Call, p: &ProcessReport, label: &str) {
    let _ = writeln!(
        out,
        "\n{label}: silent escape: {} on stream {}{} ran eagerly while a capture was running; the graph does not contain it",
        e.name(),
        e.stream.map_or("(none)".to_string(), |s| format!("{s:#x}")),
        called_at(e.user_frame(), " (", ")")
    );
    for id in &e.active {
        if let Some(c) = p.captures.iter().find(|c| c.begin.capture == *id) {
            let _ = writeln!(
                out,
                "    running: capture #{} on stream {:#x} ({} mode, thread {})",
                c.number,
                c.begin.stream,
                c.begin.mode.name(),
                thread(&c.begin.thread)
            );
        }
    }
    call_details(out, e, "    ");
}

fn call_details(out: &mut String, c: &Call, indent: &str) {
    if let Some(text) = &c.code_text {
        if c.code != 0 {
            let _ = writeln!(out, "{indent}meaning: {text}");
        }
    }
    let _ = writeln!(out, "{indent}thread: {}", thread(&c.thread));
    let _ = writeln!(out, "{indent}ranges: {}", ranges(&c.ranges));
    if let Some(s) = c.stream {
        let _ = writeln!(out, "{indent}stream: {s:#x}");
    }
    for cr in &c.capturing {
        let _ = writeln!(
            out,
            "{indent}capturing thread: {} ranges: {}",
            thread(&cr.thread),
            ranges(&cr.ranges)
        );
    }
    python_stack(out, &c.python, c.python_missing, indent);
    if !c.backtrace.is_empty() {
        let (label, shown) = if c.python.is_empty() {
            ("backtrace", FRAMES_SHOWN)
        } else {
            ("native backtrace", FRAMES_SHOWN_AFTER_PYTHON)
        };
        let _ = writeln!(out, "{indent}{label} (innermost first):");
        for (i, f) in c.backtrace.iter().take(shown).enumerate() {
            let _ = writeln!(out, "{indent}  #{i:<2} {}", frame(f));
        }
        if c.backtrace.len() > shown {
            let _ = writeln!(
                out,
                "{indent}  ... {} more frames{}",
                c.backtrace.len() - shown,
                if c.python.is_empty() {
                    ""
                } else {
                    " (see the JSON report)"
                }
            );
        }
    }
}

/// `called at train.py:12 in step`, for the innermost frame of the user's code, between
/// `before` and `after`.
fn called_at(f: Option<&PyFrame>, before: &str, after: &str) -> String {
    f.map_or(String::new(), |f| {
        format!(
            "{before}called at {}:{} in {}{after}",
            f.file, f.line, f.function
        )
    })
}

/// A Python stack, innermost first: the user's frames marked, each run of torch frames folded
/// into one line; or why none was read (nothing for a process without Python).
fn python_stack(out: &mut String, stack: &[PyFrame], missing: Option<PyMissing>, indent: &str) {
    if stack.is_empty() {
        if let Some(m) = missing.filter(|m| *m != PyMissing::NotPython) {
            let _ = writeln!(out, "{indent}python stack: not read: {}", m.text());
        }
        return;
    }
    let _ = writeln!(out, "{indent}python (innermost first):");
    let mut lines = Vec::new();
    let mut i = 0;
    while i < stack.len() {
        let f = &stack[i];
        if f.origin == Origin::Torch {
            let run = stack[i..]
                .iter()
                .take_while(|f| f.origin == Origin::Torch)
                .count();
            lines.push(format!(
                "... {} in torch (innermost: {}:{} in {})",
                plural(run, "frame"),
                short_torch_path(&f.file),
                f.line,
                f.function
            ));
            i += run;
            continue;
        }
        let mark = match f.origin {
            Origin::User => "  <- your code",
            Origin::Library => "  [library]",
            Origin::Stdlib => "  [stdlib]",
            Origin::Torch => "",
        };
        lines.push(format!("at {}:{} in {}{mark}", f.file, f.line, f.function));
        i += 1;
    }
    for l in lines.iter().take(PY_LINES_SHOWN) {
        let _ = writeln!(out, "{indent}  {l}");
    }
    if lines.len() > PY_LINES_SHOWN {
        let _ = writeln!(
            out,
            "{indent}  ... {} more lines (see the JSON report)",
            lines.len() - PY_LINES_SHOWN
        );
    }
}

/// `torch/cuda/graphs.py` from `/venv/lib/python3.12/site-packages/torch/cuda/graphs.py`.
fn short_torch_path(file: &str) -> &str {
    ["/site-packages/", "/dist-packages/"]
        .iter()
        .find_map(|p| file.find(p).map(|at| &file[at + p.len()..]))
        .unwrap_or(file)
}

fn frame(f: &Frame) -> String {
    let sym = if f.symbol.is_empty() { "??" } else { &f.symbol };
    let mut s = sym.to_string();
    if let (Some(file), Some(line)) = (&f.file, f.line) {
        let _ = write!(s, " at {file}:{line}");
    }
    if !f.module.is_empty() {
        let _ = write!(s, "  [{}]", f.module);
    }
    s
}
