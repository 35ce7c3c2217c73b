//! The launch sequence of a traced process, checked as it happens: executables keyed by their
//! `CUgraphExec` handle (a handle reused after `cuGraphExecDestroy` is a new executable), the
//! driver's streams and events as the sequence's streams and signals, and the analysis crate's
//! [`Checker`] over it. Pure bookkeeping (no CUDA), so that it is tested without a GPU; the
//! injection library feeds it (`src/inject/races.rs`).

use std::collections::{HashMap, HashSet};

use graphsmith_analysis::launch_order::{
    Checker, GraphInfo, LaunchReport, LaunchSequence, Named, NodeInfo, Op, Race, SignalUse,
};
use graphsmith_model::{Graph, Node, NodeKind};

/// Operations kept for `--launches-out` at most; past it the file is cut (the check goes on).
pub const MAX_KEPT: usize = 1_000_000;

/// `CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`, and NULL.
fn stream_label(stream: u64) -> String {
    match stream {
        0 | 1 => "legacy stream".to_string(),
        2 => "per-thread stream".to_string(),
        s => format!("{s:#x}"),
    }
}

/// The event handle of a read-back event node's label (`event 0x...`).
pub fn event_handle(label: &str) -> Option<u64> {
    u64::from_str_radix(label.strip_prefix("event 0x")?, 16).ok()
}

fn node_label(path: &str, i: usize, n: &Node) -> String {
    format!("{path}n{i} {}", n.label)
}

fn signals(info: &mut GraphInfo, path: &str, graph: &Graph) {
    for (i, n) in graph.nodes.iter().enumerate() {
        let use_of = |event: &str| {
            event_handle(event).map(|signal| SignalUse {
                signal,
                node: node_label(path, i, n),
                line: None,
            })
        };
        match &n.kind {
            NodeKind::EventRecord { event } => info.records.extend(use_of(event)),
            NodeKind::EventWait { event } => info.waits.extend(use_of(event)),
            NodeKind::ChildGraph { graph } => signals(info, &format!("{path}n{i}/"), graph),
            _ => {}
        }
    }
}

/// What the check needs of a read-back model: each node with the bytes it touches (a child
/// graph node's include its children's), and the events its record and wait nodes use (child
/// graphs' included). `id` is set by [`Recorder::instantiated`].
pub fn graph_info(label: &str, graph: &Graph) -> GraphInfo {
    let mut info = GraphInfo {
        id: 0,
        label: label.to_string(),
        nodes: graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| NodeInfo {
                label: node_label("", i, n),
                line: None,
                accesses: n.accesses.iter().filter(|a| a.len > 0).cloned().collect(),
            })
            .collect(),
        ..GraphInfo::default()
    };
    signals(&mut info, "", graph);
    info
}

/// The process's sequence so far and what the check found.
pub struct Recorder {
    checker: Checker,
    /// Executable handle -> the id of its latest instantiation.
    execs: HashMap<u64, u64>,
    /// Executable id -> the events its record nodes record.
    records: HashMap<u64, Vec<u64>>,
    next_id: u64,
    /// Nothing is recorded before the first launch of a described executable: an order given
    /// before it orders no launch.
    launched: bool,
    streams: HashSet<u64>,
    signals: HashSet<u64>,
    /// Signals recorded since the first launch: a wait on another orders nothing and is left
    /// out (counted), instead of one note per wait.
    recorded: HashSet<u64>,
    waits_skipped: u64,
    launches_unknown: u64,
    kept: Option<LaunchSequence>,
    cut: bool,
}

impl Recorder {
    /// `keep`: keep the whole sequence for `--launches-out` (at most [`MAX_KEPT`] operations).
    pub fn new(keep: bool) -> Recorder {
        Recorder {
            checker: Checker::new(),
            execs: HashMap::new(),
            records: HashMap::new(),
            next_id: 1,
            launched: false,
            streams: HashSet::new(),
            signals: HashSet::new(),
            recorded: HashSet::new(),
            waits_skipped: 0,
            launches_unknown: 0,
            kept: keep.then(LaunchSequence::default),
            cut: false,
        }
    }

    /// An executable just instantiated (or re-instantiated into a reused handle).
    pub fn instantiated(&mut self, exec: u64, mut info: GraphInfo) {
        info.id = self.next_id;
        self.next_id += 1;
        self.execs.insert(exec, info.id);
        self.records
            .insert(info.id, info.records.iter().map(|r| r.signal).collect());
        for s in info.records.iter().chain(&info.waits) {
            self.signal(s.signal);
        }
        if let Some(k) = &mut self.kept {
            k.graphs.push(info.clone());
        }
        self.checker.add_graph(info);
    }

    /// An executable destroyed or updated in place: its later launches are not described.
    pub fn forget(&mut self, exec: u64) {
        self.execs.remove(&exec);
    }

    fn stream(&mut self, stream: u64) {
        if self.streams.insert(stream) {
            let label = stream_label(stream);
            self.checker.name_stream(stream, &label);
            if let Some(k) = &mut self.kept {
                k.streams.push(Named { id: stream, label });
            }
        }
    }

    fn signal(&mut self, event: u64) {
        if self.signals.insert(event) {
            let label = format!("event {event:#x}");
            self.checker.name_signal(event, &label);
            if let Some(k) = &mut self.kept {
                k.signals.push(Named { id: event, label });
            }
        }
    }

    /// One operation of the host, with `Op::Launch`'s `graph` the executable's handle. Returns
    /// the races it adds (each pair of executables and buffer once per process).
    pub fn push(&mut self, op: Op) -> Vec<Race> {
        let op = match op {
            Op::Launch {
                graph: exec,
                stream,
                line,
            } => {
                let Some(&id) = self.execs.get(&exec) else {
                    self.launches_unknown += 1;
                    return Vec::new();
                };
                self.launched = true;
                self.stream(stream);
                // Its record nodes record their events: a later wait on them orders.
                if let Some(events) = self.records.get(&id) {
                    self.recorded.extend(events.iter().copied());
                }
                Op::Launch {
                    graph: id,
                    stream,
                    line,
                }
            }
            _ if !self.launched => return Vec::new(),
            other => other,
        };
        match &op {
            Op::Record { signal, stream, .. } => {
                self.stream(*stream);
                self.signal(*signal);
                self.recorded.insert(*signal);
            }
            Op::Wait { signal, stream, .. } => {
                if !self.recorded.contains(signal) {
                    self.waits_skipped += 1;
                    return Vec::new();
                }
                self.stream(*stream);
            }
            Op::SyncStream { stream, .. } => self.stream(*stream),
            Op::SyncSignal { signal, .. } if !self.recorded.contains(signal) => return Vec::new(),
            _ => {}
        }
        if let Some(k) = &mut self.kept {
            if k.ops.len() < MAX_KEPT {
                k.ops.push(op.clone());
            } else {
                self.cut = true;
            }
        }
        self.checker.push(&op)
    }

    /// Everything found so far, with the tracer's own notes after the check's.
    pub fn report(&self) -> LaunchReport {
        let mut r = self.checker.report();
        if self.launches_unknown > 0 {
            r.notes.push(format!(
                "{} launches of executables that were not read back (instantiated before the \
                 tracer attached, read-back failed, or updated with cuGraphExecUpdate) were \
                 not checked",
                self.launches_unknown
            ));
        }
        if self.waits_skipped > 0 {
            r.notes.push(format!(
                "{} stream waits on events not recorded since the first graph launch were left \
                 out: they order no launch",
                self.waits_skipped
            ));
        }
        if self.cut {
            r.notes.push(format!(
                "the sequence written with --launches-out stops after {MAX_KEPT} operations \
                 (the check went on to the end)"
            ));
        }
        r
    }

    /// The sequence kept for `--launches-out`.
    pub fn sequence(&self) -> Option<&LaunchSequence> {
        self.kept.as_ref()
    }
}
