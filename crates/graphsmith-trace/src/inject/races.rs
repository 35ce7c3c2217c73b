//! `--hazards` across graphs inside the traced process: the launch sequence, checked as it
//! happens (`crate::races::Recorder`, the analysis crate's launch-order check).
//!
//! Fed from the callback's exit site of successful driver calls made outside a capture:
//! `cuGraphLaunch` (the executable and its stream), `cuEventRecord*` (a record on a stream),
//! `cuStreamWaitEvent` (a wait), `cuStreamSynchronize` and a `cuStreamQuery` that returned
//! `CUDA_SUCCESS` (the host saw the stream's work done), `cuEventSynchronize` and a successful
//! `cuEventQuery` (the host saw the event's record done), `cuCtxSynchronize` (everything). Each
//! executable is described at its instantiation from the same read-back and bounds as the
//! hazard check; `cuGraphExecDestroy` and `cuGraphExecUpdate_v2` end its description (a handle
//! may be reused; an update changes what the nodes touch).
//!
//! Cost: a call of another kind pays one comparison; these calls take one lock (no CUDA call
//! under it) and a check that compares the launch with the latest launch of each other
//! executable on each stream. The log gets a line per race found (with the calling line of the
//! second launch) and a summary at exit; `--launches-out` keeps the sequence in memory
//! (at most `MAX_KEPT` operations) and records it in the log at exit, for `graphsmith trace`
//! to write.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::cupti::sys::{self as cs, CUpti_CallbackData, CUpti_driver_api_trace_cbid as D};
use graphsmith_analysis::launch_order::{GraphInfo, Op};

use super::{lock, Capturing, Kind, Spec, Tracer};
use crate::event::{user_frame, Event, HAZARDS_VAR};
use crate::inject::{python, stack};
use crate::races::{RaceEvent, RaceFound, RaceSequence, RaceSummary, Recorder, LAUNCHES_VAR};

/// Python stacks read per process for races' lines and executables' labels.
static STACKS: AtomicU64 = AtomicU64::new(0);

struct Races {
    recorder: Mutex<Recorder>,
}

fn races() -> Option<&'static Races> {
    static RACES: OnceLock<Option<Races>> = OnceLock::new();
    RACES
        .get_or_init(|| {
            (std::env::var(HAZARDS_VAR).as_deref() == Ok("1")).then(|| {
                let keep = std::env::var(LAUNCHES_VAR).as_deref() == Ok("1");
                Races {
                    recorder: Mutex::new(Recorder::new(keep)),
                }
            })
        })
        .as_ref()
}

/// Whether the launch sequence is recorded (`--hazards`).
pub(crate) fn enabled() -> bool {
    races().is_some()
}

/// The calling line: the innermost Python frame of the user's code, else the first native
/// frame with a file and line.
fn here() -> Option<String> {
    if let Ok(stack) = python::capture(&STACKS) {
        if let Some(f) = user_frame(&stack) {
            return Some(format!("{}:{} in {}", f.file, f.line, f.function));
        }
    }
    let frames = stack::capture()?;
    let f = frames.iter().find(|f| f.file.is_some())?;
    Some(format!(
        "{}:{} in {}",
        f.file.as_deref().unwrap_or("?"),
        f.line.unwrap_or(0),
        if f.symbol.is_empty() { "??" } else { &f.symbol }
    ))
}

/// The executable of a destroy or an in-place update.
fn forgotten(cbid: u32, params: *const c_void) -> Option<u64> {
    if params.is_null() {
        return None;
    }
    if cbid == D::CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy as u32 {
        // SAFETY: CUPTI passes, for this callback id, a valid pointer to this call's parameter
        // struct for the duration of the callback.
        let p = unsafe { &*params.cast::<cs::cuGraphExecDestroy_params_st>() };
        return Some(p.hGraphExec as u64);
    }
    if cbid == D::CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2 as u32 {
        // SAFETY: as above, for cuGraphExecUpdate_v2.
        let p = unsafe { &*params.cast::<cs::cuGraphExecUpdate_v2_params_st>() };
        return Some(p.hGraphExec as u64);
    }
    None
}

impl Tracer {
    /// At a successful driver call's exit: a launch, a record, a wait or a synchronisation
    /// joins the sequence (outside captures); a race it makes goes to the log.
    pub(super) fn record_order(&self, spec: &Spec, cbid: u32, data: &CUpti_CallbackData) {
        let kind = spec.kind;
        if !matches!(
            kind,
            Kind::GraphLaunch | Kind::EventRecord | Kind::Wait | Kind::Sync | Kind::EventSync
        ) {
            if let (Some(r), Some(exec)) = (
                races().filter(|_| kind == Kind::Other),
                forgotten(cbid, data.functionParams),
            ) {
                lock(&r.recorder).forget(exec);
            }
            return;
        }
        let Some(r) = races() else { return };
        let args = Self::read_args(spec, data);
        let stream = spec.stream(&args);
        if let Some(s) = stream {
            // Work on a capturing stream is a node of the graph being captured, not an order.
            if self.active.load(Ordering::Relaxed) > 0
                && matches!(self.capturing(Some(s)), Capturing::Yes(_))
            {
                return;
            }
        }
        let op = match (kind, stream, args.event, args.graph) {
            (Kind::GraphLaunch, Some(stream), _, Some(graph)) => Op::Launch {
                graph,
                stream,
                line: None,
            },
            (Kind::EventRecord, Some(stream), Some(signal), _) => Op::Record {
                signal,
                stream,
                line: None,
            },
            (Kind::Wait, Some(stream), Some(signal), _) => Op::Wait {
                signal,
                stream,
                line: None,
            },
            (Kind::Sync, Some(stream), _, _) => Op::SyncStream { stream, line: None },
            (Kind::Sync, None, _, _) => Op::SyncContext { line: None },
            (Kind::EventSync, _, Some(signal), _) => Op::SyncSignal { signal, line: None },
            _ => return,
        };
        let found = lock(&r.recorder).push(op);
        if found.is_empty() {
            return;
        }
        // Rare: the calling line of the launch that raced, taken with no lock held.
        let line = here();
        for mut race in found {
            race.second.launch_line = line.clone();
            let seq = self.next_seq();
            super::super::emit(|pid| {
                Event::Race(RaceEvent::Found(RaceFound {
                    pid,
                    seq,
                    race: Box::new(race),
                }))
            });
        }
    }

    /// After an instantiation's read-back: the executable's nodes and events, labelled with
    /// its graph and the line that instantiated it.
    pub(super) fn describe(&self, exec: u64, graph: u64, info: Option<GraphInfo>) {
        let (Some(r), Some(mut info)) = (races(), info) else {
            return;
        };
        info.label = match here() {
            Some(l) => format!("graph {graph:#x} (instantiated at {l})"),
            None => format!("graph {graph:#x}"),
        };
        lock(&r.recorder).instantiated(exec, info);
    }
}

/// At exit: the summary event and, with `--launches-out` and a graph launched, the sequence
/// (written to the file by `graphsmith trace`, not here: the traced process writes only its
/// log).
pub(crate) fn at_exit(seq: u64) -> Vec<Event> {
    let Some(r) = races() else {
        return Vec::new();
    };
    // try_lock: a thread that died holding it must not hang the exit.
    let Ok(recorder) = r.recorder.try_lock() else {
        return Vec::new();
    };
    let report = recorder.report();
    let pid = std::process::id();
    let mut events = vec![Event::Race(RaceEvent::Summary(RaceSummary {
        pid,
        seq,
        launches: report.launches,
        graphs: report.graphs,
        streams: report.streams,
        notes: report.notes,
    }))];
    if let Some(sequence) = recorder.sequence().filter(|_| report.launches > 0) {
        events.push(Event::Race(RaceEvent::Sequence(RaceSequence {
            pid,
            seq,
            sequence: sequence.clone(),
        })));
    }
    events
}
