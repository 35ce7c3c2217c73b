//! Layer 3, memory: device buffers, page-locked host buffers, and the allocations graphs keep
//! alive.

mod buffer;
mod host;

pub use buffer::*;
pub use host::*;
