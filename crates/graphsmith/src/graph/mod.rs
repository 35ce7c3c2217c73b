//! Layer 6, graphs: the template (`Graph`), the explicit builder, stream capture, read-back of
//! any `CUgraph` into the model, and capture-or-eager fallback.

mod builder;
mod capture;
mod captured_nodes;
mod fallback;
mod readback;
mod shared;
mod template;

pub use capture::*;
pub(crate) use captured_nodes::label_captured;
pub use fallback::*;
pub use readback::*;
pub use template::*;
