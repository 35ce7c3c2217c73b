//! The doctor (`graphsmith_analysis::doctor`) without a GPU: the text report (snapshots of the
//! hazards' summary line with and without strict, a note on an unjudged pair, a hazard inside a
//! conditional body), the JSON counts, the exit codes, the notes' walk over every nested graph,
//! and errors naming the line.

use graphsmith_analysis::doctor::{analyse_file, analyse_graph, analyse_text, DoctorError, Format};
use graphsmith_model::Graph;

#[path = "../../graphsmith-model/tests/common/driver_dot_fixtures.rs"]
mod fixtures;

/// A graph whose WHILE body `decode` holds a race (`produce` writes `x`, `consume` reads it,
/// unordered) and a kernel `sample` whose memory the JSON does not list.
const CONDITIONAL: &str = r#"{"label": "step", "nodes": [
  {"id": 0, "label": "loop", "kind": "conditional", "conditional": "while", "bodies": 1,
   "body_graphs": [{"label": "decode", "nodes": [
     {"id": 0, "label": "produce", "kind": "empty",
      "accesses": [{"buffer": 4096, "label": "x", "offset": 0, "len": 128, "mode": "write"}]},
     {"id": 1, "label": "consume", "kind": "empty",
      "accesses": [{"buffer": 4096, "label": "x", "offset": 0, "len": 128, "mode": "read"}]},
     {"id": 2, "label": "sample", "kind": "kernel", "name": "sample",
      "grid": {"x": 1, "y": 1, "z": 1}, "block": {"x": 32, "y": 1, "z": 1},
      "shared_mem_bytes": 0, "args": []}
   ], "edges": []}]}
], "edges": []}"#;

/// The hazards' summary line of `text`.
fn summary_line(text: &str) -> &str {
    text.lines()
        .find(|l| l.starts_with("hazards: "))
        .expect("a hazards line")
}

#[test]
fn possible_hazards_do_not_fail_unless_strict_and_the_summary_line_says_so() {
    // The full report is snapshotted through the command (graphsmith-cli's tests/doctor.rs).
    let f = analyse_text(fixtures::fixture("runtime-api/memcpy3d-racy.dot")).expect("dump");
    assert_eq!((f.certain(), f.possible()), (0, 2));
    assert!(f.passes(false) && !f.passes(true));
    assert_eq!((f.exit_code(false), f.exit_code(true)), (0, 1));
    let (plain, strict) = (
        f.text("memcpy3d-racy.dot", &[], false),
        f.text("memcpy3d-racy.dot", &[], true),
    );
    assert_eq!(
        summary_line(&plain),
        "hazards: 0 certain, 2 possible (possible ones do not fail; --strict fails on them)"
    );
    assert_eq!(
        summary_line(&strict),
        "hazards: 0 certain, 2 possible (--strict: possible ones fail too)"
    );
    // Nothing else changes with strict.
    assert_eq!(
        plain.replace(summary_line(&plain), ""),
        strict.replace(summary_line(&strict), "")
    );
    assert_eq!(
        plain.matches("\n     only possible: a dump holds no kernel arguments, so whether 'touch#1' touches these bytes is unknown\n").count(),
        2,
        "{plain}"
    );
}

#[test]
fn certain_and_possible_hazards_together_fail_in_both_modes() {
    // The verbose chain without its edges: the memset races with the memcpy (certain), and each
    // kernel is unordered with the copy and the set (possible).
    let racy: String = fixtures::fixture("chain-verbose.dot")
        .lines()
        .filter(|l| !l.contains(" -> "))
        .map(|l| format!("{l}\n"))
        .collect();
    let f = analyse_text(&racy).expect("dump");
    assert_eq!((f.certain(), f.possible()), (1, 6));
    assert_eq!((f.exit_code(false), f.exit_code(true)), (1, 1));
    let text = f.text("racy.dot", &[], false);
    assert!(
        text.contains(
            "\nhazards: 1 certain, 6 possible (possible ones do not fail; --strict fails on them)\n"
        ),
        "{text}"
    );
}

#[test]
fn only_certain_hazards_keep_the_short_summary_line() {
    let f = analyse_text(fixtures::fixture("attention-racy.json")).expect("JSON");
    let text = f.text("attention-racy.json", &[], false);
    assert!(
        text.contains("\nhazards: 2\n  1. read-after-write on 'q'"),
        "{text}"
    );
    assert_eq!(text, f.text("attention-racy.json", &[], true));
    assert_eq!((f.exit_code(false), f.exit_code(true)), (1, 1));
}

#[test]
fn an_unjudged_pair_is_a_note_not_a_hazard() {
    let f = analyse_text(fixtures::fixture("torch/torch-index-put-racy.dot")).expect("dump");
    assert_eq!((f.certain(), f.possible(), f.unjudged()), (0, 0, 1));
    assert_eq!((f.exit_code(false), f.exit_code(true)), (0, 0));
    let text = f.text("torch-index-put-racy.dot", &[], false);
    assert_eq!(
        summary_line(&text),
        "hazards: none found; 1 unordered pair(s) with kernels not judged (see the notes)"
    );
    let note = "1 unordered pair(s) of nodes that both run kernels (kernel nodes, or child graphs \
                and conditionals holding kernels) cannot be judged from a dump: not counted as \
                hazards";
    assert_eq!(f.notes.last().map(String::as_str), Some(note));
    assert!(text.ends_with(&format!("\nnote: {note}\n")), "{text}");
}

#[test]
fn a_hazard_inside_a_conditional_body_is_found_and_its_kernels_are_counted() {
    let f = analyse_text(CONDITIONAL).expect("JSON");
    assert_eq!(f.format, Format::Json);
    assert_eq!(
        f.text("step.json", &["wrote DOT to step.dot".into()], false),
        "step.json (graphsmith JSON)
graph 'step'
  nodes   1
  edges   0
  depth   1
  width   1
  roots   1
  leaves  1
  kinds   conditional 1
critical path (1 nodes): loop
memory: 2 accesses by 2 nodes in 2 graph(s)

hazards: 1
  1. read-after-write on 'x' (0x1000) bytes [0, 128)
     'produce' (n0) writes, 'consume' (n1) reads; no path orders them
     in graph 'step' > node 'loop' (n0) > body 0 graph 'decode'
     fix: add edge produce -> consume (n0 -> n1)
redundant edges: none
note: 1 kernel node(s) have no known memory accesses (the JSON lists none): their hazards \
cannot be checked; graphsmith JSON from the runtime or a live read-back has them
note: wrote DOT to step.dot
"
    );
}

#[test]
fn a_live_graph_counts_the_kernels_of_conditional_bodies_in_its_note() {
    let graph = Graph::from_json(CONDITIONAL).expect("JSON");
    let f = analyse_graph(graph, Format::Live).expect("a graph without a cycle");
    assert_eq!(f.certain(), 1);
    assert_eq!(
        f.notes,
        [
            "1 kernel node(s) have no known memory accesses (no 8-byte word of their arguments, \
          struct parameters included, points into a known allocator block or device \
          allocation): their hazards cannot be checked"
        ]
    );
    assert!(f
        .text("torch.cuda.CUDAGraph", &[], false)
        .starts_with("torch.cuda.CUDAGraph (live graph read back from the driver)\n"));
}

#[test]
fn json_counts_certain_and_possible_hazards_with_the_exit_code() {
    let f = analyse_text(fixtures::fixture("runtime-api/memcpy3d-racy.dot")).expect("dump");
    for strict in [false, true] {
        let json: serde_json::Value =
            serde_json::from_str(&f.json("memcpy3d-racy.dot", &[], strict)).expect("JSON");
        assert_eq!(
            json["hazard_counts"],
            serde_json::json!({"certain": 0, "possible": 2})
        );
        assert_eq!(json["strict"], strict);
        assert_eq!(json["exit_code"], u8::from(strict));
        assert_eq!(json["format"], "driver_dot");
        assert_eq!(json["hazards"].as_array().map(Vec::len), Some(2));
        assert_eq!(json["notes"].as_array().map(Vec::len), Some(1));
    }
}

#[test]
fn input_errors_name_the_line_and_a_missing_file_is_a_read_error() {
    let err = analyse_text("\n\nhello\n").unwrap_err();
    assert!(matches!(err, DoctorError::Input(_)));
    assert_eq!(
        err.to_string(),
        "line 3: neither graphsmith JSON (starts with '{') nor a DOT dump (starts with 'digraph')"
    );
    let err = analyse_text("{\n  \"label\": \"g\",\n  \"nodes\": [,]\n}\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "graph JSON, line 3, column 13: expected value"
    );
    let err = analyse_file(std::path::Path::new("/nonexistent/graph.json")).unwrap_err();
    assert!(matches!(err, DoctorError::Read(_)));
    assert!(err.to_string().starts_with("cannot read: "), "{err}");
}
