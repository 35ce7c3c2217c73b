//! `graphsmith doctor --launches`: a launch sequence with a missing wait fails (exit 1, the
//! full report), its fixed twin passes, `--json` carries the same race, bad input is exit 2.

use std::path::PathBuf;
use std::process::Command;

use graphsmith::analysis::launch_order::{
    GraphInfo, LaunchSequence, Named, NodeInfo, Op, SignalUse,
};
use graphsmith::model::{Access, AccessMode};

fn sequence(wait: bool) -> LaunchSequence {
    let x = |mode| Access {
        buffer: 0x1000,
        label: "x".into(),
        offset: 0,
        len: 256,
        mode,
    };
    let node = |label: &str, accesses| NodeInfo {
        label: label.into(),
        line: Some(format!("app.rs:{}:1", label.len())),
        accesses,
    };
    let ready = SignalUse {
        signal: 5,
        node: "ready".into(),
        line: None,
    };
    LaunchSequence {
        streams: vec![
            Named {
                id: 1,
                label: "a".into(),
            },
            Named {
                id: 2,
                label: "b".into(),
            },
        ],
        signals: vec![Named {
            id: 5,
            label: "x-ready".into(),
        }],
        graphs: vec![
            GraphInfo {
                id: 1,
                label: "producer#exec".into(),
                nodes: vec![
                    node("write-x", vec![x(AccessMode::Write)]),
                    node("ready", vec![]),
                ],
                records: vec![ready.clone()],
                waits: vec![],
            },
            GraphInfo {
                id: 2,
                label: "consumer#exec".into(),
                nodes: vec![node("read-x", vec![x(AccessMode::Read)])],
                records: vec![],
                waits: if wait { vec![ready] } else { vec![] },
            },
        ],
        ops: vec![
            Op::Launch {
                graph: 1,
                stream: 1,
                line: None,
            },
            Op::Launch {
                graph: 2,
                stream: 2,
                line: None,
            },
        ],
        ..LaunchSequence::default()
    }
}

fn staged(name: &str, text: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("graphsmith-doctor-launches-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join(name);
    std::fs::write(&file, text).expect("write sequence");
    file
}

fn doctor(args: &[&str]) -> (i32, String, String) {
    // GRAPHSMITH_BIN: the binary when the tests run away from the build tree.
    let bin = std::env::var("GRAPHSMITH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_graphsmith").to_string());
    let out = Command::new(bin)
        .arg("doctor")
        .args(args)
        .output()
        .expect("run graphsmith");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_wait_fails_with_the_report_and_its_twin_passes() {
    let racy = staged("racy.json", &sequence(false).to_json());
    let racy = racy.to_str().expect("utf-8 path");
    let (code, stdout, stderr) = doctor(&["--launches", racy]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert_eq!(
        stdout,
        format!(
            "{racy}: launch sequence\n\
             2 launches of 2 executables on 2 streams\n\
             cross-graph races: 1 (1 certain, 0 possible)\n\
             race 1: certain race on buffer 'x' (0x1000), bytes 0..256:\n  \
             write by node 'write-x' (app.rs:7:1) of graph 'producer#exec' (launch #1 on stream 'a')\n  \
             read by node 'read-x' (app.rs:6:1) of graph 'consumer#exec' (launch #2 on stream 'b')\n  \
             no signal, stream or host order between the launches; missing wait: make launch #2 \
             of 'consumer#exec' wait on signal 'x-ready', which 'producer#exec' records: a \
             Graph::wait_for node in 'consumer#exec', or Stream::wait_for on stream 'b' before \
             the launch\n\
             verdict: fails (certain races fail)\n"
        )
    );
    let (code, stdout, _) = doctor(&["--launches", racy, "--json"]);
    assert_eq!(code, 1);
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON report");
    assert_eq!(json["races"][0]["missing_wait"]["signal_label"], "x-ready");
    assert_eq!(json["exit_code"], 1);

    let fixed = staged("fixed.json", &sequence(true).to_json());
    let (code, stdout, _) = doctor(&["--launches", fixed.to_str().expect("utf-8 path")]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("cross-graph races: 0 (0 certain, 0 possible)\n"),
        "{stdout}"
    );
}

#[test]
fn input_that_is_not_a_launch_sequence_is_exit_2() {
    let graph = staged(
        "graph.json",
        "{\"label\": \"g\", \"nodes\": [], \"edges\": []}",
    );
    let (code, _, stderr) = doctor(&["--launches", graph.to_str().expect("utf-8 path")]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a launch sequence"), "{stderr}");
    let seq = staged("seq.json", &sequence(true).to_json());
    let (code, _, stderr) = doctor(&[
        "--launches",
        seq.to_str().expect("utf-8 path"),
        "--dot",
        "x.dot",
    ]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("leave them out with --launches"),
        "{stderr}"
    );
}
