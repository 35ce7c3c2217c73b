//! Layer 2, the context: the device's primary context, made current before every driver call,
//! the running captures it holds (with the stream-less half of the journal), and the
//! destruction deferred behind them.

mod captures;
mod deferred;
mod device;
mod footprint;

pub use captures::*;
pub(crate) use deferred::*;
pub use device::*;
pub(crate) use footprint::*;
