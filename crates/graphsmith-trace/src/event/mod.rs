//! What the injection library records: one JSON object per line, appended to the file named by
//! `GRAPHSMITH_TRACE_OUT` as it happens, so that a crash, `exit()` or `_exit()` loses nothing
//! already recorded. `graphsmith trace` reads the lines back after the command exits
//! ([`read_events`]) and builds the report from them ([`crate::analysis`]).
//!
//! Only what a report needs is recorded: captures begun and ended, calls that failed, work that
//! escaped a capture, instantiations (with `--hazards`, the hazard check of each instantiated
//! graph), and a summary at exit. Successful calls outside a capture are counted, not recorded.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hazard::HazardCheck;

pub mod freed;
pub mod graph;
pub mod race;

/// The environment variable naming the event log the injection library appends to.
pub const OUT_VAR: &str = "GRAPHSMITH_TRACE_OUT";

/// The environment variable that asks the injection library for the hazard check of each
/// instantiated graph (`--hazards`): `1` to check, anything else not to.
pub const HAZARDS_VAR: &str = "GRAPHSMITH_TRACE_HAZARDS";

/// The environment variable that asks the injection library to report launches of graphs
/// whose memory was freed since instantiation (`--freed`, [`crate::freed`]): `1` to watch.
pub const FREED_VAR: &str = "GRAPHSMITH_TRACE_FREED";
/// The environment variable that asks the injection library for what each graph costs
/// (`--graphs`): `1` to record it, anything else not to.
pub const GRAPHS_VAR: &str = "GRAPHSMITH_TRACE_GRAPHS";

/// One line of the event log. Every variant carries the process id, so that the log of a command
/// that starts several CUDA processes (a shell script, a launcher) stays readable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// The tracer is attached to CUDA (CUPTI subscribed) in this process.
    Start(Start),
    /// The tracer could not attach: the process runs untraced.
    Untraced(Untraced),
    /// An NVTX instance in the process handed its function table to the tracer.
    Nvtx(NvtxInit),
    /// A stream began capturing.
    Begin(Begin),
    /// A CUDA call returned an error.
    Call(Call),
    /// Work went to a stream outside a running capture: it ran eagerly and the graph misses it.
    Escape(Call),
    /// A capture ended (successfully or not) on the stream that began it.
    End(End),
    /// A graph was instantiated.
    Instantiate(Instantiate),
    /// The hazard check of a graph just instantiated (`--hazards`), written after its
    /// `Instantiate` event.
    Hazards(Hazards),
    /// The process is exiting (an `atexit` handler); missing when it crashed or called `_exit`.
    Exit(Exit),
    /// A graph about to be launched touches memory freed since its instantiation (`--freed`).
    Freed(freed::FreedLaunch),
    /// What a graph cost (`--graphs`): timed graph calls, allocations during captures, launches.
    Graph(graph::GraphEvent),
    /// A race across graphs, or the launch sequence's summary at exit (`--hazards`).
    Race(race::RaceEvent),
}

impl Event {
    /// The process that recorded it.
    pub fn pid(&self) -> u32 {
        match self {
            Event::Start(e) => e.pid,
            Event::Untraced(e) => e.pid,
            Event::Nvtx(e) => e.pid,
            Event::Begin(e) => e.pid,
            Event::Call(e) | Event::Escape(e) => e.pid,
            Event::End(e) => e.pid,
            Event::Instantiate(e) => e.pid,
            Event::Hazards(e) => e.pid,
            Event::Exit(e) => e.pid,
            Event::Freed(e) => e.pid,
            Event::Graph(e) => e.pid(),
            Event::Race(e) => e.pid(),
        }
    }
}

/// A thread: its OS id (`gettid`) and its name (`/proc/self/task/<tid>/comm`, or the name given
/// with `nvtxNameOsThread`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    pub tid: u32,
    #[serde(default)]
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    pub pid: u32,
    /// The executable (`/proc/self/exe`).
    pub exe: String,
    /// The libcupti the tracer subscribed through, and how it was found.
    pub cupti: String,
    /// `cuptiGetVersion`.
    pub cupti_version: u32,
}

/// Why a process runs untraced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UntracedReason {
    /// No libcupti could be loaded.
    CuptiMissing,
    /// libcupti loaded, but a symbol the tracer needs is missing.
    CuptiIncomplete,
    /// Another tool already subscribed to CUPTI (a profiler, Nsight Systems, `torch.profiler`).
    CuptiTaken,
    /// `cuptiSubscribe` or `cuptiEnableDomain` failed for another reason.
    CuptiFailed,
    /// The event log could not be opened.
    NoOutput,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Untraced {
    pub pid: u32,
    pub reason: UntracedReason,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvtxInit {
    pub pid: u32,
    /// How many NVTX instances of this process attached so far (each library compiled with the
    /// header-only NVTX3 has its own).
    pub instances: u32,
    /// The NVTX version its export table reports, when it reports one.
    pub version: Option<u32>,
}

/// A capture's mode (`CUstreamCaptureMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Global,
    ThreadLocal,
    Relaxed,
    Unknown,
}

impl Mode {
    pub fn from_raw(raw: u32) -> Mode {
        match raw {
            0 => Mode::Global,
            1 => Mode::ThreadLocal,
            2 => Mode::Relaxed,
            _ => Mode::Unknown,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Global => "global",
            Mode::ThreadLocal => "thread-local",
            Mode::Relaxed => "relaxed",
            Mode::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Begin {
    pub pid: u32,
    pub seq: u64,
    /// The driver's capture id (`cuStreamGetCaptureInfo`), unique in the process.
    pub capture: u64,
    pub stream: u64,
    pub context: u64,
    pub mode: Mode,
    pub thread: Thread,
    /// The NVTX range stack of the capturing thread at begin, outermost first.
    pub ranges: Vec<String>,
    pub driver: Option<String>,
    pub runtime: Option<String>,
    /// The Python stack of the capturing thread at begin, innermost first (see [`PyFrame`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python: Vec<PyFrame>,
    /// Why no Python stack was read, when none was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_missing: Option<PyMissing>,
}

/// Where a Python frame's file lives, from its path ([`Origin::of`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Anything outside the interpreter's library and installed packages: the user's code.
    #[default]
    User,
    /// PyTorch itself (`site-packages/torch/`, `dist-packages/torch/`).
    Torch,
    /// Another installed package (`site-packages`, `dist-packages`).
    Library,
    /// The interpreter's standard library (`/lib/python3.`, frozen modules).
    Stdlib,
}

impl Origin {
    /// Classifies a code object's `co_filename`.
    pub fn of(file: &str) -> Origin {
        let packages = ["/site-packages/", "/dist-packages/"];
        if packages.iter().any(|p| {
            file.contains(&format!("{p}torch/")) || file.contains(&format!("{p}functorch/"))
        }) {
            Origin::Torch
        } else if packages.iter().any(|p| file.contains(p)) {
            Origin::Library
        } else if file.contains("/lib/python3.")
            || file.contains("/lib64/python3.")
            || file.starts_with("<frozen ")
        {
            Origin::Stdlib
        } else {
            Origin::User
        }
    }
}

/// A Python stack frame, read in the traced process through CPython's C API.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PyFrame {
    /// The code object's `co_filename`, as Python has it (relative when the script was named
    /// relative to the working directory).
    pub file: String,
    pub line: u32,
    /// `co_qualname` (Python 3.11 and later) or `co_name`.
    pub function: String,
    #[serde(default)]
    pub origin: Origin,
}

/// Why a call's Python stack was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PyMissing {
    /// The process has no CPython loaded: nothing to read.
    NotPython,
    /// CPython is loaded but lacks a function the reader needs (before Python 3.9).
    Unsupported,
    /// CPython is loaded but not initialised, or finalising.
    NotRunning,
    /// The calling thread has never run Python code.
    NoThreadState,
    /// Past the per-process cap on Python stacks.
    Budget,
    /// The thread had released the GIL and it could not be taken in time (another thread held
    /// it); the tracer never waits long for it.
    GilBusy,
    /// The helper thread that reads the stack could not be started.
    NoHelper,
}

impl PyMissing {
    /// The sentence a report prints.
    pub fn text(self) -> &'static str {
        match self {
            PyMissing::NotPython => "not a Python process",
            PyMissing::Unsupported => "this Python lacks the frame API (needs Python 3.9 or newer)",
            PyMissing::NotRunning => "the interpreter was not running (not initialised, or exiting)",
            PyMissing::NoThreadState => "the calling thread has never run Python code",
            PyMissing::Budget => "past the per-process cap on Python stacks",
            PyMissing::GilBusy => {
                "the thread does not hold the GIL and another thread kept it too long to read the stack"
            }
            PyMissing::NoHelper => "the thread does not hold the GIL and no helper thread could be started to read the stack",
        }
    }
}

/// A native stack frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// Demangled symbol, when one is known.
    #[serde(default)]
    pub symbol: String,
    /// The shared object or executable (file name only).
    #[serde(default)]
    pub module: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// The range stack of a capture's thread, seen from a call made on another thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturingRanges {
    pub capture: u64,
    pub thread: Thread,
    pub ranges: Vec<String>,
}

/// A call: failed (`Event::Call`) or escaped (`Event::Escape`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    pub pid: u32,
    pub seq: u64,
    /// The driver function (`cuStreamSynchronize`), when the call reached the driver.
    pub driver: Option<String>,
    /// The runtime function around it (`cudaStreamSynchronize`), when the call came through
    /// the runtime.
    pub runtime: Option<String>,
    /// The CUDA result (0 for an escape).
    pub code: u32,
    /// The driver's name for the code (`cuGetErrorName`), when it has one.
    #[serde(default)]
    pub code_name: Option<String>,
    /// The driver's text for the code (`cuGetErrorString`).
    #[serde(default)]
    pub code_text: Option<String>,
    pub thread: Thread,
    /// The stream argument, when the call has one (the legacy stream is 0x0, per-thread 0x2).
    pub stream: Option<u64>,
    /// The capture the stream (or the event) belongs to, when it belongs to one.
    pub capture: Option<u64>,
    /// The call came after its capture had ended (e.g. ending it a second time).
    #[serde(default)]
    pub after_end: bool,
    /// Captures running in the call's context when it was made.
    #[serde(default)]
    pub active: Vec<u64>,
    pub ranges: Vec<String>,
    /// For a call from another thread than a running capture's: that thread's ranges.
    #[serde(default)]
    pub capturing: Vec<CapturingRanges>,
    /// Innermost frame first, starting at the caller of the CUDA API.
    #[serde(default)]
    pub backtrace: Vec<Frame>,
    /// The calling thread's Python stack, innermost first, when the call came from Python.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python: Vec<PyFrame>,
    /// Why no Python stack was read, when none was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_missing: Option<PyMissing>,
}

impl Call {
    /// The name to show: the runtime function when there is one, with the driver function.
    pub fn name(&self) -> String {
        match (&self.runtime, &self.driver) {
            (Some(r), Some(d)) => format!("{r} ({d})"),
            (Some(r), None) => r.clone(),
            (None, Some(d)) => d.clone(),
            (None, None) => "an unnamed CUDA call".to_string(),
        }
    }

    /// The innermost Python frame of the user's own code, when the call came from Python.
    pub fn user_frame(&self) -> Option<&PyFrame> {
        user_frame(&self.python)
    }

    /// The outermost function name alone.
    pub fn short_name(&self) -> &str {
        self.runtime
            .as_deref()
            .or(self.driver.as_deref())
            .unwrap_or("?")
    }
}

impl Begin {
    /// The innermost Python frame of the user's own code, when the begin came from Python.
    pub fn user_frame(&self) -> Option<&PyFrame> {
        user_frame(&self.python)
    }
}

/// The innermost frame of the user's own code in a Python stack (innermost first).
pub fn user_frame(stack: &[PyFrame]) -> Option<&PyFrame> {
    stack.iter().find(|f| f.origin == Origin::User)
}

/// A stream that took part in a capture.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamUse {
    pub stream: u64,
    /// Calls captured on it.
    pub calls: u64,
    /// Its first and last captured call, with the ranges at that call.
    pub first: String,
    pub last: String,
    #[serde(default)]
    pub last_ranges: Vec<String>,
    #[serde(default)]
    pub last_thread: Thread,
    /// Another stream of the capture waited on an event recorded on this one after its last
    /// work (the fork was joined back).
    #[serde(default)]
    pub joined: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    pub pid: u32,
    pub seq: u64,
    pub capture: u64,
    pub stream: u64,
    pub thread: Thread,
    pub code: u32,
    /// The graph, when the end succeeded.
    pub graph: Option<u64>,
    pub ranges: Vec<String>,
    /// Every stream that took part, the origin first.
    #[serde(default)]
    pub streams: Vec<StreamUse>,
    pub driver: Option<String>,
    pub runtime: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instantiate {
    pub pid: u32,
    pub seq: u64,
    pub graph: u64,
    pub exec: Option<u64>,
    pub code: u32,
    pub thread: Thread,
    /// Node counts by kind (`kernel`, `memcpy`, ...), read from the graph at instantiation.
    pub nodes: BTreeMap<String, u64>,
    pub driver: Option<String>,
    pub runtime: Option<String>,
}

/// The hazard check of an instantiated graph, read back with driver calls right after the
/// instantiation returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hazards {
    pub pid: u32,
    pub seq: u64,
    /// The `seq` of the `Instantiate` event it belongs to.
    pub instantiate: u64,
    pub graph: u64,
    pub exec: Option<u64>,
    pub check: HazardCheck,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    pub pid: u32,
    pub seq: u64,
    /// Driver and runtime API calls seen.
    pub driver_calls: u64,
    pub runtime_calls: u64,
    /// Launches of each executable (`cuGraphLaunch`): (handle, count).
    #[serde(default)]
    pub graph_launches: Vec<(u64, u64)>,
    /// Failed calls and escapes recorded without a backtrace, past the cap.
    #[serde(default)]
    pub backtraces_skipped: u64,
    /// Events not recorded, past the cap.
    #[serde(default)]
    pub events_dropped: u64,
}

/// Reads an event log. Lines that do not parse (a line cut short by a crash) are skipped and
/// counted.
pub fn read_events(text: &str) -> (Vec<Event>, usize) {
    let mut events = Vec::new();
    let mut bad = 0;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<Event>(line) {
            Ok(e) => events.push(e),
            Err(_) => bad += 1,
        }
    }
    (events, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_come_from_the_path() {
        let cases = [
            (
                "/venv/lib/python3.12/site-packages/torch/cuda/graphs.py",
                Origin::Torch,
            ),
            (
                "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py",
                Origin::Torch,
            ),
            (
                "/venv/lib/python3.12/site-packages/functorch/__init__.py",
                Origin::Torch,
            ),
            (
                "/venv/lib/python3.12/site-packages/torchvision/ops/boxes.py",
                Origin::Library,
            ),
            (
                "/venv/lib/python3.12/site-packages/accelerate/utils/operations.py",
                Origin::Library,
            ),
            ("/usr/lib/python3.12/contextlib.py", Origin::Stdlib),
            (
                "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py",
                Origin::Stdlib,
            ),
            ("<frozen runpy>", Origin::Stdlib),
            ("train.py", Origin::User),
            ("/home/me/project/torch/model.py", Origin::User),
            ("<string>", Origin::User),
        ];
        for (file, origin) in cases {
            assert_eq!(Origin::of(file), origin, "{file}");
        }
    }

    #[test]
    fn python_frames_round_trip_through_json() {
        let call = Call {
            pid: 7,
            runtime: Some("cudaStreamSynchronize".into()),
            code: 900,
            python: vec![PyFrame {
                file: "train.py".into(),
                line: 12,
                function: "step".into(),
                origin: Origin::User,
            }],
            ..Call::default()
        };
        let line = serde_json::to_string(&Event::Call(call.clone())).unwrap();
        assert!(
            line.contains(
                r#""python":[{"file":"train.py","line":12,"function":"step","origin":"user"}]"#
            ),
            "{line}"
        );
        assert!(!line.contains("python_missing"), "{line}");
        let (events, bad) = read_events(&line);
        assert_eq!((events, bad), (vec![Event::Call(call)], 0));

        let missing = Call {
            python_missing: Some(PyMissing::GilBusy),
            ..Call::default()
        };
        let line = serde_json::to_string(&Event::Escape(missing.clone())).unwrap();
        assert!(line.contains(r#""python_missing":"gil_busy""#), "{line}");
        assert_eq!(read_events(&line).0, vec![Event::Escape(missing)]);
    }

    #[test]
    fn the_users_frame_is_the_innermost_of_the_users_code() {
        let f = |file: &str, origin| PyFrame {
            file: file.into(),
            line: 1,
            function: "f".into(),
            origin,
        };
        let stack = [
            f("/v/site-packages/torch/a.py", Origin::Torch),
            f("/usr/lib/python3.12/b.py", Origin::Stdlib),
            f("mine.py", Origin::User),
            f("main.py", Origin::User),
        ];
        assert_eq!(user_frame(&stack).unwrap().file, "mine.py");
        assert!(user_frame(&stack[..2]).is_none());
    }
}
