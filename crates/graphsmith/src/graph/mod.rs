//! Layer 6, graphs: the template (`Graph`), the explicit builder, stream capture, read-back of
//! any `CUgraph` into the model, and capture-or-eager fallback.

mod builder;
mod capture;
mod fallback;
mod readback;
mod template;

pub use capture::*;
pub use fallback::*;
pub use readback::*;
pub use template::*;
