//! Layer 1, ranges: named ranges (a per-thread stack) recorded in provenance and journals, and
//! mirrored as NVTX ranges. Uses only the error types.

mod nvtx;
mod stack;

pub use stack::*;
