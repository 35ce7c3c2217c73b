//! Layer 3, memory: device buffers and the allocations graphs keep alive.

mod buffer;

pub use buffer::*;
