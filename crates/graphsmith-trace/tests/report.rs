//! The report built from recorded event logs: attribution, first cause and cascade asserted on
//! fields, and the human text asserted in full against a snapshot
//! (`GRAPHSMITH_BLESS=1 cargo test -p graphsmith-trace --test report` rewrites the snapshots).

use std::path::PathBuf;

use graphsmith_trace::analysis::{CommandExit, Outcome, Report};
use graphsmith_trace::event::read_events;
use graphsmith_trace::explain::Builtin;
use graphsmith_trace::render::render;

/// Where a snapshot lives in the source tree (only for rewriting it and for messages: the tests
/// compare with the compiled-in copy, see [`embedded`]).
fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The recorded logs and snapshots are compiled in, so the test binary runs anywhere (the GPU
/// machine gets test binaries without the source tree).
fn embedded(name: &str) -> &'static str {
    match name {
        "failures.jsonl" => include_str!("fixtures/failures.jsonl"),
        "clean.jsonl" => include_str!("fixtures/clean.jsonl"),
        "failures.txt" => include_str!("fixtures/failures.txt"),
        "failures-strict.txt" => include_str!("fixtures/failures-strict.txt"),
        "clean.txt" => include_str!("fixtures/clean.txt"),
        "h200-stream-sync.jsonl" => include_str!("fixtures/h200-stream-sync.jsonl"),
        "hazards.jsonl" => include_str!("fixtures/hazards.jsonl"),
        "hazards.txt" => include_str!("fixtures/hazards.txt"),
        "python.jsonl" => include_str!("fixtures/python.jsonl"),
        "python.txt" => include_str!("fixtures/python.txt"),
        "memory.jsonl" => include_str!("fixtures/memory.jsonl"),
        "memory.txt" => include_str!("fixtures/memory.txt"),
        _ => panic!("no fixture {name}"),
    }
}

fn report(log: &str, strict: bool) -> Report {
    report_of(embedded(log), log, strict)
}

fn report_of(text: &str, log: &str, strict: bool) -> Report {
    let (events, bad) = read_events(text);
    assert_eq!(bad, 0, "every line of {log} parses");
    let mut r = Report::build(
        vec!["python3".into(), "item.py".into()],
        CommandExit {
            code: Some(1),
            signal: None,
        },
        &events,
        &Builtin,
    );
    r.strict = strict;
    r
}

/// Compares the rendered text with a snapshot.
fn check(log: &str, snapshot: &str, strict: bool) {
    check_report(&report(log, strict), snapshot);
}

/// Compares the rendered text with the compiled-in snapshot. With `GRAPHSMITH_BLESS` set, first
/// rewrites the snapshot in the source tree; a snapshot that changed fails the test (the binary
/// still holds the old one), so a run that rewrote something never counts as a pass.
fn check_report(report: &Report, snapshot: &str) {
    let text = render(report);
    let path = fixture(snapshot);
    let same = text == embedded(snapshot);
    if std::env::var_os("GRAPHSMITH_BLESS").is_some() && !same {
        std::fs::write(&path, &text).unwrap_or_else(|e| {
            panic!(
                "GRAPHSMITH_BLESS: cannot rewrite {} ({e}); bless from a source checkout",
                path.display()
            )
        });
        panic!(
            "rewrote {}; run the tests again without GRAPHSMITH_BLESS to check it",
            path.display()
        );
    }
    assert!(
        same,
        "{} differs from the rendered report (GRAPHSMITH_BLESS=1 rewrites it):\n{text}",
        path.display()
    );
}

#[test]
fn failures_render_as_the_snapshot() {
    check("failures.jsonl", "failures.txt", false);
}

#[test]
fn strict_turns_escapes_into_errors() {
    check("failures.jsonl", "failures-strict.txt", true);
    let r = report("failures.jsonl", true);
    assert_eq!(r.errors(), 4, "three failed captures and one escape");
    assert_eq!(r.warnings(), 0);
    let r = report("failures.jsonl", false);
    assert_eq!((r.errors(), r.warnings()), (3, 1));
}

#[test]
fn clean_capture_and_replay_has_no_failure_and_no_warning() {
    check("clean.jsonl", "clean.txt", false);
    let r = report("clean.jsonl", false);
    assert_eq!((r.errors(), r.warnings()), (0, 0));
    let p = &r.processes[0];
    assert_eq!(p.captures[0].outcome, Outcome::Captured);
    assert_eq!(p.graphs[0].launches, 1000);
    assert_eq!(p.graphs[0].from_capture, Some(1));
}

#[test]
fn the_first_cause_is_the_first_failing_call_and_the_rest_is_its_cascade() {
    let r = report("failures.jsonl", false);
    let p = &r.processes[0];
    let c = &p.captures[0];
    assert_eq!(c.outcome, Outcome::Failed);
    let first = c.first.as_ref().unwrap();
    assert_eq!(first.driver.as_deref(), Some("cuStreamSynchronize"));
    assert_eq!(first.runtime.as_deref(), Some("cudaStreamSynchronize"));
    assert_eq!(first.code, 900);
    assert_eq!(first.ranges, ["train", "step 3", "loss"]);
    assert_eq!(c.explained.as_ref().unwrap().id, "sync-in-capture");
    assert_eq!(c.cascade_total(), 3);
    assert_eq!(c.cascade[0].call, "cudaLaunchKernel");
    assert_eq!(c.cascade[0].count, 2);
    assert_eq!(c.cascade[1].call, "cudaStreamEndCapture");
}

#[test]
fn a_capture_code_on_no_stream_goes_to_every_running_capture() {
    let r = report("failures.jsonl", false);
    let c = &r.processes[0].captures[1];
    let first = c.first.as_ref().unwrap();
    assert_eq!(first.runtime.as_deref(), Some("cudaMalloc"));
    assert_eq!(first.thread.name, "gs-worker");
    assert_eq!(first.capturing[0].ranges, ["decode", "layer 0"]);
    assert_eq!(c.explained.as_ref().unwrap().id, "alloc-in-capture");
    // The failure outside captures is not attributed to any.
    assert_eq!(r.processes[0].other_failures.len(), 1);
}

#[test]
fn an_unjoined_fork_names_the_side_stream() {
    let r = report("failures.jsonl", false);
    let c = &r.processes[0].captures[2];
    assert_eq!(c.first.as_ref().unwrap().code, 904);
    assert_eq!(c.unjoined.len(), 1);
    assert_eq!(c.unjoined[0].stream, 0x6b2d0);
    assert_eq!(c.unjoined[0].last_ranges, ["fork", "side"]);
}

#[test]
fn a_log_cut_short_by_a_crash_still_reports_what_it_holds() {
    let cut: Vec<&str> = embedded("failures.jsonl").lines().take(5).collect();
    let mut cut = cut.join("\n");
    cut.push_str("\n{\"ev\":\"call\",\"pid\":42"); // a line cut mid-write
    let (events, bad) = read_events(&cut);
    assert_eq!(bad, 1);
    let r = Report::build(
        vec!["x".into()],
        CommandExit {
            code: None,
            signal: Some(11),
        },
        &events,
        &Builtin,
    );
    let p = &r.processes[0];
    assert!(!p.exited_normally);
    assert_eq!(p.captures[0].outcome, Outcome::NotEnded);
    assert_eq!(p.captures[0].first.as_ref().unwrap().code, 900);
    let text = render(&r);
    assert!(text.contains("was killed by signal 11"), "{text}");
    assert!(text.contains("NEVER ENDED"), "{text}");
    assert!(text.contains("did not exit normally"), "{text}");
}

/// A log recorded on the H200 (faults.cu, case stream-sync): after the synchronize invalidated
/// the capture, the driver reports no capture id for the stream, so the failing end arrives as a
/// failing call of the capture, not as an end event. The capture is still reported as failed,
/// with the synchronize as its first cause.
#[test]
fn a_failing_end_without_an_end_event_still_fails_the_capture() {
    let r = report("h200-stream-sync.jsonl", false);
    let p = &r.processes[0];
    assert_eq!(p.captures.len(), 1);
    let c = &p.captures[0];
    assert_eq!(c.outcome, Outcome::Failed);
    let first = c.first.as_ref().expect("a first cause");
    assert_eq!(
        (first.short_name(), first.code),
        ("cudaStreamSynchronize", 900)
    );
    assert_eq!(first.ranges, ["case:stream-sync", "capture", "fault"]);
}

fn hazards_report() -> Report {
    let mut r = report("hazards.jsonl", false);
    r.command = vec!["./faults".into(), "race".into()];
    r.exit = CommandExit {
        code: Some(0),
        signal: None,
    };
    r.hazards_requested = true;
    r
}

/// `--hazards` (a log shaped like the GPU suite's `race` and `clean` cases, plus a graph whose
/// memory could not be resolved and one the tracer could not read): each instantiated graph
/// shows its check, the race names both kernels, the buffer and the fix edge.
#[test]
fn hazards_render_as_the_snapshot() {
    let r = hazards_report();
    check_report(&r, "hazards.txt");
    assert_eq!(r.hazards(), 1);
    assert_eq!(r.graphs_checked(), 3, "the fourth was not checked");
    assert_eq!((r.errors(), r.warnings()), (0, 1), "hazards are warnings");
    let mut strict = hazards_report();
    strict.strict = true;
    assert_eq!(
        (strict.errors(), strict.warnings()),
        (0, 1),
        "even with --strict"
    );
}

/// What tests/programs/check.py reads from the JSON report.
#[test]
fn the_json_report_holds_each_graphs_check() {
    let r = hazards_report();
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["hazards_requested"], true);
    let graphs = &json["processes"][0]["graphs"];
    let race = &graphs[0]["hazards"];
    assert_eq!(race["state"], "checked");
    assert_eq!(race["total"], 1);
    let h = &race["hazards"][0];
    assert_eq!(h["kind"], "possible_write");
    assert_eq!(h["first"]["label"], "inc");
    assert_eq!(h["second"]["label"], "scale");
    assert_eq!(h["second"]["kernel"], "scale(float*, int)");
    assert_eq!(h["buffer"], 0x7f3a_0000_0000_u64);
    assert_eq!(h["buffer_bytes"], 262144);
    assert_eq!(h["fix"], serde_json::json!([1, 2]));
    assert_eq!(graphs[1]["hazards"]["total"], 0);
    assert_eq!(graphs[3]["hazards"]["state"], "not_checked");
}

#[test]
fn without_hazards_the_report_says_nothing_was_checked() {
    let text = render(&report("clean.jsonl", false));
    assert!(
        text.contains("1 graph instantiated (hazards not checked: run with --hazards)"),
        "{text}"
    );
    assert!(!text.contains("hazards: "), "{text}");
    // Asked for, but the process ended before a result was written.
    let cut: String = embedded("hazards.jsonl")
        .lines()
        .filter(|l| !l.contains(r#""ev": "hazards""#))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut r = report_of(&cut, "hazards.jsonl without checks", false);
    r.hazards_requested = true;
    let text = render(&r);
    assert!(
        text.contains("hazards: not checked: no result was recorded"),
        "{text}"
    );
    assert!(
        text.contains("4 graphs instantiated (none could be checked for hazards)"),
        "{text}"
    );
}

#[test]
fn python_stacks_render_as_the_snapshot() {
    check("python.jsonl", "python.txt", false);
}

#[test]
fn the_headline_names_the_users_innermost_python_frame() {
    let r = report("python.jsonl", false);
    let first = r.processes[0].captures[0].first.as_ref().unwrap();
    let f = first.user_frame().unwrap();
    assert_eq!(
        (f.file.as_str(), f.line, f.function.as_str()),
        ("train.py", 23, "step")
    );
    let text = render(&r);
    assert!(
        text.contains(
            "returned 900 CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, called at train.py:23 in step"
        ),
        "{text}"
    );
    // The escape came through torch and a library: the user's frame is the helper's.
    let e = &r.processes[0].escapes[0];
    assert_eq!(e.user_frame().unwrap().file, "/home/me/data.py");
    assert!(
        text.contains("on stream 0x0 (called at /home/me/data.py:12 in to_gpu) ran eagerly"),
        "{text}"
    );
}

#[test]
fn the_json_report_holds_the_python_frames() {
    let r = report("python.jsonl", false);
    let json = serde_json::to_value(&r).unwrap();
    let first = &json["processes"][0]["captures"][0]["first"];
    assert_eq!(first["python"][0]["file"], "train.py");
    assert_eq!(first["python"][0]["line"], 23);
    assert_eq!(first["python"][0]["origin"], "user");
    let begin = &json["processes"][0]["captures"][0]["begin"];
    assert_eq!(begin["python"][0]["origin"], "torch");
    assert_eq!(
        json["processes"][0]["captures"][1]["begin"]["python_missing"],
        "gil_busy"
    );
}

#[test]
fn logs_without_python_fields_still_parse() {
    // The failures log predates Python stacks.
    let r = report("failures.jsonl", false);
    let first = r.processes[0].captures[0].first.as_ref().unwrap();
    assert!(first.python.is_empty() && first.python_missing.is_none());
}

#[test]
fn bounds_and_a_launch_on_freed_memory_render_as_the_snapshot() {
    check("memory.jsonl", "memory.txt", false);
    let r = report("memory.jsonl", false);
    assert_eq!(r.freed_launches(), 1);
    assert_eq!(
        (r.errors(), r.warnings()),
        (1, 1),
        "the freed launch is an error"
    );
    let f = &r.processes[0].freed[0];
    assert_eq!(
        f.freed.line(),
        "cudaFree (cuMemFree_v2) at serve.py:41 in unload"
    );
    assert_eq!(
        f.allocated.as_ref().map(|s| s.line()).as_deref(),
        Some("cudaMalloc (cuMemAlloc_v2) at serve.py:12 in load_lm_head")
    );
}
