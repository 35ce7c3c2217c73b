//! # graphsmith-trace
//!
//! `graphsmith trace -- <command>` runs any CUDA program with this crate's injection library
//! (`libgraphsmith_trace.so`, loaded through `CUDA_INJECTION64_PATH` and
//! `NVTX_INJECTION64_PATH`) and, when the command exits, reports every graph capture it made:
//! its outcome, the first failing call of a failed capture (driver and runtime names, code,
//! thread, NVTX range stack, Python stack when it came from Python, native backtrace) with the
//! cascade that followed, the work that silently escaped a capture, and the graphs instantiated
//! (with `--hazards`, each one read back and checked for hazards: nodes that no edge orders
//! touching the same memory, see [`hazard`]; and across graphs, launches of different graphs
//! on different streams touching the same memory with no wait between them, see [`races`]).
//!
//! Two halves, one crate:
//! - in the traced process ([`inject`], the cdylib): CUPTI callbacks and NVTX hooks append
//!   [`event::Event`]s to a log as they happen;
//! - in `graphsmith trace` ([`cli`]): runs the command, reads the log, builds the
//!   [`analysis::Report`] and prints it ([`render`]).
//!
//! Architecture invariant: code in [`inject`] runs inside someone else's process. It never
//! panics across the FFI boundary (`catch_unwind` at every `extern "C"` entry), never blocks on
//! a lock held across a CUDA call, and writes nothing but the event log.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod analysis;
pub mod cli;
pub mod event;
pub mod explain;
pub mod freed;
pub mod graphs;
pub mod hazard;
#[cfg(target_os = "linux")]
pub mod inject;
mod launch;
pub mod races;
pub mod render;
