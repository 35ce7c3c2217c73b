//! The launch log (docs/ordering.md): an opt-in mode of the context that records every
//! executable launch with its stream, and every order the host gives (signals recorded and
//! waited on, stream and context synchronisations), checks each launch against the earlier ones
//! with the analysis crate's [`Checker`], and writes the sequence as the
//! `graphsmith-launches` JSON file that `graphsmith doctor --launches` reads.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use graphsmith_analysis::launch_order::{
    Checker, GraphInfo, LaunchReport, LaunchSequence, Named, Op, Race,
};

use crate::context::Context;

/// What a launch that would race does while the context records launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RaceMode {
    /// The launch is refused before it is submitted: `Exec::launch` returns
    /// [`crate::ErrorKind::CrossGraphRace`] naming both graphs, both nodes, the buffer and the
    /// missing wait. For tests and debugging runs: the first race stops the program where it
    /// happens, before it can corrupt anything.
    Refuse,
    /// The launch goes ahead; the race is kept in the log ([`LaunchLog::races`]) and in its
    /// report. For collecting every race of a run, and the file for the doctor.
    Report,
}

struct LogState {
    mode: RaceMode,
    seq: LaunchSequence,
    checker: Checker,
    /// Executables described, with the update count their description was made at.
    graphs: HashMap<u64, u64>,
    streams: HashSet<u64>,
    signals: HashSet<u64>,
}

/// The launches of one context, recorded since [`Context::record_launches`]. Cheap to clone;
/// `Send + Sync`. It grows with every launch: meant for test and debugging runs.
#[derive(Clone)]
pub struct LaunchLog {
    inner: Arc<Mutex<LogState>>,
}

impl std::fmt::Debug for LaunchLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        write!(
            f,
            "LaunchLog ({:?}, {} operations)",
            state.mode,
            state.seq.ops.len()
        )
    }
}

impl LaunchLog {
    fn lock(&self) -> MutexGuard<'_, LogState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What a racing launch does.
    pub fn mode(&self) -> RaceMode {
        self.lock().mode
    }

    /// The sequence recorded so far.
    pub fn sequence(&self) -> LaunchSequence {
        self.lock().seq.clone()
    }

    /// The races found so far, with counts and notes.
    pub fn report(&self) -> LaunchReport {
        self.lock().checker.report()
    }

    /// The races found so far (in [`RaceMode::Refuse`], refused launches are not recorded, so
    /// their races are not here: they were the errors).
    pub fn races(&self) -> Vec<Race> {
        self.lock().checker.report().races
    }

    /// The sequence as the `graphsmith-launches` JSON file.
    pub fn to_json(&self) -> String {
        self.lock().seq.to_json()
    }

    /// Writes [`LaunchLog::to_json`] to `path`.
    pub fn write_json(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_json())
    }

    pub(crate) fn name_stream(&self, id: u64, label: &str) {
        let mut s = self.lock();
        if s.streams.insert(id) {
            s.seq.streams.push(Named {
                id,
                label: label.to_string(),
            });
            s.checker.name_stream(id, label);
        }
    }

    pub(crate) fn name_signal(&self, id: u64, label: &str) {
        let mut s = self.lock();
        if s.signals.insert(id) {
            s.seq.signals.push(Named {
                id,
                label: label.to_string(),
            });
            s.checker.name_signal(id, label);
        }
    }

    /// Whether executable `id` is described as it was at update count `version`.
    pub(crate) fn knows_graph(&self, id: u64, version: u64) -> bool {
        self.lock().graphs.get(&id) == Some(&version)
    }

    /// Describes (again, after an update) an executable.
    pub(crate) fn add_graph(&self, info: GraphInfo, version: u64) {
        let mut s = self.lock();
        s.graphs.insert(info.id, version);
        s.seq.graphs.retain(|g| g.id != info.id);
        s.seq.graphs.push(info.clone());
        s.checker.add_graph(info);
    }

    /// The races a launch would add, without recording it.
    pub(crate) fn races_of_launch(&self, graph: u64, stream: u64, line: &str) -> Vec<Race> {
        self.lock()
            .checker
            .races_of_launch(graph, stream, Some(line))
    }

    /// Records an operation the host issued.
    pub(crate) fn push(&self, op: Op) {
        let mut s = self.lock();
        s.checker.push(&op);
        s.seq.ops.push(op);
    }
}

impl Context {
    /// Starts recording launches (a new, empty log; one recording before is dropped from the
    /// context, though the [`LaunchLog`] handles to it stay readable). See [`RaceMode`] for what
    /// a launch that would race does.
    pub fn record_launches(&self, mode: RaceMode) -> LaunchLog {
        let log = LaunchLog {
            inner: Arc::new(Mutex::new(LogState {
                mode,
                seq: LaunchSequence::default(),
                checker: Checker::new(),
                graphs: HashMap::new(),
                streams: HashSet::new(),
                signals: HashSet::new(),
            })),
        };
        *self.log_slot() = Some(log.clone());
        self.inner.logging.store(true, Ordering::Release);
        log
    }

    /// Stops recording launches; returns the log that was recording.
    pub fn stop_recording_launches(&self) -> Option<LaunchLog> {
        self.inner.logging.store(false, Ordering::Release);
        self.log_slot().take()
    }

    /// The log recording launches, if any (one atomic load when none).
    pub fn launch_log(&self) -> Option<LaunchLog> {
        if !self.inner.logging.load(Ordering::Acquire) {
            return None;
        }
        self.log_slot().clone()
    }

    fn log_slot(&self) -> MutexGuard<'_, Option<LaunchLog>> {
        self.inner
            .launch_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}
