//! Layer 6, graphs: the template (`Graph`), the explicit builder, stream capture, read-back of
//! any `CUgraph` into the model, and capture-or-eager fallback.

mod builder;
mod capture;
mod captured_nodes;
mod conditional;
mod conditional_body;
mod conditional_capture;
mod fallback;
mod readback;
mod shared;
mod template;

pub use capture::*;
pub(crate) use captured_nodes::label_captured;
pub(crate) use conditional::Bodies;
#[cfg(test)]
pub(crate) use conditional::{foreign_body, NO_COPY};
pub use conditional::{BodyRef, ConditionHandle};
pub use conditional_body::Body;
pub use fallback::*;
pub use readback::*;
pub(crate) use shared::CopyError;
pub use template::*;
