//! Happens-before over a launch sequence with vector clocks over streams, and the races found
//! launch by launch.
//!
//! Each stream has a clock (one counter per stream); a launch ticks its stream's counter and
//! takes the stream's clock; a record copies the stream's clock into the signal; a wait joins
//! the signal's clock into the stream's; a host synchronisation joins into the host's clock,
//! which every later operation on any stream joins first. Launch `a` happens before launch `b`
//! when `b`'s clock has reached `a`'s tick on `a`'s stream.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use graphsmith_model::Access;

use super::report::{LaunchReport, MissingWait, Race, RaceSide};
use super::{GraphInfo, Op};

type Clock = Vec<u64>;

fn join(into: &mut Clock, other: &Clock) {
    if into.len() < other.len() {
        into.resize(other.len(), 0);
    }
    for (a, b) in into.iter_mut().zip(other) {
        *a = (*a).max(*b);
    }
}

/// A graph with its accesses grouped by buffer: `(node index, access)`.
struct Indexed {
    info: GraphInfo,
    by_buffer: BTreeMap<u64, Vec<(usize, Access)>>,
}

impl Indexed {
    fn new(info: GraphInfo) -> Self {
        let mut by_buffer: BTreeMap<u64, Vec<(usize, Access)>> = BTreeMap::new();
        for (i, node) in info.nodes.iter().enumerate() {
            for a in &node.accesses {
                by_buffer.entry(a.buffer).or_default().push((i, a.clone()));
            }
        }
        Self { info, by_buffer }
    }
}

/// One launch already pushed.
struct Launch {
    number: usize,
    graph: Arc<Indexed>,
    stream: usize,
    clock: Clock,
    line: Option<String>,
}

/// The sequence so far: clocks, signals, the latest launch of each executable on each stream
/// (an earlier one on the same stream happens before it, so it races with nothing the latest
/// does not), and the races already reported (each pair of executables and buffer once).
#[derive(Default)]
pub struct Checker {
    stream_index: HashMap<u64, usize>,
    stream_ids: Vec<u64>,
    stream_labels: HashMap<u64, String>,
    signal_labels: HashMap<u64, String>,
    streams: Vec<Clock>,
    host: Clock,
    signals: HashMap<u64, Clock>,
    graphs: HashMap<u64, Arc<Indexed>>,
    launched: usize,
    latest: BTreeMap<(u64, usize), Launch>,
    /// (smaller executable id, larger one, buffer) of each race reported.
    seen: HashSet<(u64, u64, u64)>,
    races: Vec<Race>,
    notes: Vec<String>,
    graphs_launched: HashSet<u64>,
}

impl Checker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives stream `id` a label for reports.
    pub fn name_stream(&mut self, id: u64, label: &str) {
        self.stream_labels.insert(id, label.to_string());
    }

    /// Gives signal `id` a label for reports.
    pub fn name_signal(&mut self, id: u64, label: &str) {
        self.signal_labels.insert(id, label.to_string());
    }

    /// Adds (or replaces, after an update) an executable; later launches of its id use it.
    pub fn add_graph(&mut self, info: GraphInfo) {
        self.graphs.insert(info.id, Arc::new(Indexed::new(info)));
    }

    /// Whether executable `id` was added.
    pub fn knows_graph(&self, id: u64) -> bool {
        self.graphs.contains_key(&id)
    }

    fn stream(&mut self, id: u64) -> usize {
        if let Some(&i) = self.stream_index.get(&id) {
            return i;
        }
        let i = self.stream_ids.len();
        self.stream_index.insert(id, i);
        self.stream_ids.push(id);
        self.streams.push(Clock::new());
        i
    }

    fn stream_label(&self, id: u64) -> String {
        self.stream_labels
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("stream {id}"))
    }

    fn signal_label(&self, id: u64) -> String {
        self.signal_labels
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("signal {id}"))
    }

    /// The clock a launch of `graph` on stream index `s` would take now, and the notes on
    /// waits that order nothing.
    fn launch_clock(&self, graph: &Indexed, s: usize, number: usize) -> (Clock, Vec<String>) {
        let mut clock = self.streams.get(s).cloned().unwrap_or_default();
        join(&mut clock, &self.host);
        let mut notes = Vec::new();
        for w in &graph.info.waits {
            match self.signals.get(&w.signal) {
                Some(c) => join(&mut clock, c),
                None => notes.push(format!(
                    "node '{}'{} of graph '{}' waits on signal '{}', which nothing recorded \
                     before launch #{}: the wait orders nothing",
                    w.node,
                    w.line
                        .as_deref()
                        .map(|l| format!(" ({l})"))
                        .unwrap_or_default(),
                    graph.info.label,
                    self.signal_label(w.signal),
                    number
                )),
            }
        }
        if clock.len() <= s {
            clock.resize(s + 1, 0);
        }
        clock[s] += 1;
        (clock, notes)
    }

    /// The races a launch of executable `graph` on `stream` would add now, without recording
    /// the launch (the runtime asks before submitting it). An unknown executable races with
    /// nothing.
    pub fn races_of_launch(&mut self, graph: u64, stream: u64, line: Option<&str>) -> Vec<Race> {
        let s = self.stream(stream);
        let Some(g) = self.graphs.get(&graph).cloned() else {
            return Vec::new();
        };
        let (clock, _) = self.launch_clock(&g, s, self.launched + 1);
        let new = Launch {
            number: self.launched + 1,
            graph: g,
            stream: s,
            clock,
            line: line.map(str::to_string),
        };
        self.races_with_earlier(&new, &mut self.seen.clone())
    }

    fn races_with_earlier(&self, new: &Launch, seen: &mut HashSet<(u64, u64, u64)>) -> Vec<Race> {
        let mut races = Vec::new();
        for (&(gid, _), old) in &self.latest {
            if gid == new.graph.info.id {
                continue;
            }
            let tick = old.clock.get(old.stream).copied().unwrap_or(0);
            if new.clock.get(old.stream).copied().unwrap_or(0) >= tick {
                continue; // old happens before new
            }
            for (buffer, olds) in &old.graph.by_buffer {
                let Some(news) = new.graph.by_buffer.get(buffer) else {
                    continue;
                };
                let key = (
                    gid.min(new.graph.info.id),
                    gid.max(new.graph.info.id),
                    *buffer,
                );
                if seen.contains(&key) {
                    continue;
                }
                // Every pair of nodes that conflicts on this buffer: the first is named, the
                // others counted (one missing wait orders them all).
                let mut pairs = olds.iter().flat_map(|(on, oa)| {
                    news.iter()
                        .filter(move |(_, na)| {
                            oa.overlaps(na) && (oa.mode.may_write() || na.mode.may_write())
                        })
                        .map(move |(nn, na)| (*on, oa, *nn, na))
                });
                let Some((on, oa, nn, na)) = pairs.next() else {
                    continue;
                };
                seen.insert(key);
                let mut race = self.race(old, on, oa, new, nn, na);
                race.more_pairs = pairs.count();
                races.push(race);
            }
        }
        races
    }

    fn side(&self, l: &Launch, node: usize, a: &Access) -> RaceSide {
        let n = &l.graph.info.nodes[node];
        let stream = self.stream_ids[l.stream];
        RaceSide {
            launch: l.number,
            graph: l.graph.info.id,
            graph_label: l.graph.info.label.clone(),
            stream,
            stream_label: self.stream_label(stream),
            node: n.label.clone(),
            line: n.line.clone(),
            mode: a.mode,
            launch_line: l.line.clone(),
        }
    }

    fn race(
        &self,
        old: &Launch,
        on: usize,
        oa: &Access,
        new: &Launch,
        nn: usize,
        na: &Access,
    ) -> Race {
        let first = self.side(old, on, oa);
        let second = self.side(new, nn, na);
        let start = oa.offset.max(na.offset);
        let end = (oa.offset.saturating_add(oa.len)).min(na.offset.saturating_add(na.len));
        let signals = old
            .graph
            .info
            .records
            .iter()
            .map(|r| (r.signal, self.signal_label(r.signal)))
            .next();
        let missing_wait = MissingWait::new(&first, &second, signals);
        let label = if oa.label.is_empty() {
            &na.label
        } else {
            &oa.label
        };
        Race {
            certain: oa.mode != graphsmith_model::AccessMode::Unknown
                && na.mode != graphsmith_model::AccessMode::Unknown,
            first,
            second,
            buffer: oa.buffer,
            buffer_label: label.clone(),
            offset: start,
            len: end.saturating_sub(start),
            more_pairs: 0,
            missing_wait,
        }
    }

    /// Applies one operation; returns the races a launch adds (each pair of executables and
    /// buffer is reported once over the whole sequence).
    pub fn push(&mut self, op: &Op) -> Vec<Race> {
        match op {
            Op::Launch {
                graph,
                stream,
                line,
            } => return self.launch(*graph, *stream, line.clone()),
            Op::Record { signal, stream, .. } => {
                let s = self.stream(*stream);
                join(&mut self.streams[s], &self.host.clone());
                self.signals.insert(*signal, self.streams[s].clone());
            }
            Op::Wait {
                signal,
                stream,
                line,
            } => {
                let s = self.stream(*stream);
                match self.signals.get(signal).cloned() {
                    Some(c) => join(&mut self.streams[s], &c),
                    None => {
                        self.notes.push(format!(
                        "stream '{}' waits on signal '{}'{}, which nothing recorded before: the \
                         wait orders nothing",
                        self.stream_label(*stream),
                        self.signal_label(*signal),
                        line.as_deref().map(|l| format!(" at {l}")).unwrap_or_default()
                    ))
                    }
                }
            }
            Op::SyncStream { stream, .. } => {
                let s = self.stream(*stream);
                let c = self.streams[s].clone();
                join(&mut self.host, &c);
            }
            Op::SyncSignal { signal, .. } => {
                if let Some(c) = self.signals.get(signal).cloned() {
                    join(&mut self.host, &c);
                }
            }
            Op::SyncGraph { graph, .. } => {
                let clocks: Vec<Clock> = self
                    .latest
                    .iter()
                    .filter(|((g, _), _)| g == graph)
                    .map(|(_, l)| l.clock.clone())
                    .collect();
                for c in clocks {
                    join(&mut self.host, &c);
                }
            }
            Op::SyncContext { .. } => {
                for c in self.streams.clone() {
                    join(&mut self.host, &c);
                }
            }
        }
        Vec::new()
    }

    fn launch(&mut self, graph: u64, stream: u64, line: Option<String>) -> Vec<Race> {
        let s = self.stream(stream);
        self.launched += 1;
        let number = self.launched;
        self.graphs_launched.insert(graph);
        let Some(g) = self.graphs.get(&graph).cloned() else {
            self.notes.push(format!(
                "launch #{number} is of graph {graph}, which the sequence does not describe: \
                 it was not checked"
            ));
            return Vec::new();
        };
        let (clock, notes) = self.launch_clock(&g, s, number);
        self.notes.extend(notes);
        let new = Launch {
            number,
            graph: g.clone(),
            stream: s,
            clock: clock.clone(),
            line,
        };
        let mut seen = std::mem::take(&mut self.seen);
        let races = self.races_with_earlier(&new, &mut seen);
        self.seen = seen;
        self.streams[s] = clock.clone();
        for r in &g.info.records {
            self.signals.insert(r.signal, clock.clone());
        }
        self.latest.insert((graph, s), new);
        self.races.extend(races.iter().cloned());
        races
    }

    /// Everything found so far.
    pub fn report(&self) -> LaunchReport {
        LaunchReport {
            launches: self.launched,
            graphs: self.graphs_launched.len(),
            streams: self.stream_ids.len(),
            races: self.races.clone(),
            notes: self.notes.clone(),
        }
    }
}
