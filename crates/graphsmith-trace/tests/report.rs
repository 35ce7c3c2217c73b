//! The report built from recorded event logs: attribution, first cause and cascade asserted on
//! fields, and the human text asserted in full against a snapshot
//! (`GRAPHSMITH_BLESS=1 cargo test -p graphsmith-trace --test report` rewrites the snapshots).

use std::path::PathBuf;

use graphsmith_trace::analysis::{CommandExit, Outcome, Report};
use graphsmith_trace::event::read_events;
use graphsmith_trace::explain::Builtin;
use graphsmith_trace::render::render;

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
        _ => panic!("no fixture {name}"),
    }
}

fn report(log: &str, strict: bool) -> Report {
    let text = embedded(log);
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
    let text = render(&report(log, strict));
    if std::env::var_os("GRAPHSMITH_BLESS").is_some() {
        std::fs::write(fixture(snapshot), &text).unwrap();
        return;
    }
    let path = fixture(snapshot);
    if text != embedded(snapshot) {
        panic!(
            "{} differs from the rendered report (GRAPHSMITH_BLESS=1 rewrites it):\n{text}",
            path.display()
        );
    }
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
