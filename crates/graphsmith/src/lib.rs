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

mod buffer;
mod builder;
mod cache;
mod capture;
mod context;
mod deferred;
mod error;
mod event;
mod exec;
mod fallback;
mod graph;
mod image;
mod journal;
mod kernel;
mod nvtx;
mod overrides;
pub mod probe;
mod probe_features;
mod range;
mod readback;
mod stream;
mod update;

pub use buffer::{DeviceBuffer, Element, View, ViewMut};
pub use cache::{
    CacheConfig, CacheStats, Dispatch, GraphCache, Oversize, Path, Scope, ShapeKey, Workload,
};
pub use capture::CaptureMode;
pub use capture::{CaptureOptions, CaptureReport};
pub use context::{gpu_available, Context, DropFailure};
pub use error::{CudaCode, Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
pub use exec::{Exec, ExecStats};
pub use fallback::Replay;
pub use graph::{Graph, NodeRef};
pub use graphsmith_analysis as analysis;
pub use graphsmith_analysis::catalogue;
pub use graphsmith_analysis::{
    diagnose, CaptureSummary, Cause, Diagnosis, Escape, JournalEntry, Outcome, Unjoined,
};
pub use graphsmith_analysis::{update_compatibility, Family, Incompatibility};
pub use graphsmith_model as model;
pub use kernel::{Args, Kernel, KernelArg, LaunchConfig, Module};
pub use range::{current_ranges, range, RangeGuard};
pub use readback::read_raw_graph;
pub use stream::{Event, Stream};
pub use update::{UpdateBatch, UpdateOutcome, UpdatePolicy};

/// Re-export of the raw driver bindings graphsmith uses, for interop with other CUDA code.
pub use cudarc::driver::sys;

/// PTX of graphsmith's own kernels (`kernels/graphsmith_kernels.cu`), compiled ahead of time so
/// that building needs no CUDA toolkit.
pub const BUILTIN_PTX: &str = include_str!("../../../kernels/graphsmith_kernels.ptx");

#[cfg(test)]
mod tests;
