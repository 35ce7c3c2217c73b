//! `graphsmith doctor` on the driver-dump fixtures and graphsmith JSON: the full text and JSON
//! output (snapshots), the exit codes, errors naming the line, DOT and SVG output.

use std::path::{Path, PathBuf};
use std::process::Command;

const FIXTURES: &str = "../graphsmith-model/tests/fixtures/driver-dot";

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `graphsmith doctor ARGS` in the crate's folder, with `PATH` when given.
fn doctor_with_path(args: &[&str], path: Option<&Path>) -> Run {
    // GRAPHSMITH_BIN: the binary when the tests run away from the build tree (the GPU machine).
    let bin = std::env::var("GRAPHSMITH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_graphsmith").to_string());
    let mut cmd = Command::new(bin);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("doctor")
        .args(args);
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    let out = cmd.output().expect("run graphsmith");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn doctor(args: &[&str]) -> Run {
    doctor_with_path(args, None)
}

fn fixture(name: &str) -> String {
    format!("{FIXTURES}/{name}")
}

/// Asserts exit code and full stdout of `doctor FIXTURE [args]`.
fn check(name: &str, args: &[&str], code: i32, expected: &str) {
    let file = fixture(name);
    let mut all = vec![file.as_str()];
    all.extend_from_slice(args);
    let run = doctor(&all);
    assert_eq!(
        run.stdout, expected,
        "\n--- stdout of {name} ---\n{}\n--- stderr ---\n{}",
        run.stdout, run.stderr
    );
    assert_eq!(
        run.code, code,
        "exit code of {name}; stderr: {}",
        run.stderr
    );
}

/// A file in a fresh temporary folder of this test.
fn temp(test: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphsmith-doctor-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

#[test]
fn racy_attention_reports_both_hazards_and_exits_1() {
    check(
        "attention-racy.json",
        &[],
        1,
        "../graphsmith-model/tests/fixtures/driver-dot/attention-racy.json (graphsmith JSON)
graph 'attention-racy'
  nodes   4
  edges   1
  depth   2
  width   3
  roots   3
  leaves  3
  kinds   kernel 4
critical path (2 nodes): v-proj -> attention
memory: 13 accesses by 4 nodes in 1 graph(s)

hazards: 2
  1. read-after-write on 'q' (0x7f1fd5e0ce00) bytes [0, 256)
     'q-proj' (n0) writes, 'attention' (n3) reads; no path orders them
     fix: add edge q-proj -> attention (n0 -> n3)
  2. read-after-write on 'k' (0x7f1fd5e0d000) bytes [0, 256)
     'k-proj' (n1) writes, 'attention' (n3) reads; no path orders them
     fix: add edge k-proj -> attention (n1 -> n3)
redundant edges: none
",
    );
}

#[test]
fn fixed_attention_is_clean_and_exits_0() {
    check(
        "attention-fixed.json",
        &[],
        0,
        "../graphsmith-model/tests/fixtures/driver-dot/attention-fixed.json (graphsmith JSON)
graph 'attention-fixed'
  nodes   4
  edges   3
  depth   2
  width   3
  roots   3
  leaves  1
  kinds   kernel 4
critical path (2 nodes): q-proj -> attention
memory: 13 accesses by 4 nodes in 1 graph(s)

hazards: none
redundant edges: none
",
    );
}

#[test]
fn racy_attention_as_json() {
    check(
        "attention-racy.json",
        &["--json"],
        1,
        r#"{
  "critical_path": [
    {
      "id": 2,
      "label": "v-proj"
    },
    {
      "id": 3,
      "label": "attention"
    }
  ],
  "exit_code": 1,
  "file": "../graphsmith-model/tests/fixtures/driver-dot/attention-racy.json",
  "format": "json",
  "hazards": [
    {
      "buffer": 139774708993536,
      "buffer_label": "q",
      "first": {
        "id": 0,
        "label": "q-proj",
        "mode": "write"
      },
      "fix": {
        "from": 0,
        "to": 3
      },
      "graph": "graph 'attention-racy'",
      "kind": "read_after_write",
      "len": 256,
      "offset": 0,
      "path": [],
      "second": {
        "id": 3,
        "label": "attention",
        "mode": "read"
      }
    },
    {
      "buffer": 139774708994048,
      "buffer_label": "k",
      "first": {
        "id": 1,
        "label": "k-proj",
        "mode": "write"
      },
      "fix": {
        "from": 1,
        "to": 3
      },
      "graph": "graph 'attention-racy'",
      "kind": "read_after_write",
      "len": 256,
      "offset": 0,
      "path": [],
      "second": {
        "id": 3,
        "label": "attention",
        "mode": "read"
      }
    }
  ],
  "memory": {
    "accesses": 13,
    "graphs": 1,
    "nodes_with_accesses": 4
  },
  "notes": [],
  "redundant_edges": [],
  "summary": {
    "by_kind": {
      "kernel": 4
    },
    "depth": 2,
    "edges": 1,
    "label": "attention-racy",
    "leaves": 3,
    "nodes": 4,
    "roots": 3,
    "width": 3
  }
}
"#,
    );
}

#[test]
fn default_driver_dump_gives_structure_and_says_what_it_lacks() {
    check(
        "chain.dot",
        &[],
        0,
        "../graphsmith-model/tests/fixtures/driver-dot/chain.dot (cudaGraphDebugDotPrint DOT)
graph 'graph_1'
  nodes   4
  edges   3
  depth   4
  width   1
  roots   1
  leaves  1
  kinds   kernel 2, memcpy 1, memset 1
critical path (4 nodes): memset#0 -> gs_axpy_f32#1 -> gs_add_scalar_f32#2 -> memcpy#3
memory: 0 accesses by 0 nodes in 1 graph(s)

hazards: none
redundant edges: none
note: 2 kernel node(s) have no known memory accesses (a DOT dump does not hold kernel \
arguments): their hazards cannot be checked; graphsmith JSON from the runtime or a live \
read-back has them
note: 2 of 2 memcpy/memset node(s) have no operands: only a verbose dump \
(cudaGraphDebugDotFlagsVerbose) prints them, so their hazards cannot be checked
",
    );
}

#[test]
fn verbose_driver_dump_with_a_child_graph() {
    check(
        "kinds-verbose.dot",
        &[],
        0,
        "../graphsmith-model/tests/fixtures/driver-dot/kinds-verbose.dot (cudaGraphDebugDotPrint DOT)
graph 'graph_3'
  nodes   5
  edges   4
  depth   5
  width   1
  roots   1
  leaves  1
  kinds   child_graph 1, empty 1, event_record 1, event_wait 1, host 1
critical path (5 nodes): empty#0 -> child_graph#1 -> event_record#2 -> event_wait#3 -> host#4
memory: 0 accesses by 0 nodes in 2 graph(s)

hazards: none
redundant edges: none
note: 1 kernel node(s) have no known memory accesses (a DOT dump does not hold kernel \
arguments): their hazards cannot be checked; graphsmith JSON from the runtime or a live \
read-back has them
",
    );
}

#[test]
fn every_driver_dump_is_read_and_clean() {
    for name in ["chain", "kinds", "attention-racy", "attention-fixed"] {
        for suffix in ["", "-verbose"] {
            let file = fixture(&format!("{name}{suffix}.dot"));
            let run = doctor(&[&file]);
            assert_eq!(run.code, 0, "{file}: {}", run.stderr);
            assert!(run.stdout.contains("hazards: none\n"), "{file}");
        }
    }
    // The racy attention dump: structure only, kernels lack accesses.
    let run = doctor(&[&fixture("attention-racy-verbose.dot")]);
    assert!(run
        .stdout
        .contains("critical path (2 nodes): proj#2 -> attention#3\n"));
    assert!(run.stdout.contains("note: 4 kernel node(s)"));
}

#[test]
fn copy_and_set_race_in_a_dump_exits_1() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(fixture("chain-verbose.dot")),
    )
    .unwrap();
    // Drop the edges: the memset, the kernels and the memcpy all start at once.
    let racy: String = text
        .lines()
        .filter(|l| !l.contains(" -> "))
        .map(|l| format!("{l}\n"))
        .collect();
    let file = temp("copy-set", "racy.dot");
    std::fs::write(&file, racy).unwrap();
    let run = doctor(&[file.to_str().unwrap()]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stdout.contains(
            "hazards: 1
  1. read-after-write on '0x7f1fd5e00400' (0x7f1fd5e00400) bytes [0, 1024)
     'memset#0' (n0) writes, 'memcpy#3' (n3) reads; no path orders them
     fix: add edge memset#0 -> memcpy#3 (n0 -> n3)
"
        ),
        "{}",
        run.stdout
    );
}

#[test]
fn unreadable_input_exits_2_naming_the_line() {
    let cases = [
        (
            "bad.dot",
            "digraph dot {\nsubgraph cluster_1 {\n\"graph_1_node_0\"[label=\"0\nEMPTY\n\"];\n\"graph_1_node_0\" -> ;\n}\n}\n",
            "driver DOT, line 6: expected a node name, found ';'",
        ),
        (
            "bad.json",
            "{\n  \"label\": \"g\",\n  \"nodes\": [,]\n}\n",
            "graph JSON, line 3, column 13: expected value",
        ),
        (
            "notes.txt",
            "\n\nhello\n",
            "line 3: neither graphsmith JSON (starts with '{') nor a DOT dump (starts with 'digraph')",
        ),
    ];
    for (name, text, message) in cases {
        let file = temp("unreadable", name);
        std::fs::write(&file, text).unwrap();
        let run = doctor(&[file.to_str().unwrap()]);
        assert_eq!(run.code, 2, "{name}");
        assert_eq!(run.stdout, "", "{name}");
        assert_eq!(
            run.stderr,
            format!("error: {}: {message}\n", file.display()),
            "{name}"
        );
    }
    let run = doctor(&["/nonexistent/graph.json"]);
    assert_eq!(run.code, 2);
    assert!(run
        .stderr
        .starts_with("error: /nonexistent/graph.json: cannot read: "));
}

#[test]
fn dot_output_highlights_hazards() {
    let out = temp("dot-output", "racy.dot");
    let run = doctor(&[
        &fixture("attention-racy.json"),
        "--dot",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1);
    assert!(run
        .stdout
        .ends_with(&format!("note: wrote DOT to {}\n", out.display())));
    let dot = std::fs::read_to_string(&out).unwrap();
    assert!(dot.contains("n0 -> n3 [color=red, style=dashed];"), "{dot}");
    assert!(dot.contains("n1 -> n3 [color=red, style=dashed];"), "{dot}");
    assert!(dot.contains("n2 -> n3;"), "{dot}");
}

#[test]
fn svg_without_graphviz_writes_dot_and_says_so() {
    let svg = temp("svg-missing", "racy.svg");
    let empty = svg.parent().unwrap().join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let run = doctor_with_path(
        &[
            &fixture("attention-racy.json"),
            "--svg",
            svg.to_str().unwrap(),
        ],
        Some(&empty),
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let fallback = svg.with_extension("dot");
    assert!(
        run.stdout.ends_with(&format!(
            "note: Graphviz `dot` not found: install graphviz for --svg; wrote DOT to {} instead\n",
            fallback.display()
        )),
        "{}",
        run.stdout
    );
    assert!(std::fs::read_to_string(fallback)
        .unwrap()
        .contains("style=dashed"));
}

#[cfg(unix)]
#[test]
fn svg_runs_graphviz_dot() {
    use std::os::unix::fs::PermissionsExt;
    // A stand-in `dot` that copies its input to the `-o` file, so the test needs no Graphviz.
    let svg = temp("svg-fake", "racy.svg");
    let bin = svg.parent().unwrap().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("dot");
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$1\" = -Tsvg ] && [ \"$2\" = -o ] || exit 3\ncat > \"$3\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/bin:/usr/bin", bin.display());
    let run = doctor_with_path(
        &[
            &fixture("attention-fixed.json"),
            "--svg",
            svg.to_str().unwrap(),
        ],
        Some(Path::new(&path)),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run
        .stdout
        .ends_with(&format!("note: wrote SVG to {}\n", svg.display())));
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .starts_with("digraph \"attention-fixed\""));
}
