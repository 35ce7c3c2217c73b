//! # graphsmith-analysis
//!
//! The parts of graphsmith that need no CUDA, in one crate that builds and tests anywhere:
//!
//! - [`catalogue`]: every capture failure mode with the codes the driver returns and the fix,
//!   used by diagnoses, `graphsmith explain` and `graphsmith trace` (one set of texts);
//! - [`doctor`]: the one doctor of `graphsmith doctor` and the Python package: a graph file or a
//!   live read-back checked for its shape, hazards (certain and possible), redundant edges and
//!   notes, reported as text and JSON, with the exit-code rule (certain hazards fail, possible
//!   ones only when strict);
//! - [`launch_order`]: races across graphs: a launch sequence (launches, signals, host
//!   synchronisations) ordered with vector clocks, each race with both graphs, both nodes, the
//!   buffer and the missing wait; its JSON file format (`graphsmith doctor --launches`);
//! - [`diagnosis`]: the diagnosis of a failed capture from its journal ([`diagnose`]);
//! - [`update_check`]: whether an executable can take a new graph's parameters in place;
//! - [`readback`]: the one conversion of a graph read back from the driver ([`RawGraph`]) into
//!   the [`graphsmith_model`] model with its memory accesses; the runtime and the tracer only
//!   fill a `RawGraph` from the driver and call [`readback::build`];
//! - [`CudaCode`]: result codes with names and descriptions from a static table, so formatting
//!   one never loads the driver.
//!
//! Architecture invariant: no CUDA dependency (`cargo tree -p graphsmith-analysis` shows no
//! cudarc).

pub mod capture_mode;
pub mod catalogue;
pub mod cuda_code;
pub mod diagnosis;
pub mod doctor;
pub mod launch_order;
pub mod readback;
pub mod source_line;
pub mod update_check;

pub use capture_mode::CaptureMode;
pub use catalogue::Family;
pub use cuda_code::CudaCode;
pub use diagnosis::{
    diagnose, CaptureSummary, Cause, Diagnosis, Escape, JournalEntry, Outcome, Unjoined,
};
pub use readback::{
    build, build_with, Built, Copy3D, CopySide, MemoryMap, Operand, RawEdge, RawGraph, RawNode,
    Region, Set2D,
};
pub use source_line::SourceLine;
pub use update_check::{update_compatibility, Incompatibility};
