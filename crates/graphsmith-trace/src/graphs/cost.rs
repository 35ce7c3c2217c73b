//! What each graph cost (`--graphs`): the types of the JSON report's `graph_costs`, built by
//! [`super::report`], printed by [`super::text`], drawn by [`super::plot`].

use std::collections::BTreeMap;

use serde::Serialize;

use super::event::DeviceTimes;
use crate::event::{Frame, PyFrame};

/// What every graph of every process cost.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GraphCosts {
    pub processes: Vec<ProcessCosts>,
}

/// How a graph was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum Made {
    /// Stream capture `capture` (1-based, as the main report numbers captures); `ended`: the
    /// end call returned a graph.
    Capture { capture: usize, ended: bool },
    /// `cuGraphCreate` and nodes added one by one: no capture time.
    Built,
    /// Instantiated from a graph the tracer saw neither captured nor created.
    Unseen,
}

/// Where a graph was begun: the innermost frame of the caller's own code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Where {
    pub file: String,
    pub line: Option<u32>,
    pub function: String,
    /// A Python frame (else a native one).
    pub python: bool,
}

impl Where {
    pub(crate) fn python(f: &PyFrame) -> Where {
        Where {
            file: f.file.clone(),
            line: Some(f.line),
            function: f.function.clone(),
            python: true,
        }
    }

    /// The first native frame outside the C and C++ runtimes and CUDA's libraries with a source
    /// line, else the first such frame with a symbol, else the first frame with a line.
    pub(crate) fn native(frames: &[Frame]) -> Option<Where> {
        let own = || frames.iter().filter(|f| !is_system(&f.module));
        let f = own()
            .find(|f| f.file.is_some() && f.line.is_some())
            .or_else(|| own().find(|f| !f.symbol.is_empty()))
            .or_else(|| frames.iter().find(|f| f.line.is_some()))?;
        Some(Where {
            file: f.file.clone().unwrap_or_else(|| f.module.clone()),
            line: f.line,
            function: f.symbol.clone(),
            python: false,
        })
    }
}

/// Libraries that are never the line that began a graph.
fn is_system(module: &str) -> bool {
    [
        "libc.so",
        "libc-",
        "ld-linux",
        "libpthread",
        "libstdc++",
        "libgcc_s",
        "libcudart",
        "libcuda.so",
        "libcupti",
        "libgraphsmith_trace",
    ]
    .iter()
    .any(|p| module.starts_with(p))
}

/// One instantiation of a graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Instantiation {
    pub exec: Option<u64>,
    pub code: u32,
    /// The driver call's wall time, when it was timed.
    pub ns: Option<u64>,
    /// Uploads of this executable (`cuGraphUpload`) and their wall time.
    pub uploads: u64,
    pub upload_ns: u64,
    pub launches: u64,
    pub device: Option<DeviceTimes>,
}

/// Device memory allocated while the graph was captured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Memory {
    /// Driver allocations by the capturing thread during the capture, and their bytes.
    pub allocations: u64,
    pub allocated_bytes: u64,
    /// Memory-allocation nodes (top level) and their bytes, read at instantiation.
    pub nodes: u64,
    pub node_bytes: u64,
    /// `allocated_bytes + node_bytes`.
    pub total_bytes: u64,
    /// Driver allocations by other threads of the process during the capture (not counted).
    pub other_thread_allocations: u64,
    pub other_thread_bytes: u64,
}

/// What one graph cost.
#[derive(Clone, Debug, Serialize)]
pub struct GraphCost {
    /// 1-based, by cost (the order of `graphs`).
    pub rank: usize,
    /// 1-based, in the order the graphs were begun.
    pub number: usize,
    pub made: Made,
    /// The graph handle (none for a capture that failed).
    pub graph: Option<u64>,
    /// The thread that began it.
    pub thread: u32,
    pub began_at: Option<Where>,
    /// Begin entry to end exit (captures whose begin and end were both timed), less the
    /// tracer's own time on the capturing thread during the capture (`tracer_ns`).
    pub capture_ns: Option<u64>,
    /// The tracer's own time on the capturing thread between the begin and the end (Python
    /// stacks, backtraces, bookkeeping), left out of `capture_ns`.
    pub tracer_ns: Option<u64>,
    /// All its instantiations, and all uploads of their executables.
    pub instantiate_ns: u64,
    pub upload_ns: u64,
    /// `capture_ns + instantiate_ns + upload_ns`: what the graph cost the host.
    pub cost_ns: u64,
    pub instantiations: Vec<Instantiation>,
    /// Nodes by kind, at its first successful instantiation.
    pub nodes: BTreeMap<String, u64>,
    pub node_total: u64,
    pub memory: Memory,
    /// Launches of all its executables.
    pub replays: u64,
    /// Device time of those launches (CUPTI graph trace).
    pub device: Option<DeviceTimes>,
    pub device_mean_ns: Option<u64>,
}

/// One process's sums.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub graphs: usize,
    pub capture_ns: u64,
    /// The tracer's own time inside captures, left out of `capture_ns` (not of `span_ns`).
    pub tracer_ns: u64,
    pub instantiate_ns: u64,
    pub upload_ns: u64,
    pub cost_ns: u64,
    /// From the first graph call's entry to the last one's exit (begin to upload).
    pub span_ns: u64,
    pub allocated_bytes: u64,
    pub node_bytes: u64,
    pub total_bytes: u64,
    pub nodes: u64,
    pub replays: u64,
}

/// One process.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessCosts {
    pub pid: u32,
    pub exe: Option<String>,
    /// Most costly first: cost (wall time), then memory, then begin order.
    pub graphs: Vec<GraphCost>,
    pub totals: Totals,
    /// Driver allocations during captures made by no capturing thread (counted once here).
    pub other_thread_allocations: u64,
    pub other_thread_bytes: u64,
    /// Whether the launch counts came from the exit summary of `--graphs` (else from the
    /// tracer's own counts, or none when the process did not exit normally).
    pub launches_recorded: bool,
    /// Why replays have no device time, when they have none.
    pub device_time_off: Option<String>,
    /// CUPTI graph trace records read, dropped by CUPTI, and not matched to a launch.
    pub device_records: u64,
    pub device_dropped: u64,
    pub device_unmatched: u64,
}

impl GraphCosts {
    /// Graphs in every process.
    pub fn graphs(&self) -> usize {
        self.processes.iter().map(|p| p.graphs.len()).sum()
    }
}
