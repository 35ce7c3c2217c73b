//! `graphsmith doctor` on the driver-dump fixtures and graphsmith JSON: the full text and JSON
//! output (snapshots), the exit codes with and without `--strict`, errors naming the line, DOT
//! and SVG output.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../../graphsmith-model/tests/common/driver_dot_fixtures.rs"]
mod fixtures;
#[path = "../../graphsmith-model/tests/common/manifests.rs"]
mod manifests;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `graphsmith doctor ARGS` in folder `dir`, with `PATH` when given.
fn doctor_with_path(dir: &Path, args: &[&str], path: Option<&Path>) -> Run {
    // GRAPHSMITH_BIN: the binary when the tests run away from the build tree (a machine with an NVIDIA GPU that got the staged binaries).
    let bin = std::env::var("GRAPHSMITH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_graphsmith").to_string());
    let mut cmd = Command::new(bin);
    cmd.current_dir(dir).arg("doctor").args(args);
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

fn doctor(dir: &Path, args: &[&str]) -> Run {
    doctor_with_path(dir, args, None)
}

/// Writes the embedded fixture `name` (a path under the model's `fixtures/driver-dot/`) into
/// a fresh temporary folder of `test`; returns the folder and the file's name in it.
fn staged(test: &str, name: &str) -> (PathBuf, String) {
    let base = name.rsplit('/').next().unwrap_or(name).to_string();
    let file = temp(test, &base);
    std::fs::write(&file, fixtures::fixture(name)).expect("write fixture");
    let dir = file.parent().expect("temp dir").to_path_buf();
    (dir, base)
}

/// Asserts exit code and full stdout of `doctor FIXTURE [args]`, run beside the fixture.
fn check(name: &str, args: &[&str], code: i32, expected: &str) {
    let test = format!("check-{}", name.replace('/', "-"));
    let (dir, file) = staged(&test, name);
    let mut all = vec![file.as_str()];
    all.extend_from_slice(args);
    let run = doctor(&dir, &all);
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
        "attention-racy.json (graphsmith JSON)
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
        "attention-fixed.json (graphsmith JSON)
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
  "file": "attention-racy.json",
  "format": "json",
  "hazard_counts": {
    "certain": 2,
    "possible": 0
  },
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
  "strict": false,
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
  },
  "unjudged_pairs": {
    "kernel_pairs": 0,
    "nested_pairs": 0
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
        "chain.dot (cudaGraphDebugDotPrint DOT)
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
arguments): a kernel that no path orders with a copy or set is reported as a possible hazard on \
the copy's or set's bytes; graphsmith JSON from the runtime or a live read-back has kernel accesses
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
        "kinds-verbose.dot (cudaGraphDebugDotPrint DOT)
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
arguments): a kernel that no path orders with a copy or set is reported as a possible hazard on \
the copy's or set's bytes; graphsmith JSON from the runtime or a live read-back has kernel accesses
",
    );
}

#[test]
fn every_driver_dump_is_read_and_clean() {
    for name in ["chain", "kinds", "attention-racy", "attention-fixed"] {
        for suffix in ["", "-verbose"] {
            let (dir, file) = staged("every-dump", &format!("{name}{suffix}.dot"));
            let run = doctor(&dir, &[&file]);
            assert_eq!(run.code, 0, "{file}: {}", run.stderr);
            assert!(run.stdout.contains("\nhazards: none"), "{file}");
        }
    }
    // The attention dumps: structure only; kernels on forked streams cannot be judged, and the
    // report says so rather than "hazards: none".
    let (dir, file) = staged("attention-verbose", "attention-racy-verbose.dot");
    let run = doctor(&dir, &[&file]);
    assert!(run
        .stdout
        .contains("critical path (2 nodes): proj#2 -> attention#3\n"));
    assert!(
        run.stdout.contains(
            "hazards: none found; 5 unordered pair(s) with kernels not judged (see the notes)\n"
        ),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("note: 4 kernel node(s)"));
    assert!(run.stdout.contains(
        "note: 5 unordered pair(s) of nodes that both run kernels (kernel nodes, or child graphs \
         and conditionals holding kernels) cannot be judged from a dump: not counted as hazards\n"
    ));
    let (dir, file) = staged("attention-verbose", "attention-fixed-verbose.dot");
    let run = doctor(&dir, &[&file]);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains(
        "hazards: none found; 3 unordered pair(s) with kernels not judged (see the notes)\n"
    ));
}

#[test]
fn copy_and_set_race_in_a_dump_exits_1_on_its_certain_hazard() {
    let text = fixtures::fixture("chain-verbose.dot");
    // Drop the edges: the memset, the kernels and the memcpy all start at once.
    let racy: String = text
        .lines()
        .filter(|l| !l.contains(" -> "))
        .map(|l| format!("{l}\n"))
        .collect();
    let file = temp("copy-set", "racy.dot");
    std::fs::write(&file, racy).unwrap();
    let run = doctor(file.parent().unwrap(), &["racy.dot"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    // The memset against the memcpy; each kernel against the memset and against both buffers
    // of the memcpy: 6 possible hazards.
    assert!(
        run.stdout
            .contains("\nhazards: 1 certain, 6 possible (possible ones do not fail; --strict fails on them)\n"),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.stdout
            .matches("possible (kernel memory unknown)")
            .count(),
        6
    );
    assert!(
        run.stdout.contains(
            "  3. read-after-write on '0x7f1fd5e00400' (0x7f1fd5e00400) bytes [0, 1024)
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
        let run = doctor(file.parent().unwrap(), &[file.to_str().unwrap()]);
        assert_eq!(run.code, 2, "{name}");
        assert_eq!(run.stdout, "", "{name}");
        assert_eq!(
            run.stderr,
            format!("error: {}: {message}\n", file.display()),
            "{name}"
        );
    }
    let run = doctor(&std::env::temp_dir(), &["/nonexistent/graph.json"]);
    assert_eq!(run.code, 2);
    assert!(run
        .stderr
        .starts_with("error: /nonexistent/graph.json: cannot read: "));
}

#[test]
fn dot_output_highlights_hazards() {
    let (dir, file) = staged("dot-output", "attention-racy.json");
    let out = dir.join("racy.dot");
    let run = doctor(&dir, &[&file, "--dot", out.to_str().unwrap()]);
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
    let (dir, file) = staged("svg-missing", "attention-racy.json");
    let svg = dir.join("racy.svg");
    let empty = dir.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let run = doctor_with_path(&dir, &[&file, "--svg", svg.to_str().unwrap()], Some(&empty));
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
    let (dir, file) = staged("svg-fake", "attention-fixed.json");
    let svg = dir.join("racy.svg");
    let bin = dir.join("bin");
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
        &dir,
        &[&file, "--svg", svg.to_str().unwrap()],
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

/// Every planted race of both manifests (runtime-API programs, PyTorch), through the program:
/// the racy dump reports a hazard naming both nodes (mapped from the manifest's node handles,
/// or by kind for PyTorch), the buffer and the bytes, and the fix edge joining them; it exits 1
/// when the hazard is certain (two copies or sets), and when it is only possible (a kernel
/// beside a copy or set) exits 0, and 1 with `--strict`; the fixed twin exits 0. The one race between two kernels (`torch-index-put`) cannot be seen
/// in a dump: it exits 0 and the report counts the pair as not judged.
#[test]
fn every_planted_race_is_found_and_every_fixed_twin_exits_0() {
    let mut all = manifests::cases(
        "runtime-api",
        fixtures::fixture("runtime-api/manifest.json"),
    );
    all.extend(manifests::cases(
        "torch",
        fixtures::fixture("torch/manifest.json"),
    ));
    assert_eq!(all.len(), 16);
    let copy_or_set = |s: &manifests::Side| s.kind == "memcpy" || s.kind == "memset";
    for case in &all {
        let (dir, file) = staged("manifest-racy", &case.racy);
        let run = doctor(&dir, &[&file, "--json"]);
        let report: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", case.racy, run.stdout));
        let (fdir, ffile) = staged("manifest-fixed", &case.fixed);
        let fixed = doctor(&fdir, &[&ffile]);
        assert_eq!(fixed.code, 0, "{}:\n{}", case.fixed, fixed.stdout);
        if !copy_or_set(&case.first) && !copy_or_set(&case.second) {
            assert_eq!(run.code, 0, "{}", case.name);
            assert_eq!(report["hazards"], serde_json::json!([]), "{}", case.name);
            assert_eq!(report["unjudged_pairs"]["kernel_pairs"], 1, "{}", case.name);
            assert!(
                fixed.stdout.contains("\nhazards: none\n"),
                "{}",
                fixed.stdout
            );
            continue;
        }
        let certain = copy_or_set(&case.first) && copy_or_set(&case.second);
        assert_eq!(
            run.code,
            i32::from(certain),
            "{}:\n{}",
            case.racy,
            run.stdout
        );
        let strict = doctor(&dir, &[&file, "--strict"]);
        assert_eq!(strict.code, 1, "{} --strict:\n{}", case.racy, strict.stdout);
        // The ids of the two nodes in the model.
        let dump = fixtures::fixture(&case.racy);
        let ids: Vec<u64> = match (case.first.handle, case.second.handle) {
            (Some(a), Some(b)) => [a, b]
                .iter()
                .map(|&h| manifests::node_of_handle(dump, h).expect("handle in dump") as u64)
                .collect(),
            _ => vec![0, 1], // PyTorch's dumps: the two nodes.
        };
        let found: Vec<&serde_json::Value> = report["hazards"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| {
                let mut pair = [h["first"]["id"].as_u64(), h["second"]["id"].as_u64()];
                pair.sort();
                let lo = h["buffer"].as_u64().unwrap() + h["offset"].as_u64().unwrap();
                let hi = lo + h["len"].as_u64().unwrap();
                pair == [Some(ids[0].min(ids[1])), Some(ids[0].max(ids[1]))]
                    && lo < case.overlap.1
                    && case.overlap.0 < hi
            })
            .collect();
        assert_eq!(found.len(), 1, "{}:\n{}", case.racy, run.stdout);
        let h = found[0];
        assert_eq!(h["fix"]["from"], h["first"]["id"], "{}", case.name);
        assert_eq!(h["fix"]["to"], h["second"]["id"], "{}", case.name);
        let lo = h["buffer"].as_u64().unwrap() + h["offset"].as_u64().unwrap();
        let range = (lo, lo + h["len"].as_u64().unwrap());
        if certain {
            assert_ne!(h["kind"], "possible_kernel_access", "{}", case.name);
            assert_eq!(range, case.overlap, "{}: the overlap", case.name);
        } else {
            assert_eq!(h["kind"], "possible_kernel_access", "{}", case.name);
            assert!(
                h["only_possible"]
                    .as_str()
                    .is_some_and(|w| w.starts_with("a dump holds no kernel arguments")),
                "{}",
                case.name
            );
            let side = if copy_or_set(&case.first) {
                &case.first
            } else {
                &case.second
            };
            let rows = manifests::merged(side.ranges.clone());
            assert_eq!(
                range,
                (rows[0].0, rows[rows.len() - 1].1),
                "{}: the copy's or set's bytes",
                case.name
            );
        }
    }
}

#[test]
fn runtime_api_2d_copy_and_2d_memset_race_on_two_rows() {
    // cudaMemcpy2DAsync writes bytes [32, 128) of rows 3-6 of a pitched buffer (pitch 512);
    // cudaMemset2DAsync writes bytes [64, 128) of rows 5-8: they share 64 bytes of rows 5 and 6.
    // The buffer is named by the first byte the dump shows touched (row 3, byte 32).
    check(
        "runtime-api/memcpy2d-htod-racy.dot",
        &[],
        1,
        "memcpy2d-htod-racy.dot (cudaGraphDebugDotPrint DOT)
graph 'graph_7'
  nodes   2
  edges   0
  depth   1
  width   2
  roots   2
  leaves  2
  kinds   memcpy 1, memset 1
critical path (1 nodes): memcpy#0
memory: 12 accesses by 2 nodes in 1 graph(s)

hazards: 1
  1. write-after-write on '0x7f9900802620' (0x7f9900802620) bytes [1056, 1632)
     'memcpy#0' (n0) writes, 'memset#1' (n1) writes; no path orders them
     fix: add edge memcpy#0 -> memset#1 (n0 -> n1)
redundant edges: none
",
    );
}

/// The report of `memcpy3d-racy.dot` (a 3-D copy beside a kernel: two possible hazards), with
/// `rule` the summary line's words on whether possible hazards fail.
fn memcpy3d_report(rule: &str) -> String {
    format!(
        "memcpy3d-racy.dot (cudaGraphDebugDotPrint DOT)
graph 'graph_10'
  nodes   2
  edges   0
  depth   1
  width   2
  roots   2
  leaves  2
  kinds   kernel 1, memcpy 1
critical path (1 nodes): memcpy#0
memory: 12 accesses by 1 nodes in 1 graph(s)

hazards: 0 certain, 2 possible ({rule})
  1. possible (kernel memory unknown) on '0x7f9900807208' (0x7f9900807208) bytes [0, 5184)
     'memcpy#0' (n0) reads, 'touch#1' (n1) may read or write; no path orders them
     only possible: a dump holds no kernel arguments, so whether 'touch#1' touches these bytes is unknown
     fix: add edge memcpy#0 -> touch#1 (n0 -> n1)
  2. possible (kernel memory unknown) on '0x7f990080b410' (0x7f990080b410) bytes [0, 5184)
     'memcpy#0' (n0) writes, 'touch#1' (n1) may read or write; no path orders them
     only possible: a dump holds no kernel arguments, so whether 'touch#1' touches these bytes is unknown
     fix: add edge memcpy#0 -> touch#1 (n0 -> n1)
redundant edges: none
note: 1 kernel node(s) have no known memory accesses (a DOT dump does not hold kernel \
arguments): a kernel that no path orders with a copy or set is reported as a possible hazard on \
the copy's or set's bytes; graphsmith JSON from the runtime or a live read-back has kernel accesses
"
    )
}

#[test]
fn possible_hazards_only_exit_0_and_the_summary_says_strict_fails_on_them() {
    check(
        "runtime-api/memcpy3d-racy.dot",
        &[],
        0,
        &memcpy3d_report("possible ones do not fail; --strict fails on them"),
    );
}

#[test]
fn strict_fails_on_possible_hazards_and_says_so() {
    check(
        "runtime-api/memcpy3d-racy.dot",
        &["--strict"],
        1,
        &memcpy3d_report("--strict: possible ones fail too"),
    );
}

#[test]
fn strict_changes_nothing_on_certain_hazards_or_a_clean_graph() {
    for (name, code) in [("attention-racy.json", 1), ("attention-fixed.json", 0)] {
        let (dir, file) = staged("strict-same", name);
        let plain = doctor(&dir, &[&file]);
        let strict = doctor(&dir, &[&file, "--strict"]);
        assert_eq!((plain.code, strict.code), (code, code), "{name}");
        assert_eq!(plain.stdout, strict.stdout, "{name}");
    }
    // A dump whose pairs of kernels cannot be judged has no hazard: it passes --strict too.
    let (dir, file) = staged("strict-unjudged", "torch/torch-index-put-racy.dot");
    assert_eq!(doctor(&dir, &[&file, "--strict"]).code, 0);
}

#[test]
fn json_counts_certain_and_possible_hazards_and_names_the_mode() {
    let (dir, file) = staged("json-counts", "runtime-api/memcpy3d-racy.dot");
    for (args, code) in [(vec!["--json"], 0), (vec!["--json", "--strict"], 1)] {
        let mut all = vec![file.as_str()];
        all.extend(args.iter().copied());
        let run = doctor(&dir, &all);
        assert_eq!(run.code, code, "{args:?}: {}", run.stderr);
        let report: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON report");
        assert_eq!(
            report["hazard_counts"],
            serde_json::json!({"certain": 0, "possible": 2})
        );
        assert_eq!(report["strict"], code == 1);
        assert_eq!(report["exit_code"], code);
    }
}

#[test]
fn a_race_between_two_kernels_is_counted_not_hidden() {
    // torch-index-put: add_ and index_put_ are both kernels; a dump cannot show that they
    // touch the same tensor. The report must not say a bare "hazards: none".
    check(
        "torch/torch-index-put-racy.dot",
        &[],
        0,
        "torch-index-put-racy.dot (cudaGraphDebugDotPrint DOT)
graph 'graph_7'
  nodes   2
  edges   0
  depth   1
  width   2
  roots   2
  leaves  2
  kinds   kernel 2
critical path (1 nodes): at::native::vectorized_elementwise_kernel#0
memory: 0 accesses by 0 nodes in 1 graph(s)

hazards: none found; 1 unordered pair(s) with kernels not judged (see the notes)
redundant edges: none
note: 2 kernel node(s) have no known memory accesses (a DOT dump does not hold kernel \
arguments): a kernel that no path orders with a copy or set is reported as a possible hazard on \
the copy's or set's bytes; graphsmith JSON from the runtime or a live read-back has kernel accesses
note: 1 unordered pair(s) of nodes that both run kernels (kernel nodes, or child graphs and \
conditionals holding kernels) cannot be judged from a dump: not counted as hazards
",
    );
}

#[test]
fn a_read_before_the_wait_is_named_as_what_a_programmatic_edge_leaves_unordered() {
    let json = r#"{"label": "pdl", "nodes": [
        {"id": 0, "label": "producer", "kind": "empty",
         "accesses": [{"buffer": 4096, "label": "x", "offset": 0, "len": 64, "mode": "write"}]},
        {"id": 1, "label": "consumer", "kind": "empty",
         "accesses_before_wait": [{"buffer": 4096, "label": "x", "offset": 0, "len": 64, "mode": "read"}]}
      ], "edges": [{"from": 0, "to": 1, "type": "programmatic"}]}"#;
    let file = temp("pdl", "pdl.json");
    std::fs::write(&file, json).expect("write");
    let run = doctor(file.parent().expect("dir"), &["pdl.json"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stdout.contains("  edges   1 (programmatic 1)\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(
            "     'producer' (n0) writes, 'consumer' (n1) reads; only programmatic or \
             launch-order paths join them, which do not order these accesses\n     \
             fix: make the edge full: producer -> consumer (n0 -> n1)\n"
        ),
        "{}",
        run.stdout
    );
}

#[test]
fn a_trigger_after_the_wait_in_json_orders_what_came_before_it() {
    // The decoder's pattern: `advance` writes the position, `qkv` triggers its dependents only
    // after its own wait, `attention` reads the position before its wait.
    let json = |late: bool| {
        format!(
            r#"{{"label": "late", "nodes": [
        {{"id": 0, "label": "advance", "kind": "empty",
         "accesses": [{{"buffer": 4096, "label": "pos", "offset": 0, "len": 4, "mode": "write"}}]}},
        {{"id": 1, "label": "qkv", "kind": "empty", "triggers_after_wait": {late}}},
        {{"id": 2, "label": "attention", "kind": "empty",
         "accesses_before_wait": [{{"buffer": 4096, "label": "pos", "offset": 0, "len": 4, "mode": "read"}}]}}
      ], "edges": [{{"from": 0, "to": 1, "type": "programmatic"}},
                   {{"from": 1, "to": 2, "type": "programmatic"}}]}}"#
        )
    };
    for (late, code) in [(true, 0), (false, 1)] {
        let file = temp(&format!("late-{late}"), "late.json");
        std::fs::write(&file, json(late)).expect("write");
        let run = doctor(file.parent().expect("dir"), &["late.json"]);
        assert_eq!(run.code, code, "late {late}: {}{}", run.stdout, run.stderr);
        if !late {
            assert!(
                run.stdout
                    .contains("'advance' (n0) writes, 'attention' (n2) reads"),
                "{}",
                run.stdout
            );
        }
    }
}
