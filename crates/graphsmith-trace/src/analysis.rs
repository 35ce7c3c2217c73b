//! From the event log to the report: which calls belong to which capture, the first failing
//! call of each failed capture, the cascade that followed it, the escapes and the graphs.
//!
//! Attribution rules (the tracer records the capture a call's stream or event belongs to, asked
//! of the driver at the call):
//! - a failing call on a stream (or an event) of capture C belongs to C; a `902` (merge) also
//!   to every capture running at the time, since both sides are invalidated;
//! - a failing call on no capture's stream whose code is a capture code (900..=908), e.g. a
//!   `cudaMalloc` from another thread in global mode, belongs to every capture running in its
//!   context at the time;
//! - any other failing call is a failure outside captures.
//!
//! The first call attributed to a capture is its first cause; the rest is its cascade.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::event::{Begin, Call, End, Event, Exit, Instantiate, StreamUse};
use crate::explain::{is_capture_code, Catalogue, Explained};
use crate::hazard::HazardCheck;

/// How a capture ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// `cuStreamEndCapture` returned a graph.
    Captured,
    /// `cuStreamEndCapture` failed: no graph.
    Failed,
    /// The process exited (or crashed) while the stream was still capturing.
    NotEnded,
}

/// Calls of one name and code in a cascade.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CascadeItem {
    pub call: String,
    pub code: u32,
    pub count: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct CaptureReport {
    /// 1-based, in begin order, within the process.
    pub number: usize,
    pub begin: Begin,
    pub outcome: Outcome,
    /// The first failing call that belongs to this capture.
    pub first: Option<Call>,
    /// Its catalogue entry.
    pub explained: Option<Explained>,
    /// Every later failing call that belongs to it, grouped by name and code in order.
    pub cascade: Vec<CascadeItem>,
    pub end: Option<End>,
    /// Streams that joined the capture and did not join back (for an unjoined fork).
    pub unjoined: Vec<StreamUse>,
}

impl CaptureReport {
    pub fn failed(&self) -> bool {
        self.outcome != Outcome::Captured || self.first.is_some()
    }

    pub fn cascade_total(&self) -> usize {
        self.cascade.iter().map(|c| c.count).sum()
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct GraphReport {
    pub instantiate: Instantiate,
    /// The capture that produced the graph, when one did.
    pub from_capture: Option<usize>,
    pub launches: u64,
    /// Its hazard check (`--hazards`); `None` when none was recorded.
    pub hazards: Option<HazardCheck>,
}

/// Whether the tracer was attached in a process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Attached {
    Yes {
        cupti: String,
        version: u32,
    },
    No {
        reason: String,
        detail: String,
    },
    /// The process never initialised CUDA, so the injection never ran.
    NoCuda,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcessReport {
    pub pid: u32,
    pub exe: Option<String>,
    pub attached: Attached,
    /// NVTX instances that attached to the tracer.
    pub nvtx_instances: u32,
    pub captures: Vec<CaptureReport>,
    pub escapes: Vec<Call>,
    pub graphs: Vec<GraphReport>,
    /// Failing calls outside every capture.
    pub other_failures: Vec<Call>,
    /// The process ran its `atexit` handlers (false: it crashed, was killed or called `_exit`).
    pub exited_normally: bool,
    pub exit: Option<Exit>,
    /// Launches of graphs whose memory was freed since instantiation (`--freed`).
    pub freed: Vec<crate::freed::FreedLaunch>,
}

impl ProcessReport {
    pub fn failed_captures(&self) -> usize {
        self.captures.iter().filter(|c| c.failed()).count()
    }
}

/// Builds one process's report from its events (in the order recorded).
pub fn analyse_process(pid: u32, events: &[Event], catalogue: &dyn Catalogue) -> ProcessReport {
    let mut attached = Attached::NoCuda;
    let mut exe = None;
    let mut nvtx_instances = 0;
    let mut begins: Vec<Begin> = Vec::new();
    let mut ends: HashMap<u64, End> = HashMap::new();
    let mut failures: Vec<Call> = Vec::new();
    let mut escapes = Vec::new();
    let mut instantiations = Vec::new();
    let mut checks: HashMap<u64, HazardCheck> = HashMap::new();
    let mut exit = None;
    let mut freed = Vec::new();
    for e in events {
        match e {
            Event::Start(s) => {
                exe = Some(s.exe.clone());
                attached = Attached::Yes {
                    cupti: s.cupti.clone(),
                    version: s.cupti_version,
                };
            }
            Event::Untraced(u) => {
                attached = Attached::No {
                    reason: format!("{:?}", u.reason),
                    detail: u.detail.clone(),
                }
            }
            Event::Nvtx(n) => nvtx_instances = nvtx_instances.max(n.instances),
            Event::Begin(b) => begins.push(b.clone()),
            Event::End(end) => {
                ends.insert(end.capture, end.clone());
            }
            Event::Call(c) => failures.push(c.clone()),
            Event::Escape(c) => escapes.push(c.clone()),
            Event::Instantiate(i) => instantiations.push(i.clone()),
            Event::Hazards(h) => {
                checks.insert(h.instantiate, h.check.clone());
            }
            Event::Exit(x) => exit = Some(x.clone()),
            Event::Freed(f) => freed.push(f.clone()),
            // `--graphs`: read by crate::graphs::report.
            Event::Graph(_) | Event::Race(_) => {}
        }
    }
    failures.sort_by_key(|c| c.seq);
    let number: HashMap<u64, usize> = begins
        .iter()
        .enumerate()
        .map(|(i, b)| (b.capture, i + 1))
        .collect();
    let mut per_capture: HashMap<u64, Vec<&Call>> = HashMap::new();
    let mut other_failures = Vec::new();
    for call in &failures {
        let targets = targets(call, |id| number.contains_key(&id));
        if targets.is_empty() {
            other_failures.push(call.clone());
        }
        for t in targets {
            per_capture.entry(t).or_default().push(call);
        }
    }
    let mut captures = Vec::new();
    for (i, begin) in begins.iter().enumerate() {
        let calls = per_capture.remove(&begin.capture).unwrap_or_default();
        let end = ends.remove(&begin.capture);
        // After a call invalidated the capture the driver no longer reports its id, so the
        // failing end may arrive as a failing call of the capture rather than as an end event.
        let failed_end = calls.iter().any(|c| {
            [c.driver.as_deref(), c.runtime.as_deref()]
                .into_iter()
                .flatten()
                .any(|n| n.contains("EndCapture"))
        });
        let outcome = match &end {
            Some(e) if e.code == 0 => Outcome::Captured,
            Some(_) => Outcome::Failed,
            None if failed_end => Outcome::Failed,
            None => Outcome::NotEnded,
        };
        let first = calls.first().map(|c| (*c).clone());
        let explained = first
            .as_ref()
            .and_then(|c| catalogue.lookup(c.short_name(), c.code));
        let cascade = cascade(calls.iter().skip(1).copied());
        let unjoined = end
            .as_ref()
            .filter(|e| e.code == 904)
            .map(|e| {
                e.streams
                    .iter()
                    .filter(|s| s.stream != begin.stream && !s.joined)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        captures.push(CaptureReport {
            number: i + 1,
            begin: begin.clone(),
            outcome,
            first,
            explained,
            cascade,
            end,
            unjoined,
        });
    }
    let launches: HashMap<u64, u64> = exit
        .as_ref()
        .map(|x: &Exit| x.graph_launches.iter().copied().collect())
        .unwrap_or_default();
    let graphs = instantiations
        .into_iter()
        .map(|inst| {
            let from_capture = captures
                .iter()
                .find(|c| c.end.as_ref().and_then(|e| e.graph) == Some(inst.graph))
                .map(|c| c.number);
            let launches = inst
                .exec
                .and_then(|x| launches.get(&x).copied())
                .unwrap_or(0);
            GraphReport {
                hazards: checks.remove(&inst.seq),
                instantiate: inst,
                from_capture,
                launches,
            }
        })
        .collect();
    ProcessReport {
        pid,
        exe,
        attached,
        nvtx_instances,
        captures,
        escapes,
        graphs,
        other_failures,
        exited_normally: exit.is_some(),
        exit,
        freed,
    }
}

/// The captures a failing call belongs to (see the module docs).
fn targets(call: &Call, known: impl Fn(u64) -> bool) -> Vec<u64> {
    let own = call.capture.filter(|c| known(*c));
    let mut out: Vec<u64> = own.into_iter().collect();
    let spread = match own {
        Some(_) => call.code == 902,
        None => is_capture_code(call.code),
    };
    if spread {
        for a in &call.active {
            if known(*a) && !out.contains(a) {
                out.push(*a);
            }
        }
    }
    out
}

fn cascade<'a>(calls: impl Iterator<Item = &'a Call>) -> Vec<CascadeItem> {
    let mut items: Vec<CascadeItem> = Vec::new();
    for c in calls {
        let name = c.short_name().to_string();
        match items
            .iter_mut()
            .find(|i| i.call == name && i.code == c.code)
        {
            Some(i) => i.count += 1,
            None => items.push(CascadeItem {
                call: name,
                code: c.code,
                count: 1,
            }),
        }
    }
    items
}

/// How the traced command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CommandExit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// The whole report of one `graphsmith trace` run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub command: Vec<String>,
    pub exit: CommandExit,
    /// Notes from `graphsmith trace` itself (why a command ran untraced, ...).
    pub notes: Vec<String>,
    pub processes: Vec<ProcessReport>,
    /// Log lines that did not parse (cut short by a crash).
    pub unreadable_lines: usize,
    /// `--strict`: escapes are errors.
    pub strict: bool,
    /// `--hazards`: each instantiated graph was to be read back and checked for hazards.
    pub hazards_requested: bool,
}

impl Report {
    /// Builds the report from a whole event log (any number of processes).
    pub fn build(
        command: Vec<String>,
        exit: CommandExit,
        events: &[Event],
        catalogue: &dyn Catalogue,
    ) -> Report {
        let mut by_pid: BTreeMap<u32, Vec<Event>> = BTreeMap::new();
        let mut order: Vec<u32> = Vec::new();
        for e in events {
            let pid = e.pid();
            if !by_pid.contains_key(&pid) {
                order.push(pid);
            }
            by_pid.entry(pid).or_default().push(e.clone());
        }
        let processes = order
            .into_iter()
            .map(|pid| analyse_process(pid, &by_pid[&pid], catalogue))
            .collect();
        Report {
            command,
            exit,
            notes: Vec::new(),
            processes,
            unreadable_lines: 0,
            strict: false,
            hazards_requested: false,
        }
    }

    pub fn failed_captures(&self) -> usize {
        self.processes.iter().map(|p| p.failed_captures()).sum()
    }

    pub fn escapes(&self) -> usize {
        self.processes.iter().map(|p| p.escapes.len()).sum()
    }

    /// Hazards found in instantiated graphs (`--hazards`).
    pub fn hazards(&self) -> usize {
        self.processes
            .iter()
            .flat_map(|p| &p.graphs)
            .filter_map(|g| g.hazards.as_ref())
            .map(|h| h.total() as usize)
            .sum()
    }

    /// Instantiated graphs whose hazard check ran.
    pub fn graphs_checked(&self) -> usize {
        self.processes
            .iter()
            .flat_map(|p| &p.graphs)
            .filter(|g| matches!(g.hazards, Some(HazardCheck::Checked(_))))
            .count()
    }

    /// Failed captures, launches on freed memory, and escapes under `--strict`. Hazards are
    /// never errors: the check reports what may race, which a person confirms.
    pub fn errors(&self) -> usize {
        self.failed_captures()
            + self.freed_launches()
            + if self.strict { self.escapes() } else { 0 }
    }

    /// Graph launches on memory freed since instantiation (`--freed`), one per node.
    pub fn freed_launches(&self) -> usize {
        self.processes.iter().map(|p| p.freed.len()).sum()
    }

    /// Hazards, and escapes without `--strict`.
    pub fn warnings(&self) -> usize {
        self.hazards() + if self.strict { 0 } else { self.escapes() }
    }
}
