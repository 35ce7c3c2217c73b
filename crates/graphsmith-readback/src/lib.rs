//! The one reader of a CUDA graph back from the driver: its nodes in the driver's order, each
//! node's type and parameters (kernel geometry, name, cluster shape and the bytes of every
//! argument; copy, set, host, event, child graph, allocation and free parameters), and its edges
//! with their data, into a [`graphsmith_analysis::RawGraph`], which
//! `graphsmith_analysis::readback::build` turns into the model.
//!
//! The reader calls the driver only through a [`DriverTable`] of C function pointers that its
//! caller fills: the runtime (`graphsmith`) from the libcuda cudarc loaded, the tracer
//! (`graphsmith-trace`) from the libcuda the traced process loaded, the tests from fakes. So
//! both read the same graph into the same `RawGraph`, with the same cap on the bytes of a
//! parameter ([`MAX_PARAM_BYTES`], stated in each [`Read`]), and the whole reader is tested
//! without a GPU.
//!
//! The reader holds no lock and never panics on anything the driver answers; how a failed
//! call for a node's parameters is taken is the caller's [`Policy`] (the runtime's reads are
//! [`Policy::Strict`], the tracer's [`Policy::Lenient`]).

mod error;
mod graph;
pub mod table;

#[cfg(test)]
mod tests;

pub use error::ReadError;
pub use graph::{
    node_type_name, KernelFunction, KernelNode, Limits, Policy, Read, Reader, MAX_PARAMS,
    MAX_PARAM_BYTES,
};
pub use table::DriverTable;
