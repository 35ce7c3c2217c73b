//! # graphsmith
//!
//! CUDA graphs from Rust, made safe and debuggable: build graphs node by node or capture them
//! from streams, instantiate once, launch many times, and read any `CUgraph` back into the
//! [`graphsmith_model`] model for analysis.
//!
//! ```no_run
//! use graphsmith::{args, CaptureMode, Context, LaunchConfig};
//! # fn main() -> graphsmith::Result<()> {
//! let ctx = Context::new(0)?;
//! let kernels = ctx.builtin_kernels()?;
//! let add = kernels.kernel("gs_add_scalar_f32")?;
//! let stream = ctx.stream("main")?;
//! let mut x = ctx.alloc::<f32>("x", 1024)?;
//! stream.upload(&mut x, &vec![1.0; 1024])?;
//! let (graph, ()) = stream.capture(CaptureMode::ThreadLocal, "step", |s| {
//!     s.launch("add-one", &add, LaunchConfig::for_elements(1024), args![&mut x, 1.0f32, 1024u32])
//! })?;
//! let mut exec = graph.instantiate()?;
//! exec.launch(&stream)?;
//! assert_eq!(stream.download(&x)?[0], 2.0);
//! # Ok(()) }
//! ```
//!
//! Architecture invariants: the runtime never prints; no CUDA error panics (each becomes an
//! [`Error`] naming the object, the operation and the caller's line); every CUDA handle has
//! exactly one owner and is freed in `Drop`, whose failures go to
//! [`Context::drop_failures`]; a graph or executable keeps every buffer it references alive.
#![deny(unsafe_op_in_unsafe_fn)]

// Layers, bottom to top; a module uses only what is below it (ARCHITECTURE.md).
// 0: errors, and the driver calls (the only code that calls `sys::cu*`).
mod driver;
mod error;
// 1: named ranges and NVTX.
mod ranges;
// 2: the context, its running captures and deferred destruction.
mod context;
// 3: device memory.
mod memory;
// 4: modules, kernels, launch configuration, arguments.
mod module;
// 5: streams, events, the capture journal.
mod stream;
// 6: graph templates, the builder, capture, read-back.
mod graph;
// 7: executables and updates.
mod exec;
// 8: the graph cache.
mod cache;
// 9: device facts and feature trials.
pub mod probe;

pub use cache::{
    CacheConfig, CacheStats, Dispatch, GraphCache, Oversize, Path, Scope, ShapeKey, Workload,
};
pub use context::CaptureMode;
pub use context::CaptureOptions;
pub use context::{gpu_available, Context, DropFailure};
pub use context::{LaunchLog, RaceMode};
pub use error::{
    CudaCode, Error, ErrorKind, ObjectKind, ObjectRef, Result, SignalWaiter, SourceLine,
    Unsupported,
};
pub use exec::{Exec, ExecStats};
pub use exec::{Relocated, Relocation};
pub use exec::{UpdateBatch, UpdateOutcome, UpdatePolicy};
pub use graph::CaptureReport;
pub use graph::Replay;
pub use graph::{read_raw_graph, read_raw_graph_in};
pub use graph::{Body, BodyRef, ConditionHandle, Graph, NodeRef};
pub use graphsmith_analysis as analysis;
pub use graphsmith_analysis::catalogue;
pub use graphsmith_analysis::{
    diagnose, CaptureSummary, Cause, Diagnosis, Escape, JournalEntry, Outcome, Unjoined,
};
pub use graphsmith_analysis::{update_compatibility, Family, Incompatibility};
pub use graphsmith_model as model;
pub use memory::HostBuffer;
pub use memory::{DeviceBuffer, Element, View, ViewMut};
pub use module::{Args, BeforeWait, Kernel, KernelArg, LaunchConfig, Module, ReadThenWrite};
pub use ranges::{current_ranges, range, RangeGuard};
pub use stream::{read, read_write, write, Event, LibraryAccess, Signal, Stream};

/// Re-export of the raw driver bindings graphsmith uses, for interop with other CUDA code.
pub use cudarc::driver::sys;

/// PTX of graphsmith's own kernels (`kernels/graphsmith_kernels.cu`), compiled ahead of time so
/// that building needs no CUDA toolkit.
pub const BUILTIN_PTX: &str = include_str!("../../../kernels/graphsmith_kernels.ptx");

#[cfg(test)]
mod tests;
