//! Why a graph could not be read back.

use std::fmt;

use crate::table::Status;

/// Why a read failed. Each caller words it its own way (the runtime as an error naming the
/// call and its `CudaCode`, the tracer as a "not checked" line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// A driver call failed: the call's name (e.g. `cuGraphGetNodes`) and its result.
    Call { call: &'static str, code: Status },
    /// The table has no function the read needed, by its driver name.
    Missing { call: &'static str },
    /// The graph, child graphs included, has more nodes than the reader's limit.
    TooManyNodes { max: usize },
    /// One graph has more edges than the reader's limit.
    TooManyEdges { max: usize },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Call { call, code } => write!(f, "{call} returned {code}"),
            ReadError::Missing { call } => write!(f, "the driver has no {call}"),
            ReadError::TooManyNodes { max } => {
                write!(
                    f,
                    "the graph has more than {max} nodes (child graphs included)"
                )
            }
            ReadError::TooManyEdges { max } => write!(f, "the graph has more than {max} edges"),
        }
    }
}

impl std::error::Error for ReadError {}

/// A driver result as the reader's.
pub(crate) fn check(r: crate::table::Status, call: &'static str) -> Result<(), ReadError> {
    if r == crate::table::SUCCESS {
        Ok(())
    } else {
        Err(ReadError::Call { call, code: r })
    }
}
