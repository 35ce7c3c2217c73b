//! What the injection library records for `--graphs` (one [`GraphEvent`] per line, inside
//! [`crate::event::Event::Graph`]): the graph calls it timed, the device memory allocated while
//! a capture ran, and at exit each executable's launches with their device time.
//!
//! Times are `CLOCK_MONOTONIC` nanoseconds taken in the traced process at the driver call's
//! entry and exit (the CUPTI callback's enter and exit sites), so a capture's wall time is the
//! begin call's entry to the end call's exit, on the capturing thread.

use serde::{Deserialize, Serialize};

use super::{Frame, PyFrame, PyMissing};

/// One `--graphs` event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub enum GraphEvent {
    /// A graph call, timed.
    Call(GraphCall),
    /// A driver allocation made while a capture ran in the process.
    Alloc(GraphAlloc),
    /// At exit: launches of each executable, with their device time when CUPTI measured it.
    Launches(GraphLaunches),
}

impl GraphEvent {
    /// The process that recorded it.
    pub fn pid(&self) -> u32 {
        match self {
            GraphEvent::Call(c) => c.pid,
            GraphEvent::Alloc(a) => a.pid,
            GraphEvent::Launches(l) => l.pid,
        }
    }
}

/// Which graph call was timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GraphCallKind {
    /// `cuStreamBeginCapture*`.
    Begin,
    /// `cuStreamEndCapture`.
    End,
    /// `cuGraphInstantiate*`.
    Instantiate,
    /// `cuGraphUpload`.
    Upload,
    /// `cuGraphCreate`: a graph built node by node, without capture.
    Create,
}

/// A timed graph call (the driver function, entry to exit).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphCall {
    pub pid: u32,
    pub seq: u64,
    pub call: Option<GraphCallKind>,
    /// The driver function (`cuStreamBeginCapture_v2`).
    pub name: String,
    /// The calling thread's OS id.
    pub thread: u32,
    /// `CLOCK_MONOTONIC` at entry, in ns.
    pub start_ns: u64,
    /// Entry to exit, in ns.
    pub dur_ns: u64,
    /// The tracer's own time in callbacks on this thread so far (a begin: at its exit; an end:
    /// at its entry): the difference between a capture's end and begin is the tracer's time
    /// inside the capture, left out of the capture time.
    #[serde(default)]
    pub spent_ns: u64,
    pub code: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<u64>,
    /// The capture (begin: after the call; end: before it), as the driver numbers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<u64>,
    /// The graph: created, ended into, instantiated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<u64>,
    /// The executable: instantiated or uploaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<u64>,
    /// Instantiate: memory-allocation nodes of the graph (its top level) and their bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mem_nodes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mem_node_bytes: u64,
    /// Create: the Python stack of the caller (a begin's is in its `Begin` event).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python: Vec<PyFrame>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_missing: Option<PyMissing>,
    /// Begin and create in a process without Python: the native stack of the caller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backtrace: Vec<Frame>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How device memory was allocated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllocKind {
    /// `cuMemAlloc_v2` (`cudaMalloc`; PyTorch's caching allocator's segments).
    #[default]
    Device,
    /// `cuMemAllocPitch_v2`.
    Pitched,
    /// `cuMemAllocManaged`.
    Managed,
    /// `cuMemCreate`: physical memory (PyTorch's expandable segments, virtual memory managers).
    Physical,
}

/// A successful driver allocation made while at least one capture ran in the process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphAlloc {
    pub pid: u32,
    pub seq: u64,
    pub thread: u32,
    pub kind: AllocKind,
    pub bytes: u64,
    /// The device address (none for `cuMemCreate`, which returns a handle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<u64>,
}

/// Device time of one executable's launches, from CUPTI's graph trace records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceTimes {
    /// Launches with a device time.
    pub timed: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

impl DeviceTimes {
    /// Adds one launch's device time.
    pub fn add(&mut self, ns: u64) {
        self.min_ns = if self.timed == 0 {
            ns
        } else {
            self.min_ns.min(ns)
        };
        self.max_ns = self.max_ns.max(ns);
        self.total_ns = self.total_ns.saturating_add(ns);
        self.timed += 1;
    }

    /// The mean, when any launch was timed.
    pub fn mean_ns(&self) -> Option<u64> {
        (self.timed > 0).then(|| self.total_ns / self.timed)
    }
}

/// Launches of one executable since it was instantiated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecLaunches {
    pub exec: u64,
    /// The `seq` of the timed instantiate call that made it (executable handles are reused
    /// after `cuGraphExecDestroy`).
    pub instantiated: u64,
    /// Successful `cuGraphLaunch` calls.
    pub launches: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceTimes>,
}

/// At exit: every executable's launches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphLaunches {
    pub pid: u32,
    pub seq: u64,
    pub execs: Vec<ExecLaunches>,
    /// Why launches have no device time, when they have none (CUPTI's activity API could not be
    /// enabled, ...); `None` when CUPTI's graph trace ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_time_off: Option<String>,
    /// Graph trace records read, records CUPTI dropped, and records of launches not seen.
    #[serde(default)]
    pub records: u64,
    #[serde(default)]
    pub dropped: u64,
    #[serde(default)]
    pub unmatched: u64,
}
