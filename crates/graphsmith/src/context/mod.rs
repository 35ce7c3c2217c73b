//! Layer 2, the context: the device's primary context, made current before every driver call,
//! the running captures it holds (with the stream-less half of the journal), and the
//! destruction deferred behind them, and the launch log (`launch_log.rs`, docs/ordering.md).

mod captures;
mod deferred;
mod device;
mod footprint;
mod launch_log;

pub use captures::*;
pub(crate) use deferred::*;
pub use device::*;
pub(crate) use footprint::*;
pub use launch_log::{LaunchLog, RaceMode};
