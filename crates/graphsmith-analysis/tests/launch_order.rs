//! Races across graphs over launch sequences: planted missing waits found once, their fixed
//! twins clean, every kind of order (stream, signal, host) respected; the report's text.

use graphsmith_analysis::doctor::analyse_launches_text;
use graphsmith_analysis::launch_order::{
    check, Checker, GraphInfo, LaunchSequence, Named, NodeInfo, Op, SignalUse,
};
use graphsmith_model::{Access, AccessMode};

const X: u64 = 0x7000_0000;

fn access(buffer: u64, label: &str, offset: u64, len: u64, mode: AccessMode) -> Access {
    Access {
        buffer,
        label: label.into(),
        offset,
        len,
        mode,
    }
}

fn node(label: &str, line: &str, accesses: Vec<Access>) -> NodeInfo {
    NodeInfo {
        label: label.into(),
        line: Some(line.into()),
        accesses,
    }
}

fn use_of(signal: u64, node: &str) -> SignalUse {
    SignalUse {
        signal,
        node: node.into(),
        line: None,
    }
}

/// A producer (graph 1) writing all of `x`, a consumer (graph 2) reading it, on streams 1 and 2;
/// the producer records signal 9 when `record`, the consumer waits on it when `wait`.
fn producer_consumer(record: bool, wait: bool) -> LaunchSequence {
    let producer = GraphInfo {
        id: 1,
        label: "producer".into(),
        nodes: vec![
            node(
                "fill",
                "src/main.rs:10:5",
                vec![access(X, "x", 0, 4096, AccessMode::Write)],
            ),
            node("ready", "src/main.rs:11:5", vec![]),
        ],
        records: if record {
            vec![use_of(9, "ready")]
        } else {
            vec![]
        },
        waits: vec![],
    };
    let consumer = GraphInfo {
        id: 2,
        label: "consumer".into(),
        nodes: vec![
            node("after-ready", "src/main.rs:20:5", vec![]),
            node(
                "sum",
                "src/main.rs:21:5",
                vec![access(X, "x", 1024, 1024, AccessMode::Read)],
            ),
        ],
        records: vec![],
        waits: if wait {
            vec![use_of(9, "after-ready")]
        } else {
            vec![]
        },
    };
    LaunchSequence {
        streams: vec![
            Named {
                id: 1,
                label: "copy".into(),
            },
            Named {
                id: 2,
                label: "compute".into(),
            },
        ],
        signals: vec![Named {
            id: 9,
            label: "x-ready".into(),
        }],
        graphs: vec![producer, consumer],
        ops: vec![launch(1, 1), launch(2, 2)],
        ..LaunchSequence::default()
    }
}

fn launch(graph: u64, stream: u64) -> Op {
    Op::Launch {
        graph,
        stream,
        line: Some(format!("src/main.rs:{}:9", 30 + graph)),
    }
}

#[test]
fn a_planted_missing_wait_is_found_once_with_its_fix() {
    let mut seq = producer_consumer(true, false);
    // Launched again and again: still one race (one pair of nodes on one buffer).
    for _ in 0..3 {
        seq.ops.push(launch(1, 1));
        seq.ops.push(launch(2, 2));
    }
    let report = check(&seq);
    assert_eq!(report.races.len(), 1, "{}", report.text());
    assert_eq!(
        report.text(),
        "8 launches of 2 executables on 2 streams\n\
         cross-graph races: 1 (1 certain, 0 possible)\n\
         race 1: certain race on buffer 'x' (0x70000000), bytes 1024..2048:\n  \
         write by node 'fill' (src/main.rs:10:5) of graph 'producer' (launch #1 on stream \
         'copy', launched at src/main.rs:31:9)\n  \
         read by node 'sum' (src/main.rs:21:5) of graph 'consumer' (launch #2 on stream \
         'compute', launched at src/main.rs:32:9)\n  \
         no signal, stream or host order between the launches; missing wait: make launch #2 of \
         'consumer' wait on signal 'x-ready', which 'producer' records: a Graph::wait_for node \
         in 'consumer', or Stream::wait_for on stream 'compute' before the launch\n"
    );
}

#[test]
fn without_a_signal_the_fix_says_to_record_one() {
    let report = check(&producer_consumer(false, false));
    assert_eq!(report.races.len(), 1);
    assert_eq!(
        report.races[0].missing_wait.fix,
        "record a signal on stream 'copy' after launch #1 of 'producer' (Stream::signal, or a \
         Graph::signal node at the end of 'producer') and make stream 'compute' wait on it \
         (Stream::wait_for) before launch #2 of 'consumer'"
    );
    assert_eq!(report.races[0].missing_wait.stream, 2);
    assert_eq!(report.races[0].missing_wait.signal, None);
}

#[test]
fn the_fixed_twin_is_clean() {
    let seq = producer_consumer(true, true);
    let report = check(&seq);
    assert!(report.races.is_empty(), "{}", report.text());
    assert!(report.notes.is_empty(), "{:?}", report.notes);
}

#[test]
fn in_a_loop_the_producer_must_also_wait_for_the_consumer() {
    let mut seq = producer_consumer(true, true);
    for _ in 0..3 {
        seq.ops.push(launch(1, 1));
        seq.ops.push(launch(2, 2));
    }
    // The producer's second launch overwrites `x` while the consumer may still read it.
    let report = check(&seq);
    assert_eq!(report.races.len(), 1, "{}", report.text());
    let race = &report.races[0];
    assert_eq!((race.first.launch, race.second.launch), (2, 3));
    assert_eq!(
        (race.first.node.as_str(), race.second.node.as_str()),
        ("sum", "fill")
    );
    // Fixed: the consumer records signal 8 ("x-free"), which the producer waits on.
    seq.signals.push(Named {
        id: 8,
        label: "x-free".into(),
    });
    seq.graphs[1].records = vec![use_of(8, "sum")];
    seq.graphs[0].waits = vec![use_of(8, "fill")];
    let report = check(&seq);
    assert!(report.races.is_empty(), "{}", report.text());
    // The first launch's wait has nothing to wait for yet, and says so.
    assert_eq!(report.notes.len(), 1, "{:?}", report.notes);
    assert!(report.notes[0].ends_with("before launch #1: the wait orders nothing"));
}

#[test]
fn stream_level_signals_order_too() {
    let mut seq = producer_consumer(false, false);
    seq.ops = vec![
        launch(1, 1),
        Op::Record {
            signal: 9,
            stream: 1,
            line: None,
        },
        Op::Wait {
            signal: 9,
            stream: 2,
            line: None,
        },
        launch(2, 2),
    ];
    assert!(check(&seq).races.is_empty());
    // The record before the producer's launch orders nothing.
    seq.ops.swap(0, 1);
    assert_eq!(check(&seq).races.len(), 1);
}

#[test]
fn launches_on_one_stream_are_ordered() {
    let mut seq = producer_consumer(false, false);
    seq.ops = vec![launch(1, 1), launch(2, 1), launch(1, 1)];
    assert!(check(&seq).races.is_empty());
}

#[test]
fn host_synchronisations_order() {
    let syncs = [
        Op::SyncStream {
            stream: 1,
            line: None,
        },
        Op::SyncContext { line: None },
        Op::SyncSignal {
            signal: 9,
            line: None,
        },
        Op::SyncGraph {
            graph: 1,
            line: None,
        },
    ];
    for sync in syncs {
        // The producer records signal 9, which SyncSignal waits for.
        let mut seq = producer_consumer(true, false);
        seq.ops = vec![launch(1, 1), sync.clone(), launch(2, 2)];
        let report = check(&seq);
        assert!(report.races.is_empty(), "{sync:?}: {}", report.text());
    }
    // Waiting for the other stream orders nothing.
    let mut seq = producer_consumer(false, false);
    seq.ops = vec![
        launch(1, 1),
        Op::SyncStream {
            stream: 2,
            line: None,
        },
        launch(2, 2),
    ];
    assert_eq!(check(&seq).races.len(), 1);
}

#[test]
fn signal_chains_order_transitively() {
    // producer (stream 1) records 9; relay (stream 3) waits on 9 and records 10; consumer
    // (stream 2) waits on 10.
    let mut seq = producer_consumer(true, false);
    seq.graphs[1].waits = vec![use_of(10, "after-ready")];
    seq.graphs.push(GraphInfo {
        id: 3,
        label: "relay".into(),
        nodes: vec![node("hop", "src/main.rs:40:5", vec![])],
        records: vec![use_of(10, "hop")],
        waits: vec![use_of(9, "hop")],
    });
    seq.ops = vec![launch(1, 1), launch(3, 3), launch(2, 2)];
    let report = check(&seq);
    assert!(report.races.is_empty(), "{}", report.text());
    // Without the relay's wait, the chain is broken.
    seq.graphs[2].waits.clear();
    assert_eq!(check(&seq).races.len(), 1);
}

#[test]
fn more_nodes_on_one_buffer_are_one_race_with_a_count() {
    let mut seq = producer_consumer(false, false);
    let twice = node(
        "scale",
        "src/main.rs:12:5",
        vec![access(X, "x", 0, 4096, AccessMode::ReadWrite)],
    );
    seq.graphs[0].nodes.push(twice);
    let report = check(&seq);
    assert_eq!(report.races.len(), 1, "{}", report.text());
    assert_eq!(report.races[0].more_pairs, 1);
    assert!(report
        .text()
        .contains("\n  and 1 more pair of nodes of these executables on this buffer\n"));
}

#[test]
fn reads_and_disjoint_bytes_do_not_race() {
    let mut seq = producer_consumer(false, false);
    seq.graphs[0].nodes[0].accesses[0].mode = AccessMode::Read;
    assert!(check(&seq).races.is_empty());
    let mut seq = producer_consumer(false, false);
    seq.graphs[1].nodes[1].accesses[0].offset = 4096;
    assert!(check(&seq).races.is_empty());
}

#[test]
fn an_unknown_direction_is_a_possible_race() {
    let mut seq = producer_consumer(false, false);
    seq.graphs[1].nodes[1].accesses[0].mode = AccessMode::Unknown;
    let report = check(&seq);
    assert_eq!((report.certain(), report.possible()), (0, 1));
}

#[test]
fn a_wait_on_a_signal_nothing_recorded_is_noted() {
    let mut seq = producer_consumer(false, true);
    let report = check(&seq);
    assert_eq!(report.races.len(), 1);
    assert_eq!(
        report.notes,
        [
            "node 'after-ready' of graph 'consumer' waits on signal 'x-ready', which nothing \
          recorded before launch #2: the wait orders nothing"
        ]
    );
    seq.ops.insert(
        1,
        Op::Wait {
            signal: 9,
            stream: 2,
            line: Some("src/main.rs:50:5".into()),
        },
    );
    assert_eq!(
        check(&seq).notes[0],
        "stream 'compute' waits on signal 'x-ready' at src/main.rs:50:5, which nothing \
         recorded before: the wait orders nothing"
    );
}

#[test]
fn asking_about_a_launch_does_not_record_it() {
    let seq = producer_consumer(false, false);
    let mut checker = Checker::new();
    for g in &seq.graphs {
        checker.add_graph(g.clone());
    }
    assert!(checker.push(&launch(1, 1)).is_empty());
    assert_eq!(checker.races_of_launch(2, 2, None).len(), 1);
    assert_eq!(checker.races_of_launch(2, 2, None).len(), 1);
    assert_eq!(checker.report().launches, 1);
    assert_eq!(checker.push(&launch(2, 2)).len(), 1);
    // Reported once.
    assert!(checker.races_of_launch(2, 2, None).is_empty());
}

#[test]
fn the_file_format_round_trips_and_names_what_is_wrong() {
    let seq = producer_consumer(true, true);
    let text = seq.to_json();
    assert!(text.contains("\"format\": \"graphsmith-launches\""));
    assert!(text.contains("\"op\": \"launch\""));
    assert_eq!(LaunchSequence::from_json(&text).unwrap(), seq);
    let other = text.replace("graphsmith-launches", "something-else");
    assert_eq!(
        LaunchSequence::from_json(&other).unwrap_err(),
        "format 'something-else' is not 'graphsmith-launches' (a graph file? run `graphsmith \
         doctor FILE` without --launches)"
    );
    let newer = text.replace("\"version\": 1", "\"version\": 2");
    assert_eq!(
        LaunchSequence::from_json(&newer).unwrap_err(),
        "version 2 of 'graphsmith-launches' is not known (this graphsmith reads version 1)"
    );
    let broken = "{\n  \"format\": \"graphsmith-launches\",\n  \"version\": 1,\n  \"ops\": [{\"op\": \"jump\"}]\n}";
    let e = LaunchSequence::from_json(broken).unwrap_err();
    assert!(e.starts_with("line 4, column "), "{e}");
    assert!(e.contains("unknown variant `jump`"), "{e}");
}

#[test]
fn the_doctor_fails_on_a_certain_race_and_passes_the_twin() {
    let racy = analyse_launches_text(&producer_consumer(true, false).to_json()).unwrap();
    assert_eq!(racy.exit_code(false), 1);
    let text = racy.text("seq.json", false);
    assert!(
        text.starts_with("seq.json: launch sequence\n2 launches"),
        "{text}"
    );
    assert!(
        text.ends_with("verdict: fails (certain races fail)\n"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&racy.json("seq.json", false)).unwrap();
    assert_eq!(json["race_counts"]["certain"], 1);
    assert_eq!(json["races"][0]["first"]["node"], "fill");
    assert_eq!(json["races"][0]["second"]["graph_label"], "consumer");
    assert_eq!(json["exit_code"], 1);
    let clean = analyse_launches_text(&producer_consumer(true, true).to_json()).unwrap();
    assert_eq!(clean.exit_code(true), 0);
    assert!(analyse_launches_text("{\"nodes\": []}").is_err());
}
