//! Errors that name the object (kind and label), the operation, the caller's line and, for driver
//! failures, the real CUDA code.

use std::fmt;

/// The kinds of objects graphsmith owns; every error names one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Driver,
    Context,
    Stream,
    Event,
    Buffer,
    Module,
    Kernel,
    Graph,
    Node,
    Exec,
    Capture,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// An object by kind and label: `Graph 'decode-step'`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    pub kind: ObjectKind,
    pub label: String,
}

impl ObjectRef {
    pub fn new(kind: ObjectKind, label: impl Into<String>) -> Self {
        Self {
            kind,
            label: label.into(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} '{}'", self.kind, self.label)
    }
}

pub use graphsmith_analysis::{CudaCode, SourceLine};

/// A feature the device or driver lacks ([`ErrorKind::FeatureUnsupported`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// The feature, e.g. "programmatic dependent launch".
    pub feature: &'static str,
    /// What it needs, e.g. "compute capability 9.0 or newer".
    pub needs: &'static str,
    /// What the device or driver has, e.g. "the device has 8.6".
    pub found: String,
}

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A driver call failed.
    Cuda { call: &'static str, code: CudaCode },
    /// The context the object lives in is gone (destroyed or reset by other code).
    ContextGone { call: &'static str, code: CudaCode },
    /// No CUDA driver library could be loaded, or it has no device.
    NoDriver { reason: String },
    /// Launch geometry the device cannot run.
    InvalidGeometry { reason: String },
    /// Arguments that do not match the kernel's parameters.
    ArgMismatch { reason: String },
    /// A dependency on a node of another graph.
    ForeignNode { node: String, node_graph: String },
    /// `end_capture` on a stream that never began one.
    NotCapturing,
    /// `begin_capture` on a stream that is already capturing.
    AlreadyCapturing { label: String },
    /// An operation that is not allowed while the stream captures.
    NotAllowedDuringCapture { reason: String },
    /// A null handle was passed where a live one is required.
    NullHandle { what: &'static str },
    /// Other bad input (sizes that do not match, ...).
    InvalidInput { reason: String },
    /// A feature the device or driver does not have: which feature, what it needs and what the
    /// device or driver has.
    FeatureUnsupported(Box<Unsupported>),
    /// The graph model refused a change (an edge to a node it does not hold, a self edge); the
    /// model's error is the [`std::error::Error::source`].
    InvalidGraph(Box<graphsmith_model::ModelError>),
    /// An executable cannot take a new graph's parameters in place; one reason per node.
    UpdateImpossible {
        reasons: Vec<graphsmith_analysis::update_check::Incompatibility>,
    },
    /// A capture failed: the diagnosis names the first offending operation, its line, thread
    /// and ranges, the real CUDA code, the family and the fix.
    CaptureFailed(Box<graphsmith_analysis::Diagnosis>),
    /// Work that would run outside the running capture, refused in strict mode.
    CaptureEscape(Box<graphsmith_analysis::Escape>),
    /// A wait on a signal that was never recorded and that nothing alive will record
    /// (docs/ordering.md): the wait would order nothing. `waiter` is the waiting node, the call
    /// that made the wait and its line; `None` for a wait issued on a stream.
    UnrecordedSignal {
        signal: String,
        waiter: Option<Box<SignalWaiter>>,
    },
    /// In the runtime's launch log refusing mode ([`crate::RaceMode::Refuse`]): the launch
    /// would race with an earlier launch of another executable (both nodes, the buffer and
    /// the missing wait); it was not submitted.
    CrossGraphRace(Box<graphsmith_analysis::launch_order::Race>),
}

/// The node that waits on a signal, and the call and line that made the wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalWaiter {
    pub node: String,
    pub op: &'static str,
    pub at: SourceLine,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Cuda { call, code } => write!(f, "{call} returned {code}"),
            ErrorKind::ContextGone { call, code } => {
                write!(f, "the CUDA context is gone: {call}: {code}")
            }
            ErrorKind::NoDriver { reason } => write!(f, "no usable CUDA driver: {reason}"),
            ErrorKind::InvalidGeometry { reason } => write!(f, "invalid launch geometry: {reason}"),
            ErrorKind::ArgMismatch { reason } => {
                write!(f, "kernel arguments do not match: {reason}")
            }
            ErrorKind::ForeignNode { node, node_graph } => write!(
                f,
                "dependency on node '{node}' of graph '{node_graph}', which is another graph"
            ),
            ErrorKind::NotCapturing => write!(f, "the stream is not capturing"),
            ErrorKind::AlreadyCapturing { label } => {
                write!(f, "the stream is already capturing '{label}'")
            }
            ErrorKind::NotAllowedDuringCapture { reason } => {
                write!(f, "not allowed while the stream captures: {reason}")
            }
            ErrorKind::NullHandle { what } => write!(f, "{what} is null"),
            ErrorKind::InvalidInput { reason } => write!(f, "invalid input: {reason}"),
            ErrorKind::FeatureUnsupported(u) => {
                write!(f, "{} needs {}; {}", u.feature, u.needs, u.found)
            }
            ErrorKind::InvalidGraph(_) => write!(f, "the graph model refused the change"),
            ErrorKind::UpdateImpossible { reasons } => {
                write!(f, "the update is impossible in place:")?;
                for r in reasons {
                    write!(f, "\n  - {r}")?;
                }
                Ok(())
            }
            ErrorKind::CaptureFailed(diagnosis) => write!(f, "{diagnosis}"),
            ErrorKind::CaptureEscape(escape) => write!(f, "refused in strict mode: {escape}"),
            ErrorKind::UnrecordedSignal { signal, waiter } => match waiter {
                Some(w) => write!(
                    f,
                    "node '{}' waits on signal '{signal}' (made by {} at {}), which was never \
                     recorded and which no live graph, executable or stream records: the wait \
                     would order nothing",
                    w.node, w.op, w.at
                ),
                None => write!(
                    f,
                    "the stream would wait on signal '{signal}', which was never recorded: the \
                     wait would order nothing"
                ),
            },
            ErrorKind::CrossGraphRace(race) => write!(f, "the launch would race: {race}"),
        }
    }
}

/// A graphsmith error: which object, which operation, where it was called from, and what went
/// wrong. Display reads `Graph::add_kernel on Graph 'step' at src/main.rs:12:5: ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    /// The object the operation was applied to.
    pub object: ObjectRef,
    /// The graphsmith operation, e.g. `Exec::launch`.
    pub op: &'static str,
    /// The caller's line.
    pub at: SourceLine,
}

impl Error {
    pub(crate) fn new(
        kind: ErrorKind,
        object: ObjectRef,
        op: &'static str,
        at: SourceLine,
    ) -> Self {
        Self {
            kind,
            object,
            op,
            at,
        }
    }

    /// The CUDA code, when the error came from the driver.
    pub fn cuda_code(&self) -> Option<CudaCode> {
        match &self.kind {
            ErrorKind::Cuda { code, .. } | ErrorKind::ContextGone { code, .. } => Some(*code),
            ErrorKind::CaptureFailed(diagnosis) => diagnosis.code,
            _ => None,
        }
    }

    /// A suggested fix, when there is a known one.
    pub fn fix(&self) -> Option<&'static str> {
        Some(match &self.kind {
            ErrorKind::ContextGone { .. } => "the context was destroyed or reset by other code (cudaDeviceReset, cuDevicePrimaryCtxReset); create a new Context and rebuild the graph",
            ErrorKind::NoDriver { .. } => "run on a machine with an NVIDIA GPU and driver (libcuda.so); CPU-only work (model, doctor, explain) needs none",
            ErrorKind::InvalidGeometry { .. } => "choose a grid and block within the device limits (graphsmith probe prints them)",
            ErrorKind::ArgMismatch { .. } => "pass one argument per kernel parameter, each of the parameter's size",
            ErrorKind::ForeignNode { .. } => "depend only on nodes returned by this graph's own builder calls",
            ErrorKind::NotCapturing => "call begin_capture on this stream first, or use Stream::capture",
            ErrorKind::AlreadyCapturing { .. } => "end the running capture first",
            ErrorKind::NotAllowedDuringCapture { .. } => "do it before begin_capture or after end_capture, or add an explicit graph node",
            ErrorKind::NullHandle { .. } => "pass a live handle",
            ErrorKind::FeatureUnsupported(_) => "run without the feature on this device (graphsmith probe lists what the device and driver support)",
            ErrorKind::UpdateImpossible { .. } => "rebuild the graph with the executable's topology, or update with UpdatePolicy::Reinstantiate to rebuild the executable (counted in Exec::stats)",
            ErrorKind::CaptureFailed(diagnosis) => diagnosis.fix(),
            ErrorKind::UnrecordedSignal { .. } => "record the signal before the wait is launched: launch the executable whose graph records it (Graph::signal) or call Stream::signal on the producing stream first, and keep that graph or executable alive",
            ErrorKind::CrossGraphRace(_) => "order the two launches: record a signal after the earlier one (Stream::signal, or a Graph::signal node) and wait on it before the later one (Stream::wait_for, or a Graph::wait_for node)",
            ErrorKind::CaptureEscape(escape) => graphsmith_analysis::catalogue::classify(escape.op.op, None)
                .map_or("issue the work on a stream of the capture", |e| e.fix),
            // A capture code at the offending call itself: the catalogue knows the fix.
            ErrorKind::Cuda { code, .. } if matches!(code.number(), 900..=908) => {
                graphsmith_analysis::catalogue::classify(self.op, Some(code.number()))?.fix
            }
            _ => return None,
        })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {} at {}: {}",
            self.op, self.object, self.at, self.kind
        )
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ErrorKind::InvalidGraph(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

/// graphsmith's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
