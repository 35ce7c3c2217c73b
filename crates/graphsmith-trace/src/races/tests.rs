//! The pure half of races across graphs: read-back models to the sequence, checked as the
//! traced process issues it, without a GPU.

use graphsmith_analysis::launch_order::{self, Op};
use graphsmith_model::{Dim3, KernelArg, KernelParams, NodeKind};

use super::*;
use crate::hazard::{build, resolver, RawEdge, RawGraph, RawNode, Set2D};

const X: u64 = 0x7f00_0000_0000;
const Y: u64 = 0x7f00_1000_0000;
const EXEC_P: u64 = 0x5000;
const EXEC_C: u64 = 0x6000;
const A: u64 = 0xa00;
const B: u64 = 0xb00;
const EV: u64 = 0xe0e0;

/// A kernel with pointer arguments (8 bytes each).
fn kernel(symbol: &str, pointers: &[u64]) -> RawNode {
    RawNode::plain(NodeKind::Kernel(KernelParams {
        name: symbol.to_string(),
        grid: Dim3::linear(1),
        block: Dim3::linear(32),
        shared_mem_bytes: 0,
        args: pointers
            .iter()
            .enumerate()
            .map(|(i, p)| KernelArg {
                offset: 8 * i as u32,
                bytes: p.to_le_bytes().to_vec(),
            })
            .collect(),
        cluster: None,
    }))
}

fn chain(nodes: Vec<RawNode>) -> RawGraph {
    let edges = (1..nodes.len()).map(|i| RawEdge::plain(i - 1, i)).collect();
    RawGraph { nodes, edges }
}

fn info(raw: &RawGraph) -> GraphInfo {
    let allocations = [(X, 4096), (Y, 4096)];
    let built = build(raw, "instantiated", &mut resolver(&allocations));
    graph_info("", &built.graph)
}

/// A memset node that writes the 1,024 floats at `X` (to 7).
fn set_x() -> RawNode {
    let set = Set2D {
        dst: X,
        pitch: 0,
        value: 7,
        element_size: 4,
        width: 1024,
        height: 1,
    };
    RawNode {
        operands: vec![set.operand()],
        ..RawNode::plain(set.kind())
    }
}

/// The GPU case's graphs: the producer spins then sets `x` (a write); the consumer reads `x`
/// (`const float*`) into `y`.
fn producer() -> GraphInfo {
    let set = set_x();
    info(&chain(vec![kernel("_Z4spinx", &[]), set]))
}

fn consumer() -> GraphInfo {
    info(&chain(vec![kernel("_Z7consumePKfPf", &[X, Y])]))
}

fn launch(exec: u64, stream: u64) -> Op {
    Op::Launch {
        graph: exec,
        stream,
        line: None,
    }
}

fn recorder(keep: bool) -> Recorder {
    let mut r = Recorder::new(keep);
    let mut p = producer();
    p.label = "producer".into();
    let mut c = consumer();
    c.label = "consumer".into();
    r.instantiated(EXEC_P, p);
    r.instantiated(EXEC_C, c);
    r
}

#[test]
fn the_model_gives_each_node_its_bytes_and_the_events_of_its_event_nodes() {
    let p = producer();
    assert_eq!(p.nodes.len(), 2);
    assert!(p.nodes[0].accesses.is_empty(), "{:?}", p.nodes[0]);
    assert!(p.nodes[1].label.starts_with("n1 "), "{}", p.nodes[1].label);
    let a = &p.nodes[1].accesses[0];
    assert_eq!((a.buffer, a.offset, a.len), (X, 0, 4096));
    assert_eq!(a.mode, graphsmith_model::AccessMode::Write);
    let c = consumer();
    assert_eq!(
        c.nodes[0].accesses[0].mode,
        graphsmith_model::AccessMode::Read
    );

    let events = chain(vec![
        RawNode::plain(NodeKind::EventWait {
            event: "event 0xe0e0".into(),
        }),
        kernel("_Z7consumePKfPf", &[X, Y]),
        RawNode::plain(NodeKind::EventRecord {
            event: "event 0xf0f0".into(),
        }),
    ]);
    let e = info(&events);
    assert_eq!(e.waits.len(), 1);
    assert_eq!(
        (e.waits[0].signal, e.waits[0].node.as_str()),
        (EV, "n0 event_wait#0")
    );
    assert_eq!(e.records[0].signal, 0xf0f0);
    assert_eq!(event_handle("event 0x1f"), Some(0x1f));
    assert_eq!(event_handle(""), None);
}

#[test]
fn two_graphs_on_two_streams_without_a_wait_race_once() {
    let mut r = recorder(false);
    let mut found = Vec::new();
    for _ in 0..3 {
        found.extend(r.push(launch(EXEC_P, A)));
        found.extend(r.push(launch(EXEC_C, B)));
        r.push(Op::SyncStream {
            stream: B,
            line: None,
        });
    }
    assert_eq!(found.len(), 1, "{found:?}");
    let text = r.report().text();
    assert_eq!(
        text,
        "6 launches of 2 executables on 2 streams\n\
         cross-graph races: 1 (1 certain, 0 possible)\n\
         race 1: certain race on buffer 0x7f0000000000, bytes 0..4096:\n  \
         write by node 'n1 memset#1' of graph 'producer' (launch #1 on stream '0xa00')\n  \
         read by node 'n0 consume' of graph 'consumer' (launch #2 on stream '0xb00')\n  \
         no signal, stream or host order between the launches; missing wait: record a signal \
         on stream '0xa00' after launch #1 of 'producer' (Stream::signal, or a Graph::signal \
         node at the end of 'producer') and make stream '0xb00' wait on it (Stream::wait_for) \
         before launch #2 of 'consumer'\n"
    );
}

#[test]
fn a_record_after_the_producer_and_a_wait_before_the_consumer_order_them() {
    let mut r = recorder(false);
    for _ in 0..3 {
        assert!(r.push(launch(EXEC_P, A)).is_empty());
        r.push(Op::Record {
            signal: EV,
            stream: A,
            line: None,
        });
        r.push(Op::Wait {
            signal: EV,
            stream: B,
            line: None,
        });
        assert!(r.push(launch(EXEC_C, B)).is_empty());
        r.push(Op::SyncStream {
            stream: B,
            line: None,
        });
    }
    let report = r.report();
    assert!(report.races.is_empty(), "{}", report.text());
    assert!(report.notes.is_empty(), "{:?}", report.notes);
}

#[test]
fn a_successful_query_orders_like_a_synchronisation() {
    // The host saw the producer's stream done (cuStreamQuery returned CUDA_SUCCESS, pushed as
    // a stream synchronisation) before it launched the consumer.
    let mut r = recorder(false);
    r.push(launch(EXEC_P, A));
    r.push(Op::SyncStream {
        stream: A,
        line: None,
    });
    assert!(r.push(launch(EXEC_C, B)).is_empty());
    // An event query that succeeded: the same through the event.
    let mut r = recorder(false);
    r.push(launch(EXEC_P, A));
    r.push(Op::Record {
        signal: EV,
        stream: A,
        line: None,
    });
    r.push(Op::SyncSignal {
        signal: EV,
        line: None,
    });
    assert!(r.push(launch(EXEC_C, B)).is_empty());
}

#[test]
fn orders_before_the_first_launch_and_unknown_executables_are_left_out_with_one_note() {
    let mut r = recorder(false);
    // Before any launch: nothing is recorded, and a later wait on this event orders nothing.
    r.push(Op::Record {
        signal: EV,
        stream: A,
        line: None,
    });
    r.push(launch(0x9999, A));
    r.push(launch(EXEC_P, A));
    for _ in 0..3 {
        r.push(Op::Wait {
            signal: EV,
            stream: B,
            line: None,
        });
    }
    assert_eq!(r.push(launch(EXEC_C, B)).len(), 1);
    let report = r.report();
    assert_eq!(report.launches, 2);
    assert_eq!(
        report.notes,
        [
            "1 launches of executables that were not read back (instantiated before the tracer \
             attached, read-back failed, or updated with cuGraphExecUpdate) were not checked",
            "3 stream waits on events not recorded since the first graph launch were left out: \
             they order no launch"
        ]
    );
}

#[test]
fn a_destroyed_handle_reused_is_a_new_executable() {
    let mut r = recorder(false);
    r.forget(EXEC_C);
    r.push(launch(EXEC_P, A));
    assert!(
        r.push(launch(EXEC_C, B)).is_empty(),
        "forgotten: not checked"
    );
    let mut other = producer();
    other.label = "second producer".into();
    r.instantiated(EXEC_C, other);
    let found = r.push(launch(EXEC_C, B));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].second.graph_label, "second producer");
}

#[test]
fn the_kept_sequence_is_what_the_doctor_reads_and_finds_the_same_races() {
    let mut r = recorder(true);
    let mut found = Vec::new();
    found.extend(r.push(launch(EXEC_P, A)));
    found.extend(r.push(launch(EXEC_C, B)));
    let seq = r.sequence().expect("kept");
    let back = launch_order::LaunchSequence::from_json(&seq.to_json()).expect("reads back");
    let report = launch_order::check(&back);
    assert_eq!(report.races, found);
    assert_eq!(
        back.streams
            .iter()
            .map(|s| s.label.as_str())
            .collect::<Vec<_>>(),
        ["0xa00", "0xb00"]
    );
    assert_eq!(back.ops.len(), 2);
}

#[test]
fn a_wait_on_an_event_a_graph_records_orders_the_next_launch() {
    let mut r = Recorder::new(false);
    let set = set_x();
    let recorded = RawNode::plain(NodeKind::EventRecord {
        event: format!("event {EV:#x}"),
    });
    let mut p = info(&chain(vec![set, recorded]));
    p.label = "producer".into();
    assert_eq!(p.records.len(), 1);
    r.instantiated(EXEC_P, p);
    r.instantiated(EXEC_C, consumer());
    r.push(launch(EXEC_P, A));
    r.push(Op::Wait {
        signal: EV,
        stream: B,
        line: None,
    });
    assert!(r.push(launch(EXEC_C, B)).is_empty());
    assert!(r.report().notes.is_empty(), "{:?}", r.report().notes);
}
