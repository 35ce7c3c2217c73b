//! From the event log to what each graph cost (`--graphs`), per process.
//!
//! A graph is a row from the call that began it: a capture (`cuStreamBeginCapture*`, numbered
//! as in the main report) or a graph built without capture (`cuGraphCreate`). Each row gets:
//! - its wall times: capture (the begin call's entry to the end call's exit), every
//!   instantiation of it and every upload of those executables (each driver call's entry to
//!   exit);
//! - its nodes by kind (read back at its first instantiation);
//! - the device memory allocated while it was captured: the driver allocations
//!   (`cuMemAlloc_v2`, `cuMemAllocPitch_v2`, `cuMemAllocManaged`, `cuMemCreate`) made by the
//!   capturing thread between the begin and the end event (for PyTorch, the new segments of the
//!   graph's private pool), plus the bytes of its memory-allocation nodes. Allocations by other
//!   threads during the capture are listed apart and not counted;
//! - its replays (`cuGraphLaunch` of its executables) and their mean device time, from CUPTI's
//!   graph trace records.
//!
//! An instantiation belongs to the latest row that produced its graph handle before it (handles
//! are reused once a graph is destroyed); an instantiation of a graph from neither (a runtime
//! call CUPTI reported without a driver call, a clone) is a row of its own.

use std::collections::BTreeMap;

use super::cost::{
    GraphCost, GraphCosts, Instantiation, Made, Memory, ProcessCosts, Totals, Where,
};
use super::event::{DeviceTimes, GraphAlloc, GraphCall, GraphCallKind, GraphEvent, GraphLaunches};
use crate::event::{user_frame, Begin, End, Event, Exit, Instantiate};

impl GraphCosts {
    /// Builds the costs of every process of a log, in the order processes first appear.
    pub fn build(events: &[Event]) -> GraphCosts {
        let mut order: Vec<u32> = Vec::new();
        let mut by_pid: BTreeMap<u32, Vec<&Event>> = BTreeMap::new();
        for e in events {
            let pid = e.pid();
            if !by_pid.contains_key(&pid) {
                order.push(pid);
            }
            by_pid.entry(pid).or_default().push(e);
        }
        let processes = order
            .into_iter()
            .map(|pid| process(pid, &by_pid[&pid]))
            .filter(|p| !p.graphs.is_empty())
            .collect();
        GraphCosts { processes }
    }
}

/// A row being built.
struct Row {
    cost: GraphCost,
    /// The seq from which its graph handle exists (end or create), for instantiations.
    made_at: u64,
    /// The capture window: seq of the begin event to the end event, on `cost.thread`.
    window: Option<(u64, u64)>,
    first_call: u64,
    last_call: u64,
}

fn end_of(c: &GraphCall) -> u64 {
    c.start_ns.saturating_add(c.dur_ns)
}

#[derive(Default)]
struct Log<'a> {
    exe: Option<String>,
    begins: Vec<&'a Begin>,
    ends: Vec<&'a End>,
    instantiations: Vec<&'a Instantiate>,
    calls: Vec<&'a GraphCall>,
    allocs: Vec<&'a GraphAlloc>,
    launches: Option<&'a GraphLaunches>,
    exit: Option<&'a Exit>,
}

fn split<'a>(events: &[&'a Event]) -> Log<'a> {
    let mut log = Log::default();
    for e in events {
        match e {
            Event::Start(s) => log.exe = Some(s.exe.clone()),
            Event::Begin(b) => log.begins.push(b),
            Event::End(x) => log.ends.push(x),
            Event::Instantiate(i) => log.instantiations.push(i),
            Event::Exit(x) => log.exit = Some(x),
            Event::Graph(GraphEvent::Call(c)) => log.calls.push(c),
            Event::Graph(GraphEvent::Alloc(a)) => log.allocs.push(a),
            Event::Graph(GraphEvent::Launches(l)) => log.launches = Some(l),
            _ => {}
        }
    }
    log.calls.sort_by_key(|c| c.seq);
    log.instantiations.sort_by_key(|i| i.seq);
    log
}

fn call_of<'a>(
    calls: &[&'a GraphCall],
    kind: GraphCallKind,
    pred: impl Fn(&GraphCall) -> bool,
) -> Option<&'a GraphCall> {
    calls
        .iter()
        .rev()
        .copied()
        .find(|c| c.call == Some(kind) && pred(c))
}

fn empty_cost(number: usize, made: Made, graph: Option<u64>, thread: u32) -> GraphCost {
    GraphCost {
        rank: 0,
        number,
        made,
        graph,
        thread,
        began_at: None,
        capture_ns: None,
        tracer_ns: None,
        instantiate_ns: 0,
        upload_ns: 0,
        cost_ns: 0,
        instantiations: Vec::new(),
        nodes: BTreeMap::new(),
        node_total: 0,
        memory: Memory::default(),
        replays: 0,
        device: None,
        device_mean_ns: None,
    }
}

/// Rows for captures and for graphs built with `cuGraphCreate`, in the order they began.
fn made_rows(log: &Log) -> Vec<Row> {
    let mut rows: Vec<(u64, Row)> = Vec::new();
    for (i, b) in log.begins.iter().enumerate() {
        let end = log.ends.iter().find(|e| e.capture == b.capture);
        let begin_call = call_of(&log.calls, GraphCallKind::Begin, |c| {
            c.capture == Some(b.capture) && c.seq <= b.seq
        });
        let end_call = call_of(&log.calls, GraphCallKind::End, |c| {
            c.capture == Some(b.capture) && c.seq > b.seq
        });
        let graph = end.and_then(|e| e.graph);
        let made = Made::Capture {
            capture: i + 1,
            ended: graph.is_some(),
        };
        let mut cost = empty_cost(0, made, graph, b.thread.tid);
        cost.began_at = user_frame(&b.python)
            .map(Where::python)
            .or_else(|| begin_call.and_then(|c| Where::native(&c.backtrace)));
        if let (Some(s), Some(e)) = (begin_call, end_call) {
            let tracer = e.spent_ns.saturating_sub(s.spent_ns);
            let wall = end_of(e).saturating_sub(s.start_ns);
            cost.capture_ns = Some(wall.saturating_sub(tracer));
            cost.tracer_ns = Some(tracer);
        }
        let closed = end
            .map(|e| e.seq)
            .or(end_call.map(|c| c.seq))
            .unwrap_or(u64::MAX);
        let first_call = begin_call.map_or(b.seq, |c| c.seq);
        rows.push((
            b.seq,
            Row {
                cost,
                made_at: closed,
                window: Some((b.seq, closed)),
                first_call,
                last_call: end_call.map_or(closed, |c| c.seq),
            },
        ));
    }
    for c in log
        .calls
        .iter()
        .filter(|c| c.call == Some(GraphCallKind::Create) && c.code == 0 && c.graph.is_some())
    {
        let mut cost = empty_cost(0, Made::Built, c.graph, c.thread);
        cost.began_at = user_frame(&c.python)
            .map(Where::python)
            .or_else(|| Where::native(&c.backtrace));
        rows.push((
            c.seq,
            Row {
                cost,
                made_at: c.seq,
                window: None,
                first_call: c.seq,
                last_call: c.seq,
            },
        ));
    }
    rows.sort_by_key(|(seq, _)| *seq);
    rows.into_iter().map(|(_, r)| r).collect()
}

/// Attaches every instantiation, with its timed call, uploads and launches.
fn instantiate_rows(log: &Log, rows: &mut Vec<Row>) {
    let mut used: Vec<u64> = Vec::new();
    for inst in &log.instantiations {
        let call = call_of(&log.calls, GraphCallKind::Instantiate, |c| {
            c.seq < inst.seq
                && c.thread == inst.thread.tid
                && c.graph == Some(inst.graph)
                && (c.exec == inst.exec || inst.exec.is_none())
                && !used.contains(&c.seq)
        });
        if let Some(c) = call {
            used.push(c.seq);
        }
        let at = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.cost.graph == Some(inst.graph) && r.made_at < inst.seq)
            .max_by_key(|(_, r)| r.made_at)
            .map(|(i, _)| i);
        let row = match at {
            Some(i) => &mut rows[i],
            None => {
                let cost = empty_cost(0, Made::Unseen, Some(inst.graph), inst.thread.tid);
                let seq = call.map_or(inst.seq, |c| c.seq);
                rows.push(Row {
                    cost,
                    made_at: inst.seq,
                    window: None,
                    first_call: seq,
                    last_call: seq,
                });
                rows.last_mut().expect("just pushed")
            }
        };
        if inst.code == 0 && row.cost.nodes.is_empty() {
            row.cost.nodes = inst.nodes.clone();
            row.cost.node_total = inst.nodes.values().sum();
            if let Some(c) = call {
                row.cost.memory.nodes = c.mem_nodes;
                row.cost.memory.node_bytes = c.mem_node_bytes;
            }
        }
        if let Some(c) = call {
            row.last_call = row.last_call.max(c.seq);
        }
        let mut one = Instantiation {
            exec: inst.exec,
            code: inst.code,
            ns: call.map(|c| c.dur_ns),
            uploads: 0,
            upload_ns: 0,
            launches: 0,
            device: None,
        };
        // Uploads of this executable before it was instantiated again.
        let next = log
            .instantiations
            .iter()
            .filter(|o| o.seq > inst.seq && o.exec.is_some() && o.exec == inst.exec)
            .map(|o| o.seq)
            .min()
            .unwrap_or(u64::MAX);
        for u in log.calls.iter().filter(|u| {
            u.call == Some(GraphCallKind::Upload)
                && u.code == 0
                && u.exec.is_some()
                && u.exec == inst.exec
                && u.seq > inst.seq
                && u.seq < next
        }) {
            one.uploads += 1;
            one.upload_ns += u.dur_ns;
            row.last_call = row.last_call.max(u.seq);
        }
        launches_of(log, inst, call, &mut one);
        row.cost.instantiations.push(one);
    }
}

/// An executable's launches: from the `--graphs` exit summary (matched to the timed
/// instantiation), else the tracer's own per-handle counts.
fn launches_of(log: &Log, inst: &Instantiate, call: Option<&GraphCall>, one: &mut Instantiation) {
    let Some(exec) = inst.exec else { return };
    if let Some(l) = log.launches {
        // An instantiation that was not timed (a runtime call CUPTI reported without its driver
        // call): its launches were counted from no instantiation (0).
        let hit = match call {
            Some(c) => l.execs.iter().find(|x| x.instantiated == c.seq),
            None => l
                .execs
                .iter()
                .find(|x| x.instantiated == 0 && x.exec == exec),
        };
        if let Some(x) = hit.filter(|x| x.exec == exec) {
            one.launches = x.launches;
            one.device = x.device;
        }
        return;
    }
    // Without the summary, a handle's count covers every executable that had it: given to the
    // last instantiation only.
    let last = log
        .instantiations
        .iter()
        .filter(|o| o.exec == Some(exec))
        .map(|o| o.seq)
        .max();
    if last == Some(inst.seq) {
        if let Some(x) = log.exit {
            one.launches = x
                .graph_launches
                .iter()
                .find(|(h, _)| *h == exec)
                .map_or(0, |(_, n)| *n);
        }
    }
}

/// Allocations to the capture windows open on their thread; the rest, made while another
/// thread captured, counted apart.
fn attribute_allocations(log: &Log, rows: &mut [Row]) -> (u64, u64) {
    let (mut others, mut other_bytes) = (0, 0);
    for a in &log.allocs {
        let (mut own, mut during) = (false, false);
        for r in rows.iter_mut() {
            let Some((from, to)) = r.window else { continue };
            if !(from < a.seq && a.seq < to) {
                continue;
            }
            during = true;
            if r.cost.thread == a.thread {
                own = true;
                r.cost.memory.allocations += 1;
                r.cost.memory.allocated_bytes += a.bytes;
            } else {
                r.cost.memory.other_thread_allocations += 1;
                r.cost.memory.other_thread_bytes += a.bytes;
            }
        }
        if during && !own {
            others += 1;
            other_bytes += a.bytes;
        }
    }
    (others, other_bytes)
}

fn finish(cost: &mut GraphCost) {
    cost.instantiate_ns = cost.instantiations.iter().filter_map(|i| i.ns).sum();
    cost.upload_ns = cost.instantiations.iter().map(|i| i.upload_ns).sum();
    cost.cost_ns = cost.capture_ns.unwrap_or(0) + cost.instantiate_ns + cost.upload_ns;
    cost.replays = cost.instantiations.iter().map(|i| i.launches).sum();
    let mut device: Option<DeviceTimes> = None;
    for d in cost.instantiations.iter().filter_map(|i| i.device) {
        let t = device.get_or_insert_with(DeviceTimes::default);
        if d.timed > 0 {
            t.min_ns = if t.timed == 0 {
                d.min_ns
            } else {
                t.min_ns.min(d.min_ns)
            };
            t.max_ns = t.max_ns.max(d.max_ns);
            t.total_ns += d.total_ns;
            t.timed += d.timed;
        }
    }
    cost.device_mean_ns = device.and_then(|d| d.mean_ns());
    cost.device = device;
    let m = &mut cost.memory;
    m.total_bytes = m.allocated_bytes + m.node_bytes;
}

fn process(pid: u32, events: &[&Event]) -> ProcessCosts {
    let log = split(events);
    let mut rows = made_rows(&log);
    instantiate_rows(&log, &mut rows);
    let (others, other_bytes) = attribute_allocations(&log, &mut rows);
    for (i, r) in rows.iter_mut().enumerate() {
        r.cost.number = i + 1;
        finish(&mut r.cost);
    }
    let seq_time = |seq: u64| log.calls.iter().copied().find(|c| c.seq == seq);
    let first = rows
        .iter()
        .filter_map(|r| seq_time(r.first_call))
        .map(|c| c.start_ns)
        .min();
    let last = rows
        .iter()
        .filter_map(|r| seq_time(r.last_call))
        .map(end_of)
        .max();
    let mut graphs: Vec<GraphCost> = rows.into_iter().map(|r| r.cost).collect();
    graphs.sort_by(|a, b| {
        b.cost_ns
            .cmp(&a.cost_ns)
            .then(b.memory.total_bytes.cmp(&a.memory.total_bytes))
            .then(a.number.cmp(&b.number))
    });
    for (i, g) in graphs.iter_mut().enumerate() {
        g.rank = i + 1;
    }
    let totals = Totals {
        graphs: graphs.len(),
        capture_ns: graphs.iter().filter_map(|g| g.capture_ns).sum(),
        tracer_ns: graphs.iter().filter_map(|g| g.tracer_ns).sum(),
        instantiate_ns: graphs.iter().map(|g| g.instantiate_ns).sum(),
        upload_ns: graphs.iter().map(|g| g.upload_ns).sum(),
        cost_ns: graphs.iter().map(|g| g.cost_ns).sum(),
        span_ns: match (first, last) {
            (Some(f), Some(l)) => l.saturating_sub(f),
            _ => 0,
        },
        allocated_bytes: graphs.iter().map(|g| g.memory.allocated_bytes).sum(),
        node_bytes: graphs.iter().map(|g| g.memory.node_bytes).sum(),
        total_bytes: graphs.iter().map(|g| g.memory.total_bytes).sum(),
        nodes: graphs.iter().map(|g| g.node_total).sum(),
        replays: graphs.iter().map(|g| g.replays).sum(),
    };
    let l = log.launches;
    ProcessCosts {
        pid,
        exe: log.exe,
        graphs,
        totals,
        other_thread_allocations: others,
        other_thread_bytes: other_bytes,
        launches_recorded: l.is_some(),
        device_time_off: match l {
            Some(l) => l.device_time_off.clone(),
            None => Some("the process did not exit normally (no launch summary)".to_string()),
        },
        device_records: l.map_or(0, |l| l.records),
        device_dropped: l.map_or(0, |l| l.dropped),
        device_unmatched: l.map_or(0, |l| l.unmatched),
    }
}
