//! Layer 6, graphs: the template (`Graph`), the explicit builder, stream capture, read-back of
//! any `CUgraph` into the model, and capture-or-eager fallback.

mod builder;
mod capture;
mod conditional;
mod conditional_capture;
mod fallback;
mod readback;
mod template;

pub use capture::*;
pub(crate) use conditional::{foreign_body, Bodies, NO_COPY};
pub use conditional::{Body, BodyRef, ConditionHandle};
pub use fallback::*;
pub use readback::*;
pub use template::*;
