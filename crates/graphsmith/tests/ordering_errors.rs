//! The ordering errors' text and fixes, without a GPU: a wait on a signal nothing records (a
//! graph's wait node at launch, a stream's wait at once) and a launch refused by the launch log
//! because it would race.

use graphsmith::analysis::launch_order::{check, GraphInfo, LaunchSequence, NodeInfo, Op};
use graphsmith::model::{Access, AccessMode};
use graphsmith::{Error, ErrorKind, ObjectKind, ObjectRef, SignalWaiter, SourceLine};

const AT: SourceLine = SourceLine {
    file: "src/main.rs",
    line: 40,
    column: 9,
};

fn error(kind: ErrorKind, object: ObjectRef, op: &'static str) -> Error {
    Error {
        kind,
        object,
        op,
        at: AT,
    }
}

#[test]
fn a_graph_wait_on_a_signal_nothing_records_names_the_node_and_line() {
    let e = error(
        ErrorKind::UnrecordedSignal {
            signal: "kv-ready".into(),
            waiter: Some(Box::new(SignalWaiter {
                node: "wait-kv".into(),
                op: "Graph::wait_for",
                at: SourceLine {
                    file: "src/decode.rs",
                    line: 12,
                    column: 5,
                },
            })),
        },
        ObjectRef::new(ObjectKind::Exec, "decode#exec"),
        "Exec::launch",
    );
    assert_eq!(
        e.to_string(),
        "Exec::launch on Exec 'decode#exec' at src/main.rs:40:9: node 'wait-kv' waits on signal \
         'kv-ready' (made by Graph::wait_for at src/decode.rs:12:5), which was never recorded \
         and which no live graph, executable or stream records: the wait would order nothing"
    );
    assert_eq!(
        e.fix(),
        Some(
            "record the signal before the wait is launched: launch the executable whose graph \
             records it (Graph::signal) or call Stream::signal on the producing stream first, \
             and keep that graph or executable alive"
        )
    );
    assert_eq!(e.cuda_code(), None);
}

#[test]
fn a_stream_wait_on_a_signal_never_recorded_says_so() {
    let e = error(
        ErrorKind::UnrecordedSignal {
            signal: "kv-ready".into(),
            waiter: None,
        },
        ObjectRef::new(ObjectKind::Stream, "decode"),
        "Stream::wait_for",
    );
    assert_eq!(
        e.to_string(),
        "Stream::wait_for on Stream 'decode' at src/main.rs:40:9: the stream would wait on \
         signal 'kv-ready', which was never recorded: the wait would order nothing"
    );
}

#[test]
fn a_refused_racing_launch_names_both_nodes_and_the_missing_wait() {
    let node = |label: &str, mode| NodeInfo {
        label: label.into(),
        line: None,
        accesses: vec![Access {
            buffer: 0x2000,
            label: "kv".into(),
            offset: 0,
            len: 64,
            mode,
        }],
    };
    let graph = |id, label: &str, n| GraphInfo {
        id,
        label: label.into(),
        nodes: vec![n],
        ..GraphInfo::default()
    };
    let seq = LaunchSequence {
        graphs: vec![
            graph(1, "prefill#exec", node("append-kv", AccessMode::Write)),
            graph(2, "decode#exec", node("attend", AccessMode::Read)),
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
    };
    let race = check(&seq).races.remove(0);
    let e = error(
        ErrorKind::CrossGraphRace(Box::new(race)),
        ObjectRef::new(ObjectKind::Exec, "decode#exec"),
        "Exec::launch",
    );
    assert_eq!(
        e.to_string(),
        "Exec::launch on Exec 'decode#exec' at src/main.rs:40:9: the launch would race: certain \
         race on buffer 'kv' (0x2000), bytes 0..64:\n  \
         write by node 'append-kv' of graph 'prefill#exec' (launch #1 on stream 'stream 1')\n  \
         read by node 'attend' of graph 'decode#exec' (launch #2 on stream 'stream 2')\n  \
         no signal, stream or host order between the launches; missing wait: record a signal on \
         stream 'stream 1' after launch #1 of 'prefill#exec' (Stream::signal, or a Graph::signal \
         node at the end of 'prefill#exec') and make stream 'stream 2' wait on it \
         (Stream::wait_for) before launch #2 of 'decode#exec'"
    );
    assert!(e.fix().unwrap().starts_with("order the two launches"));
}
