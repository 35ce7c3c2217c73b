//! Layer 2, the context: the device's primary context, made current before every driver call,
//! and the destruction deferred behind running captures.

mod deferred;
mod device;

pub(crate) use deferred::*;
pub use device::*;
